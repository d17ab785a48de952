"""Value types of the node Runtime contract, independent of the wire (``proto/ljrk/runtime/v1/runtime.proto``).

Units: memory in bytes, compute in milli-GPU (``domain.units``: 1000 = one GPU, 10 = 1 %), utilization in percent
0..100, temperature in °C, power in W, times in epoch seconds (float, UTC). ``None`` means "not known" (a metric
the GPU does not support, a usage nobody measured), never zero.

Invariants enforced at construction (raising :class:`domain.runtime.errors.InvalidAllocationError` for the
request types, whose values come from outside): non-empty pod UID and container; at least one planned GPU;
distinct GPU UUIDs and indexes; core 1..1000 milli-GPU and memory ≥ 1 byte when given.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.errors import InvalidAllocationError
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT


@attrs.frozen
class DeviceInfo:
    """One GPU as the Runtime reports it: the inventory value ``gpu`` (whose ``health`` is current) and
    ``health_reason`` (why it is unhealthy; empty when healthy)."""

    gpu: Gpu
    health_reason: str = ""


@attrs.frozen
class HealthChange:
    """A GPU's health at time ``at``: ``reason`` (e.g. ``"XID 79"``), ``xid`` (the causing XID or None) and
    ``initial`` (True for the snapshot events a health stream opens with)."""

    uuid: GpuUuid
    index: int
    health: Health
    reason: str = ""
    xid: int | None = None
    at: float = 0.0
    initial: bool = False


def _str_map(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def _int_map(value: Mapping[int, int]) -> dict[int, int]:
    return dict(value)


def _invalid(field: str, value: object, reason: str) -> InvalidAllocationError:
    return InvalidAllocationError(f"{field}={value!r}: {reason}")


@attrs.frozen
class PlannedGpu:
    """One GPU of a container's plan: ``index`` (NVML index), ``uuid`` (authoritative), ``core_milli``
    (1..1000, or None = derive from memory) and ``memory_bytes`` (≥ 1, or None = derive from core), resolved
    by the Runtime with the ledger's rule :func:`domain.request.resolve_share`."""

    index: int
    uuid: GpuUuid
    core_milli: int | None = None
    memory_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise _invalid("gpu.index", self.index, "must be an integer >= 0")
        if not self.uuid:
            raise _invalid("gpu.uuid", self.uuid, "must not be empty")
        if self.core_milli is not None and not 1 <= self.core_milli <= MILLI_PER_GPU:
            raise _invalid(f"gpu[{self.uuid}].core_milli", self.core_milli, "must be 1..1000 milli-GPU")
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise _invalid(f"gpu[{self.uuid}].memory_bytes", self.memory_bytes, "must be at least 1 byte")
        if self.core_milli is None and self.memory_bytes is None:
            raise _invalid(f"gpu[{self.uuid}]", None, "a planned GPU needs core or memory (or both)")


@attrs.frozen
class ContainerAllocationRequest:
    """Allocate one container: pod ``pod_uid``/``namespace``/``pod_name``, ``container`` name, its planned
    ``gpus`` in the order the container sees them, and ``init`` (init container). (``pod_uid``, ``container``)
    is the idempotency key."""

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    gpus: tuple[PlannedGpu, ...]
    init: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.pod_uid:
            raise _invalid("pod_uid", self.pod_uid, "must not be empty")
        if not self.container:
            raise _invalid("container_name", self.container, "must not be empty")
        if not self.gpus:
            raise _invalid(f"{self.label}.gpus", [], "a container allocation needs at least one GPU")
        uuids = [g.uuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise _invalid(f"{self.label}.gpus.uuid", uuids, "GPUs must be distinct")
        indexes = [g.index for g in self.gpus]
        if len(set(indexes)) != len(indexes):
            raise _invalid(f"{self.label}.gpus.index", indexes, "GPUs must be distinct")

    @property
    def key(self) -> tuple[str, str]:
        """``(pod_uid, container)``."""
        return (self.pod_uid, self.container)

    @property
    def label(self) -> str:
        """``namespace/name:container`` (UID when unnamed), for messages."""
        pod = f"{self.namespace}/{self.pod_name}" if self.pod_name else self.pod_uid
        return f"{pod}:{self.container}"


@attrs.frozen
class Mount:
    """A host path mounted into the container (same shape as the device plugin API's Mount)."""

    container_path: str
    host_path: str
    read_only: bool = False


@attrs.frozen
class DeviceSpec:
    """A host device node for the container; ``permissions`` is a subset of ``"rwm"``."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@attrs.frozen
class ContainerAllocationResponse:
    """What the container gets: ``envs``, ``mounts``, ``devices`` and container ``annotations``."""

    envs: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)


@attrs.frozen
class GrantedGpu:
    """A resolved grant on one GPU: ``core_milli`` (1..1000) and ``memory_bytes`` (≥ 1), the container's limits."""

    index: int
    uuid: GpuUuid
    core_milli: int
    memory_bytes: int

    @property
    def core_percent(self) -> int:
        """The core limit in whole percent: ``max(1, core_milli // 10)`` (floored, so it never exceeds the grant,
        and never 0, which HAMi-core would read as "no limit")."""
        return max(1, self.core_milli // MILLI_PER_PERCENT)


@attrs.frozen
class ContainerAllocation:
    """The Runtime's record of one allocated container: the ``request``, resolved ``grants`` (request order),
    the ``response`` given, and ``allocated_at`` (epoch s)."""

    request: ContainerAllocationRequest
    grants: tuple[GrantedGpu, ...]
    response: ContainerAllocationResponse
    allocated_at: float

    @property
    def key(self) -> tuple[str, str]:
        """``(pod_uid, container)``."""
        return self.request.key


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
class UsageSample:
    """A backend's measurements at ``at`` (epoch s): per GPU, and per container where it can attribute use."""

    gpus: tuple[GpuSample, ...] = ()
    containers: tuple[ContainerUsage, ...] = ()
    at: float = 0.0


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
    """Exporter row for one allocated container."""

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    init: bool
    gpus: tuple[ContainerGpuData, ...]
    allocated_at: float = 0.0


@attrs.frozen
class ExporterData:
    """``ExporterGetDataList``: every GPU (idle ones included) and every allocated container, at ``sampled_at``."""

    gpus: tuple[GpuData, ...] = ()
    containers: tuple[ContainerData, ...] = ()
    sampled_at: float = 0.0
