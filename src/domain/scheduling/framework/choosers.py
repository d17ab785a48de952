"""The share GPU choosers of the plain policies: which of a node's GPUs that fit a share it takes (best-fit,
worst-fit, random; the published simulator's rules, docs/trace-replay.md §3.5), and the protocol a policy's own
rule (such as FGD's) implements. Used by :class:`domain.scheduling.framework.planner.ChooserPlanner`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import I64, CycleState


class ShareGpuChooser(Protocol):
    """Chooses the GPU for a share among ``fit`` (ascending GPU indexes that fit, non-empty)."""

    name: str

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Return one index of ``fit``."""
        ...


class BestFitGpu:
    """Smallest free core that fits; lowest index on ties (simulator's ``best``, §3.5)."""

    name = "best-fit"

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Index with the least free core among ``fit``."""
        free = ledger.core_cap[slot, fit] - ledger.core_used[slot, fit]
        return int(fit[int(np.argmin(free))])


class WorstFitGpu:
    """Largest free core; lowest index on ties (GPU-level spread)."""

    name = "worst-fit"

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """Index with the most free core among ``fit``."""
        free = ledger.core_cap[slot, fit] - ledger.core_used[slot, fit]
        return int(fit[int(np.argmax(free))])


class RandomGpu:
    """Uniform among the GPUs that fit (simulator's ``random``), drawn from the run's generator."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """A uniformly random index of ``fit``."""
        return int(fit[int(self.rng.integers(len(fit)))])
