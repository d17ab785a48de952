"""Victim selection over the scheduler's synced books: pod objects → :mod:`.victims` inputs, per node.

Pure (reads a :class:`~domain.scheduling.sync.LedgerSync`, changes nothing). The pods bound to a node as the sync
counts them are the candidates, with ``spec.priority`` and ``spec.preemptionPolicy``; terminating pods (deletion
timestamp set) are *leaving*: freed for the fit, never chosen. A node gated for GPU pods (stale or missing
inventory, a pod of unreadable request…) takes no preemptor that wants a GPU. :func:`best_victims` finds the best
victim set over many nodes without evaluating each: nodes are visited by a lower bound of what any set there
costs, and the visit stops once no remaining node can beat the best found (the answer is
:func:`~.victims.best_node`'s over every node, exactly). PodDisruptionBudgets
(:mod:`domain.kube.budgets`) are matched against the node's pods here, so a budget counts what its selector and
``status`` say, as kube-scheduler counts it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from domain.kube.budgets import DisruptionBudget, protection
from domain.kube.objects import PodObject
from domain.request import PodRequest
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.framework.topology import whole_gpu_total
from domain.scheduling.preemption.victims import (
    PRIORITY_OFFSET,
    Outcome,
    PreemptionPolicy,
    Preemptor,
    RunningPod,
    Victims,
    select_victims,
)
from domain.scheduling.sync import LedgerSync
from domain.topology import Tier


def preemptor_of(pod: PodObject, request: PodRequest) -> Preemptor:
    """The :class:`Preemptor` of a pending pod (an unknown ``preemptionPolicy`` reads as ``Never``: nothing is
    evicted on a value we cannot interpret)."""
    try:
        policy = PreemptionPolicy(pod.preemption_policy)
    except ValueError:
        policy = PreemptionPolicy.NEVER
    return Preemptor(request, pod.priority, policy)


PREFERENCES = frozenset({"GpuTopologyFirst"})
"""Filters that only prefer some feasible nodes to others (they never remove the last ones): skipped whenever the
question is where a pod could fit."""

RESOLVABLE = frozenset({"NodeResourcesFit", "GpuFit", "GpuTopology"}) | PREFERENCES
"""Filters whose refusal preemption can resolve (capacity: CPU, memory, pod slots, per-GPU core and memory, a
connected set of free GPUs, whose tier the victims' plan checks exactly; :func:`preemptable_nodes` leaves out the
nodes without a topology, those whose GPUs only DRA ResourceSlices publish included, for a pod requiring one);
every other filter (node fit, gates, GPU model and UUID, GPUs in MIG mode, other
extended resources, admission holds) must pass for a node to be worth preempting on, as kube-scheduler skips
``UnschedulableAndUnresolvable`` nodes."""


def _passing(scheduler: Scheduler, request: PodRequest, skip: frozenset[str]) -> list[str]:
    ledger = scheduler.ledger
    mask = ledger.active & ledger.admitting
    state = CycleState()
    for plugin in scheduler.profile.filters:
        if not mask.any():
            break
        if plugin.name in skip:
            continue
        mask = plugin.filter(request, ledger, state, mask)
        state.reasons.pop(plugin.name, None)
    return [ledger.name(int(slot)) for slot in np.flatnonzero(mask)]


def preemptable_nodes(scheduler: Scheduler, request: PodRequest) -> list[str]:
    """Nodes (ledger order) where ``request`` passes every filter of ``scheduler``'s profile but the
    :data:`RESOLVABLE` ones: the nodes where evicting pods could make room. The pod's node constraints must be
    recorded as for a cycle (:meth:`LedgerSync.schedule` does it). A pod requiring a GPU topology has none where no
    eviction can give it one: not on nodes reporting no topology, nowhere when it asks for no whole GPU. Changes
    nothing."""
    if request.gpu_topology > Tier.SYSTEM:
        if not whole_gpu_total(request):
            return []
        ledger = scheduler.ledger
        return [name for name in _passing(scheduler, request, RESOLVABLE)
                if ledger.inventory(name).topology is not None]
    return _passing(scheduler, request, RESOLVABLE)


def fitting_nodes(scheduler: Scheduler, request: PodRequest) -> set[str]:
    """Nodes where ``request`` passes every filter but the :data:`PREFERENCES` now (capacity included): where it
    fits without preemption (after a failed cycle, only nodes that gained room since). Same preconditions as
    :func:`preemptable_nodes`."""
    return set(_passing(scheduler, request, PREFERENCES))


def victims_on(
    sync: LedgerSync, pod: PodObject, request: PodRequest, node: str, *, within: Collection[str] | None = None,
    budgets: Sequence[DisruptionBudget] = (), kept_claims: Collection[str] = (), gone: Collection[str] = (),
) -> Outcome:
    """:func:`~.victims.select_victims` on ``node`` for pending ``pod`` (request ``request``) among the pods the sync
    counts there, only those whose UID is in ``within`` when given; ``budgets``: the cluster's
    PodDisruptionBudgets (those of other namespaces match nothing here). A pod's eviction also frees the DRA claims
    reserved for it alone (:meth:`~domain.scheduling.sync.claims.ClaimEvents.claims_held`), but for those of UID
    in ``kept_claims`` (claims the preemptor uses: freeing them would free nothing it can take); the claims of the
    pods of ``gone`` (evicted for this preemptor) already deleted count as freed
    (:meth:`~domain.scheduling.sync.claims.ClaimEvents.claims_leaving`)."""
    gate = sync.gates.get(node)
    if gate is not None and (request.wants_gpu or request.wants_mig):
        return Outcome(node, None, f"node is not taking GPU pods: {gate}")
    bound = [p for p in sync.bound_pods(node) if p.uid != pod.uid]
    leaving = [p.uid for p in bound if p.deletion_timestamp is not None]
    leaving += sync.claims_leaving(node, gone) if gone else []
    matches, allowed = protection(budgets, bound)
    candidates = [RunningPod(p.uid, p.priority, p.key, matches.get(p.uid, ())) for p in bound
                  if p.deletion_timestamp is None and (within is None or p.uid in within)]
    return select_victims(sync.ledger, node, preemptor_of(pod, request), candidates, allowed=allowed,
                          leaving=leaving, held=sync.claims_held(node, kept=kept_claims))


Cost = tuple[int, int, int, int]


EMPTY: Cost = (0, -PRIORITY_OFFSET, 0, 0)
"""The cost of the empty victim set (the pod fits without evicting anyone): the least of all."""


def _floor(sync: LedgerSync, pod: PodObject, node: str, fits: bool, gone: Collection[str]) -> Cost | None:
    """A lower bound of the cost (:attr:`~.victims.Victims.cost`) of any victim set for ``pod`` on ``node``: the
    empty set's when the pod fits there now (``fits``) or a pod or a deleted pod's claim there is already leaving
    (it may fit once that is gone), else one victim of the lowest priority below ``pod``'s, violating no budget;
    None when no set exists (it does not fit, nothing is leaving, nothing is lower)."""
    if fits or (gone and sync.claims_leaving(node, gone)):
        return EMPTY
    lowest: int | None = None
    for other in sync.bound_pods(node):
        if other.uid == pod.uid:
            continue
        if other.deletion_timestamp is not None:
            return EMPTY
        if other.priority < pod.priority and (lowest is None or other.priority < lowest):
            lowest = other.priority
    return None if lowest is None else (0, lowest, lowest + PRIORITY_OFFSET, 1)


def best_victims(sync: LedgerSync, pod: PodObject, request: PodRequest, nodes: Collection[str], *,
                 fitting: Collection[str] = (), budgets: Sequence[DisruptionBudget] = (),
                 kept_claims: Collection[str] = (), gone: Collection[str] = ()) -> tuple[Victims | None, int]:
    """The victim set :func:`~.victims.best_node` would choose over :func:`victims_on` of every node in ``nodes``
    (least cost, then node name), and how many nodes were evaluated; ``fitting``: the nodes where the pod fits
    now (:func:`fitting_nodes`; a node missing from it that fits anyway may be passed over for a costlier set);
    ``kept_claims`` and ``gone`` as :func:`victims_on`.
    Branch and bound: nodes in order of :func:`_floor` (a lower bound of their cost), stopping at the first whose
    bound, with its name, is above the best found — no later node can beat it, so the answer is the exhaustive
    one; on a full cluster of equally cheap victims one node is evaluated instead of all."""
    fits = set(fitting)
    floors = sorted((floor, node) for node in nodes
                    if (floor := _floor(sync, pod, node, node in fits, gone)) is not None)
    best: Victims | None = None
    evaluated = 0
    for floor, node in floors:
        if best is not None and (floor, node) > (best.cost, best.node):
            break
        found = victims_on(sync, pod, request, node, budgets=budgets, kept_claims=kept_claims, gone=gone).victims
        evaluated += 1
        if found is not None and (best is None or (found.cost, found.node) < (best.cost, best.node)):
            best = found
    return best, evaluated
