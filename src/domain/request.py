"""Resource requests of pods and containers, validated at construction.

A container asks for either whole GPUs (``gpus = k``: each granted GPU is held with 100 % core and all of its
memory) or a share of one GPU (``core_milli`` and/or ``memory_bytes``), or nothing GPU-related.

Default rule when one half of a share is omitted (the single rule the ledger and the Runtime limits share,
failure case B09; it is never "0 = unlimited"):

* memory omitted → memory proportional to core on the granted GPU: ``floor(gpu_memory × core_milli / 1000)``;
* core omitted   → core proportional to memory: ``ceil(1000 × memory_bytes / gpu_memory)`` milli-GPU, at least 1,
  so a memory-only request never fits a GPU held at 100 % core.

Relative memory (the protocol's percentage mode, ``memory_unit: 1%``): ``memory_milli`` asks for a fraction of
the granted GPU's memory in the same unit as core (milli-GPU, 10 per percent), resolved per GPU as
``max(1, floor(gpu_memory × memory_milli / 1000))`` bytes; with core omitted, core is the same fraction,
``core_milli = memory_milli``. ``memory_bytes`` and ``memory_milli`` are mutually exclusive.

Floors for memory and ceilings for core keep the sum of defaulted grants within the GPU (Σ⌊xᵢ⌋ ≤ ⌊Σxᵢ⌋).

Init containers follow Kubernetes' effective-request rule (pod resources, "Resource sharing within
containers", kubernetes.io): the pod's effective request of a resource is ``max(Σ app containers,
max(init containers))``; the ledger applies it per GPU.

MIG instances (``<prefix>/mig-<profile>`` resources, :mod:`domain.kube.migresources`): a container may instead ask for
``mig_count`` instances of one MIG profile (``mig_profile``, canonical name). MIG asks are not time-sharing asks:
``kind`` stays :attr:`GpuKind.NONE` for such a container and ``PodRequest.wants_gpu`` stays False, so the
time-sharing ledger books a MIG pod's node CPU, memory and pod slot only; the MIG books
(:mod:`domain.mig.ledger`) hold its instances. A container never mixes MIG with time-sharing resources, and a pod
takes either kind, not both (:class:`InvalidRequestError` naming the container or pod).
"""

from __future__ import annotations

import enum
import functools

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.topology import Tier
from domain.units import (
    MAX_GPU_MEMORY_BYTES,
    MAX_NODE_QUANTITY,
    MILLI_PER_GPU,
    MILLI_PER_PERCENT,
    PERCENT_PER_GPU,
)


class GpuKind(enum.Enum):
    """What a container asks of GPUs."""

    NONE = "none"
    SHARE = "share"
    WHOLE = "whole"


def _strict_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(field, value, "must be an integer")
    return value


