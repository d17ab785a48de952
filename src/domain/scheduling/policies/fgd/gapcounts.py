"""The cluster's gap counts kept up to date between decisions, and gap keys by free milli.

:func:`~domain.scheduling.policies.fgd.gapbalance.gap_histogram` recounts every GPU of the ledger at each share
decision. :class:`GapCounts` holds the same histogram ``N(h)`` and moves it by the rows whose ledger version
changed since the last call (one decision changes one node), so a call costs one comparison over the ledger's rows
plus the changed rows' GPUs. It recounts from scratch when nodes join or leave, capacity, model or health change
(``node_set_generation``, ``capacity_generation``) or a node starts or stops admitting pods. The same pass keeps,
per row, its widest gap (so a share learns without a pass over every GPU whether a feasible node has a partly used
GPU wide enough)
and the cluster's schedulable and fully free GPU counts (the saturation test). Like every FGD cache it relies on
the ledger bumping a row's ``version`` whenever the row's books change.

:func:`keys_by_free` gives, for a share needing ``u`` milli on GPUs of capacity
:data:`~domain.units.MILLI_PER_GPU`, the :func:`~domain.scheduling.policies.fgd.gapbalance.option_keys` key of an
option as a function of the GPU's free milli ``h`` alone. The key's last field is ``2^11 − 1 − h``, so distinct
``h`` give distinct keys: the best option of a decision is one free value ``h*``, and the nodes with the best
option are those having a fitting GPU with exactly ``h*`` free; :func:`keys_of_free` gives the same keys for
just the free values the options have.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.scheduling.framework.cycle import BoolArray
from domain.scheduling.policies.fgd.fragmentation import I64
from domain.scheduling.policies.fgd.gapbalance import gap_histogram_of, option_keys
from domain.units import MILLI_PER_GPU


def keys_by_free(need: int, histogram: I64) -> I64:
    """``option_keys`` of a share needing ``need`` milli (1..1000) on a GPU of capacity 1000 with ``h`` free, for
    ``h = 0..1000``: int64 ``(1001,)``; ``histogram``: ``N(h)`` with at least 1001 entries. Keys of ``h < need``
    are computed as if the share fitted (callers mask them). Raises nothing."""
    free = np.arange(MILLI_PER_GPU + 1, dtype=np.int64)[None, :]
    cap = np.full_like(free, MILLI_PER_GPU)
    keys: I64 = option_keys(free, cap, np.full_like(free, need), np.ones(free.shape, np.bool_), histogram)[0]
    return keys


class GapCounts:
    """``N(h)`` of :func:`~domain.scheduling.policies.fgd.gapbalance.gap_histogram` for one ledger, moved by the
    changed rows (module docstring), with two more views of the same rows kept the same way: per ledger row the
    widest gap, the most free milli of its *partly used* GPUs (``0 < sched_free < capacity``; every row, admitting
    or not; :meth:`widest_gap`), and the saturation counts ``(Σ sched_gpus, Σ free_gpus)`` over active rows
    (:meth:`saturated`)."""

    def __init__(self, ledger: ClusterLedger) -> None:
        self.ledger = ledger
        self._generations = (-1, -1, -1)
        self._counted: BoolArray = np.zeros(0, np.bool_)
        self._seen: I64 = np.zeros(0, np.int64)
        self._free: I64 = np.zeros((0, 0), np.int64)
        self._cap: I64 = np.zeros((0, 0), np.int64)
        self._histogram: I64 = np.zeros(MILLI_PER_GPU + 1, np.int64)
        self._widest: I64 = np.zeros(0, np.int64)
        self._row_gpus: I64 = np.zeros(0, np.int64)
        self._row_whole: I64 = np.zeros(0, np.int64)
        self._gpus = 0
        self._whole = 0

    def _recount(self, counted: BoolArray) -> None:
        ledger = self.ledger
        rows = ledger.rows
        self._counted = counted.copy()
        self._seen = ledger.version[:rows].copy()
        self._free = ledger.sched_free[:rows].copy()
        self._cap = ledger.core_cap[:rows] * ledger.gpu_ok[:rows]
        self._histogram = gap_histogram_of(self._free[counted], self._cap[counted])
        self._widest = np.where((self._free > 0) & (self._free < self._cap), self._free, 0).max(axis=1, initial=0)
        active = ledger.active[:rows]
        self._row_gpus = ledger.sched_gpus[:rows] * active
        self._row_whole = ledger.free_gpus[:rows] * active
        self._gpus, self._whole = int(self._row_gpus.sum()), int(self._row_whole.sum())

    def sync(self) -> None:
        """Bring every view up to date: a recount when nodes, capacity or the admitting rows changed, else the rows
        whose ledger version moved (one changed row, the common case, in scalar steps)."""
        ledger = self.ledger
        rows = ledger.rows
        counted = ledger.active[:rows] & ledger.admitting[:rows]
        generations = (ledger.node_set_generation, ledger.capacity_generation, rows)
        if generations != self._generations or not np.array_equal(counted, self._counted):
            self._generations = generations
            self._recount(counted)
            return
        changed = np.flatnonzero(ledger.version[:rows] != self._seen)
        if len(changed) == 1:
            self._move_row(int(changed[0]), bool(counted[changed[0]]))
        elif len(changed):
            self._move_rows(changed, counted[changed])

    def _move_row(self, row: int, gaps: bool) -> None:
        """:meth:`_move_rows` for one row (``gaps``: whether its GPUs are in the histogram)."""
        ledger = self.ledger
        old, new, cap = self._free[row].tolist(), ledger.sched_free[row].tolist(), self._cap[row].tolist()
        histogram, top, widest = self._histogram, len(self._histogram) - 1, 0
        for before, after, capacity in zip(old, new, cap, strict=True):
            if widest < after < capacity:
                widest = after
            if gaps and before != after:
                if 0 < before < capacity:
                    histogram[min(before, top)] -= 1
                if 0 < after < capacity:
                    histogram[min(after, top)] += 1
        self._widest[row] = widest
        self._free[row] = new
        self._seen[row] = ledger.version[row]
        active = bool(ledger.active[row])
        gpus = int(ledger.sched_gpus[row]) if active else 0
        whole = int(ledger.free_gpus[row]) if active else 0
        self._gpus += gpus - int(self._row_gpus[row])
        self._whole += whole - int(self._row_whole[row])
        self._row_gpus[row], self._row_whole[row] = gpus, whole

    def _move_rows(self, changed: I64, gaps: BoolArray) -> None:
        """Move every view by the rows ``changed`` (their old values are this object's copies); ``gaps``: per
        changed row, whether its GPUs are in the histogram (active and admitting)."""
        ledger = self.ledger
        cap = self._cap[changed]
        old, new = self._free[changed], ledger.sched_free[changed]
        self._widest[changed] = np.where((new > 0) & (new < cap), new, 0).max(axis=1, initial=0)
        old_gaps, new_gaps, gap_cap = old[gaps], new[gaps], cap[gaps]
        top = len(self._histogram) - 1
        np.subtract.at(self._histogram, np.minimum(old_gaps[(old_gaps > 0) & (old_gaps < gap_cap)], top), 1)
        np.add.at(self._histogram, np.minimum(new_gaps[(new_gaps > 0) & (new_gaps < gap_cap)], top), 1)
        self._free[changed] = new
        self._seen[changed] = ledger.version[changed]
        active = ledger.active[changed]
        gpus, whole = ledger.sched_gpus[changed] * active, ledger.free_gpus[changed] * active
        self._gpus += int(gpus.sum() - self._row_gpus[changed].sum())
        self._whole += int(whole.sum() - self._row_whole[changed].sum())
        self._row_gpus[changed], self._row_whole[changed] = gpus, whole

    def histogram(self, *, sync: bool = True) -> I64:
        """``N(h)`` now, int64 ``(C + 1,)`` (``C``: the largest capacity, at least 1000); equal to
        ``gap_histogram(ledger)`` (as of the last :meth:`sync` when ``sync`` is False). The array is this object's
        own: callers must not modify it."""
        if sync:
            self.sync()
        return self._histogram

    def widest_gap(self, *, sync: bool = True) -> I64:
        """Per ledger row (int64 ``(rows,)``), the most free milli of a GPU with ``0 < sched_free < core_cap`` there,
        0 when it has none: a row offers a share needing ``u`` milli a partly used GPU it fits only when this is at
        least ``u`` (as of the last :meth:`sync` when ``sync`` is False). The array is this object's own: callers
        must not modify it."""
        if sync:
            self.sync()
        return self._widest

    def saturated(self, whole_fraction: float, *, sync: bool = True) -> bool:
        """:func:`~domain.scheduling.policies.fgd.staged.saturated` of the ledger now (as of the last :meth:`sync`
        when ``sync`` is False), from the kept counts."""
        if sync:
            self.sync()
        return self._gpus > 0 and self._whole <= whole_fraction * self._gpus


def keys_of_free(need: int, free: I64, histogram: I64) -> I64:
    """:func:`keys_by_free` at the free values ``free`` only (int64 ``(n,)``, each 0..1000): the same keys,
    ``keys_by_free(need, histogram)[free]``, without keying the values no option has. Raises nothing."""
    row = free[None, :]
    keys: I64 = option_keys(row, np.full_like(row, MILLI_PER_GPU), np.full_like(row, need),
                            np.ones(row.shape, np.bool_), histogram)[0]
    return keys
