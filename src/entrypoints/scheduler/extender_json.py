"""The extender verbs' HTTP JSON (``k8s.io/kube-scheduler/extender/v1``: Go field names, no JSON tags) over
:class:`services.scheduler.extender.Extender`.

* ``filter``: ``ExtenderArgs`` → ``ExtenderFilterResult``. The candidates come as ``NodeNames`` (a
  ``nodeCacheCapable`` extender) or as a ``NodeList`` in ``Nodes``; the reply echoes the same form, a NodeList
  keeping the passed node objects as sent.
* ``prioritize``: ``ExtenderArgs`` → ``HostPriorityList`` (``Host``, ``Score``).
* ``preempt``: ``ExtenderPreemptionArgs`` (``Pod``; ``NodeNameToMetaVictims``: node → ``MetaVictims`` {``Pods``:
  [{``UID``}], ``NumPDBViolations``} from a ``nodeCacheCapable`` kube-scheduler, else ``NodeNameToVictims``: node →
  ``Victims`` {``Pods``: [core/v1 Pod], ``NumPDBViolations``}) → ``ExtenderPreemptionResult``
  (``NodeNameToMetaVictims`` only, whichever form came: kube-scheduler reads no other);
* ``bind``: ``ExtenderBindingArgs`` (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``) →
  ``ExtenderBindingResult`` (``Error``, empty on success).

``ExtenderArgs.Pod`` is a core/v1 Pod read by :func:`adapters.kubernetes.corejson.pod_from_json`. Invariant: each
verb decodes its JSON once into domain values, calls the service's verb once and encodes its answer; a body that
is not what kube-scheduler sends raises :class:`ExtenderArgsError` (the HTTP layer answers 400).
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.kubernetes.corejson import CoreJsonError, pod_from_json
from adapters.kubernetes.corejson import shown as show_json
from domain.kube.objects import PodObject
from services.scheduler.extender import Extender
from services.scheduler.preemption import NodeVictims


class ExtenderArgsError(ValueError):
    """The request body is not what kube-scheduler sends; the HTTP layer answers 400. The message names the field
    (its path in the body) and shows the value refused (:func:`shown`)."""


SHOWN_CHARS = 80
"""Longest rendering of a refused value in a message (longer ones are cut, marked with ``…``)."""


def shown(value: object) -> str:
    """``value`` as JSON (what the client sent), cut to :data:`SHOWN_CHARS` characters."""
    return show_json(value, SHOWN_CHARS)


def _refuse(path: str, expected: str, value: object) -> ExtenderArgsError:
    return ExtenderArgsError(f"{path} must be {expected}, got {shown(value)}")


def _or(value: object, default: object) -> object:
    """``value``, or ``default`` when it is absent (JSON null): any other value is checked, never replaced."""
    return default if value is None else value


def _mapping(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _refuse(what, "a JSON object", value)
    return value


def _pod(args: Mapping[str, object]) -> PodObject:
    try:
        return pod_from_json(args.get("Pod"))
    except CoreJsonError as error:
        raise ExtenderArgsError(f"Pod: {error}") from None


def _candidates(args: Mapping[str, object]) -> tuple[list[str], list[Mapping[str, object]] | None]:
    """Node names and, when sent as a NodeList, the node objects (to echo back the kept ones)."""
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise _refuse("NodeNames", "an array of strings", names)
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise _refuse(f"NodeNames[{i}]", "a string", name)
        return list(names), None
    items_raw = _or(_mapping(_or(args.get("Nodes"), {}), "Nodes").get("items"), [])
    if not isinstance(items_raw, list):
        raise _refuse("Nodes.items", "an array", items_raw)
    items = [_mapping(item, f"Nodes.items[{i}]") for i, item in enumerate(items_raw)]
    out = []
    for i, item in enumerate(items):
        name = _mapping(_or(item.get("metadata"), {}), f"Nodes.items[{i}].metadata").get("name")
        if not isinstance(name, str):
            raise _refuse(f"Nodes.items[{i}].metadata.name", "a string", name)
        out.append(name)
    return out, items


def _victim_uid(path: str, item: object, *, meta: bool) -> str:
    entry = _mapping(item, path)
    field = "UID" if meta else "metadata.uid"
    uid = entry.get("UID") if meta else _mapping(_or(entry.get("metadata"), {}), f"{path}.metadata").get("uid")
    if not isinstance(uid, str) or not uid:
        raise _refuse(f"{path}.{field}", "a non-empty string", uid)
    return uid


def _proposals(args: Mapping[str, object]) -> dict[str, NodeVictims]:
    """The victims kube-scheduler proposes per node, from ``NodeNameToMetaVictims`` or ``NodeNameToVictims``."""
    meta = args.get("NodeNameToMetaVictims") is not None
    key = "NodeNameToMetaVictims" if meta else "NodeNameToVictims"
    out: dict[str, NodeVictims] = {}
    given = args.get(key)
    for node, raw in _mapping({} if given is None else given, key).items():
        victims = _mapping({} if raw is None else raw, f"{key}[{node}]")
        pods = victims.get("Pods")
        pods = [] if pods is None else pods
        if not isinstance(pods, list):
            raise _refuse(f"{key}[{node}].Pods", "an array", pods)
        count = _or(victims.get("NumPDBViolations"), 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise _refuse(f"{key}[{node}].NumPDBViolations", "a non-negative integer", count)
        uids = tuple(_victim_uid(f"{key}[{node}].Pods[{i}]", item, meta=meta) for i, item in enumerate(pods))
        out[node] = NodeVictims(uids, count)
    return out


class ExtenderJson:
    """The four verbs of ``extender`` over decoded JSON bodies (module docstring): each takes the body and
    returns the JSON-serialisable reply; :class:`ExtenderArgsError` means a malformed body."""

    def __init__(self, extender: Extender) -> None:
        self.extender = extender

    def filter(self, body: object) -> dict[str, object]:
        """``ExtenderArgs`` → ``ExtenderFilterResult``. Raises :class:`ExtenderArgsError` for a malformed body;
        scheduling problems go into ``FailedNodes``/``Error``."""
        args = _mapping(body, "ExtenderArgs")
        pod = _pod(args)
        names, items = _candidates(args)
        result = self.extender.filter(pod, names)
        reply: dict[str, object] = {"FailedNodes": dict(result.failed), "Error": result.error}
        if items is None:
            reply["NodeNames"] = list(result.passed)
        else:
            keep = set(result.passed)
            reply["Nodes"] = {"items": [item for item, name in zip(items, names, strict=True) if name in keep]}
        return reply

    def prioritize(self, body: object) -> list[dict[str, object]]:
        """``ExtenderArgs`` → ``HostPriorityList``. Raises :class:`ExtenderArgsError` for a malformed body."""
        args = _mapping(body, "ExtenderArgs")
        pod = _pod(args)
        names, _ = _candidates(args)
        return [{"Host": name, "Score": score} for name, score in self.extender.prioritize(pod, names)]

    def preempt(self, body: object) -> dict[str, object]:
        """``ExtenderPreemptionArgs`` → ``ExtenderPreemptionResult``. Raises :class:`ExtenderArgsError` for a
        malformed body."""
        args = _mapping(body, "ExtenderPreemptionArgs")
        pod = _pod(args)
        answer = self.extender.preempt(pod, _proposals(args))
        return {"NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in victims.uids], "NumPDBViolations": victims.pdb_violations}
            for node, victims in answer.items()}}

    def bind(self, body: object) -> dict[str, object]:
        """``ExtenderBindingArgs`` → ``ExtenderBindingResult``. Raises :class:`ExtenderArgsError` for a malformed
        body; failures come back in ``Error``."""
        args = _mapping(body, "ExtenderBindingArgs")
        for key in ("PodName", "PodNamespace", "Node"):
            value = args.get(key)
            if not isinstance(value, str) or not value:
                raise _refuse(key, "a non-empty string", value)
        uid = args.get("PodUID")
        if uid is not None and not isinstance(uid, str):
            raise _refuse("PodUID", "a string", uid)
        name, namespace, node = (str(args[k]) for k in ("PodName", "PodNamespace", "Node"))
        return {"Error": self.extender.bind(namespace, name, uid or "", node)}
