"""Raw core/v1 Pod and Node JSON (decoded, camelCase field names) as :class:`PodObject` and :class:`NodeObject`.

Read wherever the API's own JSON arrives: the ``Pod`` of a kube-scheduler extender call (``ExtenderArgs.Pod``,
k8s.io/kube-scheduler/extender/v1) and the Kubernetes adapter's LISTs and watches, which skip the official client's
model deserialisation. Only the fields the domain objects carry are read; everything else is ignored, so objects
from newer API versions still translate. Invariant: for what the API server sends, the result equals the adapter's
translation of the client's models (``adapters.kubernetes.translate``), field for field.

Source of the field names: core/v1 API reference (Pod, Container, ResourceRequirements, Toleration, NodeAffinity,
ContainerStatus, PodCondition, Node, NodeSpec, Taint, NodeStatus).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

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


class CoreJsonError(ValueError):
    """The JSON has a field of the wrong type; the message names the field (``spec.containers[0].name``) and shows
    the value refused (:func:`_got`)."""


GOT_CHARS = 60
"""Longest rendering of a refused value in a message (longer ones are cut, marked with ``…``)."""


def shown(value: object, limit: int = GOT_CHARS) -> str:
    """``value`` as JSON (as the client sent it; ``repr`` when it is not JSON), cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}…"


def _got(value: object) -> str:
    """The refused ``value`` for a message: its type and itself (:func:`shown`)."""
    return f"{type(value).__name__} {shown(value)}"


def _object(path: str, value: object) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CoreJsonError(f"{path}: expected an object, got {_got(value)}")
    return value


def _list(path: str, value: object) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CoreJsonError(f"{path}: expected an array, got {_got(value)}")
    return value


