"""Failed pods by size class and the allocation AUC (:mod:`domain.simulation.breakdown`).

Behaviours covered:

* ``size_class`` from the trace's GPU columns: CPU-only, shares of one GPU, 1/2/4/8 whole GPUs (3 → ``4``,
  5-8 → ``8``, more → ``>8``); out-of-range columns are refused with the column named;
* ``failure_curves``: cumulative per-class counts stepping up at each failure's binned x, zero for classes that
  never failed; arrivals past x = 130 count on no point; an unknown class or an index outside the arrivals is
  refused;
* ``allocation_auc``: a flat curve gives its level, the ideal ``min(x, 100)`` gives 8000 / 130, a NaN at x = 0
  counts as 0, interior NaN gaps are bridged linearly, NaN at x = 130 gives NaN, a wrong length is refused;
* ``ReplayResult`` refuses a failure list whose length differs from ``failed_pods``;
* a real replay (two 2-GPU nodes, ``spread``): the 2-GPU pod is the only pod that ever fails, exactly when two
  shares arrive before it, and its failure sits at the x of its own arrival; every run's classes sum to its
  ``failed_pods``.
"""

from __future__ import annotations

import math

import pytest

from domain.errors import InvalidRequestError
from domain.simulation.breakdown import IDEAL_AUC, SIZE_CLASSES, allocation_auc, failure_curves, size_class
from domain.simulation.curves import X_MAX, arrive_ratios
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.workload import TraceNode, TracePod


@pytest.mark.parametrize(
    ("num_gpu", "gpu_milli", "expected"),
    [(0, 0, "cpu"), (1, 1, "share"), (1, 500, "share"), (1, 999, "share"), (1, 1000, "1"), (2, 1000, "2"),
     (3, 1000, "4"), (4, 1000, "4"), (5, 1000, "8"), (8, 1000, "8"), (9, 1000, ">8"), (64, 1000, ">8")],
)
def test_size_class_from_the_gpu_columns(num_gpu: int, gpu_milli: int, expected: str) -> None:
    assert size_class(num_gpu, gpu_milli) == expected
    assert expected in SIZE_CLASSES


@pytest.mark.parametrize(("num_gpu", "gpu_milli", "field"), [(-1, 1000, "num_gpu"), (1, 1001, "gpu_milli"),
                                                              (1, -5, "gpu_milli")])
def test_size_class_refuses_impossible_columns(num_gpu: int, gpu_milli: int, field: str) -> None:
    with pytest.raises(InvalidRequestError, match=field):
        size_class(num_gpu, gpu_milli)


def test_failure_curves_count_cumulatively_at_each_failures_x() -> None:
    arrived = [10 * (i + 1) for i in range(140)]  # one GPU: event i lands on x = i + 1, the last ones past 130
    failures = [(9, "8"), (9, "share"), (49, "8"), (49, "8"), (135, "4")]  # x = 10, 10, 50, 50, 136
    curves = failure_curves(arrived, 1, failures)
    assert list(curves) == list(SIZE_CLASSES)
    assert curves["8"] == [0] * 10 + [1] * 40 + [3] * 81
    assert curves["share"] == [0] * 10 + [1] * 121
    assert curves["4"] == [0] * 131  # its arrival is past x = 130
    assert all(curves[c] == [0] * 131 for c in ("cpu", "1", "2", ">8"))


def test_failure_curves_refuse_unknown_class_and_index() -> None:
    with pytest.raises(InvalidRequestError, match="size class"):
        failure_curves([10, 20], 1, [(0, "16")])
    with pytest.raises(InvalidRequestError, match="failure index"):
        failure_curves([10, 20], 1, [(2, "1")])


def test_auc_of_known_curves() -> None:
    assert allocation_auc([50.0] * (X_MAX + 1)) == pytest.approx(50.0)
    ideal = [float(min(x, 100)) for x in range(X_MAX + 1)]
    assert allocation_auc(ideal) == pytest.approx(IDEAL_AUC) == pytest.approx(8000 / 130)
    assert allocation_auc([math.nan, *ideal[1:]]) == pytest.approx(IDEAL_AUC)  # x = 0 counts as 0 = ideal[0]
    flat = [math.nan, *[60.0] * X_MAX]  # 0 at x = 0, then 60: the first trapezoid is 30, the rest 129 × 60
    assert allocation_auc(flat) == pytest.approx((30 + 129 * 60) / 130)


def test_auc_bridges_gaps_and_needs_the_end_point() -> None:
    line = [x / 2 for x in range(X_MAX + 1)]
    gapped = [math.nan if 20 <= x <= 70 else v for x, v in enumerate(line)]
    assert allocation_auc(gapped) == pytest.approx(allocation_auc(line)) == pytest.approx(32.5)
    assert math.isnan(allocation_auc([*line[:-1], math.nan]))
    with pytest.raises(InvalidRequestError, match="131 points"):
        allocation_auc(line[:-1])


NODES = [TraceNode("n-a", 16000, 65536, 2, "G2"), TraceNode("n-b", 16000, 65536, 2, "G2")]
SHARES = [TracePod(f"s{i}", 1000, 1024, 1, 500) for i in range(4)]
DOUBLE = TracePod("w", 2000, 1024, 2, 1000)
PODS = [*SHARES, DOUBLE, TracePod("c0", 1000, 1024, 0, 0)]  # 4000 milli = the cluster's 4 GPUs: tune 1.0 is exact


def test_replay_records_which_pods_failed_and_where() -> None:
    dropped = 0
    for seed in range(20):
        result = replay(NODES, PODS, ReplayConfig("spread", seed, tune=1.0))
        steps = [b - a for a, b in zip([0, *result.arrived_milli], result.arrived_milli, strict=False)]
        double_at = steps.index(2000)
        shares_before = sum(1 for s in steps[:double_at] if s == 500)
        curves = result.failure_curves()
        assert sum(c[X_MAX] for c in curves.values()) == result.failed_pods
        if shares_before >= 2:  # spread scatters the shares: no node keeps 2 free GPUs
            dropped += 1
            assert result.failures == [(double_at, "2")]
            x = arrive_ratios(result.arrived_milli, 4)[double_at]
            assert curves["2"][x - 1:x + 1] == [0, 1]
        else:
            assert result.failures == []
    assert 0 < dropped < 20
