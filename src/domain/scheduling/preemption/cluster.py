"""Victim selection over the scheduler's synced books: pod objects → :mod:`.victims` inputs, per node.

Pure (reads a :class:`~domain.scheduling.sync.LedgerSync`, changes nothing). The pods bound to a node as the sync
counts them are the candidates, with ``spec.priority`` and ``spec.preemptionPolicy``; terminating pods (deletion
timestamp set) are *leaving*: freed for the fit, never chosen. A node gated for GPU pods (stale or missing
inventory, a pod of unreadable request…) takes no preemptor that wants a GPU. PodDisruptionBudgets
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
from domain.scheduling.preemption.victims import (
    Outcome,
    PreemptionPolicy,
    Preemptor,
    RunningPod,
    select_victims,
)
from domain.scheduling.sync import LedgerSync


def preemptor_of(pod: PodObject, request: PodRequest) -> Preemptor:
    """The :class:`Preemptor` of a pending pod (an unknown ``preemptionPolicy`` reads as ``Never``: nothing is
    evicted on a value we cannot interpret)."""
    try:
        policy = PreemptionPolicy(pod.preemption_policy)
    except ValueError:
        policy = PreemptionPolicy.NEVER
    return Preemptor(request, pod.priority, policy)


RESOLVABLE = frozenset({"NodeResourcesFit", "GpuFit"})
"""Filters whose refusal preemption can resolve (capacity: CPU, memory, pod slots, per-GPU core and memory); every
other filter (node fit, gates, GPU model and UUID, GPUs in MIG mode, other extended resources, admission holds) must
pass for a node to be worth preempting on, as kube-scheduler skips ``UnschedulableAndUnresolvable`` nodes."""


def preemptable_nodes(scheduler: Scheduler, request: PodRequest) -> list[str]:
    """Nodes (ledger order) where ``request`` passes every filter of ``scheduler``'s profile but the
    :data:`RESOLVABLE` ones: the nodes where evicting pods could make room. The pod's node constraints must be
    recorded as for a cycle (:meth:`LedgerSync.schedule` does it). Changes nothing."""
    ledger = scheduler.ledger
    mask = ledger.active & ledger.admitting
    state = CycleState()
    for plugin in scheduler.profile.filters:
        if not mask.any():
            break
        if plugin.name in RESOLVABLE:
            continue
        mask = plugin.filter(request, ledger, state, mask)
        state.reasons.pop(plugin.name, None)
    return [ledger.name(int(slot)) for slot in np.flatnonzero(mask)]


def victims_on(
    sync: LedgerSync, pod: PodObject, request: PodRequest, node: str, *, within: Collection[str] | None = None,
    budgets: Sequence[DisruptionBudget] = (),
) -> Outcome:
    """:func:`~.victims.select_victims` on ``node`` for pending ``pod`` (request ``request``) among the pods the sync
    counts there, only those whose UID is in ``within`` when given; ``budgets``: the cluster's
    PodDisruptionBudgets (those of other namespaces match nothing here)."""
    gate = sync.gates.get(node)
    if gate is not None and (request.wants_gpu or request.wants_mig):
        return Outcome(node, None, f"node is not taking GPU pods: {gate}")
    bound = [p for p in sync.bound_pods(node) if p.uid != pod.uid]
    leaving = [p.uid for p in bound if p.deletion_timestamp is not None]
    matches, allowed = protection(budgets, bound)
    candidates = [RunningPod(p.uid, p.priority, p.key, matches.get(p.uid, ())) for p in bound
                  if p.deletion_timestamp is None and (within is None or p.uid in within)]
    return select_victims(sync.ledger, node, preemptor_of(pod, request), candidates, allowed=allowed,
                          leaving=leaving)
