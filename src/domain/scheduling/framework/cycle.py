"""A scheduling framework shaped like Kubernetes' scheduler framework, vectorised over nodes.

Kubernetes' framework (KEP-624, "Scheduling Framework", kubernetes.io/docs/concepts/scheduling-eviction/
scheduling-framework) runs Filter and Score per node. Here each phase receives *all* candidate nodes at once as
ledger slot arrays, so one call costs a few numpy operations whatever the cluster size (5000 nodes × 8 GPUs in
the scheduler benchmark). The phases and their contracts are the same:

* ``filter(pod, ledger, state, candidates) -> mask``: a boolean mask over ledger slots (subset of candidates);
* ``score(pod, ledger, state, slots) -> int64[len(slots)]`` in ``0..MAX_NODE_SCORE``, then ``normalize``; a
  plugin may also refine the tie among the best-scored nodes with a second key (:class:`TieRefiner`);
* reserve: the :class:`GpuPlanner` turns the chosen node into a :class:`PodAllocation` booked in the ledger;
  ``unreserve`` releases it on any later failure;
* bind: an optional :class:`BindPlugin`; a failing bind always unreserves (failure case B06).

A :class:`CycleState` carries per-cycle data between phases (per-GPU fit masks, resolved per-GPU needs, plugin
scratch), like ``framework.CycleState``. Scores are integers, so always finite; a plugin returning a value
outside ``0..100`` is a bug and raises :class:`DomainError`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol, cast, runtime_checkable

import attrs
import numpy as np
import numpy.typing as npt

from domain.allocation import PodAllocation
from domain.errors import DomainError, InsufficientResourcesError, LedgerCorruptedError
from domain.ledger import ClusterLedger
from domain.request import PodRequest

MAX_NODE_SCORE = 100
"""Highest node score a plugin may return (kube-scheduler's ``framework.MaxNodeScore``)."""

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@attrs.define
class CycleState:
    """Per-cycle scratch shared by the plugins of one scheduling attempt.

    ``gpu_fit``: bool ``[rows, max_gpus]`` — GPU can take the pod's (single) share container, or is a fully
    free eligible GPU for whole-GPU pods; ``core_need``/``mem_need``: int64 ``[rows, max_gpus]`` per-GPU resolved
    share (milli-GPU, bytes) after the default rule; ``data``: plugin-private entries keyed by plugin name;
    ``candidates``: the node names this cycle is restricted to (the extender's candidates, read by
    :class:`~domain.scheduling.framework.candidates.CandidateNodes`), None for every node.
    """

    candidates: Collection[str] | None = None
    gpu_fit: BoolArray | None = None
    core_need: I64 | None = None
    mem_need: I64 | None = None
    data: dict[str, object] = attrs.Factory(dict)
    reasons: dict[str, str] = attrs.Factory(dict)


class FilterPlugin(Protocol):
    """Removes nodes that cannot run the pod. ``reason`` is reported for each node it removes, unless the plugin
    puts a more specific one in ``state.reasons[name]``."""

    name: str
    reason: str

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """Return the subset of ``candidates`` (bool mask over ledger slots) that passes."""
        ...


class ScorePlugin(Protocol):
    """Ranks feasible nodes; higher is better."""

    name: str

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Integer scores ``0..MAX_NODE_SCORE`` for ``slots`` (int64 array of ledger slots), same order."""
        ...

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """NormalizeScore extension point; return ``scores`` unchanged when not needed."""
        ...


@runtime_checkable
class TieRefiner(Protocol):
    """Optional extension of a score plugin: a second key (higher is better, int64) for the nodes tied on the
    best total score, applied before the profile's tie rule (FGD-residue, :mod:`domain.scheduling.policies.fgd.residue`,
    and its variants; FGD-plus ranks shares by it alone, :mod:`domain.scheduling.policies.fgd.plus`)."""

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Second key for ``tied`` (ascending ledger slots, all scored in this cycle), same order."""
        ...


