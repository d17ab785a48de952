"""The MIG fragmentation measure: how many instances of each profile size can still be placed.

Definition. For a GPU ``g`` and a profile size ``σ = (compute slices, memory slices)``, ``placeable_σ(g)`` is

* static mode: the free instances of size ``σ`` on ``g`` (the layout is fixed);
* dynamic mode: the free instances of size ``σ`` (reusable) plus the largest number of *new* instances of
  that size that fit at once in ``g``'s untaken slices, capped by the profile's instance limit.

The placements of one profile in the tables are pairwise disjoint (aligned starts, see
:mod:`domain.mig.profiles`), so the largest number of new instances is the number of free placements; it is
counted greedily in start order, which is exact for disjoint placements.

The *capacity vector* of a set of GPUs is ``Σ_g placeable(g)`` over :data:`SIZES` (every profile size of every
table, largest first). The *fragmentation cost* of a plan is its loss vector, capacity before minus capacity
after, and plans are compared **lexicographically** by loss: keeping one more instance of the largest size
placeable beats any number of smaller ones. So the planner never breaks a 7g/4g/3g slot when a smaller hole will
do: on an empty 7/8 GPU a ``1g`` goes to slice 6, a ``2g`` to slice 4, a ``3g`` to slice 4 (``4g`` stays
placeable at 0), and a GPU that is already broken up is preferred to an empty one. ``+me`` profiles share their
base size and are not counted separately.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final

from domain.mig.gpu import MigGpu, PlacementMode
from domain.mig.profiles import MIG_MODELS

SIZES: Final[tuple[tuple[int, int], ...]] = tuple(
    sorted({p.size for model in MIG_MODELS.values() for p in model.family}, reverse=True)
)
"""Profile sizes ``(compute slices, memory slices)`` of every table, largest first: the capacity vector's axes."""

_AXIS: Final = {size: n for n, size in enumerate(SIZES)}

Vector = tuple[int, ...]


@functools.lru_cache(maxsize=1 << 16)
def _new_placements(model_key: str, memory_used: int, compute_used: int) -> tuple[int, ...]:
    """Per profile of the model's family: new instances that fit at once in the untaken slices (greedy)."""
    counts = []
    for profile in MIG_MODELS[model_key].family:
        memory, compute, count = memory_used, compute_used, 0
        for start in profile.placements:
            if not memory & profile.memory_mask(start) and not compute & profile.compute_mask(start):
                memory |= profile.memory_mask(start)
                compute |= profile.compute_mask(start)
                count += 1
        counts.append(count)
    return tuple(counts)


def placeable(gpu: MigGpu) -> Vector:
    """``placeable_σ(gpu)`` over :data:`SIZES` (module docstring); an unhealthy GPU places nothing."""
    vector = [0] * len(SIZES)
    if not gpu.healthy:
        return tuple(vector)
    family = gpu.model.family
    for instance in gpu.instances:
        if instance.owner is None and not instance.profile.media_extensions:
            vector[_AXIS[instance.profile.size]] += 1
    if gpu.mode is PlacementMode.DYNAMIC:
        fresh = _new_placements(gpu.model.key, gpu.memory_used, gpu.compute_used)
        for profile, count in zip(family, fresh, strict=True):
            vector[_AXIS[profile.size]] += min(count, profile.max_instances - gpu.count(profile))
    return tuple(vector)


def capacity(gpus: Iterable[MigGpu]) -> Vector:
    """Sum of :func:`placeable` over ``gpus`` (one count per size of :data:`SIZES`)."""
    total = [0] * len(SIZES)
    for gpu in gpus:
        for n, count in enumerate(placeable(gpu)):
            total[n] += count
    return tuple(total)


def loss(before: Vector, after: Vector) -> Vector:
    """Element-wise ``before − after``: what a plan costs in placeable instances per size (compare as tuples,
    lexicographically; smaller is better)."""
    return tuple(b - a for b, a in zip(before, after, strict=True))


def add(left: Vector, right: Vector) -> Vector:
    """Element-wise sum of two vectors over :data:`SIZES`."""
    return tuple(a + b for a, b in zip(left, right, strict=True))
