"""Making a scheduling decision durable: write the plan annotation, then bind; undo the annotation on failure.

Order (issue 3 §3; research/k8s-protocols.md §3.3): the node agent reads the plan when the pod starts, and a pod
starts only once bound, so the plan must be on the pod *before* the binding. Steps and failure handling:

1. JSON merge patch of the plan annotation carrying the pod's ``resourceVersion`` (optimistic concurrency).
   A 409 means the pod changed since we read it: re-read it and retry once if it is the same pod (UID), still
   unbound, and carries no plan or exactly ours; anything else fails.
2. ``pods/binding``. If it fails, re-read the pod: bound to our node means the binding went through and only
   the answer was lost (success); otherwise the plan annotation we wrote is removed (conditional patch, only if
   it is still ours) and the commit fails (failure cases B06, B07). A leftover plan is harmless anyway — a
   pending pod's plan is never trusted — but removing it keeps the API objects honest.

Every failure raises :class:`CommitError`; the caller releases the ledger reservation. Nothing here holds a lock:
the reservation in the ledger is what keeps concurrent cycles off the resources while these calls run.
"""

from __future__ import annotations

import logging

from domain.kube.objects import PodObject
from entrypoints._shared.logs import fields
from ports.cluster import ClusterApi, ClusterError, ConflictError, NotFoundError

log = logging.getLogger(__name__)


class CommitError(Exception):
    """The plan could not be written or the pod could not be bound; the message says which step and why."""


def _write_plan(cluster: ClusterApi, pod: PodObject, key: str, plan: str) -> None:
    try:
        cluster.patch_pod_annotations(pod.namespace, pod.name, {key: plan}, resource_version=pod.resource_version
                                      or None)
        return
    except ConflictError:
        pass
    except ClusterError as error:
        raise CommitError(f"writing the plan annotation failed: {error}") from error
    try:
        current = cluster.get_pod(pod.namespace, pod.name)
    except ClusterError as error:
        raise CommitError(f"the pod changed and could not be re-read: {error}") from error
    if current.uid != pod.uid:
        raise CommitError("the pod was deleted and re-created under the same name")
    if current.node_name:
        raise CommitError(f"the pod is already bound to node {current.node_name}")
    if current.annotations.get(key) not in (None, plan):
        raise CommitError(f"the pod changed and now carries another {key} annotation")
    try:
        cluster.patch_pod_annotations(pod.namespace, pod.name, {key: plan}, resource_version=current.resource_version)
    except ClusterError as error:
        raise CommitError(f"writing the plan annotation failed twice: {error}") from error


def remove_plan(cluster: ClusterApi, pod: PodObject, key: str, plan: str) -> bool:
    """Remove the plan annotation ``key`` from ``pod`` (same UID) if it still holds exactly ``plan``, with a
    conditional merge patch (best effort: API errors are logged, never raised). Returns True when removed."""
    try:
        current = cluster.get_pod(pod.namespace, pod.name)
        if current.uid != pod.uid or current.annotations.get(key) != plan:
            return False
        cluster.patch_pod_annotations(pod.namespace, pod.name, {key: None}, resource_version=current.resource_version)
    except NotFoundError:
        return False
    except ClusterError as error:
        log.warning("could not remove the plan annotation after a failed bind",
                    extra=fields(pod=pod.key, error=str(error)))
        return False
    return True


def _bound_to(cluster: ClusterApi, pod: PodObject, node: str) -> bool:
    try:
        current = cluster.get_pod(pod.namespace, pod.name)
    except ClusterError:
        return False
    return current.uid == pod.uid and current.node_name == node


def write_plan_and_bind(cluster: ClusterApi, pod: PodObject, *, node: str, key: str, plan: str) -> None:
    """Annotate ``pod`` with ``plan`` under ``key``, then bind it to ``node`` (module docstring).

    Raises :class:`CommitError` after undoing the annotation when the bind fails.
    """
    _write_plan(cluster, pod, key, plan)
    try:
        cluster.bind_pod(pod.namespace, pod.name, uid=pod.uid, node=node)
    except ClusterError as error:
        if _bound_to(cluster, pod, node):
            return  # the binding happened; only its answer was lost
        removed = remove_plan(cluster, pod, key, plan)
        status = f" (HTTP {error.status})" if error.status else ""
        undo = "plan annotation removed" if removed else "plan annotation not removed"
        raise CommitError(f"binding to node {node} failed{status}: {error}; {undo}") from error