class GpuPlanner(Protocol):
    """Reserve-phase GPU choice: builds the allocation of ``pod`` on the chosen node (slot)."""

    name: str

    def plan(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int) -> PodAllocation | None:
        """The allocation to book, or None when the pod does not fit the node after all."""
        ...


class TieBreaker(Protocol):
    """Chooses one node among equally scored best nodes; a named, explicit part of a policy."""

    name: str

    def pick(self, ledger: ClusterLedger, tied: I64) -> int:
        """Return one slot of ``tied`` (int64 array of ledger slots, ascending)."""
        ...


class BindPlugin(Protocol):
    """Makes the decision durable (API bind). Raising any exception fails the cycle and unreserves."""

    name: str

    def bind(self, pod: PodRequest, allocation: PodAllocation) -> None:
        """Bind ``pod`` as ``allocation`` says."""
        ...


@attrs.frozen
class WeightedScore:
    """A score plugin with its weight (kube-scheduler multiplies each plugin's score by its weight)."""

    plugin: ScorePlugin
    weight: int = 1


UNPLANNED = "the pod passed the filters but its GPUs could not be planned there"
"""The reason counted for a feasible node where the planner found no grants (filters and planner disagree)."""


@attrs.frozen
class Profile:
    """One scheduling profile: filters, weighted scores, the reserve-phase GPU planner and the tie rule."""

    name: str
    filters: tuple[FilterPlugin, ...]
    scores: tuple[WeightedScore, ...]
    planner: GpuPlanner
    tie_breaker: TieBreaker
    binder: BindPlugin | None = None


@attrs.frozen
class ScheduleResult:
    """Outcome of one cycle: ``allocation`` when placed, else ``reason``; ``rejected``: nodes removed per reason
    (each filter's and Reserve's refusals; when the pod is not placed, last, :data:`UNPLANNED` for the feasible
    nodes the planner found no grants on)."""

    pod_uid: str
    allocation: PodAllocation | None
    reason: str = ""
    rejected: tuple[tuple[str, int], ...] = ()
    feasible_nodes: int = 0

    @property
    def scheduled(self) -> bool:
        """True when the pod was reserved (and bound, if the profile binds)."""
        return self.allocation is not None


def _outside_scores(scores: npt.NDArray[np.generic]) -> bool:
    """True when a score lies outside ``0..MAX_NODE_SCORE`` (one pass over int64 scores: a negative one reads as a
    huge unsigned value)."""
    if not len(scores):
        return False
    if scores.dtype == np.int64:
        return int(scores.view(np.uint64).max()) > MAX_NODE_SCORE
    return bool(scores.min() < 0 or scores.max() > MAX_NODE_SCORE)