def _str(path: str, value: object, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise CoreJsonError(f"{path}: expected a string, got {_got(value)}")
    return value


def _strings(path: str, value: object) -> dict[str, str]:
    """A string map; numbers are accepted as values (quantities are strings on the wire, but be lenient)."""
    out: dict[str, str] = {}
    for key, item in _object(path, value).items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise CoreJsonError(f"{path}.{key}: expected a string, got {_got(item)}")
        out[str(key)] = str(item)
    return out


def _time(path: str, value: object) -> float | None:
    text = _str(path, value)
    if not text:
        return None
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CoreJsonError(f"{path}: {text[:40]!r} is not an RFC 3339 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def _conditions(path: str, value: object) -> tuple[PodCondition, ...]:
    out = []
    for i, raw in enumerate(_list(path, value)):
        item = _object(f"{path}[{i}]", raw)
        out.append(PodCondition(_str(f"{path}[{i}].type", item.get("type")),
                                _str(f"{path}[{i}].status", item.get("status")),
                                _str(f"{path}[{i}].reason", item.get("reason")),
                                _str(f"{path}[{i}].message", item.get("message")),
                                _time(f"{path}[{i}].lastTransitionTime", item.get("lastTransitionTime"))))
    return tuple(out)


def _containers(path: str, value: object, *, init: bool) -> list[ContainerSpec]:
    out = []
    for i, raw in enumerate(_list(path, value)):
        item = _object(f"{path}[{i}]", raw)
        resources = _object(f"{path}[{i}].resources", item.get("resources"))
        out.append(ContainerSpec(
            name=_str(f"{path}[{i}].name", item.get("name")),
            requests=_strings(f"{path}[{i}].resources.requests", resources.get("requests")),
            limits=_strings(f"{path}[{i}].resources.limits", resources.get("limits")),
            init=init,
        ))
    return out


def _toleration(path: str, raw: object) -> Toleration:
    item = _object(path, raw)
    effect = _str(f"{path}.effect", item.get("effect"))
    try:
        parsed = TaintEffect(effect) if effect else None
    except ValueError:
        raise CoreJsonError(f"{path}.effect: unknown taint effect {effect[:40]!r}") from None
    return Toleration(
        key=_str(f"{path}.key", item.get("key")),
        operator=_str(f"{path}.operator", item.get("operator"), "Equal"),
        value=_str(f"{path}.value", item.get("value")),
        effect=parsed,
    )


def _requirements(path: str, value: object) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, raw in enumerate(_list(path, value)):
        item = _object(f"{path}[{i}]", raw)
        values = tuple(_str(f"{path}[{i}].values[{j}]", v) for j, v in enumerate(_list(f"{path}[{i}].values",
                                                                                       item.get("values"))))
        out.append(NodeSelectorRequirement(
            key=_str(f"{path}[{i}].key", item.get("key")),
            operator=_str(f"{path}[{i}].operator", item.get("operator")),
            values=values,
        ))
    return tuple(out)


def _required_terms(path: str, affinity: object) -> tuple[NodeSelectorTerm, ...]:
    node_affinity = _object(f"{path}.nodeAffinity", _object(path, affinity).get("nodeAffinity"))
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    required = _object(f"{path}.nodeAffinity.{key}", node_affinity.get(key))
    terms_path = f"{path}.nodeAffinity.{key}.nodeSelectorTerms"
    terms = []
    for i, raw in enumerate(_list(terms_path, required.get("nodeSelectorTerms"))):
        term = _object(f"{terms_path}[{i}]", raw)
        terms.append(NodeSelectorTerm(
            match_expressions=_requirements(f"{terms_path}[{i}].matchExpressions", term.get("matchExpressions")),
            match_fields=_requirements(f"{terms_path}[{i}].matchFields", term.get("matchFields")),
        ))
    return tuple(terms)


def _int(path: str, value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise CoreJsonError(f"{path}: expected an integer, got {_got(value)}")
    return value


def _terminations(path: str, value: object) -> tuple[ContainerTermination, ...]:
    out = []
    for i, raw in enumerate(_list(path, value)):
        item = _object(f"{path}[{i}]", raw)
        state = _object(f"{path}[{i}].state", item.get("state"))
        if state.get("terminated") is None:
            continue
        ended = _object(f"{path}[{i}].state.terminated", state.get("terminated"))
        at = f"{path}[{i}].state.terminated"
        out.append(ContainerTermination(_str(f"{path}[{i}].name", item.get("name")),
                                        _int(f"{at}.exitCode", ended.get("exitCode")),
                                        _str(f"{at}.reason", ended.get("reason")),
                                        _str(f"{at}.message", ended.get("message"))))
    return tuple(out)


def _taint(path: str, raw: object) -> Taint:
    item = _object(path, raw)
    effect = _str(f"{path}.effect", item.get("effect"))
    try:
        parsed = TaintEffect(effect)
    except ValueError:
        raise CoreJsonError(f"{path}.effect: unknown taint effect {effect[:40]!r}") from None
    return Taint(key=_str(f"{path}.key", item.get("key")), effect=parsed,
                 value=_str(f"{path}.value", item.get("value")))


def _pod_claims(spec: Mapping[str, object], status: Mapping[str, object]) -> tuple[PodClaim, ...]:
    """``spec.resourceClaims`` with the generated names of ``status.resourceClaimStatuses`` (:class:`PodClaim`)."""
    generated: dict[str, str] = {}
    for i, raw in enumerate(_list("status.resourceClaimStatuses", status.get("resourceClaimStatuses"))):
        item = _object(f"status.resourceClaimStatuses[{i}]", raw)
        generated[_str(f"status.resourceClaimStatuses[{i}].name", item.get("name"))] = _str(
            f"status.resourceClaimStatuses[{i}].resourceClaimName", item.get("resourceClaimName"))
    claims = []
    for i, raw in enumerate(_list("spec.resourceClaims", spec.get("resourceClaims"))):
        item = _object(f"spec.resourceClaims[{i}]", raw)
        name = _str(f"spec.resourceClaims[{i}].name", item.get("name"))
        claims.append(PodClaim(name, _str(f"spec.resourceClaims[{i}].resourceClaimName", item.get("resourceClaimName")),
                               _str(f"spec.resourceClaims[{i}].resourceClaimTemplateName",
                                    item.get("resourceClaimTemplateName")), generated.get(name)))
    return tuple(claims)


def _claim_served(status: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    """``status.extendedResourceClaimStatus.requestMappings`` as ``(containerName, resourceName)`` pairs."""
    path = "status.extendedResourceClaimStatus"
    found = status.get("extendedResourceClaimStatus")
    if found is None:
        return ()
    served = []
    for i, raw in enumerate(_list(f"{path}.requestMappings", _object(path, found).get("requestMappings"))):
        item = _object(f"{path}.requestMappings[{i}]", raw)
        served.append((_str(f"{path}.requestMappings[{i}].containerName", item.get("containerName")),
                       _str(f"{path}.requestMappings[{i}].resourceName", item.get("resourceName"))))
    return tuple(served)


def pod_phase(text: str | None) -> PodPhase:
    """The phase named ``status.phase`` (``Pending`` when empty, ``Unknown`` when not a phase we know): the
    reading shared with the client-model path (:func:`.translate.pod_from_v1`)."""
    try:
        return PodPhase(text or "Pending")
    except ValueError:
        return PodPhase.UNKNOWN


def pod_from_json(data: object) -> PodObject:
    """A :class:`PodObject` from a raw core/v1 Pod JSON object (init containers first, flagged ``init``).

    A missing namespace reads as ``default``, a missing schedulerName as ``default-scheduler``, an unknown phase
    as ``Unknown``; ``terminations`` are the ``status.containerStatuses`` whose state is ``terminated``. Raises
    :class:`CoreJsonError` naming the field for a value of the wrong type, a malformed ``deletionTimestamp`` or an
    unknown toleration effect.
    """
    pod = _object("Pod", data)
    meta = _object("metadata", pod.get("metadata"))
    spec = _object("spec", pod.get("spec"))
    status = _object("status", pod.get("status"))
    containers = (*_containers("spec.initContainers", spec.get("initContainers"), init=True),
                  *_containers("spec.containers", spec.get("containers"), init=False))
    return PodObject(
        uid=_str("metadata.uid", meta.get("uid")),
        namespace=_str("metadata.namespace", meta.get("namespace"), "default") or "default",
        name=_str("metadata.name", meta.get("name")),
        containers=containers,
        node_name=_str("spec.nodeName", spec.get("nodeName")),
        scheduler_name=_str("spec.schedulerName", spec.get("schedulerName")) or "default-scheduler",
        phase=pod_phase(_str("status.phase", status.get("phase"))),
        resource_version=_str("metadata.resourceVersion", meta.get("resourceVersion")),
        deletion_timestamp=_time("metadata.deletionTimestamp", meta.get("deletionTimestamp")),
        annotations=_strings("metadata.annotations", meta.get("annotations")),
        labels=_strings("metadata.labels", meta.get("labels")),
        node_selector=_strings("spec.nodeSelector", spec.get("nodeSelector")),
        tolerations=tuple(_toleration(f"spec.tolerations[{i}]", t)
                          for i, t in enumerate(_list("spec.tolerations", spec.get("tolerations")))),
        required_node_affinity=_required_terms("spec.affinity", spec.get("affinity")),
        terminations=_terminations("status.containerStatuses", status.get("containerStatuses")),
        priority=_int("spec.priority", spec.get("priority")),
        preemption_policy=_str("spec.preemptionPolicy", spec.get("preemptionPolicy")) or "PreemptLowerPriority",
        nominated_node_name=_str("status.nominatedNodeName", status.get("nominatedNodeName")),
        resource_claims=_pod_claims(spec, status),
        claim_served=_claim_served(status),
        conditions=_conditions("status.conditions", status.get("conditions")),
    )


def node_from_json(data: object) -> NodeObject:
    """A :class:`NodeObject` from a raw core/v1 Node JSON object (allocatable from ``status.allocatable``).

    Raises :class:`CoreJsonError` naming the field for a value of the wrong type or an unknown taint effect."""
    node = _object("Node", data)
    meta = _object("metadata", node.get("metadata"))
    spec = _object("spec", node.get("spec"))
    status = _object("status", node.get("status"))
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise CoreJsonError(f"spec.unschedulable: expected a boolean, got {_got(unschedulable)}")
    return NodeObject(
        name=_str("metadata.name", meta.get("name")),
        uid=_str("metadata.uid", meta.get("uid")),
        resource_version=_str("metadata.resourceVersion", meta.get("resourceVersion")),
        labels=_strings("metadata.labels", meta.get("labels")),
        annotations=_strings("metadata.annotations", meta.get("annotations")),
        allocatable=_strings("status.allocatable", status.get("allocatable")),
        taints=tuple(_taint(f"spec.taints[{i}]", t) for i, t in enumerate(_list("spec.taints", spec.get("taints")))),
        unschedulable=bool(unschedulable),
    )
