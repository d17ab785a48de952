"""FGD-residue — FGD's node ranking, its ties broken by how much GPU the node could still absorb (saturation residue).

FGD (:mod:`domain.scheduling.policies.fgd.score`, Weng et al., ATC '23) truncates its score to an integer, so most
decisions end in large ties (every node where a CPU-only pod changes no typical pod's fit scores exactly 50; nodes in
equal states score equally), which the fixed node order then settles. FGD-residue keeps FGD's score as the first key and
settles its ties by a second measure, at FGD's own resolution, before the node order does.

**Saturation residue** of node ``n`` for typical pod ``t`` (``r_t(n)``, milli-GPU, exact integers): the free
GPU milli of ``n`` left idle when ``n`` is filled with as many copies of ``t`` as its free CPU and its GPUs allow::

    copies_t(n) = min(⌊cpuLeft / c_t⌋, gpuCopies_t(n))         (CPU-only t: 0 copies)
    gpuCopies_t(n) = Σ_g ⌊free_g / u_t⌋  (a share, u_t < 1000)  or  ⌊#fully free GPUs / k_t⌋  (k_t whole GPUs)
    r_t(n) = Σ_g free_g − copies_t(n) · u_t · k_t

counting only GPUs of a model ``t`` allows. ``R(n) = Σ_t p_t r_t(n)`` over FGD's typical pods. FGD's own measure
``f_t`` asks only whether *one* copy of ``t`` still fits; ``r_t`` also sees the CPU a pod takes from the GPUs
beside it (a CPU-only pod on a GPU node with little CPU per GPU strands GPUs that whole-GPU pods would have
used) and the slivers repeated copies leave. It is the one-class fixed point of the recursive ("Bellman-style")
fragmentation the FGD authors describe but did not release. Memory is left out, as in FGD (typical pods
are keyed without it, ``docs/trace-replay.md`` §3.1, and it rarely binds).

Decision rule: node value ``(FGD score, residue score)`` compared lexicographically, where the residue score is
``trunc(100 · σ((R(n) − R(n')) / 1000))`` — the residue change scored exactly as FGD scores its fragmentation
change (``n'`` = the node after placing the pod; the smaller the increase of the residue, the higher). Both are
milli-GPU expectations over the same typical pods, so they share FGD's unit, scale (σ over 1000 milli) and
resolution (one point ≈ 40 milli-GPU near Δ = 0): a residue difference finer than what FGD itself can tell apart
stays a tie, which the run's node order then settles as it does for FGD. That keeps FGD's first-fit-like
concentration (ties go to the same early nodes, so untouched nodes stay whole for the large pods that only they
can host); an unquantised residue key spreads the load instead and uses those nodes up early.
The GPU inside a node is chosen by the same two keys (first index on ties). :meth:`FgdResidueScore.score` returns
FGD's 0..99 score; :meth:`FgdResidueScore.refine` gives the residue score of the tied best nodes
(:class:`~domain.scheduling.framework.cycle.Scheduler` calls it before the tie rule). No constant is fitted to a trace:
the only numbers are FGD's (σ scale 1000 milli, scores 0..100) and the packing base :data:`SECONDARY_SPAN`.

Cost per decision: one more ``(nodes × options) × typical pods × GPUs`` integer pass per evaluation (the residue
after placement; the residue before is cached per node state), shared by FGD's memoisation (values are cached
per pod class and node state); the residue score adds one sigmoid per option. Measured cost: docs/fgd-variants.md.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState
from domain.scheduling.policies.fgd.fragmentation import I64, FragmentationModel, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.score import FgdScore, sigmoid_score
from domain.scheduling.policies.fgd.statememo import StateMemo

SECONDARY_SPAN = 128
"""Values pack ``FGD score · SPAN + residue score``; both scores are in 0..100, so any base above 100 works."""

_SECONDARY = "fgd-residue.secondary"


def residue_vectors(
    model: FragmentationModel, cpu_left: I64, free: I64, models: I64, *, allowed: BoolArray | None = None
) -> I64:
    """``r_t`` (module docstring) for ``M`` node states: ``cpu_left`` (M,) CPU-milli, ``free`` (M, G) milli per GPU,
    ``models`` (M, G) ledger model ids (−1 = no GPU) → int64 (M, T) milli-GPU. ``allowed``:
    :meth:`FragmentationModel.allowed_for` of ``models`` (M, U, G), when the caller already has it. Raises nothing."""
    if allowed is None:
        allowed = model.allowed_for(models)
    return residue_from_units(model, cpu_left, free.sum(axis=-1), gpu_units(model, free, allowed))


def gpu_units(model: FragmentationModel, free: I64, allowed: BoolArray) -> I64:
    """Per state and typical-pod group ``u`` (int64 ``(M, U)``): ``Σ_g ⌊free_g / max(u_u, 1)⌋`` over the GPUs
    ``allowed`` ((M, U, G)) lets the group use — share copies, or fully free GPUs for whole-GPU groups (``free``
    (M, G) milli, at most one GPU's capacity each). Raises nothing."""
    unit = np.maximum(model.u_g, 1)[None, :, None]
    units: I64 = np.where(allowed, free[:, None, :] // unit, 0).sum(axis=-1)
    return units


def residue_from_units(model: FragmentationModel, cpu_left: I64, total: I64, units: I64) -> I64:
    """``r_t`` (int64 ``(M, T)``) from ``cpu_left`` (M,) CPU-milli, ``total`` (M,) free milli and :func:`gpu_units`
    ``units`` (M, U) of the same states: :func:`residue_vectors` after its per-GPU pass. Raises nothing."""
    gpu_copies = units[:, model.group_t] // model.copy_divisor_t  # share copies, or free GPUs ÷ k_t
    cpu_copies = (np.maximum(cpu_left, 0)[:, None] + model.cpu_offset_t) // model.cpu_divisor_t
    residue: I64 = total[:, None] - np.minimum(gpu_copies, cpu_copies) * model.milli_per_copy_t
    return residue


def _first_slots(where: I64, states: I64, wanted: I64) -> I64:
    """For each state id in ``wanted`` (sorted, unique), one slot of ``where`` whose state it is."""
    unique, first = np.unique(states, return_index=True)
    found: I64 = where[first[np.searchsorted(unique, wanted)]]
    return found


class FgdResidueScore(FgdScore):
    """FGD-residue score plugin, tie refiner and GPU chooser (module docstring)."""

    name = "fgd-residue"

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self._residue: I64 = np.zeros((0, len(cache.model.p)), np.int64)
        self._known: BoolArray = np.zeros(0, np.bool_)

    def _residue_now(self, where: I64) -> I64:
        """``r_t`` (int64 ``(len(where), T)``) of the current state of slots ``where`` (after
        :meth:`NodeStateCache.refresh`), cached per interned state: a state id never changes meaning."""
        states = self.cache.slot_state[where]
        top = int(states.max()) + 1 if len(states) else 0
        if top > len(self._known):
            size = max(top, 2 * len(self._known))
            grown = np.zeros((size, self._residue.shape[1]), np.int64)
            grown[: len(self._residue)] = self._residue
            known = np.zeros(size, np.bool_)
            known[: len(self._known)] = self._known
            self._residue, self._known = grown, known
        missing = np.unique(states[~self._known[states]])
        if len(missing):
            first = _first_slots(where, states, missing)
            ledger = self.ledger
            self._residue[missing] = residue_vectors(self.cache.model, ledger.cpu_free[first],
                                                     schedulable_free(ledger, first), ledger.gpu_model[first])
            self._known[missing] = True
        result: I64 = self._residue[states]
        return result

    def _rate(self, slots: I64, rows: I64, cpu_left: I64, after: I64, models: I64) -> I64:
        """``FGD score · SPAN + trunc(100 · σ((R(n) − R(n')) / 1000))`` per option (see :meth:`FgdScore._rate`)."""
        model = self.cache.model
        primary = super()._rate(slots, rows, cpu_left, after, models)  # FGD's own score, computed as FGD does
        now = self._residue_now(slots)[rows]
        delta = model.weighted(now - residue_vectors(model, cpu_left, after, models))
        return primary * SECONDARY_SPAN + sigmoid_score(delta)

    def _state_memo(self, pod: PodRequest, key: tuple[int, int, int, int], slots: I64,
                    combined: I64) -> tuple[StateMemo, I64]:
        """One state memo per pod class: the residue score depends on the exact CPU left (copies ``⌊cpu / c_t⌋``)."""
        return self._memo_for(key), combined

    def _publish(self, state: CycleState, slots: I64, values: I64) -> I64:
        """FGD's score (0..99); the packed values of ``slots`` go to ``state`` for :meth:`refine`, which reads the
        residue score of the tied slots only."""
        state.data[_SECONDARY] = (slots, values)
        result: I64 = values // SECONDARY_SPAN
        return result

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Second key (higher is better, 0..99) for ``tied`` slots (ascending): the residue score of the best option
        on each (scored now if this cycle has not scored them all)."""
        found = self._secondary(state, tied)
        if found is None:
            self.score(pod, ledger, state, tied)
            found = self._secondary(state, tied)
            assert found is not None
        return found

    def _secondary(self, state: CycleState, tied: I64) -> I64 | None:
        """The residue scores of ``tied`` from this cycle's last scoring pass, or None when it missed one."""
        entry = state.data.get(_SECONDARY)
        if not isinstance(entry, tuple):
            return None
        slots, values = entry
        dense = np.full(self.ledger.rows, -1, np.int64)  # per ledger row: cheaper than a sorted search of large ties
        dense[slots] = values
        found = dense[tied]
        if (found < 0).any():
            return None
        result: I64 = found % SECONDARY_SPAN
        return result
