"""Trace replay on tiny traces with results derived by hand (``docs/trace-replay.md`` §2), plus the curve binning.

Behaviours covered:

* A 2-node trace (two 2-GPU nodes; four 500-milli shares, one 2-GPU pod, two CPU-only pods; request = capacity, so
  tune 1.0 adds and removes nothing: 7 arrivals). For every seed: best-fit, gpu-packing, fgd and binpack stack
  the shares and place everything (4000 milli); spread scatters the shares and drops the 2-GPU pod exactly when at
  least two shares arrive before it (2000 milli) — checked against the rule for 30 seeds.
* For the order share, share, 2-GPU, share, share: the exact allocation curve (x = 12 [12.5 rounds half-to-even
  to 12], 25, 75, 88 [87.5 → 88], 100; ±1 fallback at 13, 87, 89, 99, 101; NaN at 38, 50, 102, 130) and the
  exact fragmentation ratios (1700/49, 100/3, 300/7, 100 % with no idle GPU).
* A failed pod still advances the arrived-GPU axis (its row repeats the allocation).
* Tuning in a replay: a single-shape trace tuned up to 1.0 and 1.3 (exact arrival counts, the last pod failing).
* ``arrival_stream`` with a scripted generator: tune up appends clones named ``-tuned-i`` after the shuffled
  originals, CPU-only samples included, stops at the first sample whose *per-GPU* milli would cross the target
  (a multi-GPU clone may overshoot; later draws are not consumed); tune down removes pods at drawn positions until
  at or below the target, the survivors keeping their order. With a real generator: same seed → same stream,
  different seeds → different orders.
* Same seed → identical replay series; different seeds → different arrival orders.
* ``domain.simulation.curves`` on hand-made series: round-half-to-even binning, 2-decimal allocation rows and
  means, unrounded fragmentation means, the ±1 fallback window, NaN where no row is near, 100 % frag without idle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from domain.simulation.curves import X_MAX, allocation_curve, arrive_ratios, fragmentation_curve
from domain.simulation.replay import ReplayConfig, ReplayResult, arrival_stream, replay
from domain.simulation.workload import TraceNode, TracePod

NODES = [TraceNode("n-a", 16000, 65536, 2, "G2"), TraceNode("n-b", 16000, 65536, 2, "G2")]
SHARES = [TracePod(f"s{i}", 1000, 1024, 1, 500) for i in range(4)]
DOUBLE = TracePod("w", 2000, 1024, 2, 1000)
CPU_ONLY = [TracePod(f"c{i}", 1000, 1024, 0, 0) for i in range(2)]
PODS = [*SHARES, DOUBLE, *CPU_ONLY]  # 4 × 500 + 2000 = 4000 milli = the cluster's 4 GPUs
FORCED = ("best-fit", "gpu-packing", "fgd", "binpack")


def run(policy: str, seed: int, *, pods: list[TracePod] | None = None, tune: float = 1.0) -> ReplayResult:
    return replay(NODES, pods or PODS, ReplayConfig(policy, seed, tune=tune))


def gpu_arrivals(result: ReplayResult) -> list[int]:
    """Per-event GPU request of the arrivals in order (0 rows dropped): the arrival order of the GPU pods."""
    steps = np.diff([0, *result.arrived_milli])
    return [int(s) for s in steps if s]


def shares_before_double(result: ReplayResult) -> int:
    return gpu_arrivals(result).index(2000)


def seed_with_order(order: list[int]) -> int:
    for seed in range(200):
        if gpu_arrivals(run("best-fit", seed)) == order:
            return seed
    raise AssertionError(f"no seed below 200 gives the order {order}")


# ---------------------------------------------------------------------------------------------- forced outcomes
@pytest.mark.parametrize("policy", [*FORCED, "spread"])
def test_outcome_for_every_seed_follows_the_hand_derived_rule(policy: str) -> None:
    seen_fail = seen_ok = False
    for seed in range(30):
        result = run(policy, seed)
        assert result.arrivals == 7
        assert result.arrived_milli[-1] == 4000
        double_dropped = policy == "spread" and shares_before_double(result) >= 2
        assert result.failed_pods == (1 if double_dropped else 0)
        assert result.used_milli[-1] == (2000 if double_dropped else 4000)
        assert result.allocation_curve()[100] == (50.0 if double_dropped else 100.0)
        seen_fail |= double_dropped
        seen_ok |= not double_dropped
    assert seen_ok
    assert seen_fail == (policy == "spread")


def nan_at(curve: list[float], xs: tuple[int, ...]) -> list[bool]:
    return [math.isnan(curve[x]) for x in xs]


@pytest.mark.parametrize("policy", FORCED)
def test_exact_curves_when_everything_fits(policy: str) -> None:
    # Levels: 500 → x 12 (12.5 half-to-even), 1000 → 25, 3000 → 75, 3500 → 88 (87.5), 4000 → 100; used = arrived.
    # Shares stack on one node: (500, 1000) | idle → (0, 1000) | idle → 2-GPU pod on the idle node → (0, 500) → full.
    seed = seed_with_order([500, 500, 2000, 500, 500])
    result = run(policy, seed)
    alloc = result.allocation_curve()
    assert len(alloc) == X_MAX + 1 == 131
    assert [alloc[x] for x in (12, 25, 75, 88, 100)] == [12.5, 25.0, 75.0, 87.5, 100.0]
    assert [alloc[x] for x in (13, 24, 26, 87, 89, 99, 101)] == [12.5, 25.0, 25.0, 87.5, 87.5, 100.0, 100.0]
    assert nan_at(alloc, (38, 50, 102, 130)) == [True] * 4
    # Typical pods: share p = 4/7, CPU-only 2/7, 2-GPU 1/7. Shares always fit (f = 0 on their GPUs); CPU-only
    # and the 2-GPU pod count every idle milli unless the node has 2 free GPUs (then the 2-GPU term is 0).
    frag = result.fragmentation_curve()
    assert frag[12] == pytest.approx((4500 / 7 + 4000 / 7) / 3500 * 100)  # = 1700/49
    assert frag[12] == pytest.approx(1700 / 49)
    assert frag[25] == pytest.approx(100 / 3)  # (3000/7 + 4000/7) / 3000
    assert frag[75] == pytest.approx(300 / 7)  # (3000/7 + 0) / 1000
    assert frag[88] == pytest.approx(300 / 7)  # 1500/7 / 500
    assert frag[100] == 100.0  # no idle GPU left


def test_exact_curves_when_spread_drops_the_two_gpu_pod() -> None:
    # Spread puts the shares on different nodes; the 2-GPU pod finds no node with 2 free GPUs and is dropped.
    seed = seed_with_order([500, 500, 2000, 500, 500])
    result = run("spread", seed)
    assert (result.failed_pods, result.used_milli[-1]) == (1, 2000)
    alloc = result.allocation_curve()
    assert [alloc[x] for x in (12, 25, 75, 88, 100)] == [12.5, 25.0, 25.0, 37.5, 50.0]
    frag = result.fragmentation_curve()
    assert frag[12] == pytest.approx(1700 / 49)
    assert [frag[x] for x in (25, 75, 88, 100)] == pytest.approx([300 / 7] * 4)


def test_failed_pod_still_advances_the_arrived_axis() -> None:
    result = run("spread", seed_with_order([500, 500, 2000, 500, 500]))
    steps = np.diff([0, *result.arrived_milli]).tolist()
    row = steps.index(2000)
    assert result.arrived_milli[row] == result.arrived_milli[row - 1] + 2000
    assert result.used_milli[row] == result.used_milli[row - 1]
    assert len(result.used_milli) == len(result.frag_milli) == len(result.idle_milli) == result.arrivals == 7


def test_replay_tunes_a_single_shape_trace_exactly() -> None:
    pods = [TracePod("a", 1000, 1024, 1, 500), TracePod("b", 1000, 1024, 1, 500)]
    nodes_1gpu = [TraceNode("n-a", 16000, 65536, 1, "G2"), TraceNode("n-b", 16000, 65536, 1, "G2")]
    # Capacity 2000. tune 1.0: 1000 → +500 → +500 = 2000; the next would cross → 4 arrivals, all placed.
    exact = replay(nodes_1gpu, pods, ReplayConfig("best-fit", 3, tune=1.0))
    assert (exact.arrivals, exact.failed_pods, exact.used_milli[-1]) == (4, 0, 2000)
    # tune 1.3 (2600): 1000 → 1500 → 2000 → 2500; 3000 would cross → 5 arrivals; the 5th finds no room.
    over = replay(nodes_1gpu, pods, ReplayConfig("best-fit", 3, tune=1.3))
    assert over.arrivals == 5
    assert over.arrived_milli == [500, 1000, 1500, 2000, 2500]
    assert over.used_milli == [500, 1000, 1500, 2000, 2000]
    assert over.failed_pods == 1
    alloc = over.allocation_curve()  # x = arrived / 20
    assert [alloc[x] for x in (25, 50, 75, 100, 125)] == [25.0, 50.0, 75.0, 100.0, 100.0]


# ---------------------------------------------------------------------------------------------- arrival stream
class ScriptedRng:
    """A stand-in generator: a fixed shuffle and a script of ``integers`` draws (unused draws stay in ``draws``)."""

    def __init__(self, permutation: list[int], draws: list[int]) -> None:
        self.perm = permutation
        self.draws = list(draws)

    def permutation(self, n: int) -> np.ndarray:
        assert n == len(self.perm)
        return np.array(self.perm)

    def integers(self, high: int) -> int:
        value = self.draws.pop(0)
        assert 0 <= value < high
        return value


A = TracePod("a", 1000, 1024, 1, 500)
B = TracePod("b", 2000, 1024, 2, 1000)
C = TracePod("c", 1000, 1024, 0, 0)


def stream(pods: list[TracePod], rng: ScriptedRng, *, capacity: int, tune: float) -> list[TracePod]:
    return arrival_stream(pods, capacity_milli=capacity, tune=tune, rng=rng)  # type: ignore[arg-type]


def test_tune_up_appends_samples_and_lets_a_multi_gpu_clone_overshoot() -> None:
    # Originals (name-sorted a, b, c) total 2500; target 4000. Draws: c (+0), a (3000), b (3000 + 1000 per GPU
    # = 4000, not above the target → appended, total 5000), a (5000 + 500 > 4000 → stop).
    rng = ScriptedRng([2, 0, 1], [2, 0, 1, 0, 2, 2])
    result = stream([C, B, A], rng, capacity=4000, tune=1.0)
    assert [p.name for p in result] == ["c", "a", "b", "c-tuned-0", "a-tuned-1", "b-tuned-2"]
    assert sum(p.total_gpu_milli for p in result) == 5000
    assert rng.draws == [2, 2]  # the stop draw was the last one consumed: no skip-and-continue
    assert result[3:] == [
        TracePod("c-tuned-0", 1000, 1024, 0, 0), TracePod("a-tuned-1", 1000, 1024, 1, 500),
        TracePod("b-tuned-2", 2000, 1024, 2, 1000),
    ]


def test_tune_up_stops_at_the_first_crossing_sample() -> None:
    # 2500 + 1000 (b per GPU) = 3500 ≤ 4000 → appended (total 4500); then a: 4500 + 500 > 4000 → stop, although a
    # CPU-only sample (c) would still have fitted.
    rng = ScriptedRng([0, 1, 2], [1, 0, 2, 2])
    result = stream([A, B, C], rng, capacity=4000, tune=1.0)
    assert [p.name for p in result] == ["a", "b", "c", "b-tuned-0"]
    assert rng.draws == [2, 2]


def test_tune_down_removes_drawn_positions_until_at_or_below_target() -> None:
    d = TracePod("d", 1000, 1024, 1, 1000)
    # Shuffled: [a 500, b 2000, c 0, d 1000] = 3500 > target 2000 (capacity 4000 × 0.5).
    # Remove position 2 (c, still 3500), position 0 (a, 3000), position 1 of [b, d] (d, 2000 ≤ 2000 → stop).
    rng = ScriptedRng([0, 1, 2, 3], [2, 0, 1, 0, 0])
    result = stream([A, B, C, d], rng, capacity=4000, tune=0.5)
    assert [p.name for p in result] == ["b"]
    assert rng.draws == [0, 0]


def test_tune_down_survivors_keep_their_shuffled_order() -> None:
    d = TracePod("d", 1000, 1024, 1, 1000)
    rng = ScriptedRng([3, 1, 0, 2], [1])  # shuffled d, b, a, c = 3500; target 2500: remove b → 1500 ≤ 2500
    result = stream([A, B, C, d], rng, capacity=5000, tune=0.5)
    assert [p.name for p in result] == ["d", "a", "c"]
    assert rng.draws == []


def test_request_equal_to_target_is_left_alone() -> None:
    result = arrival_stream(PODS, capacity_milli=4000, tune=1.0, rng=np.random.default_rng(1))
    assert sorted(p.name for p in result) == sorted(p.name for p in PODS)


def test_arrival_order_is_a_function_of_the_seed() -> None:
    pods = [TracePod(f"p{i:02d}", 1000, 1024, 1, 100 + i) for i in range(20)]

    def names(seed: int) -> list[str]:
        return [p.name for p in arrival_stream(pods, capacity_milli=8000, tune=1.3, rng=np.random.default_rng(seed))]

    assert names(42) == names(42)
    assert names(42) != names(43)
    assert names(42)[:20] != names(43)[:20]
    assert sorted(names(42)[:20]) == [p.name for p in pods]
    assert all("-tuned-" in n for n in names(42)[20:])


# ---------------------------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("policy", ["fgd", "random", "gpu-packing"])
def test_same_seed_same_results_different_seed_different_order(policy: str) -> None:
    pods = [TracePod(f"p{i}", 1000, 1024, 1, 50 * (i + 1)) for i in range(10)]  # distinct sizes reveal the order
    first = run(policy, 7, pods=pods, tune=1.0)
    again = run(policy, 7, pods=pods, tune=1.0)
    other = run(policy, 8, pods=pods, tune=1.0)
    assert first.arrived_milli == again.arrived_milli
    assert first.used_milli == again.used_milli
    assert first.frag_milli == again.frag_milli
    assert first.idle_milli == again.idle_milli
    assert first.failed_pods == again.failed_pods
    assert first.arrived_milli != other.arrived_milli


# ---------------------------------------------------------------------------------------------- curve binning
def test_arrive_ratio_rounds_half_to_even() -> None:
    assert arrive_ratios([5, 15, 25, 35, 44, 46], 1) == [0, 2, 2, 4, 4, 5]
    assert arrive_ratios([500, 1500, 3500], 4) == [12, 38, 88]


def test_allocation_curve_rows_means_and_fallback_window() -> None:
    # total_gpus = 1: x = round(arrived / 10); alloc row = round(used / 10, 2).
    arrived = [0, 0, 25, 40, 41, 44, 70]
    used = [0, 3, 25, 33, 34, 40, 51]
    curve = allocation_curve(arrived, used, 1)
    # rows: x = 0, 0, 2 (2.5 half-to-even), 4, 4, 4, 7; alloc rows 0.0, 0.3, 2.5, 3.3, 3.4, 4.0, 5.1
    assert curve[0] == round((0.0 + 0.3) / 2, 2) == 0.15
    assert curve[1] == round((0.0 + 0.3 + 2.5) / 3, 2) == 0.93  # no row at 1 → rows at 0..2
    assert curve[2] == 2.5
    assert curve[3] == round((2.5 + 3.3 + 3.4 + 4.0) / 4, 2) == 3.3  # no row at 3 → rows at 2..4
    assert curve[4] == round((3.3 + 3.4 + 4.0) / 3, 2) == 3.57
    assert curve[5] == 3.57  # rows at 4..6: only the x = 4 rows
    assert [curve[6], curve[7], curve[8]] == [5.1, 5.1, 5.1]
    assert math.isnan(curve[9])
    assert math.isnan(curve[X_MAX])


def test_allocation_fallback_averages_both_neighbours() -> None:
    curve = allocation_curve([10, 30], [10, 20], 1)  # x = 1 → 1.0, x = 3 → 2.0; x = 2 has no row
    assert curve[2] == 1.5
    assert [curve[1], curve[3]] == [1.0, 2.0]
    assert math.isnan(curve[5])


def test_fragmentation_curve_is_unrounded_and_counts_no_idle_as_100() -> None:
    arrived = [10, 10, 10, 20]
    frag = [1.0, 2.0, 1.0, 0.0]
    idle = [3, 3, 3, 0]
    curve = fragmentation_curve(arrived, frag, idle, 1)
    assert curve[1] == pytest.approx((100 / 3 + 200 / 3 + 100 / 3) / 3, abs=1e-12)
    assert curve[1] != round(curve[1], 2)
    assert curve[2] == 100.0
    assert math.isnan(curve[4])
