"""The Runtime's state as its config service and exporter see it: the toggle state, a snapshot of its allocation
records, usage samples and the raw exporter data (``ExporterGetDataList``). Invariant: values are immutable; units are
bytes, milli-GPU and epoch seconds as named on each field.
"""


from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from domain.gpu import GpuUuid
from domain.runtime.types.allocation import (
    ContainerAllocation,
    _int_map,
)
from domain.runtime.types.devices import DeviceInfo, MigInstanceInfo


class RuntimeState(enum.Enum):
    """Whether the Runtime takes new allocations (config service)."""

    ENABLED = "enabled"
    DISABLED = "disabled"


@attrs.frozen
class ConfigStatus:
    """Config service status: ``state``, ``changed_at`` (epoch s; 0 = never changed), ``reason`` given with the
    last change, ``active_allocations`` (container records held)."""

    state: RuntimeState
    changed_at: float = 0.0
    reason: str = ""
    active_allocations: int = 0


@attrs.frozen
class RuntimeSnapshot:
    """Everything a Runtime persists across restarts: the config ``state`` with ``changed_at``/``reason``, and
    the ``allocations``."""

    state: RuntimeState
    changed_at: float = 0.0
    reason: str = ""
    allocations: tuple[ContainerAllocation, ...] = ()


@attrs.frozen
class GpuSample:
    """One GPU's measurements (None = unknown): utilization %, memory used (bytes), temperature (°C), power (W),
    ``xid_counts`` (XID → events since start) and ``error`` (why values are missing; empty when none are)."""

    uuid: GpuUuid
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    xid_counts: Mapping[int, int] = attrs.field(factory=dict, converter=_int_map)
    error: str = ""


@attrs.frozen
class ContainerUsage:
    """Measured use of one GPU by one container (None = unknown): memory used (bytes), utilization (%)."""

    pod_uid: str
    container: str
    uuid: GpuUuid
    memory_used_bytes: int | None = None
    utilization_percent: float | None = None


@attrs.frozen
class MigSample:
    """One MIG instance's measurements, by its ``uuid`` (``MIG-…``; None = unknown): memory used (bytes),
    utilization (%; NVML has no per-instance utilization, so None there) and ``error`` (why values are missing)."""

    uuid: str
    memory_used_bytes: int | None = None
    utilization_percent: float | None = None
    error: str = ""


@attrs.frozen
class UsageSample:
    """A backend's measurements at ``at`` (epoch s): per GPU, per container where it can attribute use, and per
    MIG instance."""

    gpus: tuple[GpuSample, ...] = ()
    containers: tuple[ContainerUsage, ...] = ()
    at: float = 0.0
    mig: tuple[MigSample, ...] = ()


@attrs.frozen
class GpuData:
    """Exporter row for one GPU: inventory, health, measurements (None = unknown) and what the recorded
    allocations grant on it (effective rule: ``max(Σ app containers, max init container)`` per pod, summed)."""

    device: DeviceInfo
    sample: GpuSample
    allocated_core_milli: int = 0
    allocated_memory_bytes: int = 0


@attrs.frozen
class ContainerGpuData:
    """Exporter row for one container on one GPU: limits (``core_milli``, ``memory_limit_bytes``) beside the
    measured use (None = unknown)."""

    index: int
    uuid: GpuUuid
    core_milli: int
    memory_limit_bytes: int
    memory_used_bytes: int | None = None
    utilization_percent: float | None = None


@attrs.frozen
class ContainerData:
    """Exporter row for one allocated container; ``mig_uuids``: the MIG instances it holds (``MIG-…``, details in
    :attr:`ExporterData.mig`). ``claim_namespace``/``claim_name``: the DRA claim whose grant this is, set by the
    exporter's attribution (``domain.exporter.attribution``) on a claim's row (the Runtime keeps a claim's grant as
    pod = the claim, container ``dra-claim``); empty for a device-plugin container."""

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    init: bool
    gpus: tuple[ContainerGpuData, ...]
    allocated_at: float = 0.0
    mig_uuids: tuple[str, ...] = ()
    claim_namespace: str = ""
    claim_name: str = ""


@attrs.frozen
class MigInstanceData:
    """Exporter row for one MIG instance: the listed ``instance`` (profile, ids, memory total, owner) and its
    measurements (None = unknown; ``error`` says why)."""

    instance: MigInstanceInfo
    memory_used_bytes: int | None = None
    utilization_percent: float | None = None
    error: str = ""


@attrs.frozen
class ExporterData:
    """``ExporterGetDataList``: every GPU (idle ones included), every allocated container and every MIG instance
    (free ones included), at ``sampled_at``."""

    gpus: tuple[GpuData, ...] = ()
    containers: tuple[ContainerData, ...] = ()
    sampled_at: float = 0.0
    mig: tuple[MigInstanceData, ...] = ()
