"""Two policies compared seed by seed (:mod:`domain.simulation.compare`).

Behaviours covered:

* ``failure_regressions`` (paired sign rule): a class the candidate fails more on every common seed is reported at
  exactly the x points where it does, with the means and the least excess; a tie on one seed, or more failures on
  some seeds and fewer on others, is noise; fewer failures are never a regression; with one seed any excess counts;
  seeds run by only one policy are ignored; no common seed is refused;
* ``regressions_between`` reads the same from replay results;
* ``paired_seeds`` are the seeds both policies ran; ``allocation_difference``: the paired mean, least and
  greatest candidate − baseline allocation per x, NaN where a run has no point;
* ``x_ranges`` folds ascending x values into ranges.
"""

from __future__ import annotations

import math

import pytest

from domain.errors import InvalidRequestError
from domain.simulation.breakdown import SIZE_CLASSES
from domain.simulation.compare import (
    FailureRegression,
    allocation_difference,
    failure_regressions,
    paired_seeds,
    regressions_between,
    x_ranges,
)
from domain.simulation.curves import X_MAX
from domain.simulation.replay import ReplayConfig, ReplayResult

POINTS = X_MAX + 1


def step(at: int, *, by: int = 1, base: int = 0) -> list[int]:
    """A cumulative curve: ``base`` before x = ``at``, ``base + by`` from it."""
    return [base if x < at else base + by for x in range(POINTS)]


def curves(**per_class: list[int]) -> dict[str, list[int]]:
    return {c: per_class.get(c, [0] * POINTS) for c in SIZE_CLASSES}


def test_more_failures_on_every_seed_is_a_regression_at_exactly_those_x() -> None:
    baseline = {1: curves(), 2: curves(), 3: curves(**{"8": step(120)})}
    candidate = {1: curves(**{"8": step(90)}), 2: curves(**{"8": step(95, by=2)}),
                 3: curves(**{"8": step(100, by=2)})}
    found = failure_regressions(baseline, candidate)
    assert [f.x for f in found] == list(range(100, POINTS))  # seed 3 ties (0 = 0) below x = 100
    assert {f.size_class for f in found} == {"8"}
    assert found[0] == FailureRegression(100, "8", baseline_mean=0.0, candidate_mean=5 / 3, least_excess=1)
    assert found[-1] == FailureRegression(130, "8", baseline_mean=1 / 3, candidate_mean=5 / 3, least_excess=1)


def test_mixed_signs_ties_and_fewer_failures_are_noise() -> None:
    baseline = {1: curves(share=step(10, by=3)), 2: curves(share=step(10, by=1)), 3: curves(**{"4": step(5)})}
    candidate = {1: curves(share=step(10, by=1)), 2: curves(share=step(10, by=4)), 3: curves()}
    assert failure_regressions(baseline, candidate) == []
    assert failure_regressions(candidate, candidate) == []


def test_one_seed_counts_any_excess_and_unpaired_seeds_are_ignored() -> None:
    baseline = {7: curves(), 8: curves()}
    candidate = {7: curves(**{"1": step(129)}), 9: curves(**{"2": step(0)})}
    found = failure_regressions(baseline, candidate)
    assert [(f.x, f.size_class, f.least_excess) for f in found] == [(129, "1", 1), (130, "1", 1)]
    with pytest.raises(InvalidRequestError, match="seeds"):
        failure_regressions({1: curves()}, {2: curves()})


def run(policy: str, seed: int, *, lost: int = 0, failed_at: tuple[int, ...] = ()) -> ReplayResult:
    """One GPU; event i arrives at x = i + 1 and allocates min(x, 90) % less ``lost`` milli (÷ 10 = pp)."""
    arrived = [10 * (i + 1) for i in range(X_MAX)]
    used = [max(min(a, 900) - lost, 0) for a in arrived]
    failures = [(i, "8") for i in failed_at]
    return ReplayResult(
        config=ReplayConfig(policy, seed), total_gpus=1, arrived_milli=arrived, used_milli=used,
        frag_milli=[0.0] * X_MAX, idle_milli=[1000 - u for u in used], wall_seconds=0.0,
        failures=failures,
    )


def test_regressions_between_reads_replay_results() -> None:
    results = [run("fgd", 1), run("fgd", 2, failed_at=(99,)), run("fgd-plus", 1, failed_at=(59,)),
               run("fgd-plus", 2, failed_at=(59, 79))]
    found = regressions_between(results, candidate="fgd-plus", baseline="fgd")
    # seed 1: 1 vs 0 from x = 60; seed 2: 1 vs 0 from 60, 2 vs 0 from 80, 2 vs 1 from 100
    assert [f.x for f in found] == list(range(60, POINTS))
    assert found[-1].least_excess == 1
    assert found[-1].candidate_mean == 1.5
    assert found[-1].baseline_mean == 0.5


def test_allocation_difference_is_paired_with_its_seed_spread() -> None:
    results = [run("fgd", 1), run("fgd", 2), run("fgd-plus", 1, lost=10), run("fgd-plus", 2, lost=30),
               run("fgd-plus", 3, lost=50)]  # seed 3 has no fgd run: not paired
    spread = allocation_difference(results, candidate="fgd-plus", baseline="fgd")
    assert spread.seeds == paired_seeds(results, candidate="fgd-plus", baseline="fgd") == (1, 2)
    assert paired_seeds(results, candidate="fgd-plus", baseline="random") == ()
    assert len(spread.mean) == len(spread.low) == len(spread.high) == POINTS
    for x in range(5, POINTS):
        assert spread.mean[x] == pytest.approx(-2.0)
        assert spread.low[x] == pytest.approx(-3.0)
        assert spread.high[x] == pytest.approx(-1.0)
    short = [*results[:1], cut(results[2])]
    assert math.isnan(allocation_difference(short, candidate="fgd-plus", baseline="fgd").mean[X_MAX])


def cut(result: ReplayResult) -> ReplayResult:
    """``result`` cut to its first 50 arrivals (its curve ends at x = 51)."""
    n = 50
    return ReplayResult(
        config=result.config, total_gpus=1, arrived_milli=result.arrived_milli[:n], used_milli=result.used_milli[:n],
        frag_milli=result.frag_milli[:n], idle_milli=result.idle_milli[:n], wall_seconds=0.0,
        failures=[],
    )


def test_x_ranges() -> None:
    assert x_ranges([70, 71, 72, 90, 100, 101]) == "70-72,90,100-101"
    assert x_ranges([5]) == "5"
    assert x_ranges([]) == ""
