"""The serving loop of a long-running component: start, wait for the stop event, stop (even on an error)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class RunUntilStopped(ABC):
    """Base of a component app with ``start()`` and ``stop()``: :meth:`run` serves until the event is set."""

    @abstractmethod
    def start(self) -> None:
        """Start serving (threads, listeners). May raise (for example OSError when an address cannot be bound)."""

    @abstractmethod
    def stop(self) -> None:
        """Stop everything :meth:`start` started; idempotent."""

    def run(self, stop: threading.Event) -> None:
        """Start, wait for ``stop``, then stop (also when start or the wait raised). Raises what start raises."""
        self.start()
        try:
            stop.wait()
        finally:
            self.stop()
