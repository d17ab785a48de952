"""The Event half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``CoreV1Api`` (a mixin over
:class:`~.base.KubernetesApis`): core/v1 Events with client-go's recorder de-duplication.

A repeat of an Event this adapter created (:mod:`domain.kube.events`) merge-patches that Event's ``count`` and
``lastTimestamp``; one write at a time (``_event_lock``), so a repeat never races its first create. The correlator
and the lock are shared by every :meth:`~adapters.kubernetes.cluster.KubernetesCluster.with_request_timeout` view.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

from kubernetes import client

from domain.kube.events import EventCorrelator, SeenEvent
from domain.kube.objects import ClusterEvent
from ports.cluster import ClusterError

from .base import KubernetesApis
from .compat import EVENT, MERGE_PATCH, merge_patch
from .errors import api_errors

_CLUSTER_SCOPED_KINDS = frozenset({"Node", "Namespace", "PersistentVolume", "StorageClass"})
"""Kinds whose Events name no namespace in ``involvedObject``."""


def event_to_v1(event: ClusterEvent, *, component: str, now: float) -> client.CoreV1Event:
    """A core/v1 ``Event`` (generated name ``<object>.<suffix>``, count 1, first = last = ``now``)."""
    stamp = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    namespaced = event.kind not in _CLUSTER_SCOPED_KINDS
    return client.CoreV1Event(
        api_version="v1",
        kind="Event",
        metadata=client.V1ObjectMeta(generate_name=f"{event.name}.", namespace=event.namespace),
        involved_object=client.V1ObjectReference(
            kind=event.kind, name=event.name, namespace=event.namespace if namespaced else None,
            uid=event.uid or None,
        ),
        reason=event.reason,
        message=event.message,
        type=event.type,
        count=1,
        first_timestamp=stamp,
        last_timestamp=stamp,
        source=client.V1EventSource(component=component),
    )


def event_repeat_patch(*, count: int, now: float) -> dict[str, object]:
    """The JSON merge patch that records a repeat of a stored Event: its new ``count`` and ``lastTimestamp``
    (``now``, epoch seconds, as metav1.Time: RFC 3339 to the second, UTC), as client-go's recorder patches it."""
    stamp = dt.datetime.fromtimestamp(now, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"count": count, "lastTimestamp": stamp}


class KubernetesEvents(KubernetesApis):
    """The Event method of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring);
    ``_component`` is the Events' ``source.component``."""

    _component: str
    _event_lock: threading.Lock
    _events: EventCorrelator  # names: the Events' metadata.name

    def create_event(self, event: ClusterEvent) -> None:
        """Create a core/v1 Event in ``event.namespace``, or, for a repeat of an Event this adapter created
        (:mod:`domain.kube.events`), merge-patch that Event's ``count`` and ``lastTimestamp`` as client-go's
        recorder does; a repeat whose Event cannot be patched — gone (expired after the server's event TTL, 1 h by
        default) or not patchable under an older release's RBAC (create only) — creates a new one. Raises
        ClusterError (best effort: the caller logs)."""
        what = f"event {event.reason[:64]} for {event.kind}/{event.name[:100]}"
        with self._event_lock:
            now = time.time()
            seen = self._events.seen(event)
            if seen is not None:
                repeat = seen.repeated(now=now)
                try:
                    with api_errors(f"patch {what}"):
                        patch = event_repeat_patch(count=repeat.count, now=repeat.last)
                        merge_patch(
                            lambda: self._core.patch_namespaced_event(
                                seen.name, event.namespace, patch, _content_type=MERGE_PATCH,
                                _request_timeout=self._timeout),
                            self._api_client, EVENT, patch, timeout=self._timeout,
                            path={"name": seen.name, "namespace": event.namespace})
                except ClusterError:  # expired (404), or no patch right (403, RBAC of an older release): create
                    self._events.forget(event)
                else:
                    self._events.record(event, repeat)
                    return
            body = event_to_v1(event, component=self._component, now=now)
            with api_errors(f"create {what}"):
                created: Any = self._core.create_namespaced_event(event.namespace, body,
                                                                   _request_timeout=self._timeout)
            name = getattr(getattr(created, "metadata", None), "name", None)
            if isinstance(name, str) and name:
                self._events.record(event, SeenEvent(name, 1, now, now))
