"""``fgd-plus``'s value of share options and of one-GPU pods for ``fgd-staged``, computed from cached per-state
parts and the one GPU a placement changes.

:meth:`FgdPlusScore._option_values` ranks the options that tie on the gap key by FGD-deficit-scarce's value of
placing the share there (:meth:`FgdScarceScore._rate`): FGD's fragmentation change of the node, its CPU-deficit
change, the restricted claim and the saturation-residue change; a one-GPU pod is placed by that value too. Evaluated
from scratch that is a pass over every GPU, head and typical-pod group of each option, and most evaluations are of
one option (a node whose state just changed). A share changes only the free milli of its GPU, from ``h`` to
``h' = max(h − u, 0)``, a one-GPU pod only its first fitting GPU, from ``h`` to 0, and every GPU-wise quantity those
terms read is a sum of per-GPU integers: the usable-GPU counts and free milli per head
(:meth:`FragmentationModel.head_usable`) and the copies per typical-pod group (:func:`residue.gpu_units`).
:class:`GapPlusScore` keeps those integers per node state (an interned state id never changes meaning), moves them
by the one GPU's change (:meth:`FragmentationModel.head_change`) and applies the rest of
:meth:`FgdScarceScore._rate`'s arithmetic. The values are the same bit for bit: the integers are equal, every float
operation is the one ``_rate`` performs on equal operands (the per-GPU claim sum has one non-zero term), and the
float reductions are row by row, so a row's value does not depend on its batch.

A one-GPU pod's value depends on the node state, its fit and the pod's CPU ask only, and one placement changes one
node, whose new state every one-GPU class values next: a state one class misses is valued in the same batch for the
:data:`SIBLINGS` one-GPU classes scored most recently before it (numpy's per-call cost, not the rows, dominates such
small batches).

Memory: per node state valued, its heads' counts and milli, its groups' copies and its residue vector (int64);
all dropped once :data:`MAX_STATES` states are held. The values memoised for siblings are entries of their classes'
state memos (one int64 key and value per node state and fit), kept as FGD's are.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.policies.fgd.deficit import cpu_deficit_of_total
from domain.scheduling.policies.fgd.fragmentation import I64, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.residue import SECONDARY_SPAN, gpu_units, residue_from_units
from domain.scheduling.policies.fgd.score import CHOICE_SPAN, distinct_keys, sigmoid_score

MAX_STATES = 1 << 15
"""Node states whose parts are kept (about 2 KiB each with 233 typical pods): beyond it all are dropped and
recomputed on use."""
SIBLINGS = 4
"""Other one-GPU pod classes a missed node state is valued for in the same batch (:meth:`GapPlusScore._lookup`).
Small, since a batch's cost grows with its rows once they are many (about 85, 100 and 160 µs for 1, 5 and 25 rows
with 233 typical pods), and each sibling's values take memo room whether or not its pods come back."""


def is_one_gpu(pod: PodRequest) -> bool:
    """Whether ``pod`` is one container asking one whole GPU."""
    shape = pod.simple_shape
    return pod.wants_gpu and shape is not None and shape.kind is GpuKind.WHOLE and shape.gpus == 1


