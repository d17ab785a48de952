"""The extender's preemption: kube-scheduler's proposed victims, minimised with our per-GPU books.

kube-scheduler (``pkg/scheduler/framework/preemption``) picks victims per node with its own, summed view of our
extended resources (a node with 30 % free on GPU 0 and 40 % on GPU 1 has "70" free for it) and then calls the
extender's ``preempt`` verb with them (``ExtenderPreemptionArgs``). For every node it proposes, we answer:

1. the minimum victim set (:mod:`domain.scheduling.preemption.victims`, fewest PodDisruptionBudget violations
   first) **within** kube-scheduler's proposal, whose reprieve already spared budget-protected pods where it could;
2. when no subset of the proposal fits on one GPU set, the minimum set among **all** lower-priority pods the node
   holds;

   both reported with the violations counted on the budgets the replica listed for this call; when it could not
   list them (``budgets`` None), with kube-scheduler's own ``NumPDBViolations`` for the proposal (an upper bound for
   a subset of it, not for a set beyond it);
3. no entry for the node when nothing fits there (or the node is gated, unknown, or the pod preempts ``Never``).

A pod asking for none of our resources is answered with kube-scheduler's proposal unchanged; a replica that does
not serve answers with no node (kube-scheduler then preempts nothing and retries the pod later). Invariant: reads
the books under the service's lock and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.kube.budgets import DisruptionBudget
from domain.kube.objects import PodObject
from domain.scheduling.preemption.cluster import victims_on
from domain.scheduling.sync import LedgerSync


@attrs.frozen
class NodeVictims:
    """One node's victims as the extender protocol carries them (``MetaVictims``): pod UIDs and the number of
    PodDisruptionBudget violations."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


def minimise(sync: LedgerSync, pod: PodObject, proposals: Mapping[str, NodeVictims], *,
             budgets: Sequence[DisruptionBudget] | None = None) -> dict[str, NodeVictims]:
    """The answer of the ``preempt`` verb for pending ``pod`` (module docstring), in the order of ``proposals``;
    ``budgets``: the cluster's PodDisruptionBudgets, None when they could not be read."""
    try:
        request = sync.requests.get(pod)
    except InvalidRequestError:
        return {}
    if not (request.wants_gpu or request.wants_mig):
        return dict(proposals)
    if request.wants_mig:
        return {}  # MIG instances are not preempted (docs/scheduler.md, Preemption)
    answer: dict[str, NodeVictims] = {}
    for node, proposed in proposals.items():
        outcome = victims_on(sync, pod, request, node, within=frozenset(proposed.uids), budgets=budgets or ())
        if outcome.victims is None:
            outcome = victims_on(sync, pod, request, node, budgets=budgets or ())
        if outcome.victims is not None:
            violations = proposed.pdb_violations if budgets is None else outcome.victims.pdb_violations
            answer[node] = NodeVictims(outcome.victims.uids, violations)
    return answer
