"""Allocation records: what one pod holds on one node, per container and per GPU.

A :class:`PodAllocation` is both the scheduler's plan (written to the pod as an annotation in later issues)
and the ledger's record, keyed by pod UID and container name.

Per-GPU usage follows Kubernetes' effective-request rule applied per GPU: on GPU ``j`` the pod holds
``max(Σ app-container grants on j, max init-container grant on j)``, field by field (core, memory). Init
containers run one after another before the app containers, so their grants never add up.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.units import MILLI_PER_GPU


@attrs.frozen
class GpuGrant:
    """A grant on one GPU: ``gpu_index`` (node-local index), ``core_milli`` (1..1000), ``memory_bytes`` (≥ 1)."""

    gpu_index: int
    core_milli: int
    memory_bytes: int

    def __attrs_post_init__(self) -> None:
        if self.gpu_index < 0:
            raise InvalidRequestError("grant.gpu_index", self.gpu_index, "must not be negative")
        if not 1 <= self.core_milli <= MILLI_PER_GPU:
            raise InvalidRequestError("grant.core_milli", self.core_milli, "must be 1..1000")
        if self.memory_bytes < 1:
            raise InvalidRequestError("grant.memory_bytes", self.memory_bytes, "must be at least 1 byte")


@attrs.frozen
class ContainerGrant:
    """One container's grants. ``whole`` marks whole-GPU grants (100 % core and all memory of each GPU)."""

    container: str
    grants: tuple[GpuGrant, ...]
    init: bool = False
    whole: bool = False

    def __attrs_post_init__(self) -> None:
        indexes = [g.gpu_index for g in self.grants]
        if len(set(indexes)) != len(indexes):
            raise InvalidRequestError(f"container[{self.container}].grants", indexes, "GPUs must be distinct")


@attrs.frozen
class PodAllocation:
    """The ledger's record of one pod: node, container grants, and node-level CPU (milli) and memory (bytes).
    ``pod_slot``: whether it takes one of the node's pod slots (False for a DRA claim's record,
    :mod:`domain.dra.booking`: the pods that use the claim take theirs)."""

    pod_uid: str
    node: str
    containers: tuple[ContainerGrant, ...] = ()
    cpu_milli: int = 0
    memory_bytes: int = 0
    pod_slot: bool = True

    def __attrs_post_init__(self) -> None:
        names = [c.container for c in self.containers]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"pod[{self.pod_uid}].containers", names, "container names must be unique")
        if self.cpu_milli < 0:
            raise InvalidRequestError(f"pod[{self.pod_uid}].cpu_milli", self.cpu_milli, "must not be negative")
        if self.memory_bytes < 0:
            raise InvalidRequestError(
                f"pod[{self.pod_uid}].memory_bytes", self.memory_bytes, "must not be negative"
            )

    def per_gpu_usage(self) -> dict[int, tuple[int, int]]:
        """Effective usage per GPU index: ``{index: (core_milli, memory_bytes)}`` (see module docstring)."""
        app: dict[int, list[int]] = {}
        init: dict[int, list[int]] = {}
        for container in self.containers:
            target = init if container.init else app
            for grant in container.grants:
                core, mem = target.setdefault(grant.gpu_index, [0, 0])
                if container.init:
                    target[grant.gpu_index] = [max(core, grant.core_milli), max(mem, grant.memory_bytes)]
                else:
                    target[grant.gpu_index] = [core + grant.core_milli, mem + grant.memory_bytes]
        usage: dict[int, tuple[int, int]] = {}
        for index in sorted(set(app) | set(init)):
            a_core, a_mem = app.get(index, [0, 0])
            i_core, i_mem = init.get(index, [0, 0])
            usage[index] = (max(a_core, i_core), max(a_mem, i_mem))
        return usage

    @property
    def whole_gpu_indexes(self) -> frozenset[int]:
        """GPU indexes held as whole GPUs by any container."""
        return frozenset(g.gpu_index for c in self.containers if c.whole for g in c.grants)

    @property
    def gpu_tag(self) -> str | None:
        """Workload tag used by GPU-clustering: ``"<k>-gpu"`` for whole-GPU pods, ``"share-gpu"``, or None."""
        app = [c for c in self.containers if not c.init and c.grants]
        whole = sum(len(c.grants) for c in app if c.whole)
        if whole:
            return f"{whole}-gpu"
        if app:
            return "share-gpu"
        return None

    @property
    def gpu_milli(self) -> int:
        """Total effective GPU compute held, milli-GPU."""
        return sum(core for core, _ in self.per_gpu_usage().values())


def add_usage(into: dict[int, tuple[int, int]], usage: Mapping[int, tuple[int, int]]) -> None:
    """Add per-GPU ``usage`` (GPU index → ``(core milli-GPU, memory bytes)``) into ``into``, GPU by GPU."""
    for index, (core, memory) in usage.items():
        old_core, old_memory = into.get(index, (0, 0))
        into[index] = (old_core + core, old_memory + memory)
