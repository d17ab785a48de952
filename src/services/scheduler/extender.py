"""The kube-scheduler extender verbs: ``filter``, ``prioritize``, ``bind`` (research/k8s-protocols.md §3.2, §3.3).

Wire format: the Go types of ``k8s.io/kube-scheduler/extender/v1`` have no JSON tags, so keys are the Go field
names — ``ExtenderArgs{Pod, Nodes, NodeNames}``, ``ExtenderFilterResult{Nodes, NodeNames, FailedNodes, Error}``,
``HostPriority{Host, Score}`` (0..10), ``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}``,
``ExtenderBindingResult{Error}``. With ``nodeCacheCapable: true`` kube-scheduler sends ``NodeNames`` and reads
``NodeNames`` back; otherwise it sends a ``Nodes`` NodeList and reads one back. Both are accepted.

**Why filter returns one node.** Extender priorities are integers 0..10, and kube-scheduler breaks equal totals
at random, which on the trace replay costs FGD about 5 pp of GPU allocation. So ``filter`` runs our whole cycle
(filter, score, our tie rule) over the candidate nodes kube-scheduler sends, reserves the winner in the ledger
as an *assumed* pod (so concurrent cycles see it) and returns only that node; every other candidate is in
``FailedNodes`` with ``lj-runtimekit chose node X`` (or, when nothing fits, the real reason per node).
kube-scheduler, left with one feasible node, takes it without scoring; ``prioritize`` (10 for the chosen node,
0 for the rest) only matters if it is called anyway. ``bind`` commits the reservation (plan annotation, then
binding) or rolls it back. A second ``filter`` for a pod that still holds a reservation keeps it when that node
is among the candidates, else releases it and decides again.

Deployment requirement for full fidelity: ``percentageOfNodesToScore: 100`` in the KubeSchedulerConfiguration.
On clusters of 100+ nodes kube-scheduler otherwise stops its own filtering once it has "enough" feasible nodes
(research/k8s-protocols.md §3.4) and the extender only ever sees that subset, so our choice is the best of a
sample rather than of the cluster.

MIG pods (``<prefix>/mig-<profile>`` resources) are answered the same way: ``filter`` runs the cycle (node-level
filters, then the MIG plugin) and returns the one node whose MIG books took the reservation; the other candidates
carry the node filter's or the MIG plugin's reason (``MIG: …``); an unknown profile name is an invalid request on
every candidate (B30). List the MIG resource names in ``managedResources`` (or rank all pods) so kube-scheduler
calls the extender for them.

Pods that ask for none of our resources pass untouched (``managedResources`` in the scheduler configuration
already keeps them away), unless the extender ranks all pods (``rank_all_pods``; setting ``rank_all_pods``, CLI
``--rank-all-pods``): then the scheduler configuration drops ``managedResources``, kube-scheduler calls the
extender for every pod, and pods without GPU requests get our policy's one node too. That is what keeps the
policy's result on GPU nodes shared with CPU-only pods: on the trace replay, CPU-only pods left to kube-scheduler's
default scoring (LeastAllocated + BalancedAllocation spread them over every node) cost FGD 5.3 pp and best-fit
7.5 pp of GPU allocation at 130 % load (10 seeds), while ranking them here reproduces the in-process replay
exactly (``bench/trace_replay.py --driver extender --cpu-pods kube|extender``).

A standby replica (or a leader still rebuilding its ledger) answers ``filter`` and ``bind`` with ``Error`` (only
the leader reserves and writes); put the extender Service behind the ``/readyz`` probe so only the serving leader
receives calls.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping

from domain.kube.objects import PodObject
from ports.cluster import ClusterError
from services._shared.logs import fields

from .commit import CommitError
from .decision import NOT_SERVING
from .podjson import PodJsonError, pod_from_json
from .service import SchedulerService

log = logging.getLogger(__name__)

MAX_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``."""

PENDING_PODS_KEPT = 4096
"""Pods remembered between filter and bind (their resourceVersion makes the plan write conditional)."""


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
        except PodJsonError as error:
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
        """``ExtenderBindingArgs`` → ``ExtenderBindingResult``: commit the reservation (plan, then binding); a
        pod without a reservation on that node gets a fresh cycle restricted to it first. Raises
        :class:`ExtenderArgsError` for a malformed body; failures come back in ``Error`` (the reservation and the
        plan annotation already rolled back)."""
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
