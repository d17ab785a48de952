"""A tap on the cluster port that keeps the latest Event per object, so the report can say why a pod is pending
(the scheduler's ``FailedScheduling``) or failed (kubelet's ``UnexpectedAdmissionError``, ``OutOf…``) without
reading Events back from the API (the port has no Event list, and a real API server may drop or merge them).

:class:`EventTap` forwards every call of :class:`~ports.cluster.ClusterApi` to the wrapped cluster unchanged
(``__getattr__``); only ``create_event`` is intercepted: the Event is forwarded first, then recorded whether or not
the API accepted it (the component did decide it).
"""

from __future__ import annotations

import threading
from typing import Any

from domain.kube.objects import ClusterEvent
from ports.cluster import ClusterApi


class EventTap:
    """``ClusterApi`` over ``cluster`` that remembers the last Event per ``(kind, namespace, name)`` (module
    docstring). Thread-safe."""

    def __init__(self, cluster: ClusterApi) -> None:
        self.inner = cluster
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], ClusterEvent] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_event(self, event: ClusterEvent) -> None:
        """Forward ``event`` (its errors propagate, as the port's), then record it."""
        try:
            self.inner.create_event(event)
        finally:
            with self._lock:
                self._last[(event.kind, event.namespace, event.name)] = event

    def last_event(self, kind: str, namespace: str, name: str) -> ClusterEvent | None:
        """The latest Event recorded about that object, or None."""
        with self._lock:
            return self._last.get((kind, namespace, name))


def as_cluster(tap: EventTap) -> ClusterApi:
    """``tap`` as the port type (mypy checks that it conforms)."""
    return tap
