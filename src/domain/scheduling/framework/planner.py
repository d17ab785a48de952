"""Reserve-phase GPU planning: turn "this pod on this node" into per-container GPU grants.

Shares go to the GPU a :class:`ShareGpuChooser` picks among the GPUs that fit (best-fit, worst-fit, first,
random, or a policy's own rule such as FGD's). A pod with one whole-GPU container takes the best-connected ``k``
completely free eligible GPUs where its node reports a topology, else the first ``k`` by index (the published
simulator's rule, docs/trace-replay.md §3.5; :func:`domain.scheduling.framework.topology_sets.whole_gpus`). Pods with
several GPU containers are planned container by container, with best-fit for shares; where the node reports a
topology, their whole-GPU app containers first take one best-connected set together
(:func:`domain.scheduling.framework.topology_sets.connected_grants`; after their shares where the set would leave
a share no GPU), else each the first free GPUs by index in turn.
Init containers are planned against the node as it was before the pod, because the pod holds ``max(app, init)``
per GPU.
"""

from __future__ import annotations

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import DomainError
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.scheduling.framework.choosers import ShareGpuChooser
from domain.scheduling.framework.cycle import I64, BoolArray, CycleState
from domain.scheduling.framework.topology_sets import connected_grants, steer_share, whole_gpus
from domain.topology import NodeTopology, Tier
from domain.units import MILLI_PER_GPU

SHARE_NEEDS_MEMO = 32
"""Share shapes whose resolved per-GPU needs (two int64 arrays the size of the ledger's) are kept per capacity
generation by :func:`ledger_share_needs`; the least recently used beyond it are recomputed when asked again."""

_ROW_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def any_per_row(mask: BoolArray) -> BoolArray:
    """Bool ``[rows]``: ``mask.any(axis=1)`` of a bool ``[rows, cols]`` mask, read as one unsigned integer per row
    when a row is 1, 2, 4 or 8 bytes (numpy stores ``True`` as byte 1, ``False`` as 0). Raises nothing."""
    view = _ROW_VIEW.get(mask.shape[1])
    if view is not None and mask.dtype == np.bool_ and mask.flags.c_contiguous:
        packed: BoolArray = mask.view(view)[:, 0] != 0
        return packed
    counted: BoolArray = np.count_nonzero(mask, axis=1) > 0
    return counted


def _has_selector(pod: PodRequest) -> bool:
    selector = pod.selector
    return bool(selector.models or selector.include_uuids or selector.exclude_uuids)


