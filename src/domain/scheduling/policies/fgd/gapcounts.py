"""The cluster's gap counts kept up to date between decisions, and gap keys by free milli.

:func:`~domain.scheduling.policies.fgd.gapbalance.gap_histogram` recounts every GPU of the ledger at each share
decision. :class:`GapCounts` holds the same histogram ``N(h)`` and moves it by the rows whose ledger version
changed since the last call (one decision changes one node), so a call costs one comparison over the ledger's rows
plus the changed rows' GPUs. It recounts from scratch when nodes join or leave, capacity, model or health change
(``node_set_generation``, ``capacity_generation``) or a node starts or stops admitting pods.

:func:`keys_by_free` gives, for a share needing ``u`` milli on GPUs of capacity
:data:`~domain.units.MILLI_PER_GPU`, the :func:`~domain.scheduling.policies.fgd.gapbalance.option_keys` key of an
option as a function of the GPU's free milli ``h`` alone. The key's last field is ``2^11 − 1 − h``, so distinct
``h`` give distinct keys: the best option of a decision is one free value ``h*``, and the nodes with the best
option are those having a fitting GPU with exactly ``h*`` free.
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
    changed rows (module docstring)."""

    def __init__(self, ledger: ClusterLedger) -> None:
        self.ledger = ledger
        self._generations = (-1, -1, -1)
        self._counted: BoolArray = np.zeros(0, np.bool_)
        self._seen: I64 = np.zeros(0, np.int64)
        self._free: I64 = np.zeros((0, 0), np.int64)
        self._cap: I64 = np.zeros((0, 0), np.int64)
        self._histogram: I64 = np.zeros(MILLI_PER_GPU + 1, np.int64)

    def _recount(self, counted: BoolArray) -> None:
        ledger = self.ledger
        rows = ledger.rows
        self._counted = counted.copy()
        self._seen = ledger.version[:rows].copy()
        self._free = ledger.sched_free[:rows].copy()
        self._cap = ledger.core_cap[:rows] * ledger.gpu_ok[:rows]
        self._histogram = gap_histogram_of(self._free[counted], self._cap[counted])

    def histogram(self) -> I64:
        """``N(h)`` now, int64 ``(C + 1,)`` (``C``: the largest capacity, at least 1000); equal to
        ``gap_histogram(ledger)``. The array is this object's own: callers must not modify it."""
        ledger = self.ledger
        rows = ledger.rows
        counted = ledger.active[:rows] & ledger.admitting[:rows]
        generations = (ledger.node_set_generation, ledger.capacity_generation, rows)
        if generations != self._generations or not np.array_equal(counted, self._counted):
            self._generations = generations
            self._recount(counted)
            return self._histogram
        changed = np.flatnonzero(ledger.version[:rows] != self._seen)
        if len(changed):
            changed = changed[counted[changed]]
            cap = self._cap[changed]
            old, new = self._free[changed], ledger.sched_free[changed]
            top = len(self._histogram) - 1
            np.subtract.at(self._histogram, np.minimum(old[(old > 0) & (old < cap)], top), 1)
            np.add.at(self._histogram, np.minimum(new[(new > 0) & (new < cap)], top), 1)
            self._free[changed] = new
            self._seen[: rows] = ledger.version[:rows]
        return self._histogram
