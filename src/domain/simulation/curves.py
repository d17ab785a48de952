"""Allocation-ratio and fragmentation curves over the arrived-GPU axis (docs/trace-replay.md §2.3).

Per event row: ``arrive_ratio = round(arrived_milli / total_gpus / 10)`` (Python's round-half-to-even),
``alloc_ratio = round(used_milli / total_gpus / 10, 2)`` (milli-GPU allocation, %), ``frag_ratio =
100 × frag / idle``. For each x in 0..130 the curve is the mean over rows with ``arrive_ratio == x`` (allocation
rounded to 2 decimals, fragmentation unrounded); when no row has exactly x, rows with ``x−1 ≤ arrive_ratio ≤ x+1``
are used; with none at all the point is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

X_MAX = 130
"""Last point of the published x-axis (tune 1.3 = 130 % of cluster GPU capacity)."""


def arrive_ratios(arrived_milli: Sequence[int], total_gpus: int) -> list[int]:
    """Binned x value of each event row."""
    return [round(a / total_gpus / 10) for a in arrived_milli]


def _binned_means(xs: list[int], values: list[float], *, digits: int | None) -> list[float]:
    buckets: dict[int, list[float]] = {}
    for x, value in zip(xs, values, strict=True):
        buckets.setdefault(x, []).append(value)
    curve: list[float] = []
    for x in range(X_MAX + 1):
        rows = buckets.get(x)
        if not rows:
            rows = [v for nx in (x - 1, x, x + 1) for v in buckets.get(nx, [])]
        if not rows:
            curve.append(math.nan)
            continue
        mean = sum(rows) / len(rows)
        curve.append(round(mean, digits) if digits is not None else mean)
    return curve


def allocation_curve(arrived_milli: Sequence[int], used_milli: Sequence[int], total_gpus: int) -> list[float]:
    """Mean milli-GPU allocation % at x = 0..130 (131 floats, NaN where no event is near x)."""
    alloc = [round(u / total_gpus / 10, 2) for u in used_milli]
    return _binned_means(arrive_ratios(arrived_milli, total_gpus), alloc, digits=2)


def fragmentation_curve(
    arrived_milli: Sequence[int], frag_milli: Sequence[float], idle_milli: Sequence[int], total_gpus: int
) -> list[float]:
    """Mean frag ratio % (100 × frag / idle) at x = 0..130; a row with no idle GPU counts as 100 %."""
    ratios = [100.0 * f / i if i > 0 else 100.0 for f, i in zip(frag_milli, idle_milli, strict=True)]
    return _binned_means(arrive_ratios(arrived_milli, total_gpus), ratios, digits=None)