class Scheduler:
    """The cycle runner: filter → score → normalize → select (tie rule) → reserve → bind.

    ``on_unreserve`` callbacks run after every rollback (used to roll back annotations in later issues).
    """

    def __init__(self, ledger: ClusterLedger, profile: Profile) -> None:
        self.ledger = ledger
        self.profile = profile
        self.on_unreserve: list[Callable[[PodRequest, PodAllocation], None]] = []
        self._refiners: tuple[Profile | None, tuple[bool, ...]] = (None, ())

    def _refines(self) -> tuple[bool, ...]:
        """Per weighted score of the profile: whether its plugin is a :class:`TieRefiner` (checked once per profile
        object: a runtime protocol check costs more than a whole cycle's filter)."""
        profile, flags = self._refiners
        if profile is not self.profile:
            flags = tuple(isinstance(w.plugin, TieRefiner) for w in self.profile.scores)
            self._refiners = (self.profile, flags)
        return flags

    def feasible(self, pod: PodRequest, state: CycleState) -> tuple[I64, list[tuple[str, int]]]:
        """Run the filters; return feasible slots (ascending) and ``(reason, nodes removed)`` pairs."""
        ledger = self.ledger
        mask = ledger.active.copy()
        rejected: list[tuple[str, int]] = []
        quarantined = int(np.count_nonzero(ledger.active & ~ledger.admitting))
        mask &= ledger.admitting
        if quarantined:
            rejected.append(("node not admitting pods (quarantined or cordoned)", quarantined))
        for plugin in self.profile.filters:
            if not mask.any():
                break
            passed = plugin.filter(pod, ledger, state, mask)
            removed = int(np.count_nonzero(mask)) - int(np.count_nonzero(passed))
            reason = state.reasons.pop(plugin.name, plugin.reason)
            if removed:
                rejected.append((reason, removed))
            mask = passed
        return np.flatnonzero(mask).astype(np.int64), rejected

    def scores(self, pod: PodRequest, state: CycleState, slots: I64) -> I64:
        """Weighted, normalised total score per slot (int64)."""
        total = np.zeros(len(slots), np.int64)
        for weighted in self.profile.scores:
            raw = weighted.plugin.score(pod, self.ledger, state, slots)
            if raw.shape != slots.shape or _outside_scores(raw):
                raise DomainError(f"score plugin {weighted.plugin.name!r} returned scores outside 0..100")
            raw = raw.astype(np.int64, copy=False)
            normalized = weighted.plugin.normalize(pod, raw)
            if normalized.shape != slots.shape or _outside_scores(normalized):
                raise DomainError(f"score plugin {weighted.plugin.name!r} normalized scores outside 0..100")
            if weighted.weight == 1:
                total += normalized
            else:
                total += weighted.weight * normalized
        return total

    def select(self, pod: PodRequest, state: CycleState, slots: I64) -> int:
        """Pick the node: the only feasible one, else the best total score, then the best second key of each
        plugin that is a :class:`TieRefiner` (in profile order), then the profile's tie rule."""
        if len(slots) == 1:
            return int(slots[0])
        total = self.scores(pod, state, slots)
        tied = slots[total == total.max()]
        for weighted, refines in zip(self.profile.scores, self._refines(), strict=True):
            if len(tied) > 1 and refines:
                keys = cast(TieRefiner, weighted.plugin).refine(pod, self.ledger, state, tied)
                tied = tied[keys == keys.max()]
        return self.profile.tie_breaker.pick(self.ledger, tied)

    def schedule(self, pod: PodRequest, *, candidates: Collection[str] | None = None) -> ScheduleResult:
        """Run one scheduling cycle for ``pod``, among ``candidates`` (node names; None: every node) when the profile
        has :class:`~domain.scheduling.framework.candidates.CandidateNodes`; the ledger is changed only when the result
        is scheduled."""
        existing = self.ledger.record(pod.uid)
        if existing is not None:
            return ScheduleResult(pod.uid, existing, reason="already counted", feasible_nodes=1)
        state = CycleState(candidates=candidates)
        slots, rejected = self.feasible(pod, state)
        unplanned = 0
        while len(slots):
            slot = self.select(pod, state, slots)
            allocation = self.profile.planner.plan(pod, self.ledger, state, slot)
            if allocation is None:
                unplanned += 1
                slots = slots[slots != slot]
                continue
            try:
                self.ledger.reserve(allocation)
            except (InsufficientResourcesError, LedgerCorruptedError) as error:
                rejected.append((str(error), 1))
                slots = slots[slots != slot]
                continue
            if self.profile.binder is not None:
                try:
                    self.profile.binder.bind(pod, allocation)
                except Exception as error:  # any bind failure must unreserve (B06)
                    self.unreserve(pod, allocation)
                    return ScheduleResult(pod.uid, None, reason=f"bind failed: {error}", rejected=tuple(rejected))
            return ScheduleResult(pod.uid, allocation, feasible_nodes=len(slots), rejected=tuple(rejected))
        if unplanned:
            rejected.append((UNPLANNED, unplanned))
        reason = "; ".join(f"{count} node(s): {why}" for why, count in rejected) or "no nodes available"
        return ScheduleResult(pod.uid, None, reason=f"0 nodes available: {reason}", rejected=tuple(rejected))

    def unreserve(self, pod: PodRequest, allocation: PodAllocation) -> None:
        """Release a reservation and run the rollback callbacks; idempotent."""
        self.ledger.release(allocation.pod_uid)
        for callback in self.on_unreserve:
            callback(pod, allocation)
