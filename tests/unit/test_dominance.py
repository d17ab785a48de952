"""The dominance check of issue 31: ``bench/dominance.py``'s helpers, and ``fgd-staged`` against FGD on a short replay.

Behaviours covered:

* ``mean_curve`` ignores NaN points; ``worst_gap`` finds the first x of the smallest candidate − baseline gap,
  skipping NaN; ``failed_gpu_pods`` reads the GPU pods failed by an x, per GPU size class, from the run's failure
  curves; ``verdict`` applies the tolerance and, for full runs only, the gain at x = 130.
* ``replay(..., limit=N)`` gives the full run's first N rows; a limit below 1 is refused.
* Short replay (skipped without the openb traces: ``LJRK_TRACES`` or ``../shared/traces/openb``): on the
  ``default`` pod file, the first 8,500 arrivals (x up to about 102, past the point where FGD starts turning pods
  away) of seeds 42-44 with trace typical pods, the 3-seed mean allocation of ``fgd-staged`` is at least FGD's −
  0.1 pp at every x the replay reaches.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from domain.errors import InvalidRequestError
from domain.simulation.replay import ReplayConfig, ReplayResult, replay
from support.bench_modules import load_bench

dominance = load_bench("dominance")
trace_replay = load_bench("trace_replay")

TRACES = Path(os.environ.get("LJRK_TRACES", Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"))
needs_trace = pytest.mark.skipif(not (TRACES / "openb_pod_list_default.csv").is_file(),
                                 reason="openb traces not present (set LJRK_TRACES)")


def test_mean_curve_ignores_nan_points() -> None:
    mean = dominance.mean_curve([[1.0, math.nan, math.nan], [3.0, 4.0, math.nan]])
    assert mean[:2] == [2.0, 4.0]
    assert math.isnan(mean[2])


def test_worst_gap_is_the_first_smallest_difference() -> None:
    base = [0.0, 10.0, 20.0, 30.0, math.nan]
    cand = [0.0, 9.5, 20.2, 29.5, 50.0]
    assert dominance.worst_gap(base, cand, range(1, 5)) == (-0.5, 1)
    gap, x = dominance.worst_gap([math.nan], [1.0], range(1))
    assert math.isnan(gap)
    assert x == -1


def test_failed_gpu_pods_counts_gpu_failures_by_an_x_per_class() -> None:
    # 10 GPUs; arrivals: share 500 placed (x = 5), 8-GPU failed (x = 85), 1-GPU failed (x = 95), CPU-only failed
    # (x = 95), share failed (x = 98).
    result = ReplayResult(config=ReplayConfig("fgd", 1), total_gpus=10, arrived_milli=[500, 8500, 9500, 9500, 9800],
                          used_milli=[500] * 5, frag_milli=[0.0] * 5, idle_milli=[9500] * 5, wall_seconds=0.0,
                          failures=[(1, "8"), (2, "1"), (3, "cpu"), (4, "share")])
    assert dominance.failed_gpu_pods(result, 96) == {"share": 0, "1": 1, "2": 0, "4": 0, "8": 1}
    assert dominance.failed_gpu_pods(result, 98) == {"share": 1, "1": 1, "2": 0, "4": 0, "8": 1}
    assert dominance.failed_gpu_pods(result, 84) == dict.fromkeys(dominance.GPU_CLASSES, 0)


def test_verdict_applies_tolerance_and_the_gain_only_to_full_runs() -> None:
    assert dominance.verdict(-0.1, 0.5, tolerance=0.1, required_gain=0.5, full=True)
    assert not dominance.verdict(-0.11, 0.9, tolerance=0.1, required_gain=0.5, full=True)
    assert not dominance.verdict(0.0, 0.4, tolerance=0.1, required_gain=0.5, full=True)
    assert dominance.verdict(0.0, math.nan, tolerance=0.1, required_gain=0.5, full=False)


@needs_trace
def test_fgd_staged_is_never_below_fgd_on_a_short_default_replay() -> None:
    nodes = trace_replay.read_nodes(str(TRACES / dominance.NODES_FILE))
    pods = trace_replay.read_pods(str(TRACES / "openb_pod_list_default.csv"))
    curves = {policy: [replay(nodes, pods, ReplayConfig(policy, seed), limit=8500).allocation_curve()
                       for seed in (42, 43, 44)] for policy in ("fgd", "fgd-staged")}
    base = dominance.mean_curve(curves["fgd"])
    cand = dominance.mean_curve(curves["fgd-staged"])
    reached = [x for x in range(1, 131) if not math.isnan(base[x])]
    assert max(reached) >= 100
    gap, at = dominance.worst_gap(base, cand, reached)
    assert gap >= -0.1, f"fgd-staged {gap:+.3f} pp below fgd at x = {at}"


def test_a_limited_replay_is_the_full_replays_first_arrivals() -> None:
    from domain.simulation.synthetic import synthetic_nodes, synthetic_pods

    nodes, pods = synthetic_nodes(scale=0.02), synthetic_pods(scale=0.02)
    full = replay(nodes, pods, ReplayConfig("fgd-staged", 3))
    cut = replay(nodes, pods, ReplayConfig("fgd-staged", 3), limit=50)
    assert cut.arrivals == 50
    assert cut.used_milli == full.used_milli[:50]
    assert cut.arrived_milli == full.arrived_milli[:50]
    with pytest.raises(InvalidRequestError):
        replay(nodes, pods, ReplayConfig("fgd", 3), limit=0)
