"""Reserve-phase GPU planning: turn "this pod on this node" into per-container GPU grants.

Shares go to the GPU a :class:`ShareGpuChooser` picks among the GPUs that fit (best-fit, worst-fit, first,
random, or a policy's own rule such as FGD's). Whole-GPU containers take the first ``k`` completely free
eligible GPUs by index (the published simulator's rule, docs/trace-replay.md §3.5). Pods with several GPU
containers are planned greedily, container by container, with best-fit for shares; init containers are planned
against the node as it was before the pod, because the pod holds ``max(app, init)`` per GPU.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.scheduling.framework import I64, BoolArray, CycleState
from domain.units import MILLI_PER_GPU


def eligible_gpus(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> BoolArray:
    """Bool ``[rows, max_gpus]``: schedulable GPUs passing the pod's model allow-list and UUID lists (cached)."""
    cached = state.data.get("eligible")
    if isinstance(cached, np.ndarray):
        return cached
    eligible = ledger.gpu_ok & ledger.admitting[:, None]
    selector = pod.selector
    if selector.models:
        eligible = eligible & np.isin(ledger.gpu_model, ledger.model_ids(selector.models))
    if selector.include_uuids or selector.exclude_uuids:
        for name in ledger.node_names():
            slot = ledger.slot(name)
            for gpu in ledger.inventory(name).gpus:
                if not selector.allows(gpu):
                    eligible[slot, gpu.index] = False
    state.data["eligible"] = eligible
    return eligible


