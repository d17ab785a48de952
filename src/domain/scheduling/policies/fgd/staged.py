"""FGD-staged — published FGD, with fgd-plus's gap balance for shares only where it cannot cost FGD a placement.

``fgd-plus`` (:mod:`~domain.scheduling.policies.fgd.plus`) packs better than FGD (Weng et al., ATC '23) past
saturation but worse below it: its CPU-deficit term and its gap balance spend fully free nodes and GPUs early, and
the rare multi-GPU pods that only those can host then fail. FGD-staged keeps FGD's decision wherever
that risk exists and uses gap balance only where it does not:

* **Saturated** cluster — at most :data:`SATURATED_WHOLE_GPUS` of the schedulable GPUs of active nodes are fully
  free (the fraction ``Σ free_gpus / Σ sched_gpus`` of the ledger, dimensionless): a share is placed exactly as by
  ``fgd-plus`` (gap key over every GPU that fits, then FGD-deficit-scarce's value, then the tie rule).
* **Below saturation** a share goes into a *partly used* GPU (free milli below its capacity) whose model no
  model-restricted typical pod claims (:func:`~domain.scheduling.policies.fgd.scarce.restricted_claim` = 0), ranked
  as ``fgd-plus`` ranks its options, whenever a feasible node has such a GPU; it never opens a fully free GPU then,
  so it takes nothing a whole-GPU pod could use. With no such GPU the share is placed by FGD.
* **A one-GPU pod**: placed as by ``fgd-plus`` (FGD-deficit-scarce: FGD's change with the CPU a node's GPUs would
  be left without, then its residue score, then the tie rule), but never on a *reserve node*
  (:func:`reserve_rows`: a node with all its GPUs free and the most CPU among the nodes of its GPU count) while
  another feasible node exists.
* **Every other pod** (several whole GPUs, CPU only, several containers): exactly FGD — score, GPU choice, tie rule.

Invariants: a decision for a pod that is neither a share nor a one-GPU pod is FGD's decision on the same cluster
state; a one-GPU pod takes a reserve node only when no other node fits it; a share below saturation never takes a
fully free GPU while FGD's rule is not used for it, nor a GPU of a restricted model. Why the split: replays of the
six public openb files (``bench/dominance.py``, ``docs/fgd-variants.md``) show the losses of ``fgd-plus`` below
saturation are failed 4- and 8-GPU pods, among them CPU-heavy 8-GPU pods only the most CPU-rich nodes can host,
whose CPU its CPU-deficit term hands to one-GPU pods early; its gain at x = 130 comes from how shares fill the last
GPUs and one-GPU pods the last nodes. Raises nothing beyond what FGD and ``fgd-plus`` raise.

Cost: a pod costs FGD's decision; a one-GPU pod FGD-deficit-scarce's instead (memoised per pod class and node
state; a state one class misses is valued from per-state parts for the one-GPU classes scored just before it in the
same batch, :mod:`~domain.scheduling.policies.fgd.optionvalues`), plus a look at the memoised most-CPU rows for the
reserve;
a share also costs one :class:`GapCounts` sync (the rows whose ledger version changed) and a mask over the feasible
rows whose widest gap fits it. When gap balance places it (fast path: a fixed milli on a cluster whose GPUs all
hold 1000 milli) it costs the gap key of the free values its options have, and, when more than one node offers the
best key, FGD-deficit-scarce's value of those nodes (:mod:`~domain.scheduling.policies.fgd.optionvalues`, memoised
per pod class, node state and GPU); other shares go through ``fgd-plus``'s own share decision on the allowed
options.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState
from domain.scheduling.framework.planner import ensure_gpu_fit
from domain.scheduling.policies.fgd.fragmentation import I64
from domain.scheduling.policies.fgd.gapcounts import GapCounts, keys_of_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.optionvalues import GapPlusScore, is_one_gpu
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.score import FgdScore
from domain.units import MILLI_PER_GPU

SATURATED_WHOLE_GPUS = 0.10
"""The cluster counts as saturated when fully free GPUs are at most this fraction of its schedulable GPUs. On the
openb files FGD places every pod up to about x = 90 (90 % of capacity requested), when about 10 % of the GPUs are
still whole; on share-heavy files the allocated fraction stays below 90 % at saturation, while the whole-GPU
fraction still falls to it. Measured alternatives: ``docs/fgd-variants.md``."""

_PLUS = "fgd-staged.plus"
_SCARCE = "fgd-staged.scarce"
_GAP = "fgd-staged.gap"


def is_share(pod: PodRequest) -> bool:
    """Whether ``pod`` is one container asking a share of one GPU (the pods gap balance places)."""
    shape = pod.simple_shape
    return pod.wants_gpu and shape is not None and shape.kind is GpuKind.SHARE


def least_need(pod: PodRequest) -> int:
    """A lower bound (milli-GPU, ≥ 1) of the core milli a share ``pod`` needs on any GPU: its fixed core milli, or
    its relative memory share (which then sets the core, :func:`~domain.request.resolve_share`), else 1."""
    shape = pod.simple_shape
    assert shape is not None
    if shape.core_milli is not None:
        return shape.core_milli
    return shape.memory_milli if shape.memory_milli is not None else 1


def most_cpu_per_gpu_count(ledger: ClusterLedger) -> BoolArray:
    """Bool ``(rows,)``: among the active nodes with at least one schedulable GPU and the same GPU count, those whose
    CPU capacity is the largest, where those nodes do not all have the same CPU capacity (a GPU count whose nodes
    are alike marks none). Depends on capacity and health only. Raises nothing."""
    rows = ledger.rows
    count, cpu = ledger.gpu_count[:rows], ledger.cpu_cap[:rows]
    usable = ledger.active[:rows] & (ledger.sched_gpus[:rows] > 0)
    marked = np.zeros(rows, np.bool_)
    for gpus in np.unique(count[usable]).tolist():
        same = usable & (count == gpus)
        most = int(cpu[same].max())
        if most > int(cpu[same].min()):
            marked |= same & (cpu == most)
    return marked


def reserve_rows(ledger: ClusterLedger, most_cpu: I64 | None = None) -> I64:
    """Ledger rows (ascending) of the *reserve nodes*, kept from one-GPU pods while another node fits them: the nodes
    of :func:`most_cpu_per_gpu_count` (``most_cpu``: their rows, ascending, when the caller has them) whose
    schedulable GPUs are all fully free. Pods without GPUs (DaemonSets, CPU-only jobs) do not end a reserve.
    Rationale: on the openb trace those nodes are the only hosts of the CPU-heaviest 8-GPU pods (120 of 128 cores),
    and FGD-deficit-scarce's CPU-deficit term sends CPU-hungry one-GPU pods to them first, since their CPU strands
    no GPU; the rule does not read which pods need them. Raises nothing."""
    if most_cpu is None:
        most_cpu = np.flatnonzero(most_cpu_per_gpu_count(ledger))
    result: I64 = most_cpu[ledger.free_gpus[most_cpu] == ledger.sched_gpus[most_cpu]]
    return result


def saturated(ledger: ClusterLedger, whole_fraction: float = SATURATED_WHOLE_GPUS) -> bool:
    """Whether at most ``whole_fraction`` of the schedulable GPUs of active nodes are fully free (False for a
    ledger without schedulable GPUs)."""
    rows = ledger.rows
    active = ledger.active[:rows]
    gpus = int(np.dot(ledger.sched_gpus[:rows], active))
    whole = int(np.dot(ledger.free_gpus[:rows], active))
    return gpus > 0 and whole <= whole_fraction * gpus


class FgdStagedScore:
    """FGD-staged score plugin, tie refiner and GPU chooser (module docstring). A cycle is decided by FGD
    (:class:`FgdScore`), by FGD-deficit-scarce (one-GPU pods, valued by :class:`GapPlusScore`) or by gap balance; gap
    balance ranks exactly as ``fgd-plus`` (:class:`FgdPlusScore`) does
    over the options it allows. Shares with a fixed milli on a cluster whose GPUs all hold 1000 milli take the fast
    path: :class:`GapCounts` and :func:`keys_by_free` find the best gap key ``h*`` from the free milli of the
    allowed options, and only the nodes offering ``h*`` are valued by FGD-deficit-scarce; other shares go through
    ``fgd-plus`` itself on the allowed options."""

    name = "fgd-staged"

    def __init__(self, cache: NodeStateCache) -> None:
        self.cache = cache
        self.ledger: ClusterLedger = cache.ledger
        self.fgd = FgdScore(cache)
        self.plus: FgdPlusScore = GapPlusScore(cache)
        self.gaps = GapCounts(cache.ledger)
        self._uniform_key = (-1, -1)
        self._uniform = False
        self._most_cpu_key = (-1, -1)
        self._most_cpu: I64 = np.zeros(0, np.int64)

    def _reserve(self, slots: I64) -> BoolArray | None:
        """Which of ``slots`` are reserve nodes now (:func:`reserve_rows`; the capacity part memoised per node-set
        and capacity generation); None when the ledger has none."""
        ledger = self.ledger
        key = (ledger.node_set_generation, ledger.capacity_generation)
        if key != self._most_cpu_key:
            self._most_cpu = np.flatnonzero(most_cpu_per_gpu_count(ledger))
            self._most_cpu_key = key
        if not len(self._most_cpu):
            return None
        kept = reserve_rows(ledger, self._most_cpu)
        if not len(kept):
            return None
        where = np.minimum(np.searchsorted(kept, slots), len(kept) - 1)
        result: BoolArray = kept[where] == slots
        return result

    def _uniform_gpus(self) -> bool:
        """Whether every schedulable GPU of an active node holds 1000 milli (memoised per node-set and capacity
        generation)."""
        ledger = self.ledger
        key = (ledger.node_set_generation, ledger.capacity_generation)
        if key != self._uniform_key:
            rows = ledger.rows
            caps = ledger.core_cap[:rows][ledger.active[:rows]]
            ok = ledger.gpu_ok[:rows][ledger.active[:rows]]
            self._uniform = bool((caps[ok] == MILLI_PER_GPU).all())
            self._uniform_key = key
        return self._uniform

    def _options(self, ledger: ClusterLedger, state: CycleState, slots: I64, whole_too: bool,
                 least: int) -> tuple[I64, BoolArray] | None:
        """The slots of ``slots`` (ascending) that have an allowed option, and their allowed GPUs (bool ``(R, G)``):
        fitting GPUs; below saturation (``whole_too`` False) only partly used GPUs of models no restricted typical
        pod claims, looked for only on slots whose widest gap (:meth:`GapCounts.widest_gap`) is at least ``least``,
        a lower bound of the pod's per-GPU milli. None when there is none."""
        assert state.gpu_fit is not None
        if not whole_too:
            slots = slots[self.gaps.widest_gap(sync=False)[slots] >= least]
            if not len(slots):
                return None
        allowed = np.take(state.gpu_fit, slots, axis=0)
        if not whole_too:
            allowed &= np.take(ledger.sched_free, slots, axis=0) < np.take(ledger.core_cap, slots, axis=0)
            if not allowed.any():
                return None
            claim = self.plus.claim()
            if claim.any():
                allowed &= claim[np.take(ledger.gpu_model, slots, axis=0)] <= 0
        keep = allowed.any(axis=1)
        if not keep.all():
            slots, allowed = slots[keep], allowed[keep]
        return (slots, allowed) if len(slots) else None

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Node scores (0..100) for ``slots`` (ascending). A share placed by gap balance on the fast path: 1 on the
        slots offering the best gap key and 0 on the others, so only those reach :meth:`refine` (which ranks them
        and gives every other slot 0: the same choice as scoring all 0), and none is valued when one slot offers
        it; through ``fgd-plus``'s own share decision: 0 per slot. A one-GPU pod: FGD-deficit-scarce's scores
        (0..100), or, when ``slots`` hold reserve nodes and others, 0 on the reserve nodes and those scores + 1,
        capped at 100, on the others. Any other pod: FGD's scores."""
        options = None
        state.data[_SCARCE] = False
        if is_one_gpu(pod):
            state.data[_PLUS] = False
            state.data[_SCARCE] = True
            scores = self.plus.score(pod, ledger, state, slots)  # fgd-plus's rule: FGD-deficit-scarce
            reserve = self._reserve(slots)
            if reserve is not None and reserve.any() and not reserve.all():
                scores = np.where(reserve, 0, np.minimum(scores + 1, 100))
            return scores
        if is_share(pod):
            ensure_gpu_fit(pod, ledger, state)
            self.gaps.sync()
            options = self._options(ledger, state, slots, self.gaps.saturated(SATURATED_WHOLE_GPUS, sync=False),
                                    least_need(pod))
        state.data[_PLUS] = options is not None
        if options is None:
            return self.fgd.score(pod, ledger, state, slots)
        rows, allowed = options
        shape = pod.simple_shape
        assert shape is not None
        assert state.gpu_fit is not None
        if shape.core_milli is None or not self._uniform_gpus():
            masked = np.zeros_like(state.gpu_fit)  # fgd-plus reads the fit of ``slots`` only
            masked[rows] = allowed
            state.gpu_fit = masked
            state.data[_GAP] = None
            return self.plus.score(pod, ledger, state, slots)
        self.cache.refresh()
        free = np.take(ledger.sched_free, rows, axis=0)
        values = np.unique(free[allowed])  # the free milli the options have, ascending
        keys = keys_of_free(shape.core_milli, values, self.gaps.histogram(sync=False))
        best = int(values[int(np.argmax(keys))])
        top, gpus = np.nonzero(allowed & (free == best))
        first = np.flatnonzero(np.r_[True, top[1:] != top[:-1]])  # lowest GPU index per node
        best_rows = rows[top[first]]
        state.data[_GAP] = (best_rows, gpus[first].astype(np.int64))
        result: I64 = np.zeros(len(slots), np.int64)
        result[np.searchsorted(slots, best_rows)] = 1
        return result

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """No normalize step (FGD has none)."""
        return scores

    def _plugin(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> bool:
        """Whether gap balance decides this cycle (scoring ``slots`` first when the cycle has not scored: the
        scheduler skips scoring when one node is feasible)."""
        if _PLUS not in state.data:
            self.score(pod, ledger, state, slots)
        return bool(state.data[_PLUS])

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Second key for ``tied`` under gap balance: 0 on slots without the best gap option, else 1 +
        FGD-deficit-scarce's value of placing the share there (as ``fgd-plus``); for a one-GPU pod
        FGD-deficit-scarce's residue score (0..99); 0 for every slot under FGD (whose ties go straight to the tie
        rule)."""
        if not self._plugin(pod, ledger, state, tied):
            if state.data[_SCARCE]:
                return self.plus.refine(pod, ledger, state, tied)
            return np.zeros(len(tied), np.int64)
        entry = state.data.get(_GAP)
        if entry is None:
            return self.plus.refine(pod, ledger, state, tied)
        assert isinstance(entry, tuple)
        rows, gpus = entry
        where = np.searchsorted(rows, tied)
        hit = (where < len(rows)) & (rows[np.minimum(where, len(rows) - 1)] == tied)
        result: I64 = np.zeros(len(tied), np.int64)
        if hit.any():
            assert state.core_need is not None
            result[hit] = self.plus._option_values(pod, state.core_need, tied[hit], gpus[where[hit]]) + 1
        return result

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """The GPU of ``slot`` the deciding rule chose."""
        if not self._plugin(pod, ledger, state, np.array([slot], np.int64)):
            return self.fgd.choose(pod, ledger, state, slot, fit)
        entry = state.data.get(_GAP)
        if entry is None:
            return self.plus.choose(pod, ledger, state, slot, fit)
        assert isinstance(entry, tuple)
        rows, gpus = entry
        where = int(np.searchsorted(rows, slot))
        if where < len(rows) and rows[where] == slot:
            return int(gpus[where])
        return self.plus.choose(pod, ledger, state, slot, fit)
