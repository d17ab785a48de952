"""Gap balance (:mod:`domain.scheduling.policies.fgd.gapbalance`); every expected value is worked out in the test.

Behaviours covered:

* the gap histogram counts partly used schedulable GPUs of active, admitting nodes only (not fully free, full,
  quarantined or removed ones);
* option keys: closing options (remainder < 100 milli) beat all others, the smaller remainder first; then the
  smaller sum-of-squares change; then the smaller free milli; GPUs that do not fit get ``NO_OPTION``.
"""

from __future__ import annotations

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.scheduling.policies.fgd.gapbalance import CLOSE_BELOW, NO_OPTION, gap_histogram, option_keys
from domain.units import GiB, MiB


def node(name: str, gpus: int) -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), "G2", 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=96000, memory_bytes=512 * GiB, max_pods=100)


def share(ledger: ClusterLedger, uid: str, name: str, gpu: int, core: int) -> None:
    grant = ContainerGrant("main", (GpuGrant(gpu, core, MiB),))
    ledger.reserve(PodAllocation(uid, name, (grant,), cpu_milli=1000))


def test_histogram_counts_partly_used_gpus_of_admitting_nodes_only() -> None:
    ledger = ClusterLedger([node("a", 4), node("b", 2), node("c", 1)])
    share(ledger, "p1", "a", 0, 300)  # gap 700
    share(ledger, "p2", "a", 1, 300)  # gap 700
    share(ledger, "p3", "a", 2, 1000)  # full: no gap
    share(ledger, "p4", "b", 0, 600)  # gap 400, but b is quarantined below
    share(ledger, "p5", "c", 0, 950)  # gap 50
    ledger.quarantine_node("b", "test")
    histogram = gap_histogram(ledger)
    assert len(histogram) == 1001
    assert {int(h): int(histogram[h]) for h in np.flatnonzero(histogram)} == {700: 2, 50: 1}
    ledger.lift_quarantine("b")
    assert int(gap_histogram(ledger)[400]) == 1


def test_closing_beats_balancing_and_the_smaller_remainder_wins() -> None:
    assert CLOSE_BELOW == 100
    histogram = np.zeros(1001, np.int64)
    histogram[700] = 1
    free = np.array([[700, 1000, 350, 380, 420, 300]], np.int64)
    cap = np.full_like(free, 1000)
    need = np.full_like(free, 300)
    fit = np.array([[True, True, True, True, True, True]])
    keys = option_keys(free, cap, need, fit, histogram)[0]
    # Remainders: 400, 700, 50, 80, 120, 0. Closing (< 100): GPU 5 (0), GPU 2 (50), GPU 3 (80), in that order.
    assert list(np.argsort(-keys)[:3]) == [5, 2, 3]
    # Balancing: GPU 0 ΔSS = (2·N(400)+1) + (1 − 2·N(700)) = 1 − 1 = 0; GPU 1 (fresh) ΔSS = 2·N(700)+1 = 3;
    # GPU 4 (free 420 → 120, neither counted yet) ΔSS = 1 + 1 = 2. Order: 0, 4, 1.
    assert keys[0] > keys[4] > keys[1]
    assert keys[1] > NO_OPTION
    assert option_keys(free, cap, need, ~fit, histogram)[0].tolist() == [NO_OPTION] * 6


def test_common_gaps_are_filled_and_rare_ones_created_then_best_fit() -> None:
    # N(300) = 3, N(500) = 1, N(700) = 1. A 200-milli share: free 700 → 500: ΔSS = (2·1+1) + (1 − 2·1) = 2;
    # free 500 → 300: (2·3+1) + (1 − 2·1) = 6; fresh 1000 → 800: 2·0+1 = 1. Sum of squares picks the fresh GPU,
    # where best fit would take the 500 gap.
    histogram = np.zeros(1001, np.int64)
    histogram[[300, 500, 700]] = [3, 1, 1]
    free = np.array([[700, 500, 1000]], np.int64)
    keys = option_keys(free, np.full_like(free, 1000), np.full_like(free, 200), np.ones((1, 3), np.bool_),
                       histogram)[0]
    assert int(np.argmax(keys)) == 2
    assert keys[0] > keys[1]
    # Equal changes go to the smaller free milli: N(400) = 0, N(700) = 1 → free 700 → 400 gives 1 + (1 − 2) = 0;
    # N(300) = 2, N(600) = 3 → free 600 → 300 gives 5 + (1 − 6) = 0.
    histogram = np.zeros(1001, np.int64)
    histogram[[700, 300, 600]] = [1, 2, 3]
    free = np.array([[700, 600]], np.int64)
    keys = option_keys(free, np.full_like(free, 1000), np.full_like(free, 300), np.ones((1, 2), np.bool_),
                       histogram)[0]
    assert keys[1] > keys[0]
