"""The standalone loop's evictions for a preemptor (:func:`evict`): each victim marked, announced and deleted, as
kube-scheduler's preemption does.

Invariants: a victim is deleted only after its ``DisruptionTarget`` condition is written (a Job's
``podFailurePolicy`` may read it), and only by UID (a pod re-created under its name is never touched); every API
failure is logged and leaves that victim for the next attempt to choose again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from domain.kube.objects import PodObject
from domain.kube.podconditions import preemption_condition
from domain.scheduling.preemption.victims import Victims
from services._shared.logs import fields

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
