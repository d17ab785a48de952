"""The extender's preemption: kube-scheduler's proposed victims, minimised with our per-GPU books.

kube-scheduler (``pkg/scheduler/framework/preemption``) picks victims per node with its own, summed view of our
extended resources (a node with 30 % free on GPU 0 and 40 % on GPU 1 has "70" free for it) and then calls the
extender's ``preempt`` verb with them (``ExtenderPreemptionArgs``). For every node it proposes, we answer:

1. the minimum victim set (:mod:`domain.scheduling.preemption.victims`) **within** kube-scheduler's proposal, whose
   reprieve already spared PodDisruptionBudget-protected pods where it could; it is reported with kube-scheduler's
   own ``NumPDBViolations`` for the proposal (an upper bound: fewer victims violate no more budgets);
2. when no subset of the proposal fits on one GPU set, the minimum set among **all** lower-priority pods the node
   holds, reported with the same number (this replica does not read PodDisruptionBudgets: the budgets only steer
   kube-scheduler's proposal, see ``docs/extender.md``);
3. no entry for the node when nothing fits there (or the node is gated, unknown, or the pod preempts ``Never``).

A pod asking for none of our resources is answered with kube-scheduler's proposal unchanged; a replica that does
not serve answers with no node (kube-scheduler then preempts nothing and retries the pod later). Invariant: reads
the books under the service's lock and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import PodObject
from domain.scheduling.preemption.cluster import victims_on
from domain.scheduling.sync import LedgerSync


@attrs.frozen
class NodeVictims:
    """One node's victims as the extender protocol carries them (``MetaVictims``): pod UIDs and the number of
    PodDisruptionBudget violations."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


def minimise(sync: LedgerSync, pod: PodObject, proposals: Mapping[str, NodeVictims]) -> dict[str, NodeVictims]:
    """The answer of the ``preempt`` verb for pending ``pod`` (module docstring), in the order of ``proposals``."""
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
        outcome = victims_on(sync, pod, request, node, within=frozenset(proposed.uids))
        if outcome.victims is None:
            outcome = victims_on(sync, pod, request, node)
        if outcome.victims is not None:
            answer[node] = NodeVictims(outcome.victims.uids, proposed.pdb_violations)
    return answer