def eligible_gpus(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> BoolArray:
    """Bool ``[rows, max_gpus]``: schedulable GPUs passing the pod's model allow-list and UUID lists (cached)."""
    cached = state.data.get("eligible")
    if isinstance(cached, np.ndarray):
        return cached
    eligible = ledger.gpu_ok.copy()
    eligible[~ledger.admitting] = False
    selector = pod.selector
    if selector.models:
        eligible &= ledger.model_mask(selector.models)
    if selector.include_uuids or selector.exclude_uuids:
        for name in ledger.node_names():
            slot = ledger.slot(name)
            for gpu in ledger.inventory(name).gpus:
                if not selector.allows(gpu):
                    eligible[slot, gpu.index] = False
    state.data["eligible"] = eligible
    return eligible


def eligible_nodes(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> BoolArray:
    """Bool ``[rows]``: nodes with at least one GPU of :func:`eligible_gpus` (cached per cycle); without a model
    or UUID selector, from the ledger's per-node count of schedulable GPUs."""
    cached = state.data.get("eligible_nodes")
    if isinstance(cached, np.ndarray):
        return cached
    if _has_selector(pod):
        nodes = any_per_row(eligible_gpus(pod, ledger, state))
    else:
        nodes = ledger.admitting & (ledger.sched_gpus > 0)
    state.data["eligible_nodes"] = nodes
    return nodes


def whole_fit_nodes(pod: PodRequest, ledger: ClusterLedger, free: BoolArray, gpus: int) -> BoolArray:
    """Bool ``[rows]``: at least ``gpus`` True in each row of ``free`` (:func:`eligible_gpus` ∧ untouched GPUs), read
    from the ledger's per-node count of schedulable untouched GPUs when the pod has no selector (rows where ``free``
    is restricted further, to candidates, must be masked by the caller)."""
    if gpus <= 0:
        return np.ones(len(free), np.bool_)
    if _has_selector(pod):
        counted: BoolArray = np.count_nonzero(free, axis=1) >= gpus
        return counted
    enough: BoolArray = ledger.admitting & (ledger.free_gpus >= gpus)
    return enough


def ledger_share_needs(ledger: ClusterLedger, shape: ContainerRequest) -> tuple[I64, I64]:
    """:func:`share_needs` of a share container over the whole ledger (``[rows, max_gpus]`` each, read-only),
    memoised per capacity generation (:meth:`~domain.ledgerslots.LedgerSlots.capacity_memo`) for the
    :data:`SHARE_NEEDS_MEMO` most recently used shapes."""
    memo = ledger.capacity_memo().setdefault("share_needs", {})
    assert isinstance(memo, dict)
    key = _shape_key(shape)
    needs = memo.pop(key, None)
    if needs is None:
        needs = share_needs(shape.core_milli, shape.memory_bytes, ledger.mem_cap, memory_milli=shape.memory_milli)
        for array in needs:
            array.flags.writeable = False
        if needs[0].min(initial=1) < 1:  # pragma: no cover - validated requests resolve to ≥ 1 milli-GPU
            raise DomainError(f"share {key} resolves to a core need below 1 milli-GPU")
    _remember(memo, key, needs)
    core: I64 = needs[0]
    mem: I64 = needs[1]
    return core, mem


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


def _shape_key(shape: ContainerRequest) -> tuple[int | None, int | None, int | None]:
    """The memo key of a share shape: ``(core_milli, memory_bytes, memory_milli)``."""
    return shape.core_milli, shape.memory_bytes, shape.memory_milli


def _remember(memo: dict[object, object], key: object, value: object) -> None:
    """Store ``value`` as the newest entry of the least-recently-used ``memo`` (its caller popped ``key`` first),
    dropping the oldest beyond :data:`SHARE_NEEDS_MEMO` entries."""
    while len(memo) >= SHARE_NEEDS_MEMO:
        del memo[next(iter(memo))]
    memo[key] = value


def ledger_share_fit(ledger: ClusterLedger, shape: ContainerRequest,
                     needs: tuple[I64, I64] | None = None) -> BoolArray:
    """Bool ``[rows, max_gpus]``, a read-only view: ``sched_free ≥ core_need`` and ``free_mem ≥ mem_need`` per GPU
    for a share container (needs of :func:`ledger_share_needs`), over every ledger row, before eligibility and
    admission. The view shows the ledger's current books until the next call for this shape, which updates the same
    memory: copy it to keep it.

    Kept in the ledger's :meth:`~domain.ledgerslots.LedgerSlots.stamped_memo` for the :data:`SHARE_NEEDS_MEMO` most
    recently used shapes, with the ledger's ``derived_stamp`` of each row when it was computed: a later call
    recomputes only the rows whose stamp moved (one decision changes one node), so the result always equals the full
    comparison. ``needs``: what :func:`ledger_share_needs` gives for ``shape``, when the caller has it already.
    Raises what :func:`ledger_share_needs` raises."""
    core_need, mem_need = ledger_share_needs(ledger, shape) if needs is None else needs
    memo = ledger.stamped_memo().setdefault("share_fit", {})
    assert isinstance(memo, dict)
    key = _shape_key(shape)
    entry = memo.pop(key, None)
    stamp = ledger.derived_stamp
    if entry is None or len(entry[1]) != len(stamp):
        fit: BoolArray = (ledger.sched_free >= core_need) & (ledger.free_mem >= mem_need)
        entry = (fit, stamp.copy())
    else:
        fit, seen = entry
        changed = np.flatnonzero(seen != stamp)
        if len(changed):
            fit[changed] = (ledger.sched_free[changed] >= core_need[changed]) & (
                ledger.free_mem[changed] >= mem_need[changed])
            seen[changed] = stamp[changed]
    _remember(memo, key, entry)
    shared: BoolArray = entry[0].view()  # the memo's array stays writeable for the next update; callers read only
    shared.flags.writeable = False
    return shared


def only_rows(mask: BoolArray, rows: BoolArray) -> BoolArray:
    """A new bool ``[rows, cols]`` array: ``mask`` (bool ``[rows, cols]``) where ``rows`` (bool ``[rows]``, the same
    length) is True, else all False; each row is read as one unsigned integer and multiplied by 0 or 1 when a row is
    1, 2, 4 or 8 bytes. Raises ValueError when the lengths differ."""
    if len(rows) != len(mask):
        raise ValueError(f"rows has {len(rows)} entries for a mask of {len(mask)} rows")
    view = _ROW_VIEW.get(mask.shape[1])
    if view is not None and mask.dtype == np.bool_ and mask.flags.c_contiguous:
        kept: BoolArray = (mask.view(view)[:, 0] * rows.astype(view)).view(np.bool_).reshape(mask.shape)
        return kept
    masked: BoolArray = mask & rows[:, None]
    return masked


def gpu_fit_mask(
    pod: PodRequest, ledger: ClusterLedger, state: CycleState, shape: ContainerRequest, *, rows: BoolArray | None = None
) -> BoolArray:
    """Bool ``[rows, max_gpus]`` (a fresh array): the :func:`eligible_gpus` that can take ``shape``, the pod's single
    GPU container (whole: completely free; share: :func:`ledger_share_fit`, needs also stored in ``state``), only on
    ``rows`` (bool ``[rows]``) when given.

    Every resolved core need is ≥ 1 milli-GPU (requests are validated), so ``sched_free ≥ core_need`` (0 on
    unschedulable GPUs) already implies a schedulable GPU; the other terms of eligibility are applied per row."""
    if shape.kind is GpuKind.WHOLE:
        fit = ledger.free_whole
    else:
        needs = state.core_need, state.mem_need = ledger_share_needs(ledger, shape)
        fit = ledger_share_fit(ledger, shape, needs)
    if _has_selector(pod):
        fit = fit & eligible_gpus(pod, ledger, state)
    keep = ledger.admitting if rows is None else rows & ledger.admitting
    return only_rows(fit, keep)


def ensure_gpu_fit(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> None:
    """Fill ``state.gpu_fit`` (and needs) for a single-GPU-container pod if no filter did (vectorised)."""
    if state.gpu_fit is not None:
        return
    shape = pod.simple_shape
    assert shape is not None
    state.gpu_fit = gpu_fit_mask(pod, ledger, state, shape)


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
            chosen = whole_gpus(pod, ledger, slot, fit, shape.gpus)
            if chosen is None:
                return None
            grants = tuple(GpuGrant(int(i), MILLI_PER_GPU, int(ledger.mem_cap[slot, i])) for i in chosen)
            container = ContainerGrant(shape.name, grants, init=shape.init, whole=True)
        else:
            if not len(fit):
                return None
            assert state.core_need is not None
            assert state.mem_need is not None
            index = self.chooser.choose(pod, ledger, state, slot, fit)
            topology = ledger.inventory(node).topology
            if topology is not None and ledger.free_whole[slot, index]:
                alike = np.zeros(ledger.gpu_model.shape[1], np.bool_)
                alike[fit] = True
                alike &= (ledger.gpu_model[slot] == ledger.gpu_model[slot, index]) & (
                    ledger.mem_cap[slot] == ledger.mem_cap[slot, index])
                index = steer_share(topology, ledger.free_whole[slot], alike, index)
            grant = GpuGrant(index, int(state.core_need[slot, index]), int(state.mem_need[slot, index]))
            container = ContainerGrant(shape.name, (grant,), init=shape.init)
        return PodAllocation(pod.uid, node, (container,), cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)


def _place(
    container: ContainerRequest, core_free: I64, mem_free: I64, untouched: BoolArray, eligible: BoolArray,
    mem_cap: I64, *, held: I64 | None = None, topology: NodeTopology | None = None, models: I64 | None = None,
) -> ContainerGrant | None:
    """Place one container on one node's free vectors (mutated on success); None if it does not fit.

    ``held`` (init containers): core the pod's app containers already hold per GPU; GPUs where the init grant
    adds least to ``max(app, init)`` are preferred, then best-fit, then the lowest index; a share opening an
    untouched GPU takes, among the untouched ones of equal memory and model (``models``: model id per GPU, when
    known), the one :func:`steer_share` names.
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
    if held is None and topology is not None and untouched[index]:
        alike = np.zeros(len(mem_cap), np.bool_)
        alike[fit] = True
        alike &= mem_cap == mem_cap[index]
        if models is not None:
            alike &= models == models[index]
        index = steer_share(topology, untouched, alike, index)
    core_free[index] -= core_need[index]
    mem_free[index] -= mem_need[index]
    untouched[index] = False
    grant = GpuGrant(index, int(core_need[index]), int(mem_need[index]))
    return ContainerGrant(container.name, (grant,), init=container.init)


def plan_vectors(
    pod: PodRequest, eligible: BoolArray, mem_cap: I64, core_free: I64, mem_free: I64, untouched: BoolArray, *,
    topology: NodeTopology | None = None, minimum: Tier = Tier.SYSTEM, models: I64 | None = None,
) -> tuple[ContainerGrant, ...] | None:
    """Grants of every GPU container of ``pod`` on one node's vectors (``[gpus]`` each: eligible GPUs, memory
    capacity in bytes, free core in milli-GPU, free memory in bytes, GPUs with nothing used; ``models``: model id
    per GPU, when known), app containers first (whole-GPU ones by ``topology`` when given, their GPUs together at
    least of tier ``minimum``), then init containers against the node as it was before the pod (module
    docstring); a pod whose one GPU container is an init container is planned like a one-container pod. On a node
    with a ``topology``, when a pod mixing whole GPUs and shares does not fit with the connected set taken first
    (its set can leave a share no GPU: GPUs of several memory sizes), its shares are placed first and the set taken
    among the GPUs they leave; without a topology, only the container-by-container plan. None if a container does
    not fit or the tier cannot be met. The inputs are not changed."""
    vectors = (eligible, mem_cap, core_free, mem_free, untouched)
    planned = _plan(pod, *vectors, topology, minimum, models, shares_first=False)
    if planned is not None or topology is None or {c.kind is GpuKind.WHOLE for c in _topology_group(pod)} != {
            True, False}:
        return planned
    return _plan(pod, *vectors, topology, minimum, models, shares_first=True)


def _topology_group(pod: PodRequest) -> list[ContainerRequest]:
    """The containers whose whole GPUs form the pod's connected set: its app GPU containers, or its one GPU
    container when that is an init container."""
    gpu = pod.gpu_containers
    return list(gpu) if len(gpu) == 1 else [c for c in gpu if not c.init]


def _plan(
    pod: PodRequest, eligible: BoolArray, mem_cap: I64, core_free: I64, mem_free: I64, untouched: BoolArray,
    topology: NodeTopology | None, minimum: Tier, models: I64 | None, *, shares_first: bool,
) -> tuple[ContainerGrant, ...] | None:
    core, mem, still = core_free.copy(), mem_free.copy(), untouched.copy()
    app = _topology_group(pod)
    early: dict[int, ContainerGrant] = {}
    for position, container in enumerate(app if shares_first else ()):
        if container.kind is not GpuKind.WHOLE:
            share = _place(container, core, mem, still, eligible, mem_cap, topology=topology, models=models)
            if share is None:
                return None
            early[position] = share
    preset = connected_grants(app, eligible & still, mem_cap, topology, minimum)
    if preset is None:
        return None
    for grant in (g for c in preset if c is not None for g in c.grants):
        core[grant.gpu_index] = mem[grant.gpu_index] = 0
        still[grant.gpu_index] = False
    grants: list[ContainerGrant] = []
    for position, (container, connected) in enumerate(zip(app, preset, strict=True)):
        placed = early.get(position, connected)
        if placed is None:
            placed = _place(container, core, mem, still, eligible, mem_cap, topology=topology, models=models)
        if placed is None:
            return None
        grants.append(placed)
    held = core_free - core
    for container in (c for c in pod.gpu_containers if c.init and c not in app):
        placed = _place(container, core_free.copy(), mem_free.copy(), untouched.copy(), eligible, mem_cap, held=held)
        if placed is None:
            return None
        grants.append(placed)
    return tuple(grants)


def plan_composite(
    pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, *, required: bool = True
) -> PodAllocation | None:
    """Plan of a pod with several GPU containers on ``slot`` (module docstring), by the node's topology and, when
    ``required``, meeting the pod's ``gpu_topology``; None if it does not fit."""
    eligible = eligible_gpus(pod, ledger, state)[slot]
    # eligible GPUs are schedulable: the ledger's untouched GPUs are the same GPUs as "nothing used" ones
    grants = plan_vectors(pod, eligible, ledger.mem_cap[slot], ledger.free_core[slot], ledger.free_mem[slot],
                          ledger.free_whole[slot], topology=ledger.inventory(ledger.name(slot)).topology,
                          minimum=pod.gpu_topology if required else Tier.SYSTEM, models=ledger.gpu_model[slot])
    if grants is None:
        return None
    return PodAllocation(pod.uid, ledger.name(slot), grants, cpu_milli=pod.cpu_milli, memory_bytes=pod.memory_bytes)
