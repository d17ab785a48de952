"""An Allocate call in the Runtime's terms: the planned GPUs and MIG instances of one container
(:class:`ContainerAllocationRequest`), the response kubelet passes on (envs, mounts, device nodes) and the record the
Runtime keeps (:class:`ContainerAllocation`). Invariant: a request that names a GPU twice, a share outside 1..1000
milli or a MIG instance without its GPU is refused with :class:`InvalidAllocationError` naming the field.
"""


from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.gpu import GpuUuid
from domain.runtime.errors import InvalidAllocationError
from domain.runtime.types.devices import MigInstanceInfo
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


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
    """What the container gets: ``envs``, ``mounts``, ``devices``, container ``annotations`` and ``cdi_devices``
    (fully qualified CDI device names, ``vendor/class=name``; the device plugin adds them after the Runtime answered
    (:mod:`domain.device_plugin.cdi`); the Runtime contract never carries them, so a Runtime response has none)."""

    envs: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    cdi_devices: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)


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
