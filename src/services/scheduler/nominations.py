"""Preemption's books: which pending pod was nominated to which node, over which victims, and the hold
that keeps the capacity its victims free for it.

* :func:`plan_preemption` — for a pending pod that fits nowhere: the nodes where only capacity refuses it
  (:func:`~domain.scheduling.preemption.cluster.preemptable_nodes`), the victim set on each
  (:func:`~domain.scheduling.preemption.cluster.victims_on`: strictly lower priority, per GPU, terminating pods
  counted as freed), and the best node by kube-scheduler's order (:func:`~domain.scheduling.preemption.cluster.
  best_victims`, which skips the nodes that cannot beat the best found);
* :class:`Nominations` — the pods nominated (pod UID → :class:`Nomination`) and the **hold**: a cycle that places
  pod P on a node N where a pod of priority ≥ P's is nominated keeps that placement unless P's reservation is
  what stops the nominee from fitting N once its victims are gone (it fits without P, victims counted as freed,
  and not with P): the rule kube-scheduler applies with nominated pods (``RunFilterPluginsWithNominatedPods``),
  per GPU here. A nominee that fits nowhere on N whatever P does holds nothing against P. A nomination ends when
  its pod is bound, deleted or finished, or its node is deleted, and when the pod can no longer use it: no victim
  set makes it fit any more, or a cycle places it on another node (the service ends it then).

Not thread-safe: the service calls it under its lock. Pure bookkeeping: the API writes (victims' deletion, the
Events, ``status.nominatedNodeName``) are the standalone loop's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.kube.budgets import DisruptionBudget
from domain.kube.objects import PodObject
from domain.request import PodRequest
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.preemption.cluster import best_victims, fitting_nodes, preemptable_nodes, preemptor_of
from domain.scheduling.preemption.victims import PreemptionPolicy, Preemptor, Victims, select_victims
from domain.scheduling.sync import LedgerSync


@attrs.frozen
class Nomination:
    """Pod ``uid`` (``key``: namespace/name) nominated to ``node``: where it will go (``allocation``), the victims
    being deleted for it (UIDs) and its ``preemptor`` (request and priority). ``followed``: read from the pod's
    ``status.nominatedNodeName`` (kube-scheduler's, or a previous leader's), with no victims of its own: it
    follows that field (:meth:`~.preempting.PreemptionEntries.follow`)."""

    uid: str
    key: str
    node: str
    allocation: PodAllocation
    victims: tuple[str, ...]
    preemptor: Preemptor
    followed: bool = False


def plan_preemption(sync: LedgerSync, scheduler: Scheduler, pod: PodObject, request: PodRequest, *,
                    held: Collection[str] = (), budgets: Sequence[DisruptionBudget] = (),
                    only: str | None = None, kept_claims: Collection[str] = (),
                    gone: Collection[str] = ()) -> Victims | str:
    """The victim set to evict for pending ``pod`` (module docstring), or the reason there is none; nodes in
    ``held`` (held for a nominee of priority ≥ the pod's) are not considered, nor any node but ``only`` when given
    (the node the pod's allocated DRA claims pin it to); ``kept_claims``: the UIDs of those claims (never counted as
    freed by a victim); ``gone``: the pods already evicted for it (their claims not deallocated yet count as
    freed); ``budgets``: the cluster's PodDisruptionBudgets, fewest
    violations first (kube-scheduler's order). Its ``pods`` are empty when the pod fits once pods already
    terminating are gone (wait, evict nothing more)."""
    if not request.wants_gpu:
        return "preemption is for pods asking for GPU resources (not MIG, not CPU only)"
    preemptor = preemptor_of(pod, request)
    if preemptor.policy is PreemptionPolicy.NEVER:
        return "not eligible for preemption: preemptionPolicy is Never"
    nodes = [node for node in preemptable_nodes(scheduler, request)
             if node not in held and (only is None or node == only)]
    chosen, _ = best_victims(sync, pod, request, nodes, fitting=fitting_nodes(scheduler, request), budgets=budgets,
                             kept_claims=kept_claims, gone=gone)
    if chosen is None:
        return (f"preemption: 0/{len(nodes)} nodes where only capacity refuses the pod have lower-priority pods "
                "whose eviction makes it fit")
    return chosen


class Nominations:
    """Nominated pods and the hold on what their victims free (module docstring)."""

    def __init__(self) -> None:
        self._by_uid: dict[str, Nomination] = {}
        self.ended = 0
        """Nominations ended so far (each ends a hold on room other pods may take)."""

    def add(self, pod: PodObject, request: PodRequest, victims: Victims, *, followed: bool = False) -> Nomination:
        """Nominate ``pod`` to ``victims.node`` (replacing an earlier nomination of it; the victims of an earlier
        nomination to the same node stay among its victims: they are on their way out for it). ``followed``: a
        nomination read from the pod's status (:class:`Nomination`), recorded without victims."""
        earlier = self._by_uid.get(pod.uid)
        kept = earlier.victims if earlier is not None and earlier.node == victims.node else ()
        chosen = () if followed else victims.uids
        nomination = Nomination(pod.uid, pod.key, victims.node, victims.allocation,
                                tuple(dict.fromkeys((*kept, *chosen))), preemptor_of(pod, request), followed)
        self.ended += earlier is not None and earlier != nomination  # the earlier hold may be smaller or elsewhere
        self._by_uid[pod.uid] = nomination
        return nomination

    def __len__(self) -> int:
        """Nominations held now."""
        return len(self._by_uid)

    def get(self, uid: str) -> Nomination | None:
        """The nomination of pod ``uid``, if any."""
        return self._by_uid.get(uid)

    def end(self, uid: str) -> Nomination | None:
        """The pod was bound, deleted or finished: drop its nomination (idempotent); returns it."""
        self.ended += uid in self._by_uid  # counted before it goes: a reader seeing it gone sees the count
        return self._by_uid.pop(uid, None)

    def node_deleted(self, node: str) -> None:
        """Drop the nominations to ``node``."""
        for uid in [u for u, n in self._by_uid.items() if n.node == node]:
            self.ended += 1
            del self._by_uid[uid]

    def all(self) -> list[Nomination]:
        """Every nomination, by pod UID."""
        return [self._by_uid[uid] for uid in sorted(self._by_uid)]

    def held_for(self, pod: PodObject) -> set[str]:
        """Nodes with a nominee other than ``pod`` of priority ≥ ``pod``'s."""
        return {n.node for n in self._by_uid.values() if n.uid != pod.uid and n.preemptor.priority >= pod.priority}

    def blocked_by(self, sync: LedgerSync, pod: PodObject, node: str, *, leaving: Collection[str] = ()) -> str:
        """Why ``pod``'s reservation on ``node`` (in the books) breaks the hold of a nominee of priority ≥ ``pod``'s
        on that node, or "" when it breaks none. Only what the pod takes counts: a nominee is refused the pod's
        placement when, its victims gone, it fits **without** the pod's reservation and not with it; a nominee that
        fits either way, or neither way (another pod took the room, the node changed), holds nothing against it.
        Counted as freed: the pods terminating on the node, the nominee's victims no longer running there (a victim
        not deleted, its condition write failed, is not), and ``leaving``."""
        bound = sync.bound_pods(node)
        running = {p.uid for p in bound if p.deletion_timestamp is None}
        terminating = {p.uid for p in bound if p.deletion_timestamp is not None}
        for nomination in self.all():
            if nomination.node != node or nomination.uid == pod.uid:
                continue
            if nomination.preemptor.priority < pod.priority:
                continue
            gone = {*(v for v in nomination.victims if v not in running), *terminating, *leaving}
            if _fits(sync, nomination, gone) or not _fits(sync, nomination, {*gone, pod.uid}):
                continue
            return (f"node {node} is held for the nominated pod {nomination.key} (priority "
                    f"{nomination.preemptor.priority}) while its victims terminate")
        return ""


def _fits(sync: LedgerSync, nomination: Nomination, gone: Collection[str]) -> bool:
    """True when ``nomination``'s pod fits its node with the UIDs in ``gone`` counted as freed."""
    outcome = select_victims(sync.ledger, nomination.node, nomination.preemptor, [], leaving=gone)
    return outcome.victims is not None
