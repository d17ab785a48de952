"""Making a scheduling decision durable: write the plan annotation, then bind; undo the annotation on failure.

Order (binding through ``pods/binding``: core/v1 Binding API reference): the node agent reads the plan when the pod
starts, and a pod starts only once bound, so the plan must be on the pod *before* the binding. Steps and failure
handling:

1. JSON merge patch of the plan annotation carrying the pod's ``resourceVersion`` (optimistic concurrency).
   A 409 means the pod changed since we read it: re-read it and retry once if it is the same pod (UID), still
   unbound, and carries no plan, exactly ours, or a leftover plan this scheduler (``writer``) wrote for this
   very pod object (``podUID``) in an earlier attempt; anything else fails.
2. ``may_write()`` is asked right before the binding (a replica deposed while writing the plan must not bind);
   False fails the commit with :class:`NotLeaderError`.
3. ``pods/binding``.

On **any** exception in these steps (API errors, transport errors, bugs alike) the plan annotation is rolled
back with :func:`remove_plan` — which never edits a bound pod — and :class:`CommitError` is raised, chained to
the cause. One exception: when the rollback finds the pod bound to the planned node after the binding was sent,
the binding went through and only its answer was lost: success (failure cases B06, B07). A leftover plan is
harmless anyway — a pending pod's plan is never trusted, and a plan names its pod's UID — but removing it keeps
the API objects honest.

The caller releases the ledger reservation on failure. Nothing here holds a lock: the reservation in the ledger
is what keeps concurrent cycles off the resources while these calls run.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from domain.errors import InvalidRequestError
from domain.kube.annotations import plan_owner
from domain.kube.objects import PodObject
from ports.cluster import ClusterError, ConflictError, NotFoundError, PodsApi
from services._shared.logs import fields

log = logging.getLogger(__name__)

REMOVE_ATTEMPTS = 3
"""Conditional removals of the plan tried by :func:`remove_plan` (each 409 re-reads the pod)."""


class CommitError(Exception):
    """The plan could not be written or the pod could not be bound; the message names the pod
    (``namespace/name``), the step and why, and says what became of the plan annotation."""


class NotLeaderError(CommitError):
    """This replica is not (or no longer) the leader, so it must not write to the API."""


class Undo(enum.Enum):
    """What :func:`remove_plan` did; the value is the phrase commit errors end with."""

    REMOVED = "plan annotation removed"
    BOUND = "pod bound to the planned node: plan annotation kept"
    NOT_OURS = "plan annotation not ours (or pod gone): left alone"
    FAILED = "plan annotation not removed"


def _always() -> bool:
    return True


def _ours(text: str | None, pod: PodObject, key: str, plan: str, writer: str) -> bool:
    """True when ``text`` is no plan, exactly ``plan``, or a plan ``writer`` wrote for this pod object."""
    if text is None or text == plan:
        return True
    try:
        return plan_owner(text, key=key) == (pod.uid, writer)
    except InvalidRequestError:
        return False


def _write_plan(cluster: PodsApi, pod: PodObject, key: str, plan: str, writer: str) -> None:
    try:
        cluster.patch_pod_annotations(pod.namespace, pod.name, {key: plan}, resource_version=pod.resource_version
                                      or None)
        return
    except ConflictError:
        pass
    except ClusterError as error:
        raise CommitError(f"pod {pod.key}: writing the plan annotation failed: {error}") from error
    try:
        current = cluster.get_pod(pod.namespace, pod.name)
    except ClusterError as error:
        raise CommitError(f"pod {pod.key}: the pod changed and could not be re-read: {error}") from error
    if current.uid != pod.uid:
        raise CommitError(f"pod {pod.key}: the pod was deleted and re-created under the same name")
    if current.node_name:
        raise CommitError(f"pod {pod.key}: the pod is already bound to node {current.node_name}")
    if not _ours(current.annotations.get(key), pod, key, plan, writer):
        raise CommitError(f"pod {pod.key}: the pod changed and now carries another {key} annotation")
    try:
        cluster.patch_pod_annotations(pod.namespace, pod.name, {key: plan}, resource_version=current.resource_version)
    except ClusterError as error:
        raise CommitError(f"pod {pod.key}: writing the plan annotation failed twice: {error}") from error


def remove_plan(cluster: PodsApi, pod: PodObject, key: str, plan: str, *, node: str = "") -> Undo:
    """Remove the plan annotation ``key`` from ``pod`` if it is the same pod object (UID), still unbound, and
    still holds exactly ``plan``, with a conditional merge patch; a 409 (the pod changed meanwhile) re-reads and
    tries again, up to :data:`REMOVE_ATTEMPTS` times.

    Never edits a bound pod: bound to ``node`` gives :attr:`Undo.BOUND` (a binding that went through), bound
    elsewhere :attr:`Undo.NOT_OURS`. Best effort: errors are logged, never raised (:attr:`Undo.FAILED`).
    """
    for _ in range(REMOVE_ATTEMPTS):
        try:
            current = cluster.get_pod(pod.namespace, pod.name)
            if current.uid != pod.uid:
                return Undo.NOT_OURS
            if current.node_name:
                return Undo.BOUND if node and current.node_name == node else Undo.NOT_OURS
            if current.annotations.get(key) != plan:
                return Undo.NOT_OURS
            cluster.patch_pod_annotations(pod.namespace, pod.name, {key: None},
                                          resource_version=current.resource_version)
            return Undo.REMOVED
        except ConflictError:
            continue  # changed between our read and our patch (bound, perhaps): look again
        except NotFoundError:
            return Undo.NOT_OURS
        except Exception as error:  # best effort: the caller is already failing
            log.warning("could not remove the plan annotation", extra=fields(pod=pod.key, error=str(error)))
            return Undo.FAILED
    log.warning("could not remove the plan annotation: the pod kept changing",
                extra=fields(pod=pod.key, attempts=REMOVE_ATTEMPTS))
    return Undo.FAILED


def write_plan_and_bind(
    cluster: PodsApi,
    pod: PodObject,
    *,
    node: str,
    key: str,
    plan: str,
    writer: str,
    may_write: Callable[[], bool] = _always,
) -> None:
    """Annotate ``pod`` with ``plan`` under ``key`` (a plan signed ``writer``), then bind it to ``node``
    (module docstring). ``may_write`` is asked right before the binding.

    Raises :class:`NotLeaderError` when ``may_write`` says no and :class:`CommitError` on any other failure,
    both after rolling the annotation back; returns normally when the pod ends up bound to ``node`` by us.
    """
    sent = False
    try:
        _write_plan(cluster, pod, key, plan, writer)
        if not may_write():
            raise NotLeaderError(f"pod {pod.key}: this replica lost leadership before binding it; not bound")
        sent = True
        cluster.bind_pod(pod.namespace, pod.name, uid=pod.uid, node=node)
    except Exception as error:
        undo = remove_plan(cluster, pod, key, plan, node=node)
        if sent and undo is Undo.BOUND:
            log.info("binding went through; only its answer was lost",
                     extra=fields(pod=pod.key, node=node, error=str(error)))
            return
        if isinstance(error, CommitError):
            raise type(error)(f"{error}; {undo.value}") from error
        status = f" (HTTP {error.status})" if isinstance(error, ClusterError) and error.status else ""
        step = f"binding to node {node} failed{status}" if sent else "writing the plan annotation failed"
        raise CommitError(f"pod {pod.key}: {step}: {error}; {undo.value}") from error
