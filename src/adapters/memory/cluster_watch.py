"""Watch machinery of :class:`~adapters.memory.cluster.InMemoryCluster`: pod field selectors, label selectors,
the bounded per-resource change history, and how a filtered watcher sees a change.

Mirrors kube-apiserver: field selectors as in apimachinery ``fields.ParseSelector`` over the pod registry's
``ToSelectableFields``; label selectors as in apimachinery ``labels.Parse``; the history as the watch cache's
window (``storage/cacher/watch_cache.go``: a watch from an RV older than the window is 410 "too old resource
version"); the transition rules as ``cacheWatcher.convertToWatchEvent`` (``storage/cacher/cacher.go``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.slices import ResourceSlice
from domain.kube.objects import EventType, JobObject, NodeObject, PodObject, WatchEvent
from ports.cluster import ClusterError

_O = TypeVar("_O", PodObject, NodeObject, JobObject, ClaimAllocation, ResourceSlice)
PodMatcher = Callable[[PodObject], bool]
LabelMatcher = Callable[[Mapping[str, str]], bool]

_POD_FIELDS: dict[str, Callable[[PodObject], str]] = {
    "metadata.name": lambda pod: pod.name,
    "metadata.namespace": lambda pod: pod.namespace,
    "spec.nodeName": lambda pod: pod.node_name,
    "spec.schedulerName": lambda pod: pod.scheduler_name,
    "status.phase": lambda pod: pod.phase.value,
}


def status_error(status: int, message: str) -> ClusterError:
    """A :class:`ClusterError` carrying HTTP ``status`` (400 bad request, 422 invalid) and ``message``."""
    error = ClusterError(message)
    error.status = status
    return error


def _split_term(part: str) -> tuple[str, str, bool]:
    for operator, negate in (("!=", True), ("==", False), ("=", False)):
        if operator in part:
            field, _, value = part.partition(operator)
            return field, value, negate
    raise status_error(400, f"invalid field selector term {part[:80]!r}")


def parse_pod_field_selector(text: str) -> PodMatcher:
    """A predicate for a pod field selector such as ``spec.schedulerName=s,spec.nodeName=`` (terms ANDed).

    Fields ``metadata.name``, ``metadata.namespace``, ``spec.nodeName``, ``spec.schedulerName``, ``status.phase``
    with ``=``, ``==``, ``!=``; an empty selector matches every pod. Raises :class:`ClusterError` with
    status 400 for anything else (as kube-apiserver does: "field label not supported"). Source: apimachinery
    ``fields.ParseSelector`` and the pod registry's ``ToSelectableFields``.
    """
    terms: list[tuple[Callable[[PodObject], str], str, bool]] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        field, value, negate = _split_term(part)
        getter = _POD_FIELDS.get(field.strip())
        if getter is None:
            raise status_error(400, f"field label not supported: {field.strip()[:80]}")
        terms.append((getter, value.strip(), negate))

    def matches(pod: PodObject) -> bool:
        return all((getter(pod) == value) != negate for getter, value, negate in terms)

    return matches


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


def _split_selector(text: str) -> list[str]:
    """Comma-separated terms, commas inside ``( … )`` kept (set-based terms)."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
            continue
        depth += (char == "(") - (char == ")")
        current.append(char)
    terms.append("".join(current))
    return [t.strip() for t in terms if t.strip()]


def _checked(key: str, values: list[str], text: str) -> tuple[str, list[str]]:
    if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise status_error(400, f"invalid label key {key[:80]!r} in selector {text[:120]!r}")
    for value in values:
        if not _LABEL_VALUE.match(value) or len(value) > 63:
            raise status_error(400, f"invalid label value {value[:80]!r} in selector {text[:120]!r}")
    return key, values


def _label_term(part: str, text: str) -> LabelMatcher:
    found = _SET_TERM.match(part)
    if found is not None:
        key, values = _checked(found.group(1), [v.strip() for v in found.group(3).split(",")], text)
        allowed = frozenset(values)
        if found.group(2) == "in":
            return lambda labels: labels.get(key) in allowed
        return lambda labels: labels.get(key) not in allowed
    for operator, negate in (("!=", True), ("==", False), ("=", False)):
        if operator in part:
            raw_key, _, raw_value = part.partition(operator)
            key, (value,) = _checked(raw_key.strip(), [raw_value.strip()], text)
            if negate:
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if part.startswith("!"):
        key, _ = _checked(part[1:].strip(), [], text)
        return lambda labels: key not in labels
    key, _ = _checked(part, [], text)
    return lambda labels: key in labels


def parse_label_selector(text: str) -> LabelMatcher:
    """A predicate over a label map for a label selector such as ``app=x,tier!=db,env in (a,b),!legacy``.

    Terms are comma-ANDed: ``k=v``, ``k==v``, ``k!=v`` (true when ``k`` is absent), ``k`` (exists), ``!k``
    (absent), ``k in (v1,v2)``, ``k notin (v1,v2)``; an empty selector matches everything. Keys and values are
    checked against the label syntax (value ≤ 63 characters). Raises :class:`ClusterError` with status 400 for
    anything else, as kube-apiserver does. Source: apimachinery ``labels.Parse``.
    """
    terms = [_label_term(part, text) for part in _split_selector(text)]

    def matches(labels: Mapping[str, str]) -> bool:
        return all(term(labels) for term in terms)

    return matches


@attrs.frozen
class Change(Generic[_O]):
    """One stored write at ``rv``: ``obj`` is the new state (for DELETED the last state at the deletion RV),
    ``prev`` the state before (None for ADDED)."""

    rv: int
    type: EventType
    obj: _O
    prev: _O | None


@attrs.define
class History(Generic[_O]):
    """Changes with RV > ``floor``, oldest first, at most ``limit`` of them; a watch may resume from any RV
    >= ``floor``."""

    limit: int
    changes: list[Change[_O]] = attrs.field(factory=list)
    floor: int = 0

    def append(self, change: Change[_O]) -> None:
        """Record ``change`` (RVs ascending), dropping the oldest beyond ``limit``."""
        self.changes.append(change)
        excess = len(self.changes) - self.limit
        if excess > 0:
            self.floor = self.changes[excess - 1].rv
            del self.changes[:excess]

    def compact(self, rv: int) -> None:
        """Drop every change up to ``rv`` (etcd compaction)."""
        self.changes = [c for c in self.changes if c.rv > rv]
        self.floor = max(self.floor, rv)

    def since(self, rv: int) -> list[Change[_O]] | None:
        """Changes after ``rv``; None when ``rv`` is older than the window."""
        if rv < self.floor:
            return None
        return self.changes[bisect.bisect_right(self.changes, rv, key=lambda c: c.rv) :]


def visible_event(change: Change[_O], match: Callable[[_O], bool]) -> WatchEvent[_O] | None:
    """The event a watcher with filter ``match`` sees (apiserver ``cacheWatcher.convertToWatchEvent``)."""
    now = change.type is not EventType.DELETED and match(change.obj)
    before = change.prev is not None and match(change.prev)
    rv = str(change.rv)
    if now:
        return WatchEvent(EventType.MODIFIED if before else EventType.ADDED, change.obj, rv)
    if before and change.prev is not None:
        return WatchEvent(EventType.DELETED, attrs.evolve(change.prev, resource_version=rv), rv)
    return None
