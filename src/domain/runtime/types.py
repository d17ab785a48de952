"""Value types of the node Runtime contract, independent of the wire (``proto/ljrk/runtime/v1/runtime.proto``).

Units: memory in bytes, compute in milli-GPU (``domain.units``: 1000 = one GPU, 10 = 1 %), utilization in percent
0..100, temperature in °C, power in W, times in epoch seconds (float, UTC). ``None`` means "not known" (a metric
the GPU does not support, a usage nobody measured), never zero.

Invariants enforced at construction (raising :class:`domain.runtime.errors.InvalidAllocationError` for the
request types, whose values come from outside): non-empty pod UID and container; at least one planned GPU or MIG
instance, never both kinds in one container; distinct GPU UUIDs and indexes; core 1..1000 milli-GPU and memory
≥ 1 byte when given; a planned MIG instance names a profile or an existing instance, and creating one needs a
profile and a placement start.

MIG (Runtime 1.1.0, features ``mig-inventory``, ``mig-allocate``, ``mig-dynamic``, ``mig-exporter-data``): a GPU in
MIG mode is listed with its instances (:class:`MigInstanceInfo`, one per GPU instance + compute instance, with
NVML's ids, the placement in memory slices and the ``MIG-…`` UUID); a container plans instances
(:class:`PlannedMig`) instead of GPU shares, and its record holds the granted instances. Profile names are the
canonical names of :mod:`domain.mig.profiles`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from domain.gpu import Gpu, GpuUuid, Health
from domain.mig.gpu import MigOwner
from domain.runtime.errors import InvalidAllocationError
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT


@attrs.frozen
class MigInstanceInfo:
    """One MIG instance (a GPU instance and one of its compute instances) as the Runtime lists it.

    Fields: ``gpu_index``/``gpu_uuid`` (the parent GPU); ``gpu_instance_id`` (NVML GI id, ``nvmlGpuInstanceGetInfo``
    ``.id``); ``compute_instance_id`` (NVML CI id, ``nvmlComputeInstanceGetInfo`` ``.id``; None for a GPU instance
    without compute instance, which takes slices but cannot be handed out); ``profile`` (canonical GPU instance
    profile name, e.g. ``3g.40gb``; the NVML name without its ``MIG `` prefix when the model has no table);
    ``start`` and ``size`` (placement in memory slices, ``nvmlGpuInstancePlacement_t``); ``compute_slices``
    (``sliceCount`` of the profile); ``memory_bytes`` (the instance's memory, bytes); ``uuid`` (``MIG-…``, from
    ``nvmlDeviceGetUUID`` on the MIG device handle; empty without compute instance); ``owner`` (the pod and
    container holding it; None when free); ``created`` (True: the Runtime created it for its owner at Allocate
    and destroys it at Release, dynamic strategy).
    """

    gpu_index: int
    gpu_uuid: GpuUuid
    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    start: int
    size: int
    compute_slices: int
    memory_bytes: int
    uuid: str
    owner: MigOwner | None = None
    created: bool = False

    @property
    def key(self) -> tuple[GpuUuid, int, int | None]:
        """``(gpu_uuid, gpu_instance_id, compute_instance_id)``: identity on the node (MIG UUIDs of GPU
        instances without compute instance are empty)."""
        return (self.gpu_uuid, self.gpu_instance_id, self.compute_instance_id)

    @property
    def usable(self) -> bool:
        """True when the instance can be handed to a container (it has a compute instance and a MIG UUID)."""
        return self.compute_instance_id is not None and bool(self.uuid)


def _mig_tuple(value: tuple[MigInstanceInfo, ...] | list[MigInstanceInfo]) -> tuple[MigInstanceInfo, ...]:
    return tuple(value)


@attrs.frozen
class DeviceInfo:
    """One GPU as the Runtime reports it: the inventory value ``gpu`` (whose ``health`` is current),
    ``health_reason`` (why it is unhealthy; empty when healthy) and, for a GPU in MIG mode, its
    ``mig_instances`` (by placement start; empty otherwise)."""

    gpu: Gpu
    health_reason: str = ""
    mig_instances: tuple[MigInstanceInfo, ...] = attrs.field(default=(), converter=_mig_tuple)


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
class PlannedMig:
    """One MIG instance of a container's plan, on the GPU ``index``/``uuid`` (the parent GPU; UUID authoritative).

    Either an existing instance by its ``mig_uuid`` (``MIG-…``; ``profile`` and ``start`` then only cross-check
    it), or by ``profile`` (any spelling :func:`domain.mig.profiles.resolve_profile` accepts) and ``start``
    (placement start, memory slice; None = the free instance of the profile with the lowest start). ``create``
    (dynamic strategy): the Runtime creates the instance at ``start`` when no free one of the profile starts
    there, and destroys it at Release. Raises :class:`InvalidAllocationError` for a negative index or start, an
    empty UUID, neither profile nor MIG UUID, or ``create`` without profile and start or with a MIG UUID.
    """

    index: int
    uuid: GpuUuid
    profile: str = ""
    start: int | None = None
    create: bool = False
    mig_uuid: str = ""

    def __attrs_post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise _invalid("mig.index", self.index, "must be an integer >= 0")
        if not self.uuid:
            raise _invalid("mig.uuid", self.uuid, "must not be empty (the parent GPU's UUID)")
        label = f"mig[{self.uuid}]"
        if self.start is not None and (isinstance(self.start, bool) or not isinstance(self.start, int)
                                       or self.start < 0):
            raise _invalid(f"{label}.start", self.start, "must be a memory slice >= 0")
        if not self.profile and not self.mig_uuid:
            raise _invalid(label, None, "a planned MIG instance needs a profile or a MIG UUID")
        if self.create and (not self.profile or self.start is None or self.mig_uuid):
            raise _invalid(f"{label}.create", True, "creating an instance needs a profile and a start, no MIG UUID")


@attrs.frozen
class ContainerAllocationRequest:
    """Allocate one container: pod ``pod_uid``/``namespace``/``pod_name``, ``container`` name, its planned
    ``gpus`` (time-sharing) or ``mig`` instances, in the order the container sees them, and ``init`` (init
    container). (``pod_uid``, ``container``) is the idempotency key."""

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    gpus: tuple[PlannedGpu, ...]
    init: bool = False
    mig: tuple[PlannedMig, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.pod_uid:
            raise _invalid("pod_uid", self.pod_uid, "must not be empty")
        if not self.container:
            raise _invalid("container_name", self.container, "must not be empty")
        if not self.gpus and not self.mig:
            raise _invalid(f"{self.label}.gpus", [], "a container allocation needs at least one GPU or MIG instance")
        if self.gpus and self.mig:
            raise _invalid(f"{self.label}.mig", len(self.mig),
                           "a container takes either time-sharing GPUs or MIG instances, not both")
        named = [m.mig_uuid for m in self.mig if m.mig_uuid]
        placed = [(m.uuid, m.start) for m in self.mig if m.start is not None]
        if len(set(named)) != len(named) or len(set(placed)) != len(placed):
            raise _invalid(f"{self.label}.mig", [m.mig_uuid or (m.uuid, m.start) for m in self.mig],
                           "MIG instances must be distinct")
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
    the ``response`` given, ``allocated_at`` (epoch s) and the granted ``mig`` instances (request order; owner
    set, ``created`` True for those the Runtime created and destroys at Release)."""

    request: ContainerAllocationRequest
    grants: tuple[GrantedGpu, ...]
    response: ContainerAllocationResponse
    allocated_at: float
    mig: tuple[MigInstanceInfo, ...] = ()

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
    :attr:`ExporterData.mig`)."""

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    init: bool
    gpus: tuple[ContainerGpuData, ...]
    allocated_at: float = 0.0
    mig_uuids: tuple[str, ...] = ()


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
