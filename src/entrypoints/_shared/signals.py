"""Stop a long-running component on SIGTERM/SIGINT (what kubelet sends on pod deletion, and Ctrl-C)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event | None = None) -> Iterator[threading.Event]:
    """Yield the event that stops the component: ``stop`` when a caller (a test) supplies one, else a new event
    set by SIGTERM or SIGINT. Handlers are installed only on the main thread, and restored on exit."""
    event = stop or threading.Event()
    previous: dict[int, object] = {}
    if stop is None and threading.current_thread() is threading.main_thread():

        def handler(signum: int, frame: FrameType | None) -> None:
            event.set()

        previous = {int(s): signal.signal(s, handler) for s in _SIGNALS}
    try:
        yield event
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)  # type: ignore[arg-type]  # getsignal's union round-trips
