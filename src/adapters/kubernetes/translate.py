"""Translation between the official client's V1 models (``kubernetes`` 37.x pydantic, or 28–35) and the domain
value types: nodes, pods, metadata patches, API errors and times (a Lease's and an Event's own models are in
:mod:`.leases` and :mod:`.events`, a Job's in :mod:`.translate_jobs`, a ConfigMap's in :mod:`.configmaps`).

Private to this adapter (house rule 6). Quantities stay strings as the API writes them; times become epoch seconds
(float). ``metav1.MicroTime`` (Lease acquire/renew times) is parsed by kube-apiserver with the strict layout
``2006-01-02T15:04:05.000000Z07:00`` (apimachinery ``micro_time.go``), while ``datetime.isoformat()`` drops the
fraction when it is zero, so Lease times are sent as :class:`MicroTime`, which always writes six digits.
Source of the field names: core/v1 and coordination.k8s.io/v1 API reference.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from domain.kube.objects import (
    ContainerSpec,
    ContainerTermination,
    NodeObject,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodClaim,
    PodObject,
    PodPhase,
    Taint,
    TaintEffect,
    Toleration,
)
from domain.kube.podconditions import PodCondition
from ports.cluster import ClusterError, ConflictError, GoneError, NotFoundError, UnavailableError

from .corejson import pod_phase

MAX_ERROR_DETAIL = 300
"""Characters of a server message kept in an error (server messages can echo whole objects)."""

_ERRORS: dict[int, type[ClusterError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError}


class MicroTime(dt.datetime):
    """A datetime that serialises with exactly six fractional digits (``metav1.MicroTime``'s wire format)."""

    def isoformat(self, sep: str = "T", timespec: str = "microseconds") -> str:
        """RFC 3339 with microseconds whatever ``timespec`` asks for (the client passes none)."""
        return super().isoformat(sep, "microseconds")


def to_epoch(value: dt.datetime | None) -> float | None:
    """Epoch seconds of an API time (naive values are taken as UTC), or None."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def to_microtime(epoch: float | None) -> MicroTime | None:
    """A :class:`MicroTime` in UTC for epoch seconds, or None."""
    return None if epoch is None else MicroTime.fromtimestamp(epoch, tz=dt.UTC)


def cluster_error(exc: ApiException, what: str) -> ClusterError:
    """The port error for an :class:`ApiException`: 404/409/410 → NotFound/Conflict/Gone, status 0 (the
    client's own TLS failures: no HTTP answer) → UnavailableError, anything else a :class:`ClusterError`
    carrying the HTTP status. The server's message is truncated to
    :data:`MAX_ERROR_DETAIL` characters."""
    status = int(exc.status or 0)
    detail = str(exc.reason or "")
    if exc.body:
        try:
            body = json.loads(exc.body)
            detail = str(body.get("message", detail)) if isinstance(body, dict) else detail
        except ValueError:
            detail = str(exc.body)
    if status == 0:
        return UnavailableError(f"{what}: API server unavailable: {detail[:MAX_ERROR_DETAIL]}")
    error = _ERRORS.get(status, ClusterError)(f"{what}: HTTP {status}: {detail[:MAX_ERROR_DETAIL]}")
    error.status = status
    return error


# ---------------------------------------------------------------------------------------------- nodes
def taint_from_v1(taint: client.V1Taint) -> Taint:
    """Domain taint of a ``V1Taint``. Raises ValueError for an unknown effect."""
    return Taint(key=taint.key, effect=TaintEffect(taint.effect), value=taint.value or "")


def node_from_v1(node: client.V1Node) -> NodeObject:
    """Domain node of a ``V1Node`` (allocatable from ``status.allocatable``)."""
    meta = node.metadata or client.V1ObjectMeta()
    spec = node.spec or client.V1NodeSpec()
    status = node.status or client.V1NodeStatus()
    return NodeObject(
        name=meta.name or "",
        uid=meta.uid or "",
        resource_version=meta.resource_version or "",
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        allocatable=dict(status.allocatable or {}),
        taints=tuple(taint_from_v1(t) for t in spec.taints or ()),
        unschedulable=bool(spec.unschedulable),
    )


def node_to_v1(node: NodeObject) -> client.V1Node:
    """A ``V1Node`` to create: metadata, taints, unschedulable, and ``allocatable`` as allocatable and capacity."""
    return client.V1Node(
        api_version="v1",
        kind="Node",
        metadata=client.V1ObjectMeta(
            name=node.name, labels=dict(node.labels) or None, annotations=dict(node.annotations) or None
        ),
        spec=client.V1NodeSpec(
            taints=[client.V1Taint(key=t.key, effect=t.effect.value, value=t.value or None) for t in node.taints]
            or None,
            unschedulable=node.unschedulable or None,
        ),
        status=client.V1NodeStatus(allocatable=dict(node.allocatable) or None, capacity=dict(node.allocatable) or None),
    )


# ---------------------------------------------------------------------------------------------- pods
def _toleration_from_v1(tol: client.V1Toleration) -> Toleration:
    return Toleration(
        key=tol.key or "",
        operator=tol.operator or "Equal",
        value=tol.value or "",
        effect=TaintEffect(tol.effect) if tol.effect else None,
    )


def _toleration_to_v1(tol: Toleration) -> client.V1Toleration:
    return client.V1Toleration(
        key=tol.key or None,
        operator=tol.operator or None,
        value=tol.value or None,
        effect=tol.effect.value if tol.effect is not None else None,
    )


def _requirements_from_v1(
    reqs: Sequence[client.V1NodeSelectorRequirement] | None,
) -> tuple[NodeSelectorRequirement, ...]:
    return tuple(
        NodeSelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values or ())) for r in reqs or ()
    )


def _requirements_to_v1(reqs: Sequence[NodeSelectorRequirement]) -> list[client.V1NodeSelectorRequirement] | None:
    return [
        client.V1NodeSelectorRequirement(key=r.key, operator=r.operator, values=list(r.values) or None) for r in reqs
    ] or None


def _required_terms_from_v1(affinity: client.V1Affinity | None) -> tuple[NodeSelectorTerm, ...]:
    node_affinity = affinity.node_affinity if affinity is not None else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    if required is None:
        return ()
    return tuple(
        NodeSelectorTerm(
            match_expressions=_requirements_from_v1(term.match_expressions),
            match_fields=_requirements_from_v1(term.match_fields),
        )
        for term in required.node_selector_terms
    )


def _affinity_to_v1(terms: Sequence[NodeSelectorTerm]) -> client.V1Affinity | None:
    if not terms:
        return None
    selector = client.V1NodeSelector(
        node_selector_terms=[
            client.V1NodeSelectorTerm(
                match_expressions=_requirements_to_v1(t.match_expressions),
                match_fields=_requirements_to_v1(t.match_fields),
            )
            for t in terms
        ]
    )
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(required_during_scheduling_ignored_during_execution=selector)
    )


def _container_from_v1(container: client.V1Container, *, init: bool) -> ContainerSpec:
    resources = container.resources or client.V1ResourceRequirements()
    return ContainerSpec(
        name=container.name,
        requests=dict(resources.requests or {}),
        limits=dict(resources.limits or {}),
        init=init,
    )


def _container_to_v1(container: ContainerSpec, image: str) -> client.V1Container:
    return client.V1Container(
        name=container.name,
        image=image,
        resources=client.V1ResourceRequirements(
            requests=dict(container.requests) or None, limits=dict(container.limits) or None
        ),
    )


def _terminations_from_v1(status: client.V1PodStatus) -> tuple[ContainerTermination, ...]:
    out = []
    for container in status.container_statuses or ():
        ended = container.state.terminated if container.state is not None else None
        if ended is not None:
            out.append(ContainerTermination(container.name or "", ended.exit_code or 0, ended.reason or "",
                                            ended.message or ""))
    return tuple(out)


def _conditions_from_v1(status: client.V1PodStatus) -> tuple[PodCondition, ...]:
    return tuple(PodCondition(c.type or "", c.status or "", c.reason or "", c.message or "",
                              to_epoch(c.last_transition_time)) for c in status.conditions or ())


def pod_condition_patch(condition: PodCondition, order: Sequence[str], *, resource_version: str) -> dict[str, object]:
    """A strategic merge patch of a pod's ``status.conditions`` writing ``condition`` (the list merges by ``type``:
    the others stay) with ``$setElementOrder`` listing the types as ``order`` (the server would otherwise put a new
    entry first; ``CreateTwoWayMergePatch`` writes the same directive), ``resource_version`` as its precondition;
    the transition time in RFC 3339 seconds, omitted when None."""
    entry: dict[str, object] = {"type": condition.type, "status": condition.status, "reason": condition.reason,
                                "message": condition.message}
    if condition.last_transition_time is not None:
        entry["lastTransitionTime"] = dt.datetime.fromtimestamp(
            int(condition.last_transition_time), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"resourceVersion": resource_version},
            "status": {"$setElementOrder/conditions": [{"type": t} for t in order], "conditions": [entry]}}


def pod_status_patch(phase: PodPhase, terminations: Sequence[ContainerTermination]) -> dict[str, object]:
    """A JSON merge patch of a pod's ``status``: the phase and, with ``terminations``, ``containerStatuses`` as
    those containers, terminated (the fields the API requires: not ready, no restart, no image)."""
    status: dict[str, object] = {"phase": phase.value}
    if terminations:
        status["containerStatuses"] = [
            {"name": t.container, "ready": False, "restartCount": 0, "image": "", "imageID": "",
             "state": {"terminated": {"exitCode": t.exit_code, "reason": t.reason, "message": t.message}}}
            for t in terminations]
    return {"status": status}


def _claim_field(claim: Any, field: str) -> str:
    """``field`` of a ``V1PodResourceClaim``: flat since client 31 (API 1.31), under ``source`` before it. A client
    older than the server's API drops the flat fields when it builds its model, so its pods read here name no claim
    (the informers read pods as JSON, :mod:`.corejson`, which has them)."""
    value = getattr(claim, field, None)
    if value is None:
        value = getattr(getattr(claim, "source", None), field, None)
    return str(value or "")


def _pod_claims_from_v1(spec: client.V1PodSpec, status: client.V1PodStatus) -> tuple[PodClaim, ...]:
    generated = {s.name: s.resource_claim_name or "" for s in getattr(status, "resource_claim_statuses", None) or ()}
    return tuple(PodClaim(c.name, _claim_field(c, "resource_claim_name"),
                          _claim_field(c, "resource_claim_template_name"), generated.get(c.name))
                 for c in getattr(spec, "resource_claims", None) or ())


def _claim_served_from_v1(status: client.V1PodStatus) -> tuple[tuple[str, str], ...]:
    served = getattr(status, "extended_resource_claim_status", None)  # None too before client 34
    return tuple((m.container_name or "", m.resource_name or "") for m in getattr(served, "request_mappings", None)
                 or ())


def pod_from_v1(pod: client.V1Pod) -> PodObject:
    """Domain pod of a ``V1Pod``: init containers first (flagged ``init``), then the app containers; the terminated
    app containers' states; the status conditions."""
    meta = pod.metadata or client.V1ObjectMeta()
    spec = pod.spec or client.V1PodSpec(containers=[])
    status = pod.status or client.V1PodStatus()
    containers = tuple(_container_from_v1(c, init=True) for c in spec.init_containers or ()) + tuple(
        _container_from_v1(c, init=False) for c in spec.containers
    )
    return PodObject(
        uid=meta.uid or "",
        namespace=meta.namespace or "",
        name=meta.name or "",
        containers=containers,
        node_name=spec.node_name or "",
        scheduler_name=spec.scheduler_name or "default-scheduler",
        phase=pod_phase(status.phase),
        resource_version=meta.resource_version or "",
        deletion_timestamp=to_epoch(meta.deletion_timestamp),
        annotations=dict(meta.annotations or {}),
        labels=dict(meta.labels or {}),
        node_selector=dict(spec.node_selector or {}),
        tolerations=tuple(_toleration_from_v1(t) for t in spec.tolerations or ()),
        required_node_affinity=_required_terms_from_v1(spec.affinity),
        terminations=_terminations_from_v1(status),
        priority=spec.priority or 0,
        preemption_policy=spec.preemption_policy or "PreemptLowerPriority",
        nominated_node_name=status.nominated_node_name or "",
        resource_claims=_pod_claims_from_v1(spec, status),
        claim_served=_claim_served_from_v1(status),
        conditions=_conditions_from_v1(status),
    )


def pod_to_v1(pod: PodObject, *, image: str) -> client.V1Pod:
    """A ``V1Pod`` to create; every container runs ``image`` (the domain has no images: tests, local cluster)."""
    return client.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=client.V1ObjectMeta(
            name=pod.name,
            namespace=pod.namespace,
            labels=dict(pod.labels) or None,
            annotations=dict(pod.annotations) or None,
        ),
        spec=client.V1PodSpec(
            containers=[_container_to_v1(c, image) for c in pod.containers if not c.init],
            init_containers=[_container_to_v1(c, image) for c in pod.containers if c.init] or None,
            node_name=pod.node_name or None,
            scheduler_name=pod.scheduler_name or None,
            node_selector=dict(pod.node_selector) or None,
            tolerations=[_toleration_to_v1(t) for t in pod.tolerations] or None,
            affinity=_affinity_to_v1(pod.required_node_affinity),
        ),
    )


def metadata_patch(
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> dict[str, object]:
    """A JSON merge patch (RFC 7386) body for metadata: null deletes a key; ``resourceVersion`` makes it
    conditional (409 when stale)."""
    meta: dict[str, object] = {}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}
