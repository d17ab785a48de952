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
    """Named daemon threads sharing :attr:`stop_event` (module docstring). Not thread-safe: start and stop them
    from one thread (the app's)."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self._watched: list[threading.Thread] = []
        self._unwatched: list[threading.Thread] = []

    def spawn(self, name: str, target: Callable[[], None], *, watched: bool = True) -> threading.Thread:
        """Start ``target`` on a daemon thread called ``name``; ``watched`` ones count in :meth:`health`
        (unwatched ones that have ended are forgotten here). Returns the thread."""
        thread = threading.Thread(target=target, name=name, daemon=True)
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
        dead = [t.name for t in self._watched if not t.is_alive()]
        if dead and not self.stop_event.is_set():
            return False, f"threads stopped: {', '.join(dead)}"
        return True, "ok"

    def stop(self, *, join_seconds: float, then: Callable[[], None] = lambda: None) -> None:
        """Set the stop event; wait up to ``join_seconds`` (s) for the elector (it releases the Lease); call
        ``then`` (stop the listeners); then wait up to ``join_seconds`` in all for the other threads (daemons: the
        process may exit without them). Idempotent."""
        self.stop_event.set()
        for thread in self._watched:
            if thread.name == ELECTOR_THREAD:
                thread.join(join_seconds)
        then()
        deadline = time.monotonic() + join_seconds
        for thread in [*self._watched, *self._unwatched]:
            thread.join(max(0.0, deadline - time.monotonic()))
