"""The standalone loop's preemption step (:func:`preempt`) and its evictions for a preemptor (:func:`evict`): each
victim marked, announced and deleted, as kube-scheduler's preemption does.

Invariants: a victim is deleted only after its ``DisruptionTarget`` condition is written (a Job's
``podFailurePolicy`` may read it), and only by UID (a pod re-created under its name is never touched); every API
failure is logged and leaves that victim for the next attempt to choose again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from domain.dra.allocate import ClaimNeed
from domain.kube.objects import PodObject
from domain.kube.podconditions import preemption_condition
from domain.scheduling.preemption.victims import Victims
from services._shared.logs import fields

from .service import SchedulerService
from .state import SchedulerCluster

log = logging.getLogger(__name__)


def evict(cluster: SchedulerCluster, preemptor: PodObject, planned: Victims, scheduler_name: str,
          event: Callable[[PodObject, str, str, str], None]) -> list[str]:
    """Mark each victim of ``planned`` with the condition ``DisruptionTarget`` (reason ``PreemptionByScheduler``,
    by ``scheduler_name``), record a ``Preempted`` Event on it through ``event`` (pod, reason, message, type) and
    delete it gracefully by UID; returns the ``namespace/name`` of the victims deleted. Never raises."""
    deleted = []
    condition = preemption_condition(scheduler_name)
    for victim in planned.pods:
        namespace, _, name = victim.key.partition("/")
        try:
            cluster.set_pod_condition(namespace, name, condition, uid=victim.uid)
        except Exception as error:  # the next attempt chooses again from what is left
            log.warning("victim not marked DisruptionTarget, not deleted",
                        extra=fields(pod=victim.key, preemptor=preemptor.key, error=str(error)))
            continue
        message = (f"Preempted by pod {preemptor.key} (UID {preemptor.uid}, priority {preemptor.priority}) "
                   f"on node {planned.node}")
        event(PodObject(victim.uid, namespace, name), "Preempted", message, "Normal")
        try:
            cluster.delete_pod(namespace, name, uid=victim.uid)
            deleted.append(victim.key)
        except Exception as error:  # the next attempt chooses again from what is left
            log.warning("victim not deleted", extra=fields(pod=victim.key, preemptor=preemptor.key, error=str(error)))
    return deleted


def preempt(service: SchedulerService, pod: PodObject, nominated: str, claims: ClaimNeed | None,
            scheduler_name: str, event: Callable[[PodObject, str, str, str], None]) -> str:
    """Preemption for ``pod`` (:mod:`.standalone`): nominate it, mark the victims ``DisruptionTarget`` and delete
    them gracefully, with an Event on each (through ``event``); returns what happened, for the pod's FailedScheduling
    Event. When no victim set helps, a nomination (``nominated``: its node, or "") ends and
    ``status.nominatedNodeName`` is cleared. API failures are logged and said; a victim not marked is not deleted.
    ``claims``: what the pod's DRA claims ask (:mod:`.claimcycle`)."""
    planned = service.preempt_for(pod, claims=claims)
    if not isinstance(planned, Victims):
        if nominated:
            unnominate(service.cluster, pod, nominated)
            return f"{planned}; nomination to node {nominated} ended"
        return planned
    node = planned.node
    try:
        if pod.nominated_node_name != node:
            service.cluster.nominate_pod(pod.namespace, pod.name, node)
    except Exception as error:  # the hold stands in our books; the status field is informative
        log.warning("nomination not written", extra=fields(pod=pod.key, node=node, error=str(error)))
    if not planned.pods:
        return f"preemption: nominated to node {node}, waiting for the pods it evicted to terminate"
    deleted = evict(service.cluster, pod, planned, scheduler_name, event)
    log.info("preempting", extra=fields(pod=pod.key, node=node, victims=deleted))
    evicted = ", ".join(deleted) or "nothing (condition writes or deletes failed)"
    return f"preemption: nominated to node {node}, evicting {evicted}"


def unnominate(cluster: SchedulerCluster, pod: PodObject, node: str) -> None:
    """Clear ``pod``'s ``status.nominatedNodeName`` (was ``node``); best effort: a failure is logged."""
    try:
        cluster.nominate_pod(pod.namespace, pod.name, "")
    except Exception as error:  # the books no longer hold the node; the status field is informative
        log.warning("nomination not cleared", extra=fields(pod=pod.key, node=node, error=str(error)))
