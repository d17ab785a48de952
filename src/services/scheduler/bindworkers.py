"""The standalone loop's bind workers (:class:`BindWorkers`): daemon threads that run the jobs the scheduling
cycle hands over (a pod's commit, an Event), so that the cycle never waits on the API server.

Invariants: jobs run in the order handed over, each on one thread; :meth:`BindWorkers.stop` returns once every job
handed over before it has run; a job that raises is logged and the worker goes on (the loop's own jobs catch what
they expect).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class BindWorkers:
    """``count`` daemon threads named ``ljrk-bind-<n>`` (module docstring); none run before :meth:`start`."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return bool(self._threads)

    def start(self) -> None:
        """Start the threads."""
        self._threads = [threading.Thread(target=self._work, name=f"ljrk-bind-{n}", daemon=True)
                         for n in range(self.count)]
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Hand ``job`` over; it runs on the first free thread."""
        self._jobs.put(job)

    def stop(self) -> None:
        """Let every job handed over run, then end the threads and wait for them."""
        threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a worker outlives any job
                log.exception("bind worker job failed")
