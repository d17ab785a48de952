"""Timekeeping of the pod runner: a monotonic clock in seconds that can also wait on a condition variable, so a
test (or a replay that must not depend on wall time) can drive emulated time by hand.

:class:`SystemClock` is wall time (``time.monotonic``); :class:`ManualClock` moves only when :meth:`ManualClock.advance`
is called and wakes every waiter then. Compressing trace time is the runner's ``speedup``, not the clock's job.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, and waiting on a condition for at most some of those seconds."""

    def now(self) -> float:
        """Seconds on a monotonic scale (the origin is arbitrary)."""
        ...

    def wait(self, condition: threading.Condition, timeout_s: float | None) -> None:
        """Wait on ``condition`` (held by the caller) until notified or ``timeout_s`` of this clock's seconds pass
        (None = until notified). May return early (spuriously); callers re-check their state."""
        ...


class SystemClock:
    """Wall time: ``time.monotonic`` and ``Condition.wait``."""

    def now(self) -> float:
        """``time.monotonic()``, s."""
        return time.monotonic()

    def wait(self, condition: threading.Condition, timeout_s: float | None) -> None:
        """``condition.wait(timeout_s)``."""
        condition.wait(None if timeout_s is None else max(timeout_s, 0.0))


class ManualClock:
    """A clock that moves only through :meth:`advance` (tests, deterministic replays). Thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self._waiters: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now(self) -> float:
        """The current manual time, s."""
        with self._lock:
            return self._now

    def wait(self, condition: threading.Condition, timeout_s: float | None) -> None:
        """Wait on ``condition`` until notified (by its owner or by :meth:`advance`); ``timeout_s`` is honoured by
        the caller re-checking :meth:`now` after each wake-up."""
        with self._lock:
            self._waiters.add(condition)
        if timeout_s is None or timeout_s > 0:
            condition.wait()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (≥ 0) and wake every waiter. Raises ValueError for a negative step."""
        if seconds < 0:
            raise ValueError(f"seconds={seconds}: time only moves forward")
        with self._lock:
            self._now += seconds
            waiters = list(self._waiters)
        for condition in waiters:
            with condition:
                condition.notify_all()
