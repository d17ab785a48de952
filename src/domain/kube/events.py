"""Event de-duplication as Kubernetes' event recorder does it: one Event object per repeated occurrence.

client-go's recorder (``tools/record``, ``EventCorrelator``) keys every Event by its source, the involved object
(kind, namespace, name, UID), type, reason and message. The first occurrence creates an Event with ``count`` 1; a
repeat of the same key patches that Event instead, raising ``count`` and moving ``lastTimestamp`` (``firstTimestamp``
stays). So a pod that fails to schedule 5 times for the same reason has one ``FailedScheduling`` Event with count 5,
not 5 objects. Keys live in a bounded LRU cache (:data:`MAX_KEYS`, client-go's
``maxLruCacheEntries``); a key evicted or whose Event expired on the server (the API server keeps Events 1 h by
default) starts a new Event. client-go's further *aggregation* of similar Events with different messages ("combined
from similar events") is not done: every distinct message keeps its own Event.

Pure bookkeeping: the cluster adapters (``adapters.memory``, ``adapters.kubernetes``) hold one
:class:`EventCorrelator` each, under their own lock, and do the writes. The source component is one per adapter
instance, so it is not part of the key here.
"""

from __future__ import annotations

import collections

import attrs

from domain.kube.objects import ClusterEvent

MAX_KEYS = 4096
"""Distinct Events remembered for de-duplication (client-go ``maxLruCacheEntries``)."""

EventKey = tuple[str, str, str, str, str, str, str]
"""``(kind, namespace, name, uid, type, reason, message)`` of an Event."""


def event_key(event: ClusterEvent) -> EventKey:
    """The de-duplication key of ``event`` (module docstring); its count and timestamps are not part of it."""
    return (event.kind, event.namespace, event.name, event.uid, event.type, event.reason, event.message)


@attrs.frozen
class SeenEvent:
    """The stored Event of one key: ``name`` (the adapter's handle: the Event object's ``metadata.name``),
    ``count`` (≥ 1) and ``first``/``last`` timestamps (epoch seconds)."""

    name: str
    count: int
    first: float
    last: float

    def repeated(self, *, now: float) -> SeenEvent:
        """The same Event seen once more at ``now``: count + 1, last timestamp ``now`` (never earlier than
        ``last``, so a clock step back cannot move it backwards)."""
        return attrs.evolve(self, count=self.count + 1, last=max(self.last, now))


class EventCorrelator:
    """Remembers the stored Event of each recent key (module docstring), at most ``max_keys`` of them, least
    recently recorded evicted first. Not thread-safe: the adapter's lock covers it. Raises ValueError for
    ``max_keys`` < 1."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys={max_keys}: must be >= 1")
        self.max_keys = max_keys
        self._seen: collections.OrderedDict[EventKey, SeenEvent] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, event: ClusterEvent) -> SeenEvent | None:
        """The stored Event with ``event``'s key, or None when there is none to raise (first occurrence)."""
        return self._seen.get(event_key(event))

    def record(self, event: ClusterEvent, stored: SeenEvent) -> None:
        """Remember ``stored`` as the Event of ``event``'s key (after the adapter created or patched it)."""
        key = event_key(event)
        self._seen[key] = stored
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_keys:
            self._seen.popitem(last=False)

    def forget(self, event: ClusterEvent) -> None:
        """Drop ``event``'s key (its Event is gone: the next occurrence creates a new one)."""
        self._seen.pop(event_key(event), None)
