"""Interned node states and their fragmentation (:class:`NodeStateCache`), the cache FGD-family scores read.

Identical nodes share one state id, so ``F`` is computed once per distinct ``(cpuLeft, free vector, models)``;
slots are refreshed lazily from the ledger's per-slot version; the cluster totals ``Σ_n f_t(n)`` and idle milli
stay exact integers (moved by the slots whose counted state changed).
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from domain.scheduling.policies.fgd.fragmentation import F64, I64, FragmentationModel, schedulable_free

_Array = TypeVar("_Array", bound=npt.NDArray[Any])


def _grown(old: _Array, size: int, fill: float, columns: int | None = None) -> _Array:
    """``old`` copied into a ``size``-row array of its dtype (a 2-D one ``columns`` wide when given, ≥ its own
    width); the new cells hold ``fill``."""
    new = np.full((size, *old.shape[1:]) if columns is None else (size, columns), fill, old.dtype)
    new[tuple(slice(0, n) for n in old.shape)] = old
    return cast(_Array, new)


class NodeStateCache:
    """Interns node states ``(cpuLeft, free vector, models)`` and caches their ``F`` (:attr:`weighted_f`,
    :meth:`FragmentationModel.weighted_frag`) and, on demand, their ``f_t`` vectors.

    Identical nodes share one state id, so their fragmentation is computed once (the memoisation the published
    simulator uses, §6.13). Slots are refreshed lazily from :attr:`ClusterLedger.version`. Scoring needs only
    ``F``; the per-class ``f_t`` (for :attr:`total_f`) of a state is computed when a cluster total first needs it,
    and the totals then move by the slots whose counted state differs from their current one (exact integers).
    """

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self.ledger = model.ledger
        self._ids: dict[tuple[int, bytes, bytes], int] = {}
        width = self.ledger.max_gpus
        self._f: I64 = np.zeros((64, len(model.p)), np.int64)
        self._has_f = np.zeros(64, np.bool_)
        self._state_cpu: I64 = np.zeros(64, np.int64)
        self._state_free: I64 = np.zeros((64, width), np.int64)
        self._state_models: I64 = np.zeros((64, width), np.int64)
        self.weighted_f: F64 = np.zeros(64, np.float64)
        self.slot_state: I64 = np.full(self.ledger.rows, -1, np.int64)
        self._seen: I64 = np.full(self.ledger.rows, -1, np.int64)
        self._counted: I64 = np.full(self.ledger.rows, -1, np.int64)  # state id included in _total_f, -1 = none
        self._total_f: I64 = np.zeros(len(model.p), np.int64)
        self.total_idle = 0
        self._slot_idle: I64 = np.zeros(self.ledger.rows, np.int64)

    def _fit_rows(self) -> None:
        rows = self.ledger.rows
        if len(self.slot_state) < rows:
            extra = np.full(rows - len(self.slot_state), -1, np.int64)
            self.slot_state = np.concatenate([self.slot_state, extra])
            self._seen = np.concatenate([self._seen, extra])
            self._counted = np.concatenate([self._counted, extra])
            self._slot_idle = np.concatenate([self._slot_idle, np.zeros(len(extra), np.int64)])

    def _grow(self, top: int, width: int) -> None:
        """Room for state ids below ``top`` and ``width`` GPU columns in the per-state arrays (a stored state gains
        GPUs with 0 free milli and model −1, which change none of its ``f_t``)."""
        size = len(self.weighted_f) if top <= len(self.weighted_f) else max(top, 2 * len(self.weighted_f))
        columns = max(width, self._state_free.shape[1])
        if size == len(self.weighted_f) and columns == self._state_free.shape[1]:
            return
        self._f, self._has_f = _grown(self._f, size, 0), _grown(self._has_f, size, False)
        self.weighted_f, self._state_cpu = _grown(self.weighted_f, size, 0.0), _grown(self._state_cpu, size, 0)
        self._state_free = _grown(self._state_free, size, 0, columns)
        self._state_models = _grown(self._state_models, size, -1, columns)

    def intern(self, cpu_left: I64, free: I64, models: I64) -> I64:
        """State ids for ``M`` states (computing ``F`` for the new ones in one batch)."""
        ids = np.empty(len(cpu_left), np.int64)
        new: list[int] = []
        for i in range(len(cpu_left)):
            key = (int(cpu_left[i]), free[i].tobytes(), models[i].tobytes())
            state = self._ids.get(key)
            if state is None:
                state = len(self._ids)
                self._ids[key] = state
                new.append(i)
            ids[i] = state
        if new:
            rows = np.array(new)
            fresh = ids[rows]
            self._grow(int(fresh.max()) + 1, free.shape[1])
            self._state_cpu[fresh], self._state_free[fresh] = cpu_left[rows], free[rows]
            self._state_models[fresh] = models[rows]
            self.weighted_f[fresh] = self.model.weighted_frag(cpu_left[rows], free[rows], models[rows])
        return ids

    def state_f(self, ids: I64) -> I64:
        """``f_t`` (int64 ``(len(ids), T)``, milli-GPU) of interned state ids ``ids`` (each ≥ 0), computed once per
        state on first use (:meth:`FragmentationModel.frag_vectors`). Raises IndexError for an unknown id."""
        if len(ids) and int(ids.max()) >= len(self._ids):
            raise IndexError(f"state id {int(ids.max())} not interned")
        missing = np.unique(ids[~self._has_f[ids]])
        if len(missing):
            self._f[missing] = self.model.frag_vectors(
                self._state_cpu[missing], self._state_free[missing], self._state_models[missing])
            self._has_f[missing] = True
        result: I64 = self._f[ids]
        return result

    def refresh(self) -> I64:
        """Bring changed slots up to date; returns the slots that changed. Keeps :attr:`total_idle` exact."""
        self._fit_rows()
        ledger = self.ledger
        changed = np.flatnonzero(ledger.version != self._seen[: ledger.rows])
        if not len(changed):
            return changed
        if len(changed) == 1:  # one decision changes one node: scalar bookkeeping costs less than array calls
            slot = int(changed[0])
            state = int(self.intern(ledger.cpu_free[changed], schedulable_free(ledger, changed),
                                    ledger.gpu_model[changed])[0])
            on = bool(ledger.active[slot])
            idle = int(ledger.sched_free_sum[slot]) if on else 0
            self.total_idle += idle - int(self._slot_idle[slot])
            self._slot_idle[slot] = idle
            self.slot_state[slot] = state if on else -1
            self._seen[slot] = ledger.version[slot]
            return changed
        active = ledger.active[changed]
        ids = self.intern(ledger.cpu_free[changed], schedulable_free(ledger, changed), ledger.gpu_model[changed])
        new_idle = np.where(active, ledger.sched_free_sum[changed], 0)
        self.total_idle += int(new_idle.sum() - self._slot_idle[changed].sum())
        self._slot_idle[changed] = new_idle
        self.slot_state[changed] = np.where(active, ids, -1)
        self._seen[changed] = ledger.version[changed]
        return changed

    @property
    def total_f(self) -> I64:
        """``Σ_n f_t(n)`` over active slots (int64 ``(T,)``, milli-GPU), as of the last :meth:`refresh`."""
        moved = np.flatnonzero(self._counted != self.slot_state)
        if len(moved):
            old, new = self._counted[moved], self.slot_state[moved]
            self._total_f += self.state_f(new[new >= 0]).sum(axis=0) - self.state_f(old[old >= 0]).sum(axis=0)
            self._counted[moved] = new
        return self._total_f

    def cluster_fragmentation(self) -> tuple[float, int]:
        """``(Σ_n F(n), Σ_n idle milli)`` for the whole cluster, after :meth:`refresh`."""
        self.refresh()
        return float(self.model.weighted(self.total_f)), self.total_idle
