"""What a replay's headline hides: failed pods by size class over the arrived-GPU axis, and the allocation AUC.

Size classes (:func:`size_class`) come from the trace's GPU request columns ``num_gpu`` and ``gpu_milli``:
``cpu`` (no GPU), ``share`` (part of one GPU, ``gpu_milli < 1000``), then whole GPUs by count: ``1``, ``2``,
``4`` (3-4 GPUs), ``8`` (5-8 GPUs) and ``>8`` (9 or more). The openb traces ask only 1, 2, 4 or 8 whole GPUs, so
there each class is one exact count. :data:`SIZE_CLASSES` is their report order.

Failure curves (:func:`failure_curves`): for class ``c`` and x = 0..130, the number of pods of class ``c`` that
failed at an arrival whose binned x (:func:`domain.simulation.curves.arrive_ratios`) is ≤ x — cumulative, so a
point reads "failed by the time x % of cluster GPU capacity had arrived"; past a run's last arrival every point
is that run's total. Invariant: at every x the classes sum to the failures binned at or below x, so at x = 130 to
the run's ``failed_pods`` unless arrivals went past x = 130 (``tune`` above 1.3, or the last tuned multi-GPU pod
overshooting the target). :func:`failed_by_size` counts every failure, wherever it arrived.

Area under the allocation curve (:func:`allocation_auc`), unit %: the mean allocation over x ∈ [0, 130],
``AUC = (1/130) · Σ (x_j − x_i) · (a_i + a_j) / 2`` over consecutive finite points (x_i, a_i), (x_j, a_j) of the
allocation curve (trapezoid rule; a gap of NaN points is bridged by the straight line between its neighbours).
A NaN at x = 0 counts as 0 (nothing has arrived, so nothing is allocated); a NaN at x = 130 (the run stopped
short of it) makes the AUC NaN. Ideal packing (allocation = min(x, 100)) gives 8000 / 130 ≈ 61.54.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from domain.errors import InvalidRequestError
from domain.simulation.curves import X_MAX, arrive_ratios
from domain.units import MILLI_PER_GPU

SIZE_CLASSES = ("cpu", "share", "1", "2", "4", "8", ">8")
"""Size classes in report order (module docstring)."""

_WHOLE_GPU_CLASSES = ((1, "1"), (2, "2"), (4, "4"), (8, "8"))

IDEAL_AUC = (X_MAX * X_MAX / 2 - (X_MAX - 100) ** 2 / 2) / X_MAX
"""AUC (%) of the ideal curve ``min(x, 100)``: every arrived request placed until the cluster is full."""


def size_class(num_gpu: int, gpu_milli: int) -> str:
    """The size class (module docstring) of a pod asking ``num_gpu`` GPUs of ``gpu_milli`` milli each.
    Raises :class:`InvalidRequestError` for a negative ``num_gpu`` or ``gpu_milli`` outside 0..1000."""
    if num_gpu < 0:
        raise InvalidRequestError("num_gpu", num_gpu, "must be ≥ 0")
    if not 0 <= gpu_milli <= MILLI_PER_GPU:
        raise InvalidRequestError("gpu_milli", gpu_milli, f"must be 0..{MILLI_PER_GPU}")
    if num_gpu == 0 or gpu_milli == 0:
        return "cpu"
    if gpu_milli < MILLI_PER_GPU:
        return "share"
    return next((name for most, name in _WHOLE_GPU_CLASSES if num_gpu <= most), ">8")


def failed_by_size(failures: Sequence[tuple[int, str]]) -> dict[str, int]:
    """Size class → failed pods of that class among ``failures`` ((arrival index, class) pairs), every class of
    :data:`SIZE_CLASSES` in that order, zeros included; the counts sum to ``len(failures)``. Raises
    :class:`InvalidRequestError` for an unknown class."""
    counts = dict.fromkeys(SIZE_CLASSES, 0)
    for _, cls in failures:
        if cls not in counts:
            raise InvalidRequestError("size class", cls, f"must be one of {', '.join(SIZE_CLASSES)}")
        counts[cls] += 1
    return counts


def failure_curves(
    arrived_milli: Sequence[int], total_gpus: int, failures: Sequence[tuple[int, str]]
) -> dict[str, list[int]]:
    """Per class of :data:`SIZE_CLASSES`, the cumulative failed-pod count at x = 0..130 (131 ints; module
    docstring). ``failures`` holds (arrival index into ``arrived_milli``, size class) of each failed pod.
    Raises :class:`InvalidRequestError` for an unknown class or an index outside the arrivals."""
    per_x = {c: [0] * (X_MAX + 1) for c in SIZE_CLASSES}
    xs = arrive_ratios(arrived_milli, total_gpus)
    for index, cls in failures:
        if cls not in per_x:
            raise InvalidRequestError("size class", cls, f"must be one of {', '.join(SIZE_CLASSES)}")
        if not 0 <= index < len(xs):
            raise InvalidRequestError("failure index", index, f"must be 0..{len(xs) - 1}")
        if xs[index] <= X_MAX:  # an arrival past the axis (tune > 1.3) is on no point
            per_x[cls][xs[index]] += 1
    for counts in per_x.values():
        for x in range(1, X_MAX + 1):
            counts[x] += counts[x - 1]
    return per_x


def allocation_auc(curve: Sequence[float]) -> float:
    """Mean allocation % over x ∈ [0, 130] by the trapezoid rule (formula in the module docstring); NaN when
    ``curve[130]`` is NaN. Raises :class:`InvalidRequestError` unless ``curve`` has 131 points."""
    if len(curve) != X_MAX + 1:
        raise InvalidRequestError("curve", len(curve), f"must have {X_MAX + 1} points (x = 0..{X_MAX})")
    if math.isnan(curve[X_MAX]):
        return math.nan
    points = [(x, a) for x, a in enumerate(curve) if math.isfinite(a)]
    if points[0][0] != 0:
        points.insert(0, (0, 0.0))
    area = sum((x1 - x0) * (a0 + a1) / 2 for (x0, a0), (x1, a1) in itertools.pairwise(points))
    return area / X_MAX
