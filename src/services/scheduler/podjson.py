"""The ``Pod`` of a kube-scheduler extender call (raw core/v1 Pod JSON) as a :class:`PodObject`.

kube-scheduler sends the whole ``v1.Pod`` with its JSON (camelCase) field names (``ExtenderArgs.Pod``,
k8s.io/kube-scheduler/extender/v1). Only the fields :class:`PodObject` carries are read; everything else is ignored, so
pods from newer API versions still translate. This is a pure function over dicts rather than a detour through the
official client's models (``kubernetes`` 37.x models forbid unknown fields and may only be imported by
``adapters.kubernetes``).

Source of the field names: core/v1 API reference (Pod, Container, ResourceRequirements, Toleration, NodeAffinity).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from domain.kube.objects import (
    ContainerSpec,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodObject,
    PodPhase,
    TaintEffect,
    Toleration,
)


class PodJsonError(ValueError):
    """The pod JSON has a field of the wrong type; the message names the field (``spec.containers[0].name``)."""


def _object(path: str, value: object) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodJsonError(f"{path}: expected an object, got {type(value).__name__}")
    return value


def _list(path: str, value: object) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodJsonError(f"{path}: expected an array, got {type(value).__name__}")
    return value


def _str(path: str, value: object, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise PodJsonError(f"{path}: expected a string, got {type(value).__name__}")
    return value


def _strings(path: str, value: object) -> dict[str, str]:
    """A string map; numbers are accepted as values (quantities are strings on the wire, but be lenient)."""
    out: dict[str, str] = {}
    for key, item in _object(path, value).items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise PodJsonError(f"{path}.{key}: expected a string, got {type(item).__name__}")
        out[str(key)] = str(item)
    return out


def _time(path: str, value: object) -> float | None:
    text = _str(path, value)
    if not text:
        return None
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PodJsonError(f"{path}: {text[:40]!r} is not an RFC 3339 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


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
        raise PodJsonError(f"{path}.effect: unknown taint effect {effect[:40]!r}") from None
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


def _phase(text: str) -> PodPhase:
    try:
        return PodPhase(text or "Pending")
    except ValueError:
        return PodPhase.UNKNOWN


def pod_from_json(data: object) -> PodObject:
    """A :class:`PodObject` from a raw core/v1 Pod JSON object (init containers first, flagged ``init``).

    A missing namespace reads as ``default``, a missing schedulerName as ``default-scheduler``, an unknown phase
    as ``Unknown``. Raises :class:`PodJsonError` naming the field for a value of the wrong type, a malformed
    ``deletionTimestamp`` or an unknown toleration effect.
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
        phase=_phase(_str("status.phase", status.get("phase"))),
        resource_version=_str("metadata.resourceVersion", meta.get("resourceVersion")),
        deletion_timestamp=_time("metadata.deletionTimestamp", meta.get("deletionTimestamp")),
        annotations=_strings("metadata.annotations", meta.get("annotations")),
        labels=_strings("metadata.labels", meta.get("labels")),
        node_selector=_strings("spec.nodeSelector", spec.get("nodeSelector")),
        tolerations=tuple(_toleration(f"spec.tolerations[{i}]", t)
                          for i, t in enumerate(_list("spec.tolerations", spec.get("tolerations")))),
        required_node_affinity=_required_terms("spec.affinity", spec.get("affinity")),
    )
