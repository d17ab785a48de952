"""``fgd-plus``'s value of share options for ``fgd-staged``, computed from cached per-state parts and the one GPU
a share changes.

:meth:`FgdPlusScore._option_values` ranks the options that tie on the gap key by FGD-deficit-scarce's value of
placing the share there (:meth:`FgdScarceScore._rate`): FGD's fragmentation change of the node, its CPU-deficit
change, the restricted claim and the saturation-residue change. Evaluated from scratch that is a pass over every
GPU, head and typical-pod group of each option, and most evaluations are of one option (a node whose state just
changed). A share changes only the free milli of its GPU, from ``h`` to ``h' = max(h − u, 0)``, and every GPU-wise
quantity those terms read is a sum of per-GPU integers: the usable-GPU counts and free milli per head
(:meth:`FragmentationModel.head_usable`) and the copies per typical-pod group (:func:`residue.gpu_units`).
:class:`GapPlusScore` keeps those integers per node state (an interned state id never changes meaning), moves them
by the one GPU's change (:meth:`FragmentationModel.head_change`) and applies the rest of
:meth:`FgdScarceScore._rate`'s arithmetic to the same batch of options in the same order. The values are the same
bit for bit: the integers are equal, and every float operation is the one ``_rate`` performs on equal operands
(the per-GPU claim sum has one non-zero term; the residue weighting, the one batch-wide float reduction, sees the
same rows).

Memory: per node state valued, its heads' counts and milli, its groups' copies and its residue vector (int64);
all dropped once :data:`MAX_STATES` states are held.
"""

from __future__ import annotations

import numpy as np

from domain.request import PodRequest
from domain.scheduling.policies.fgd.deficit import cpu_deficit_of_total
from domain.scheduling.policies.fgd.fragmentation import I64, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.residue import SECONDARY_SPAN, gpu_units, residue_from_units
from domain.scheduling.policies.fgd.score import sigmoid_score

MAX_STATES = 1 << 15
"""Node states whose parts are kept (about 2 KiB each with 233 typical pods): beyond it all are dropped and
recomputed on use."""


class GapPlusScore(FgdPlusScore):
    """``fgd-plus`` whose share options are valued from per-state parts (module docstring); same values. Its
    residue vectors come from the same per-state rows, so states that gap balance never values cost nothing."""

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self._index: dict[int, int] = {}
        model = cache.model
        self._count: I64 = np.zeros((0, model.head_count), np.int64)
        self._milli: I64 = np.zeros((0, model.head_count), np.int64)
        self._units: I64 = np.zeros((0, len(model.u_g)), np.int64)
        self._residue: I64 = np.zeros((0, len(model.p)), np.int64)

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
            residue = residue_from_units(model, ledger.cpu_cap[first] - ledger.cpu_used[first], free.sum(axis=-1),
                                         units)
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

    def _evaluate_options(self, pod: PodRequest, need: I64, slots: I64, gpu: I64) -> I64:
        """:meth:`FgdPlusScore._evaluate_options` (FGD-deficit-scarce's value of placing ``pod`` on GPU ``gpu[i]``
        of slot ``slots[i]``; ``need``: the cycle's per-GPU milli, ledger rows × GPUs) from the per-state parts and
        the changed GPU (module docstring). Raises nothing."""
        ledger, model = self.ledger, self.cache.model
        rows = self._rows(slots)
        before = ledger.sched_free[slots, gpu]
        after = np.maximum(before - need[slots, gpu], 0)
        model_ids = ledger.gpu_model[slots, gpu]
        moved_count, moved_milli = model.head_change(before, after, model_ids)
        cpu_now = ledger.cpu_cap[slots] - ledger.cpu_used[slots]
        cpu_left = ledger.cpu_free[slots] - pod.cpu_milli
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
        result: I64 = sigmoid_score(change) * SECONDARY_SPAN + sigmoid_score(residue)
        return result