def share_needs(
    core_milli: int | None, memory_bytes: int | None, mem_cap: I64, *, memory_milli: int | None = None
) -> tuple[I64, I64]:
    """Per-GPU resolved ``(core_need, mem_need)`` arrays for a share (default rule of :mod:`domain.request`).

    ``mem_cap``: GPU memory capacity array (bytes, any shape); GPUs with no memory get needs that never fit.
    ``memory_milli``: relative memory share (milli-GPU of memory, percentage mode), resolved per GPU.
    """
    has_mem = mem_cap > 0
    safe_cap = np.where(has_mem, mem_cap, 1)
    if memory_milli is not None:
        mem = np.maximum(safe_cap * memory_milli // MILLI_PER_GPU, 1)
        core = np.full_like(mem_cap, memory_milli if core_milli is None else core_milli)
    elif memory_bytes is None:
        assert core_milli is not None
        mem = np.maximum(safe_cap * core_milli // MILLI_PER_GPU, 1)
        core = np.full_like(mem_cap, core_milli)
    elif core_milli is None:
        core = np.minimum(np.maximum(-(-MILLI_PER_GPU * memory_bytes // safe_cap), 1), MILLI_PER_GPU)
        mem = np.full_like(mem_cap, memory_bytes)
    else:
        core = np.full_like(mem_cap, core_milli)
        mem = np.full_like(mem_cap, memory_bytes)
    never = np.iinfo(np.int64).max // 4
    return np.where(has_mem, core, never), np.where(has_mem, mem, never)


def ensure_gpu_fit(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> None:
    """Fill ``state.gpu_fit`` (and needs) for a single-GPU-container pod if no filter did (vectorised)."""
    if state.gpu_fit is not None:
        return
    shape = pod.simple_shape
    assert shape is not None
    eligible = eligible_gpus(pod, ledger, state)
    if shape.kind is GpuKind.WHOLE:
        state.gpu_fit = eligible & (ledger.core_used == 0) & (ledger.mem_used == 0) & (ledger.core_cap > 0)
        return
    core_need, mem_need = share_needs(
        shape.core_milli, shape.memory_bytes, ledger.mem_cap, memory_milli=shape.memory_milli
    )
    state.gpu_fit = eligible & (ledger.core_free() >= core_need) & (ledger.mem_free() >= mem_need)
    state.core_need, state.mem_need = core_need, mem_need


class ShareGpuChooser(Protocol):
    """Chooses the GPU for a share among ``fit`` (ascending GPU indexes that fit, non-empty)."""

    name: str

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Return one index of ``fit``."""
        ...


class BestFitGpu:
    """Smallest free core that fits; lowest index on ties (simulator's ``best``, §3.5)."""

    name = "best-fit"

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Index with the least free core among ``fit``."""
        free = ledger.core_cap[slot, fit] - ledger.core_used[slot, fit]
        return int(fit[int(np.argmin(free))])


class WorstFitGpu:
    """Largest free core; lowest index on ties (GPU-level spread)."""

    name = "worst-fit"

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Index with the most free core among ``fit``."""
        free = ledger.core_cap[slot, fit] - ledger.core_used[slot, fit]
        return int(fit[int(np.argmax(free))])


class RandomGpu:
    """Uniform among the GPUs that fit (simulator's ``random``), drawn from the run's generator."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """A uniformly random index of ``fit``."""
        return int(fit[int(self.rng.integers(len(fit)))])


class ChooserPlanner:
    """GpuPlanner that uses a :class:`ShareGpuChooser` for shares (see module docstring)."""

    def __init__(self, chooser: ShareGpuChooser) -> None:
        self.chooser = chooser
        self.name = f"planner[{chooser.name}]"

    def plan(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int) -> PodAllocation | None:
        """The pod's allocation on ``slot``, or None if it does not fit there."""
        node = ledger.name(slot)
        if not pod.wants_gpu:
            return PodAllocation(pod.uid, node, (), cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)
        shape = pod.simple_shape
        if shape is None:
            return plan_composite(pod, ledger, state, slot)
        ensure_gpu_fit(pod, ledger, state)
        assert state.gpu_fit is not None
        fit = np.flatnonzero(state.gpu_fit[slot]).astype(np.int64)
        if shape.kind is GpuKind.WHOLE:
            if len(fit) < shape.gpus:
                return None
            grants = tuple(GpuGrant(int(i), MILLI_PER_GPU, int(ledger.mem_cap[slot, i])) for i in fit[: shape.gpus])
            container = ContainerGrant(shape.name, grants, init=shape.init, whole=True)
        else:
            if not len(fit):
                return None
            assert state.core_need is not None
            assert state.mem_need is not None
            index = self.chooser.choose(pod, ledger, state, slot, fit)
            grant = GpuGrant(index, int(state.core_need[slot, index]), int(state.mem_need[slot, index]))
            container = ContainerGrant(shape.name, (grant,), init=shape.init)
        return PodAllocation(pod.uid, node, (container,), cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)


def _place(
    container: ContainerRequest, core_free: I64, mem_free: I64, untouched: BoolArray, eligible: BoolArray,
    mem_cap: I64, *, held: I64 | None = None,
) -> ContainerGrant | None:
    """Place one container on one node's free vectors (mutated on success); None if it does not fit.

    ``held`` (init containers): core the pod's app containers already hold per GPU; GPUs where the init grant
    adds least to ``max(app, init)`` are preferred, then best-fit, then the lowest index.
    """
    if container.kind is GpuKind.WHOLE:
        free = np.flatnonzero(eligible & untouched)
        if len(free) < container.gpus:
            return None
        if held is not None:
            free = free[np.argsort(-held[free], kind="stable")]
        chosen = np.sort(free[: container.gpus])
        grants = tuple(GpuGrant(int(i), MILLI_PER_GPU, int(mem_cap[i])) for i in chosen)
        core_free[chosen] = 0
        mem_free[chosen] = 0
        untouched[chosen] = False
        return ContainerGrant(container.name, grants, init=container.init, whole=True)
    core_need, mem_need = share_needs(
        container.core_milli, container.memory_bytes, mem_cap, memory_milli=container.memory_milli
    )
    fit = np.flatnonzero(eligible & (core_free >= core_need) & (mem_free >= mem_need))
    if not len(fit):
        return None
    extra = np.zeros(len(fit), np.int64) if held is None else np.maximum(core_need[fit] - held[fit], 0)
    index = int(fit[int(np.lexsort((fit, core_free[fit], extra))[0])])
    core_free[index] -= core_need[index]
    mem_free[index] -= mem_need[index]
    untouched[index] = False
    grant = GpuGrant(index, int(core_need[index]), int(mem_need[index]))
    return ContainerGrant(container.name, (grant,), init=container.init)


def plan_composite(pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int) -> PodAllocation | None:
    """Greedy plan for a pod with several GPU containers (module docstring); None if it does not fit."""
    eligible = eligible_gpus(pod, ledger, state)[slot]
    mem_cap = ledger.mem_cap[slot]
    base_core = ledger.core_free()[slot]
    base_mem = ledger.mem_free()[slot]
    base_untouched = (ledger.core_used[slot] == 0) & (ledger.mem_used[slot] == 0) & (ledger.core_cap[slot] > 0)
    core, mem, untouched = base_core.copy(), base_mem.copy(), base_untouched.copy()
    grants: list[ContainerGrant] = []
    for container in (c for c in pod.gpu_containers if not c.init):
        placed = _place(container, core, mem, untouched, eligible, mem_cap)
        if placed is None:
            return None
        grants.append(placed)
    held = base_core - core
    for container in (c for c in pod.gpu_containers if c.init):
        placed = _place(
            container, base_core.copy(), base_mem.copy(), base_untouched.copy(), eligible, mem_cap, held=held
        )
        if placed is None:
            return None
        grants.append(placed)
    return PodAllocation(
        pod.uid, ledger.name(slot), tuple(grants), cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes
    )
