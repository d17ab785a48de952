"""The kube-scheduler extender verbs over :meth:`SchedulerService.decide`: ``filter``, ``prioritize``, ``bind``
(HTTP JSON of ``k8s.io/kube-scheduler/extender/v1``: Go field names, no JSON tags).

``filter`` runs our whole cycle over the candidates kube-scheduler sends, reserves the winner and returns only
that node (extender priorities are 0..10 and kube-scheduler breaks ties at random, which would undo the policy),
with an empty ``FailedNodes`` (kube-scheduler reads it only when no node is left); when nothing fits, every
candidate gets its reason there. ``bind`` commits the reservation or releases it. A
standby replica answers ``Error``. Invariant: each verb translates its JSON once into domain values and back; no
scheduling rule lives here. The wire format, the deployment requirements (``percentageOfNodesToScore: 100``,
``managedResources``, ``rank_all_pods``) and what they cost: ``docs/extender.md``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping

from domain.kube.corejson import CoreJsonError, pod_from_json
from domain.kube.objects import PodObject
from ports.cluster import ClusterError
from services._shared.logs import fields

from .commit import CommitError
from .decision import NOT_SERVING
from .service import SchedulerService

log = logging.getLogger(__name__)

MAX_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``."""

PENDING_PODS_KEPT = 4096
"""Pods remembered between filter and bind (the bind verb commits the pod as its filter saw it, with no re-read)."""


class ExtenderArgsError(ValueError):
    """The request body is not what kube-scheduler sends; the HTTP layer answers 400."""


def _mapping(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ExtenderArgsError(f"{what} must be a JSON object")
    return value


def _candidates(args: Mapping[str, object]) -> tuple[list[str], list[Mapping[str, object]] | None]:
    """Node names and, when sent as a NodeList, the node objects (to echo back the kept ones)."""
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ExtenderArgsError("NodeNames must be an array of strings")
        return list(names), None
    items_raw = _mapping(args.get("Nodes") or {}, "Nodes").get("items") or []
    if not isinstance(items_raw, list):
        raise ExtenderArgsError("Nodes.items must be an array")
    items = [_mapping(item, "Nodes.items[]") for item in items_raw]
    out = []
    for item in items:
        name = _mapping(item.get("metadata") or {}, "Nodes.items[].metadata").get("name")
        if not isinstance(name, str):
            raise ExtenderArgsError("Nodes.items[].metadata.name must be a string")
        out.append(name)
    return out, items


class Extender:
    """The three verbs over a :class:`SchedulerService` (module docstring). Each takes the decoded JSON body and
    returns the JSON reply; :class:`ExtenderArgsError` means a malformed body."""

    def __init__(self, service: SchedulerService, *, rank_all_pods: bool = False) -> None:
        self.service = service
        self.rank_all_pods = rank_all_pods
        self._pods: collections.OrderedDict[str, PodObject] = collections.OrderedDict()

    def _pod(self, args: Mapping[str, object]) -> PodObject:
        try:
            return pod_from_json(args.get("Pod"))
        except CoreJsonError as error:
            raise ExtenderArgsError(f"Pod: {error}") from None

    def filter(self, body: object) -> dict[str, object]:
        """``ExtenderArgs`` → ``ExtenderFilterResult``: at most one node passes (module docstring). Raises
        :class:`ExtenderArgsError` for a malformed body; scheduling problems go into ``FailedNodes``/``Error``."""
        args = _mapping(body, "ExtenderArgs")
        pod = self._pod(args)
        names, items = _candidates(args)
        passed, failed, error = self._decide(pod, names)
        reply: dict[str, object] = {"FailedNodes": failed, "Error": error}
        if items is None:
            reply["NodeNames"] = passed
        else:
            keep = set(passed)
            reply["Nodes"] = {"items": [item for item, name in zip(items, names, strict=True) if name in keep]}
        return reply

    def _decide(self, pod: PodObject, names: list[str]) -> tuple[list[str], dict[str, str], str]:
        """``(passed, FailedNodes, Error)`` for ``filter`` from the service's :class:`Decision`."""
        decision = self.service.decide(pod, names, rank_all_pods=self.rank_all_pods)
        if decision.error:
            return [], {}, decision.error
        if not decision.managed:
            return names, {}, ""
        if decision.node is not None:
            self._remember(pod)
            log.info("filter chose a node", extra=fields(pod=pod.key, node=decision.node, candidates=len(names)))
            return [decision.node], dict(decision.reasons), ""
        log.info("filter found no node", extra=fields(pod=pod.key, reason=decision.reason))
        return [], dict(decision.reasons), ""

    def _remember(self, pod: PodObject) -> None:
        self._pods[pod.uid] = pod
        self._pods.move_to_end(pod.uid)
        while len(self._pods) > PENDING_PODS_KEPT:
            self._pods.popitem(last=False)

    def prioritize(self, body: object) -> list[dict[str, object]]:
        """``ExtenderArgs`` → ``HostPriorityList``: 10 (``MaxExtenderPriority``) for the node reserved for the pod, 0
        for the others. Raises :class:`ExtenderArgsError` for a malformed body."""
        args = _mapping(body, "ExtenderArgs")
        pod = self._pod(args)
        names, _ = _candidates(args)
        held = self.service.reservation(pod.uid)
        chosen = held.node if held is not None else None
        return [{"Host": name, "Score": MAX_PRIORITY if name == chosen else 0} for name in names]

    def bind(self, body: object) -> dict[str, object]:
        """``ExtenderBindingArgs`` → ``ExtenderBindingResult``: commit the reservation (one binding that carries
        the plan annotation); a pod without a reservation on that node gets a fresh cycle restricted to it first.
        Raises :class:`ExtenderArgsError` for a malformed body; failures come back in ``Error`` (the reservation
        already released, no plan written)."""
        args = _mapping(body, "ExtenderBindingArgs")
        values = {key: args.get(key) for key in ("PodName", "PodNamespace", "PodUID", "Node")}
        if not all(isinstance(v, str) and v for k, v in values.items() if k != "PodUID"):
            raise ExtenderArgsError("PodName, PodNamespace and Node must be non-empty strings")
        name, namespace, uid, node = (str(values[k] or "") for k in ("PodName", "PodNamespace", "PodUID", "Node"))
        try:
            self._bind(namespace, name, uid, node)
        except (CommitError, ClusterError) as error:
            log.warning("bind failed", extra=fields(pod=f"{namespace}/{name}", node=node, error=str(error)))
            return {"Error": str(error)}
        return {"Error": ""}

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        service = self.service
        if not service.serving:
            raise CommitError(NOT_SERVING)
        pod = self._pods.pop(uid, None) if uid else None
        if pod is None or (pod.namespace, pod.name) != (namespace, name):
            pod = service.cluster.get_pod(namespace, name)
        if uid and pod.uid != uid:
            raise CommitError(f"pod {namespace}/{name} has UID {pod.uid}, not {uid}")
        held = service.reservation(pod.uid)
        if held is None or held.node != node:
            result = service.schedule_pod(pod, candidates=[node])
            if result.allocation is None:
                raise CommitError(f"pod {namespace}/{name} does not fit node {node}: {result.reason}")
            held = result.allocation
        service.commit(pod, held)
