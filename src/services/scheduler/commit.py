"""Making a scheduling decision durable: bind the pod with its plan annotation in the same write.

The node agent reads the plan when the pod starts, and a pod starts only once bound, so the plan must be on the
pod no later than ``spec.nodeName``. ``pods/binding`` copies the Binding's ``metadata.annotations`` onto the pod in
the same storage update that sets ``spec.nodeName`` (the ``pods/binding`` subresource of the core/v1 API;
``tests/contract/test_cluster_contract.py`` checks it against the live version's server and the in-memory one): one
API write, and no moment where a pod carries a plan but no node, or a node but no plan. Steps:

1. ``may_write()`` is asked right before the binding (a deposed replica must not bind); False fails the commit
   with :class:`NotLeaderError`, nothing written;
2. ``pods/binding`` with the plan annotation, replacing any plan the pending pod carries (a leftover plan is never
   trusted: B07). The server binds only a pod that is unbound and not being deleted (409 otherwise, checked
   inside the update), so a plan another replica wrote comes with its binding and ours then fails; releases
   (1.37 included) also refuse a Binding whose UID is not the pod's. The binding carries no resourceVersion
   precondition, so a change to the pod between the caller's read and the binding does not stop it; the GPU
   extended resources the plan is made of cannot change on a pod (extended resources are not resizable in place).
   A pod deleted and re-created under the same name in that window would get a plan naming the old UID, which
   the plan decoder never trusts (the pod is then booked by inference).

On **any** exception from the binding (API errors, transport errors, bugs alike) the pod is re-read: bound to the
planned node, same UID, carrying exactly our plan means the binding went through and only its answer was lost —
success (failure cases B06, B07). Otherwise :class:`CommitError` is raised, chained to the cause, saying what the
re-read found. There is nothing to roll back: plan and node are written together or not at all. A binding whose
answer was lost may still land after the re-read (a client-side timeout); it then lands whole, and the informer
books the pod from its plan.

The caller releases the ledger reservation on failure. Nothing here holds a lock: the reservation in the ledger
is what keeps concurrent cycles off the resources while these calls run.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from domain.kube.objects import PodObject
from ports.cluster import ClusterError, NotFoundError, PodsApi
from services._shared.logs import fields

log = logging.getLogger(__name__)


class CommitError(Exception):
    """The pod could not be bound; the message names the pod (``namespace/name``), the step and why, and says what
    a re-read of the pod found."""


class NotLeaderError(CommitError):
    """This replica is not (or no longer) the leader, so it must not write to the API."""


class Found(enum.Enum):
    """What :func:`check_bound` found on the pod after a failed binding; the value is the phrase commit errors end
    with."""

    BOUND = "pod bound to the planned node with our plan"
    UNBOUND = "pod not bound when re-read"
    NOT_OURS = "pod bound elsewhere, re-created or gone: not bound by us"
    UNKNOWN = "pod could not be re-read: the binding may still go through"


def _always() -> bool:
    return True


def check_bound(cluster: PodsApi, pod: PodObject, key: str, plan: str, *, node: str) -> Found:
    """Re-read ``pod`` after a failed binding: :attr:`Found.BOUND` when it is the same pod object (UID), bound to
    ``node`` and carries exactly ``plan`` under ``key`` — our binding, which writes both at once, went through.
    Never raises: a failed read is :attr:`Found.UNKNOWN` (logged)."""
    try:
        current = cluster.get_pod(pod.namespace, pod.name)
    except NotFoundError:
        return Found.NOT_OURS
    except Exception as error:  # best effort: the caller is already failing
        log.warning("could not re-read the pod after a failed binding", extra=fields(pod=pod.key, error=str(error)))
        return Found.UNKNOWN
    if current.uid != pod.uid:
        return Found.NOT_OURS
    if not current.node_name:
        return Found.UNBOUND
    if current.node_name == node and current.annotations.get(key) == plan:
        return Found.BOUND
    return Found.NOT_OURS


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
    """Bind ``pod`` to ``node`` with ``plan`` as its annotation ``key``, in one ``pods/binding`` write (module
    docstring). ``may_write`` is asked right before the binding; ``writer`` (the plan's signer, which the plan
    text names too) only labels the log lines.

    Raises :class:`NotLeaderError` when ``may_write`` says no (nothing written) and :class:`CommitError` when the
    binding fails; returns normally when the pod ends up bound to ``node`` with ``plan`` by us.
    """
    if not may_write():
        raise NotLeaderError(f"pod {pod.key}: this replica lost leadership before binding it; not bound")
    try:
        cluster.bind_pod(pod.namespace, pod.name, uid=pod.uid, node=node, annotations={key: plan})
    except Exception as error:
        found = check_bound(cluster, pod, key, plan, node=node)
        if found is Found.BOUND:
            log.info("binding went through; only its answer was lost",
                     extra=fields(pod=pod.key, node=node, writer=writer, error=str(error)))
            return
        status = f" (HTTP {error.status})" if isinstance(error, ClusterError) and error.status else ""
        raise CommitError(f"pod {pod.key}: binding to node {node} failed{status}: {error}; {found.value}") from error
