"""The kube-scheduler extender verbs over :meth:`SchedulerService.decide`: ``filter``, ``prioritize``, ``bind`` and
``preempt`` (:meth:`SchedulerService.preempt`), in
domain values (their HTTP JSON, ``k8s.io/kube-scheduler/extender/v1``, is :mod:`entrypoints.scheduler.extender_json`).

``filter`` runs our whole cycle over the candidates kube-scheduler sends, reserves the winner and passes only that
node (extender priorities are 0..10 and kube-scheduler breaks ties at random, which would undo the policy), with no
failed nodes (kube-scheduler reads them only when no node is left); when nothing fits, every candidate gets its
reason there. ``bind`` commits the reservation or releases it. A pod with DRA claims of our classes is placed with
what they ask (:mod:`.claimcycle`: its node is chosen by our policy over the ledger), but kube-scheduler's
DynamicResources plugin still allocates the claims, first fit on that node, before our ``bind``; claims we would
refuse to allocate ourselves (other drivers, selectors…) and MIG claims (:data:`MIG_CLAIMS`) are left out of the
choice, and so are all the pod's claims when no candidate takes them in our books (nodes whose GPUs only the DRA
driver publishes): the candidates passed kube-scheduler's own DRA filter, and its allocation decides. A standby
replica answers with an error. Invariant: no scheduling rule lives here; each verb asks the service once. The deployment
requirements (``percentageOfNodesToScore: 100``, ``managedResources``, ``rank_all_pods``) and what they cost:
``docs/extender.md``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping, Sequence

import attrs

from domain.dra.allocate import ClaimNeed
from domain.kube.objects import PodObject
from ports.cluster import ClusterError
from services._shared.logs import fields

from .commit import CommitError
from .decision import NOT_SERVING
from .preemption import NodeVictims
from .service import SchedulerService

log = logging.getLogger(__name__)

MIG_CLAIMS = ("MIG claims are left to kube-scheduler in extender mode: its allocator picks node and instance (our "
              "standalone mode places them by the MIG books)")

MAX_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``."""

PENDING_PODS_KEPT = 4096
"""Pods remembered between filter and bind (the bind verb commits the pod as its filter saw it, with no re-read)."""


@attrs.frozen
class FilterResult:
    """What ``filter`` answers: the candidates that pass (in the order sent), the reason of each failed one
    (``FailedNodes``) and an error that fails the whole call (empty when none)."""

    passed: tuple[str, ...]
    failed: Mapping[str, str] = attrs.field(factory=dict)
    error: str = ""


