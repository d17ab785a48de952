"""A node component's serving loop on a thread of its own, for :mod:`.simnode` and :mod:`.dranode`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def serve_on_thread(run: Callable[[threading.Event], None], stop: threading.Event, *, what: str,
                    node: str) -> threading.Thread:
    """Start a daemon thread running ``run(stop)`` (an app's serving loop, returning once ``stop`` is set); an
    exception ends the thread and is logged as ``node <node>: <what> stopped`` (an OSError binding a socket: the
    node's readiness then reports the component as not ready). Returns the started thread."""
    def serve() -> None:
        try:
            run(stop)
        except Exception:
            log.exception("node %s: %s stopped", node, what)

    thread = threading.Thread(target=serve, name=f"ljrk-up-{what.replace(' ', '-')}-{node}", daemon=True)
    thread.start()
    return thread