class GapPlusScore(FgdPlusScore):
    """``fgd-plus`` whose share options and one-GPU pods are valued from per-state parts (module docstring); same
    values. Its residue vectors come from the same per-state rows: parts are computed only for the node states a
    share option or a one-GPU pod is valued on."""

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self._index: dict[int, int] = {}
        model = cache.model
        self._count: I64 = np.zeros((0, model.head_count), np.int64)
        self._milli: I64 = np.zeros((0, model.head_count), np.int64)
        self._units: I64 = np.zeros((0, len(model.u_g)), np.int64)
        self._residue: I64 = np.zeros((0, len(model.p)), np.int64)
        self._one_gpu_asks: OrderedDict[tuple[int, int, int, int], None] = OrderedDict()  # class keys, LRU last

    def _store(self, at: int, parts: tuple[I64, I64, I64, I64]) -> None:
        """Write ``parts`` (each ``(n, width)``, widths fixed by the fragmentation model) at rows ``at..at + n`` of
        the per-state arrays, growing them."""
        end = at + len(parts[0])
        if end > len(self._count):
            size = max(end, 2 * len(self._count), 64)
            held = (self._count, self._milli, self._units, self._residue)
            grown = []
            for old, new in zip(held, parts, strict=True):
                array = np.zeros((size, new.shape[1]), np.int64)
                array[: len(old)] = old
                grown.append(array)
            self._count, self._milli, self._units, self._residue = grown
        self._count[at:end], self._milli[at:end], self._units[at:end], self._residue[at:end] = parts

    def _rows(self, slots: I64) -> I64:
        """Row of the per-state arrays for the current state of each slot of ``slots`` (after
        :meth:`NodeStateCache.refresh`), computing the parts of states not held yet in one batch."""
        states = self.cache.slot_state[slots].tolist()
        index = self._index
        missing: dict[int, int] = {}
        for state, slot in zip(states, slots.tolist(), strict=True):
            if state not in index:
                missing.setdefault(state, slot)
        if missing:
            if len(index) + len(missing) > MAX_STATES:
                index.clear()
                missing = {}
                for state, slot in zip(states, slots.tolist(), strict=True):
                    missing.setdefault(state, slot)
            ledger, model = self.ledger, self.cache.model
            first = np.array(list(missing.values()), np.int64)
            free, models = schedulable_free(ledger, first), ledger.gpu_model[first]
            count, milli = model.head_usable(free, models)
            units = gpu_units(model, free, model.allowed_for(models))
            residue = residue_from_units(model, ledger.cpu_free[first], free.sum(axis=-1), units)
            start = len(index)
            self._store(start, (count, milli, units, residue))
            index.update(zip(missing, range(start, start + len(missing)), strict=True))
        return np.array([index[state] for state in states], np.int64)

    def _residue_now(self, where: I64) -> I64:
        """``r_t`` (int64 ``(len(where), T)``) of the current state of slots ``where``."""
        if not len(where):
            return np.zeros((0, len(self.cache.model.p)), np.int64)
        rows = self._rows(where)  # first: it may grow (rebind) the per-state arrays
        result: I64 = self._residue[rows]
        return result

    def _evaluate(self, pod: PodRequest, state: CycleState, slots: I64) -> tuple[I64, I64]:
        """A one-GPU pod's values (:meth:`FgdScore._evaluate`: FGD-deficit-scarce's, no GPU choice) by
        :meth:`_one_gpu_values`; other pods: FGD-deficit-scarce's own evaluation."""
        if not is_one_gpu(pod):
            return super()._evaluate(pod, state, slots)
        cpu = np.full(len(slots), pod.cpu_milli, np.int64)
        return self._one_gpu_values(state, slots, cpu), np.full(len(slots), -1, np.int64)

    def _one_gpu_values(self, state: CycleState, slots: I64, cpu: I64) -> I64:
        """FGD-deficit-scarce's value (≥ 0) of a one-GPU pod asking ``cpu[i]`` CPU-milli on slot ``slots[i]`` (slots
        may repeat): it empties the first GPU the cycle's fit allows there, and a slot without one is left as it is
        (as :meth:`FgdScore._evaluate` places a whole-GPU pod). Raises nothing."""
        assert state.gpu_fit is not None
        fit = np.take(state.gpu_fit, slots, axis=0)
        gpu = np.argmax(fit, axis=1).astype(np.int64)
        before = self.ledger.sched_free[slots, gpu]
        return self._values_after(cpu, slots, gpu, before, np.where(fit.any(axis=1), 0, before))

    def _lookup(self, pod: PodRequest, state: CycleState, key: tuple[int, int, int, int], slots: I64,
                combined: I64) -> I64:
        """:meth:`FgdScore._lookup`; for a one-GPU pod the node states it misses are valued in the same batch for up
        to :data:`SIBLINGS` other one-GPU pod classes (other CPU asks, most recently scored first) and memoised for
        them too: a placement changes one node, whose new state each of those classes would value next. A value is
        a pure function of the pod class and the memo key (node state, fit bits), and a row's value does not depend
        on its batch, so the values are those each class would compute itself."""
        if not is_one_gpu(pod):
            return super()._lookup(pod, state, key, slots, combined)
        asks = self._one_gpu_asks
        asks.pop(key, None)
        asks[key] = None
        while len(asks) > SIBLINGS + 1:
            del asks[next(iter(asks))]
        memo = self._memo_for(key)
        packed = memo.get_many(combined)
        missing = np.flatnonzero(packed < 0)
        if not len(missing):
            return packed
        unique, first, inverse = distinct_keys(combined[missing])
        at = slots[missing[first]]
        classes = list(reversed(asks))  # this pod's class first
        cpu = np.repeat(np.array([c[0] for c in classes], np.int64), len(at))
        values = (self._one_gpu_values(state, np.tile(at, len(classes)), cpu) * CHOICE_SPAN).reshape(len(classes), -1)
        packed[missing] = values[0][inverse]
        memo.update(unique, values[0].tolist())
        for other, row in zip(classes[1:], values[1:], strict=True):
            self._memo_for(other).update_missing(unique, row.tolist())
        return packed

    def _evaluate_options(self, pod: PodRequest, need: I64, slots: I64, gpu: I64) -> I64:
        """:meth:`FgdPlusScore._evaluate_options` (FGD-deficit-scarce's value of placing ``pod`` on GPU ``gpu[i]``
        of slot ``slots[i]``; ``need``: the cycle's per-GPU milli, ledger rows × GPUs) from the per-state parts and
        the changed GPU (module docstring). Raises nothing."""
        before = self.ledger.sched_free[slots, gpu]
        cpu = np.full(len(slots), pod.cpu_milli, np.int64)
        return self._values_after(cpu, slots, gpu, before, np.maximum(before - need[slots, gpu], 0))

    def _values_after(self, cpu: I64, slots: I64, gpu: I64, before: I64, after: I64) -> I64:
        """FGD-deficit-scarce's value (:meth:`FgdScarceScore._rate`) of a pod asking ``cpu[i]`` CPU-milli on slot
        ``slots[i]`` when its GPU ``gpu[i]`` goes from ``before[i]`` (its free milli now,
        ``ledger.sched_free[slots[i], gpu[i]]``) to ``after[i]`` free milli and no other GPU changes. Raises
        nothing."""
        ledger, model = self.ledger, self.cache.model
        rows = self._rows(slots)
        model_ids = ledger.gpu_model[slots, gpu]
        moved_count, moved_milli = model.head_change(before, after, model_ids)
        cpu_now = ledger.cpu_free[slots]
        cpu_left = ledger.cpu_free[slots] - cpu
        total_now = ledger.sched_free[slots].sum(axis=1)
        total = total_now - (before - after)
        # FgdScarceScore._rate, term by term and in its order.
        change = self.cache.weighted_f[self.cache.slot_state[slots]] - model.weighted_heads(
            cpu_left, total, self._count[rows] + moved_count, self._milli[rows] + moved_milli)
        if self.rho > 0:
            deficit_before = cpu_deficit_of_total(self.rho, cpu_now, total_now)
            change = change - (cpu_deficit_of_total(self.rho, cpu_left, total) - deficit_before) / self.rho
        change = change - (before - after) * self.claim()[model_ids]
        unit = np.maximum(model.u_g, 1)[None, :]
        allowed = model.allowed_table()[:, model_ids].T
        units = self._units[rows] + np.where(allowed, after[:, None] // unit - before[:, None] // unit, 0)
        residue = model.weighted(self._residue[rows] - residue_from_units(model, cpu_left, total, units))
        both = sigmoid_score(np.concatenate([change, residue]))  # elementwise: as two calls
        result: I64 = both[: len(slots)] * SECONDARY_SPAN + both[len(slots):]
        return result