class Extender:
    """The three verbs over a :class:`SchedulerService` (module docstring), in domain values."""

    def __init__(self, service: SchedulerService, *, rank_all_pods: bool = False) -> None:
        self.service = service
        self.rank_all_pods = rank_all_pods
        self._pods: collections.OrderedDict[str, tuple[PodObject, ClaimNeed | None]] = collections.OrderedDict()

    def _claims(self, pod: PodObject) -> ClaimNeed | None:
        """What ``pod``'s DRA claims ask of our GPUs (module docstring), None when it has none or they are not ours
        to place (kube-scheduler allocates them anyway; the pod is then placed as if it had none)."""
        if not pod.resource_claims:
            return None
        need = self.service.claim_need(pod)
        if isinstance(need, str):
            log.debug("claims not placed by us", extra=fields(pod=pod.key, reason=need))
            return None
        if any(c.wants_mig for ask in need.asks for c in ask.containers):
            log.debug("claims not placed by us", extra=fields(pod=pod.key, reason=MIG_CLAIMS))
            return None
        return need

    def filter(self, pod: PodObject, names: Sequence[str]) -> FilterResult:
        """At most one of the candidate ``names`` passes (module docstring); scheduling problems come back in
        :attr:`FilterResult.failed` and :attr:`FilterResult.error`, never raised."""
        claims = self._claims(pod) if self.service.serving else None  # a standby answers with an error anyway
        decision = self.service.decide(pod, list(names), rank_all_pods=self.rank_all_pods, claims=claims)
        if claims is not None and decision.node is None and not decision.error:
            # no candidate takes the claims in our books (nodes whose GPUs only the DRA driver publishes, or books
            # that disagree): kube-scheduler's own DRA filter passed these candidates, so its allocation decides
            log.info("claims left to kube-scheduler", extra=fields(pod=pod.key, reason=decision.reason))
            claims = None
            decision = self.service.decide(pod, list(names), rank_all_pods=self.rank_all_pods)
        if decision.error:
            return FilterResult((), {}, decision.error)
        if not decision.managed:
            return FilterResult(tuple(names))
        if decision.node is not None:
            self._remember(pod, claims)
            log.info("filter chose a node", extra=fields(pod=pod.key, node=decision.node, candidates=len(names)))
            return FilterResult((decision.node,), dict(decision.reasons))
        log.info("filter found no node", extra=fields(pod=pod.key, reason=decision.reason))
        return FilterResult((), dict(decision.reasons))

    def _remember(self, pod: PodObject, claims: ClaimNeed | None) -> None:
        self._pods[pod.uid] = (pod, claims)
        self._pods.move_to_end(pod.uid)
        while len(self._pods) > PENDING_PODS_KEPT:
            self._pods.popitem(last=False)

    def preempt(self, pod: PodObject, proposals: Mapping[str, NodeVictims]) -> dict[str, NodeVictims]:
        """kube-scheduler's proposed victims per node, minimised with our books (nodes where nothing fits left out;
        :mod:`.preemption`)."""
        answer = self.service.preempt(pod, proposals)
        log.info("preempt answered", extra=fields(pod=pod.key, proposed=len(proposals), kept=len(answer),
                                                  victims={n: list(v.uids) for n, v in answer.items()}))
        return answer

    def prioritize(self, pod: PodObject, names: Sequence[str]) -> list[tuple[str, int]]:
        """``(node, score)`` per candidate, in the order sent: :data:`MAX_PRIORITY` for the node reserved for the
        pod, 0 for the others."""
        held = self.service.reservation(pod.uid)
        chosen = held.node if held is not None else None
        return [(name, MAX_PRIORITY if name == chosen else 0) for name in names]

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Commit the reservation of pod ``namespace/name`` (``uid``, when not empty, must be the pod's) on ``node``
        (one binding that carries the plan annotation); a pod without a reservation on that node gets a fresh cycle
        restricted to it first. Returns the error ("" on success; on failure the reservation is already released
        and no plan written)."""
        try:
            self._bind(namespace, name, uid, node)
        except (CommitError, ClusterError) as error:
            log.warning("bind failed", extra=fields(pod=f"{namespace}/{name}", node=node, error=str(error)))
            return str(error)
        return ""

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        service = self.service
        if not service.serving:
            raise CommitError(NOT_SERVING)
        pod, claims = self._pods.pop(uid, (None, None)) if uid else (None, None)
        if pod is None or (pod.namespace, pod.name) != (namespace, name):
            pod = service.cluster.get_pod(namespace, name)
        if uid and pod.uid != uid:
            raise CommitError(f"pod {namespace}/{name} has UID {pod.uid}, not {uid}")
        held = service.reservation(pod.uid)
        if held is None or held.node != node:  # decide again, with the claims as they are now
            claims = self._claims(pod)
            result = service.schedule_pod(pod, candidates=[node], claims=claims)
            if result.allocation is None and claims is not None:  # as in filter: kube-scheduler's allocation decides
                claims = None
                result = service.schedule_pod(pod, candidates=[node])
            if result.allocation is None:
                raise CommitError(f"pod {namespace}/{name} does not fit node {node}: {result.reason}")
            held = result.allocation
        service.commit(pod, held, claims=claims, write_claims=False)
