"""Two policies replayed on the same seeds, compared seed by seed: allocation difference and failure regressions.

Runs are **paired by seed**: one seed gives both policies the same arrival stream (shuffle and tune depend only
on the pods, the capacity, ``tune`` and the seed; ``domain.simulation.replay``), so the difference of two runs of
one seed is the policies' difference on identical pods, free of the workload's seed-to-seed variation.

Seed noise in the failure check (:func:`failure_regressions`) — the **paired sign rule**: the candidate fails
more pods of class c than the baseline by x only when it failed strictly more of them on *every* common seed.
Under the null hypothesis that neither policy tends to fail more, each seed is at most a coin toss, so a false
alarm at one (x, class) point has probability at most 2^−n for n seeds (1/8 with 3 seeds, 1/1024 with 10); a tie
on any seed is not a regression. With one seed the rule has no protection against noise: any excess counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.simulation.breakdown import SIZE_CLASSES
from domain.simulation.curves import X_MAX
from domain.simulation.replay import ReplayResult

BASELINE_POLICY = "fgd"
"""The published FGD: the policy a candidate must not pack worse than."""

CANDIDATE_POLICY = "fgd-plus"
"""The policy the report compares with :data:`BASELINE_POLICY` whenever both were replayed."""

FailureCurves = Mapping[str, Sequence[int]]
"""One run's failure curves: size class → cumulative failed pods at x = 0..130
(:func:`domain.simulation.breakdown.failure_curves`)."""


@attrs.frozen
class SeedSpread:
    """Per x = 0..130 (131 floats each, NaN where no seed has both points): the mean, least and greatest paired
    difference candidate − baseline over the common seeds, in the curve's unit (percentage points for allocation)."""

    seeds: tuple[int, ...]
    mean: list[float]
    low: list[float]
    high: list[float]


@attrs.frozen
class FailureRegression:
    """At arrived point ``x`` the candidate failed more pods of ``size_class`` than the baseline on every seed.
    ``baseline_mean``/``candidate_mean``: mean cumulative failed pods of that class by x over the seeds;
    ``least_excess``: the smallest per-seed excess (≥ 1)."""

    x: int
    size_class: str
    baseline_mean: float
    candidate_mean: float
    least_excess: int


def _by_seed(results: Sequence[ReplayResult], policy: str) -> dict[int, ReplayResult]:
    return {r.config.seed: r for r in results if r.config.policy == policy}


def paired_seeds(results: Sequence[ReplayResult], *, candidate: str, baseline: str) -> tuple[int, ...]:
    """The seeds both policies ran among ``results``, in the candidate's run order (empty when none)."""
    base = _by_seed(results, baseline)
    return tuple(s for s in _by_seed(results, candidate) if s in base)


def _common_seeds(baseline: Mapping[int, object], candidate: Mapping[int, object]) -> tuple[int, ...]:
    seeds = tuple(s for s in candidate if s in baseline)
    if not seeds:
        raise InvalidRequestError("seeds", sorted(candidate), f"none also run by the baseline ({sorted(baseline)})")
    return seeds


def allocation_difference(results: Sequence[ReplayResult], *, candidate: str, baseline: str) -> SeedSpread:
    """Candidate − baseline allocation (percentage points) per x with its spread over the seeds both policies ran
    (module docstring). Raises :class:`InvalidRequestError` when they share no seed."""
    base, cand = _by_seed(results, baseline), _by_seed(results, candidate)
    seeds = _common_seeds(base, cand)
    pairs = [(cand[s].allocation_curve(), base[s].allocation_curve()) for s in seeds]
    mean: list[float] = []
    low: list[float] = []
    high: list[float] = []
    for x in range(X_MAX + 1):
        diffs = [c[x] - b[x] for c, b in pairs if math.isfinite(c[x]) and math.isfinite(b[x])]
        mean.append(sum(diffs) / len(diffs) if diffs else math.nan)
        low.append(min(diffs) if diffs else math.nan)
        high.append(max(diffs) if diffs else math.nan)
    return SeedSpread(seeds, mean, low, high)


def failure_regressions(
    baseline: Mapping[int, FailureCurves], candidate: Mapping[int, FailureCurves]
) -> list[FailureRegression]:
    """Every (x, size class) where the candidate fails more pods than the baseline beyond seed noise, by the paired
    sign rule (module docstring); arguments map seed → that run's failure curves. Ordered by size class
    (:data:`SIZE_CLASSES`), then x. Raises :class:`InvalidRequestError` when they share no seed."""
    seeds = _common_seeds(baseline, candidate)
    found: list[FailureRegression] = []
    for cls in SIZE_CLASSES:
        for x in range(X_MAX + 1):
            base = [baseline[s][cls][x] for s in seeds]
            cand = [candidate[s][cls][x] for s in seeds]
            excess = [c - b for c, b in zip(cand, base, strict=True)]
            if min(excess) > 0:
                found.append(FailureRegression(x, cls, sum(base) / len(seeds), sum(cand) / len(seeds), min(excess)))
    return found


def regressions_between(
    results: Sequence[ReplayResult], *, candidate: str, baseline: str
) -> list[FailureRegression]:
    """:func:`failure_regressions` of two policies' runs among ``results``. Raises :class:`InvalidRequestError`
    when they share no seed."""
    def curves(policy: str) -> dict[int, FailureCurves]:
        return {seed: r.failure_curves() for seed, r in _by_seed(results, policy).items()}

    return failure_regressions(curves(baseline), curves(candidate))


def x_ranges(xs: Sequence[int]) -> str:
    """``[70, 71, 72, 90]`` → ``"70-72,90"`` (ascending input)."""
    spans: list[list[int]] = []
    for x in xs:
        if spans and x == spans[-1][1] + 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)