def resolve_share(
    *, core_milli: int | None, memory_bytes: int | None, gpu_memory_bytes: int, memory_milli: int | None = None
) -> tuple[int, int]:
    """Apply the documented default rule; return ``(core_milli, memory_bytes)`` granted on one GPU.

    ``gpu_memory_bytes`` is the total memory of the GPU being considered (bytes, > 0); ``memory_milli`` is a
    relative memory share (milli-GPU of memory, percentage mode; see module docstring). Raises
    :class:`InvalidRequestError` if all of core and memory are missing or the GPU reports no memory.
    """
    if gpu_memory_bytes <= 0:
        raise InvalidRequestError("gpu.memory_bytes", gpu_memory_bytes, "a GPU must report memory > 0")
    if memory_milli is not None:
        memory = max(1, gpu_memory_bytes * memory_milli // MILLI_PER_GPU)
        return (memory_milli if core_milli is None else core_milli), memory
    if core_milli is None and memory_bytes is None:
        raise InvalidRequestError("core_milli", None, "a share needs core or memory")
    if memory_bytes is None:
        assert core_milli is not None
        return core_milli, max(1, gpu_memory_bytes * core_milli // MILLI_PER_GPU)
    if core_milli is None:
        core = max(1, -(-MILLI_PER_GPU * memory_bytes // gpu_memory_bytes))
        return min(core, MILLI_PER_GPU), memory_bytes
    return core_milli, memory_bytes


def _percent_to_milli(name: str, field: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"container[{name}].{field}", value, "must be an integer")
    if not 1 <= value <= PERCENT_PER_GPU:
        raise InvalidRequestError(f"container[{name}].{field}", value, "must be 1..100 (% of one GPU)")
    return value * MILLI_PER_PERCENT


@attrs.frozen
class GpuSelector:
    """GPU eligibility constraints of a pod.

    ``models``: allow-list of model strings (exact match; empty = any model). ``include_uuids``: if non-empty,
    only these GPUs. ``exclude_uuids``: never these GPUs.
    """

    models: tuple[str, ...] = ()
    include_uuids: frozenset[str] = frozenset()
    exclude_uuids: frozenset[str] = frozenset()

    @property
    def unconstrained(self) -> bool:
        """True when every GPU is eligible."""
        return not (self.models or self.include_uuids or self.exclude_uuids)

    def allows(self, gpu: Gpu) -> bool:
        """True if ``gpu`` passes the model allow-list and the UUID include/exclude lists."""
        if self.models and gpu.model not in self.models:
            return False
        if self.include_uuids and gpu.uuid not in self.include_uuids:
            return False
        return gpu.uuid not in self.exclude_uuids


@attrs.frozen
class ContainerRequest:
    """One container's GPU request.

    Fields: ``name``; ``gpus`` (whole GPUs, ≥ 0); ``core_milli`` (share of one GPU's compute, 1..1000 milli-GPU,
    i.e. 0.1-100 %); ``memory_bytes`` (share of one GPU's memory, ≥ 1 byte); ``init`` (init container);
    ``memory_milli`` (keyword-only: relative share of one GPU's memory, 1..1000 milli-GPU, percentage mode);
    ``mig_profile``/``mig_count`` (keyword-only: ``mig_count`` ≥ 1 instances of the MIG profile ``mig_profile``, a
    canonical name of :mod:`domain.mig.profiles`; None/0 = no MIG ask).

    Raises :class:`InvalidRequestError` naming the field for: non-integers, zero or negative core/memory,
    core or relative memory above 1000 milli-GPU (100 %), memory above ``MAX_GPU_MEMORY_BYTES`` (1 PiB), both
    ``memory_bytes`` and ``memory_milli``, whole GPUs combined with a core/memory share, a MIG profile without
    count ≥ 1 (or the reverse), or a MIG ask combined with whole GPUs or a core/memory share.
    """

    name: str
    gpus: int = 0
    core_milli: int | None = None
    memory_bytes: int | None = None
    init: bool = False
    memory_milli: int | None = attrs.field(default=None, kw_only=True)
    mig_profile: str | None = attrs.field(default=None, kw_only=True)
    mig_count: int = attrs.field(default=0, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise InvalidRequestError("container.name", self.name, "must not be empty")
        prefix = f"container[{self.name}]"
        self._check_mig(prefix)
        gpus = _strict_int(f"{prefix}.gpus", self.gpus)
        if gpus < 0:
            raise InvalidRequestError(f"{prefix}.gpus", self.gpus, "must not be negative")
        if self.core_milli is not None:
            core = _strict_int(f"{prefix}.core_milli", self.core_milli)
            if not 1 <= core <= MILLI_PER_GPU:
                raise InvalidRequestError(
                    f"{prefix}.core_milli", self.core_milli, "must be 1..1000 milli-GPU (0.1-100 % of one GPU)"
                )
        if self.memory_bytes is not None:
            memory = _strict_int(f"{prefix}.memory_bytes", self.memory_bytes)
            if memory < 1:
                raise InvalidRequestError(f"{prefix}.memory_bytes", self.memory_bytes, "must be at least 1 byte")
            if memory > MAX_GPU_MEMORY_BYTES:
                raise InvalidRequestError(f"{prefix}.memory_bytes", self.memory_bytes, f"must be at most "
                                          f"{MAX_GPU_MEMORY_BYTES} bytes (1 PiB): no GPU has that much memory")
        if self.memory_milli is not None:
            relative = _strict_int(f"{prefix}.memory_milli", self.memory_milli)
            if not 1 <= relative <= MILLI_PER_GPU:
                raise InvalidRequestError(
                    f"{prefix}.memory_milli", self.memory_milli, "must be 1..1000 milli-GPU (0.1-100 % of one GPU)"
                )
            if self.memory_bytes is not None:
                raise InvalidRequestError(
                    f"{prefix}.memory_milli", self.memory_milli, "give memory in bytes or relative, not both"
                )
        shared = (self.core_milli, self.memory_bytes, self.memory_milli)
        if gpus > 0 and any(value is not None for value in shared):
            raise InvalidRequestError(
                f"{prefix}.gpus",
                self.gpus,
                "whole GPUs cannot be combined with a core/memory share; a whole GPU already grants 100 % core "
                "and all of its memory",
            )

    def _check_mig(self, prefix: str) -> None:
        count = _strict_int(f"{prefix}.mig_count", self.mig_count)
        if self.mig_profile is None and count == 0:
            return
        if not self.mig_profile or count < 1:
            raise InvalidRequestError(f"{prefix}.mig_count", self.mig_count,
                                      f"a MIG ask needs a profile and a count >= 1 (profile {self.mig_profile!r})")
        if self.gpus or any(v is not None for v in (self.core_milli, self.memory_bytes, self.memory_milli)):
            raise InvalidRequestError(
                f"{prefix}.mig_profile", self.mig_profile,
                "a container takes either MIG instances or time-sharing GPU resources (whole GPUs, core, memory), "
                "not both; split them into separate pods")

    @property
    def wants_mig(self) -> bool:
        """True when the container asks for MIG instances (``mig_count`` of ``mig_profile``)."""
        return self.mig_count > 0

    @classmethod
    def share(
        cls,
        name: str,
        *,
        core_percent: object = None,
        memory_bytes: object = None,
        memory_percent: object = None,
        init: bool = False,
    ) -> ContainerRequest:
        """Build a share request from the protocol's units: core in percent (integer 1..100), memory in bytes or
        (percentage mode) in percent of the granted GPU's memory (integer 1..100, stored as ``memory_milli``).

        Raises :class:`InvalidRequestError` naming ``core_percent``/``memory_percent`` for 0, negative, > 100 or
        non-integer values (for example ``50.5``).
        """
        core_milli = _percent_to_milli(name, "core_percent", core_percent)
        memory_milli = _percent_to_milli(name, "memory_percent", memory_percent)
        if memory_bytes is not None and (isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int)):
            raise InvalidRequestError(f"container[{name}].memory_bytes", memory_bytes, "must be an integer")
        return cls(name=name, core_milli=core_milli, memory_bytes=memory_bytes, init=init, memory_milli=memory_milli)

    @functools.cached_property
    def kind(self) -> GpuKind:
        """Whole GPUs, a share of one GPU, or no time-sharing GPU (MIG asks are :attr:`GpuKind.NONE`, see module
        docstring)."""
        if self.gpus > 0:
            return GpuKind.WHOLE
        if self.core_milli is not None or self.memory_bytes is not None or self.memory_milli is not None:
            return GpuKind.SHARE
        return GpuKind.NONE

    @property
    def nominal_milli(self) -> int:
        """GPU compute asked for in milli-GPU, before defaults (whole: 1000 × k; memory-only share: 0)."""
        if self.gpus > 0:
            return self.gpus * MILLI_PER_GPU
        return self.core_milli or 0


@attrs.frozen
class PodRequest:
    """A pod's requests: its containers' GPU requests plus node-level CPU and host memory.

    Fields: ``uid`` (Kubernetes pod UID, the ledger key); ``containers`` (unique names, init and app);
    ``namespace``/``name`` (for messages); ``cpu_milli`` and ``memory_bytes`` (the pod's *effective* node-level
    requests, milli-cores and bytes); ``selector``; ``gpu_topology``: the least connection its whole GPUs must have
    (:class:`domain.topology.Tier`; ``SYSTEM``, the default, requires nothing).

    Raises :class:`InvalidRequestError` for an empty UID, duplicate container names, negative quantities or ones
    above ``MAX_NODE_QUANTITY`` (1 PiB of memory, 2^50 milli-cores), or a pod
    whose containers mix MIG instances with time-sharing GPU resources.
    """

    uid: str
    containers: tuple[ContainerRequest, ...] = ()
    namespace: str = "default"
    name: str = ""
    cpu_milli: int = 0
    memory_bytes: int = 0
    selector: GpuSelector = GpuSelector()
    gpu_topology: Tier = Tier.SYSTEM

    def __attrs_post_init__(self) -> None:
        if not self.uid:
            raise InvalidRequestError("pod.uid", self.uid, "must not be empty")
        names = [c.name for c in self.containers]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"pod[{self.uid}].containers.name", names, "must be unique")
        for field, value in (("cpu_milli", self.cpu_milli), ("memory_bytes", self.memory_bytes)):
            checked = _strict_int(f"pod[{self.uid}].{field}", value)
            if checked < 0:
                raise InvalidRequestError(f"pod[{self.uid}].{field}", value, "must not be negative")
            if checked > MAX_NODE_QUANTITY:
                raise InvalidRequestError(f"pod[{self.uid}].{field}", value,
                                          f"must be at most {MAX_NODE_QUANTITY}: no node has that much")
        if self.wants_gpu and self.wants_mig:
            shared = [c.name for c in self.gpu_containers]
            mig = [c.name for c in self.mig_containers]
            raise InvalidRequestError(
                f"pod[{self.uid}].containers", {"time-sharing": shared, "mig": mig},
                "a pod takes either MIG instances or time-sharing GPU resources, not both; split it into two pods")

    @functools.cached_property
    def mig_containers(self) -> tuple[ContainerRequest, ...]:
        """Containers (init first, then app, in declaration order) that ask for MIG instances."""
        init = [c for c in self.containers if c.init and c.wants_mig]
        app = [c for c in self.containers if not c.init and c.wants_mig]
        return (*init, *app)

    @functools.cached_property
    def wants_mig(self) -> bool:
        """True when any container asks for MIG instances (never together with :attr:`wants_gpu`)."""
        return any(c.wants_mig for c in self.containers)

    @functools.cached_property
    def gpu_containers(self) -> tuple[ContainerRequest, ...]:
        """Containers (init first, then app, in declaration order) that ask for any GPU resource."""
        init = [c for c in self.containers if c.init and c.kind is not GpuKind.NONE]
        app = [c for c in self.containers if not c.init and c.kind is not GpuKind.NONE]
        return (*init, *app)

    @functools.cached_property
    def wants_gpu(self) -> bool:
        """True when any container asks for a time-sharing GPU resource (whole GPUs, core, memory; MIG asks are
        :attr:`wants_mig`)."""
        return any(c.kind is not GpuKind.NONE for c in self.containers)

    @functools.cached_property
    def effective_gpu_milli(self) -> int:
        """Pod GPU compute in milli-GPU by the effective-request rule ``max(Σ app, max init)``."""
        return max(
            sum(c.nominal_milli for c in self.containers if not c.init),
            max((c.nominal_milli for c in self.containers if c.init), default=0),
        )

    def label(self) -> str:
        """``namespace/name`` (or the UID when unnamed), for messages."""
        return f"{self.namespace}/{self.name}" if self.name else self.uid

    @functools.cached_property
    def simple_shape(self) -> ContainerRequest | None:
        """The single GPU container when the pod has exactly one (the vectorised fast path), else ``None``."""
        gpu = self.gpu_containers
        return gpu[0] if len(gpu) == 1 else None


def single_container_pod(
    uid: str,
    *,
    cpu_milli: int = 0,
    memory_bytes: int = 0,
    gpus: int = 0,
    core_milli: int | None = None,
    gpu_memory_bytes: int | None = None,
    models: tuple[str, ...] = (),
    name: str = "",
) -> PodRequest:
    """Convenience constructor of a one-container pod (container ``main``) used by the simulator and tests."""
    container = ContainerRequest(name="main", gpus=gpus, core_milli=core_milli, memory_bytes=gpu_memory_bytes)
    return PodRequest(
        uid=uid,
        containers=(container,),
        name=name or uid,
        cpu_milli=cpu_milli,
        memory_bytes=memory_bytes,
        selector=GpuSelector(models=models),
    )
