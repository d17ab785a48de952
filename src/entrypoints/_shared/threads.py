"""The threads of one leader-elected replica (controller, scheduler): start, liveness, ordered stop.

Invariants: every thread is a daemon sharing one stop event; *watched* threads must run until stop, and
:meth:`ReplicaThreads.health` fails while one has ended; *unwatched* ones (publishing the protocol fingerprint, a
ledger rebuild) may end on their own. :meth:`ReplicaThreads.stop` joins the leader elector first, so the Lease is
released (a standby takes over at once) before the listeners and the other threads stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from services._shared.leader import LeaderElector

ELECTOR_THREAD = "leader-election"


class ReplicaThreads:
    """Named daemon threads sharing :attr:`stop_event` (module docstring). Thread-safe: the elector's callback
    spawns a ledger rebuild on the elector thread while the app thread spawns the others."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._watched: list[threading.Thread] = []
        self._unwatched: list[threading.Thread] = []

    def spawn(self, name: str, target: Callable[[], None], *, watched: bool = True) -> threading.Thread:
        """Start ``target`` on a daemon thread called ``name``; ``watched`` ones count in :meth:`health`
        (unwatched ones that have ended are forgotten here). Returns the thread."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._lock:
            thread.start()
            if watched:
                self._watched.append(thread)
            else:
                self._unwatched = [t for t in self._unwatched if t.is_alive()] + [thread]
        return thread

    def lead(self, elector: LeaderElector | None, *, on_started: Callable[[], None],
             on_stopped: Callable[[], None]) -> None:
        """Run ``elector`` on the watched thread :data:`ELECTOR_THREAD` with these callbacks; None = always
        leader: ``on_started()`` now, on the caller's thread."""
        if elector is None:
            on_started()
            return
        stop = self.stop_event
        self.spawn(ELECTOR_THREAD, lambda: elector.run(stop, on_started=on_started, on_stopped=on_stopped))

    def publish(self, publisher: Callable[[threading.Event], None] | None) -> None:
        """Run ``publisher(stop_event)`` once on the unwatched thread ``publish-protocol`` (None: nothing): it ends
        once the fingerprint is written, which :meth:`health` must not mind."""
        if publisher is not None:
            stop = self.stop_event
            self.spawn("publish-protocol", lambda: publisher(stop), watched=False)

    def health(self) -> tuple[bool, str]:
        """Liveness ``(ok, text)``: every watched thread still runs (or the replica is stopping)."""
        with self._lock:
            dead = [t.name for t in self._watched if not t.is_alive()]
        if dead and not self.stop_event.is_set():
            return False, f"threads stopped: {', '.join(dead)}"
        return True, "ok"

    def stop(self, *, join_seconds: float, then: Callable[[], None] = lambda: None) -> None:
        """Set the stop event; wait up to ``join_seconds`` (s) for the elector (it releases the Lease); call
        ``then`` (stop the listeners); then wait up to ``join_seconds`` in all for the other threads (daemons: the
        process may exit without them). Idempotent."""
        self.stop_event.set()
        with self._lock:
            electors = [t for t in self._watched if t.name == ELECTOR_THREAD]
        for thread in electors:
            thread.join(join_seconds)
        then()
        deadline = time.monotonic() + join_seconds
        with self._lock:
            others = [*self._watched, *self._unwatched]
        for thread in others:
            thread.join(max(0.0, deadline - time.monotonic()))
