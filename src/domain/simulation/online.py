"""Typical pods learned online: what a live scheduler knows of the workload when a pod arrives.

The published replay gives FGD the typical pods of the whole trace (§3.1 of docs/trace-replay.md), known before
the first arrival. A production scheduler only knows the pods it has seen. :class:`OnlineTypical` replays that
knowledge: it records every arrival (failed ones too: a pending pod is seen) and recomputes the distribution with
the production rule :func:`domain.scheduling.policies.fgd.typical.blend_typical` — the pods seen so far plus the
embedded synthetic reference workload until :data:`MIN_OBSERVED` have been seen, the pods seen alone afterwards.

Refreshes (each one rebuilds the policy's fragmentation cache) happen when the number of pods seen reaches
:data:`REFRESH_GROWTH` times its value at the previous refresh, and at :data:`MIN_OBSERVED` (where the rule stops
adding the reference): the distribution is then never estimated from fewer than 1/1.1 of the pods seen, and a
10 800-arrival replay refreshes about 100 times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from domain.errors import InvalidRequestError
from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods
from domain.scheduling.policies.fgd.typical import blend_typical

MIN_OBSERVED = 200
"""Pods seen before the reference workload is dropped (the scheduler's ``ServiceConfig.min_observed_pods``)."""

REFERENCE_SCALE = 0.1
"""Size of the synthetic reference workload (the scheduler's ``ServiceConfig.synthetic_scale``, ≈ 815 pods)."""

REFRESH_GROWTH = 1.1
"""A refresh is due when the pods seen have grown by 10 % since the last one (module docstring)."""


class OnlineTypical:
    """Arrivals seen so far and the typical pods a live scheduler would derive from them (module docstring).

    ``reference``: the reference workload's classes (non-empty); ``min_observed`` ≥ 0; ``growth`` > 1. Raises
    :class:`InvalidRequestError` naming the bad argument.
    """

    def __init__(
        self, reference: Sequence[PodClass], *, min_observed: int = MIN_OBSERVED, growth: float = REFRESH_GROWTH
    ) -> None:
        if not reference:
            raise InvalidRequestError("reference", 0, "the reference workload needs at least one pod")
        if min_observed < 0:
            raise InvalidRequestError("min_observed", min_observed, "must be >= 0")
        if not (math.isfinite(growth) and growth > 1):
            raise InvalidRequestError("growth", growth, "must be a finite number > 1")
        self.reference = tuple(reference)
        self.min_observed = min_observed
        self.growth = growth
        self.observed: list[PodClass] = []
        self.refreshes = 0
        self._due = 1

    def observe(self, pod: PodClass) -> TypicalPods | None:
        """Record one arrival; return the recomputed typical pods when a refresh is due, else None."""
        self.observed.append(pod)
        seen = len(self.observed)
        if seen < self._due and seen != self.min_observed:
            return None
        self._due = max(seen + 1, math.ceil(seen * self.growth))
        self.refreshes += 1
        return blend_typical(self.observed, self.reference, min_observed=self.min_observed)
