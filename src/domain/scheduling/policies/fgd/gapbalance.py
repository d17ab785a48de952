"""Gap balance — which GPU a share should take, judged by the gaps it leaves across the whole cluster.

A partly used schedulable GPU has a **gap**: its free milli-GPU ``h`` with ``0 < h < capacity`` (fully free and full
GPUs have none). ``N(h)`` counts the GPUs of the cluster with gap ``h``. A share needing ``u`` milli placed on a GPU
with free ``h`` leaves ``r = h − u``. Options are ranked by, in order:

1. **Closing**: ``r <`` :data:`CLOSE_BELOW` — the GPU is left (all but) full; among closing options the smaller ``r``
   wins (best fit), and any closing option beats every other.
2. **Sum of squares**: the smaller change of ``Σ_h N(h)²`` — ``[0 < r < cap] (2 N(r) + 1) + [0 < h < cap] (1 − 2 N(h))``
   — the Sum-of-Squares rule of online bin packing (Csirik, Johnson, Kenyon, Orlin, Shor, Weber, "On the
   Sum-of-Squares Algorithm for Bin Packing", J. ACM 53(1), 2006): gaps that are already common are filled, gaps
   that are rare are created, so later shares of every size keep finding a gap that fits them closely.
3. The smaller free ``h`` (best fit).

Keys are exact integers (no float, no truncation), so decisions are deterministic; they depend on the cluster only
through each GPU's free milli, its capacity and whether it is schedulable on an admitting node. Memory is left to
the filters, as in FGD.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.scheduling.framework.cycle import BoolArray
from domain.scheduling.policies.fgd.fragmentation import I64
from domain.units import MILLI_PER_GPU

CLOSE_BELOW = MILLI_PER_GPU // 10
"""Remainder (milli-GPU) under which a share closes its GPU: a tenth of a GPU. Below it fit only the rarest shares
(50 milli on the openb files, none of them a typical pod), so such a remainder stays idle whatever comes later and
the smallest one is best. Its measured sensitivity is in ``docs/fgd-plus.md``."""

_R_BITS = 11  # > log2(MILLI_PER_GPU): the free milli tie-break sits below the rank
_CLOSING = np.int64(1) << 40  # above every sum-of-squares rank: |ΔSS| ≤ 2 · GPUs + 2 < 2^39
_BALANCING = np.int64(1) << 39
NO_OPTION = np.iinfo(np.int64).min
"""The key of a GPU that does not fit."""


def gap_histogram(ledger: ClusterLedger) -> I64:
    """``N(h)`` (module docstring) over the schedulable GPUs of active, admitting nodes (:func:`gap_histogram_of`).
    Raises nothing."""
    rows = ledger.rows
    nodes = ledger.active[:rows] & ledger.admitting[:rows]
    capacity = ledger.core_cap[:rows][nodes] * ledger.gpu_ok[:rows][nodes]
    return gap_histogram_of(ledger.sched_free[:rows][nodes], capacity)


def gap_histogram_of(free: I64, cap: I64) -> I64:
    """``N(h)`` of GPUs with free milli ``free`` and capacity ``cap`` (same shape, milli-GPU; capacity 0 = not
    schedulable): int64 ``(C + 1,)`` with ``C`` the largest capacity, at least :data:`~domain.units.MILLI_PER_GPU`.
    Counts the GPUs with ``0 < free < cap``. Raises nothing."""
    size = max(int(cap.max()) if cap.size else 0, MILLI_PER_GPU) + 1
    histogram: I64 = np.bincount(free[(free > 0) & (free < cap)], minlength=size).astype(np.int64)
    return histogram


def option_keys(free: I64, cap: I64, need: I64, fit: BoolArray, histogram: I64) -> I64:
    """Key of placing the share on each GPU (higher is better; :data:`NO_OPTION` where ``fit`` is False), int64
    ``(S, G)`` from ``free`` (sched free milli), ``cap`` (capacity milli), ``need`` (milli the share takes) and
    ``fit``, all ``(S, G)``, and ``histogram`` (:func:`gap_histogram`). Packs rank 1 or 2 of the module docstring
    above ``(2^11 − 1 − h)`` (rank 3). Raises nothing."""
    top = len(histogram) - 1
    left = np.maximum(free - need, 0)
    counted_left = (left > 0) & (left < cap)
    counted_free = (free > 0) & (free < cap)
    change = (np.where(counted_left, 2 * histogram[np.minimum(left, top)] + 1, 0)
              + np.where(counted_free, 1 - 2 * histogram[np.minimum(free, top)], 0))
    rank = np.where(left < CLOSE_BELOW, _CLOSING - left, _BALANCING - change)
    keys: I64 = np.where(fit, (rank << _R_BITS) + ((1 << _R_BITS) - 1 - np.minimum(free, (1 << _R_BITS) - 1)),
                         NO_OPTION)
    return keys
