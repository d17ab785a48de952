"""The emulated kubelets' clock: wall time that can be paused, so ``ljrk up`` can freeze departures.

While paused, :meth:`PausableClock.now` stands still, so no running pod reaches the end of its emulated duration;
after :meth:`PausableClock.resume` time goes on from where it stopped (the pause is not counted), so every pod
still gets its whole duration. This is how the run reaches a quiescent point for the agreement check: arrivals
stop, departures are frozen, and the binds and admissions in flight settle.
"""

from __future__ import annotations

import threading
import time
import weakref


class PausableClock:
    """Monotonic seconds minus the time spent paused; implements ``adapters.grpc.kubelet_emulator.Clock``.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0  # seconds spent paused so far
        self._paused_at: float | None = None
        self._waiters: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume`."""
        with self._lock:
            return self._paused_at is not None

    def now(self) -> float:
        """Seconds on a monotonic scale that stands still while paused."""
        with self._lock:
            at = self._paused_at if self._paused_at is not None else time.monotonic()
            return at - self._offset

    def wait(self, condition: threading.Condition, timeout_s: float | None) -> None:
        """Wait on ``condition`` (held by the caller) for at most ``timeout_s`` wall seconds (None = until
        notified); :meth:`resume` wakes every waiter, so a deadline that moved is re-read at once."""
        with self._lock:
            self._waiters.add(condition)
        condition.wait(None if timeout_s is None else max(timeout_s, 0.0))

    def pause(self) -> None:
        """Stop time (idempotent)."""
        with self._lock:
            if self._paused_at is None:
                self._paused_at = time.monotonic()

    def resume(self) -> None:
        """Let time go on from where it stopped and wake every waiter (idempotent)."""
        with self._lock:
            if self._paused_at is None:
                return
            self._offset += time.monotonic() - self._paused_at
            self._paused_at = None
            waiters = list(self._waiters)
        for condition in waiters:
            with condition:
                condition.notify_all()
