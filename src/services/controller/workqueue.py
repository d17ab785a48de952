"""A keyed work queue with due times (client-go's delaying, de-duplicating workqueue, reduced to what the node
controller needs).

Each key is queued at most once; adding a key again keeps the earlier due time, so a burst of events for one
node costs one reconcile. Due times are read from the injected ``clock`` (epoch seconds, the same clock the
reconcile uses), so tests can drive it with a fake clock through :meth:`WorkQueue.pop_due`. Thread-safe.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable


class WorkQueue:
    """Keys with due times (module docstring). ``clock`` returns epoch seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)

    def add(self, key: str, *, at: float | None = None) -> None:
        """Queue ``key`` for ``at`` (epoch s; None = now). A key already due earlier keeps its time."""
        due = self._clock() if at is None else at
        with self._cond:
            current = self._due.get(key)
            if current is not None and current <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify_all()

    def pop_due(self) -> str | None:
        """The key due first if its time has come (it leaves the queue), else None."""
        now = self._clock()
        with self._cond:
            while self._heap:
                due, _, key = self._heap[0]
                if self._due.get(key) != due:  # superseded by an earlier add, or already popped
                    heapq.heappop(self._heap)
                    continue
                if due > now:
                    return None
                heapq.heappop(self._heap)
                del self._due[key]
                return key
            return None

    def _peek(self) -> float | None:
        while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def next_due(self) -> float | None:
        """The earliest due time queued (epoch s), or None when empty."""
        with self._cond:
            return self._peek()

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds, or until a key is added or the first key is due."""
        with self._cond:
            nearest = self._peek()
            if nearest is not None:
                timeout = min(timeout, max(0.0, nearest - self._clock()))
            if timeout > 0:
                self._cond.wait(timeout)
