"""Fan-out of health changes to any number of subscribers (one per WatchHealth stream).

Pure stdlib synchronisation, no I/O. Each subscriber gets its own unbounded queue, opened with a snapshot of
every GPU's current health (``initial=True``) taken under the same lock as the broadcasts, so a subscriber sees
every change after its snapshot and never a change from before it. ``close`` (or :meth:`HealthBroadcast.close`,
at shutdown) ends the iteration.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator

from domain.runtime.types import HealthChange

_END = object()


class HealthSubscription:
    """An iterator of :class:`HealthChange` that blocks for the next change; ``close()`` ends it (idempotent,
    safe from another thread)."""

    def __init__(self, on_close: Callable[[HealthSubscription], None]) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._on_close = on_close
        self._closed = False

    def put(self, change: HealthChange) -> None:
        """Deliver one change (called by the broadcast)."""
        self._queue.put(change)

    def __iter__(self) -> Iterator[HealthChange]:
        return self

    def __next__(self) -> HealthChange:
        item = self._queue.get()
        if item is _END:
            self._queue.put(_END)  # later calls end too
            raise StopIteration
        assert isinstance(item, HealthChange)
        return item

    def close(self) -> None:
        """End the iteration and unsubscribe."""
        if not self._closed:
            self._on_close(self)
            self.end()

    def end(self) -> None:
        """End the iteration after what is queued, without unsubscribing (the broadcast's own shutdown path)."""
        if not self._closed:
            self._closed = True
            self._queue.put(_END)


class HealthBroadcast:
    """Thread-safe fan-out (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[HealthSubscription] = []
        self._closed = False

    def subscribe(self, snapshot: Callable[[], Iterable[HealthChange]]) -> HealthSubscription:
        """A new subscription opened with ``snapshot()`` (called under the lock). After :meth:`close` the
        subscription ends right after its snapshot."""
        subscription = HealthSubscription(self._remove)
        with self._lock:
            for change in snapshot():
                subscription.put(change)
            if self._closed:
                subscription.end()
            else:
                self._subscribers.append(subscription)
        return subscription

    def publish(self, changes: Iterable[HealthChange]) -> None:
        """Deliver ``changes`` to every subscriber, in order."""
        with self._lock:
            for change in changes:
                for subscription in self._subscribers:
                    subscription.put(change)

    def close(self) -> None:
        """End every subscription (shutdown); later subscriptions end after their snapshot."""
        with self._lock:
            self._closed = True
            subscribers, self._subscribers = self._subscribers, []
        for subscription in subscribers:
            subscription.end()

    def _remove(self, subscription: HealthSubscription) -> None:
        with self._lock:
            if subscription in self._subscribers:
                self._subscribers.remove(subscription)

    @property
    def subscriber_count(self) -> int:
        """Open subscriptions."""
        with self._lock:
            return len(self._subscribers)
