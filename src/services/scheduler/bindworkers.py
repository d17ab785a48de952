"""The standalone loop's bind workers (:class:`BindWorkers`): daemon threads that run the jobs the scheduling
cycle hands over (a pod's commit, an Event), so that the cycle never waits on the API server.

Invariants: jobs start in the order handed over, each on one thread (with one thread: one after another, in that
order); :meth:`BindWorkers.stop` returns once every job handed over before it has run, and a job handed over after
it is refused (:meth:`BindWorkers.submit` returns False: the caller runs it itself); with a ``limit``, a job
handed over while that many wait is refused too; a job that raises is logged and the worker goes on.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from services._shared.logs import fields

log = logging.getLogger(__name__)


class BindWorkers:
    """``count`` daemon threads named ``ljrk-<name>-<n>`` (module docstring), none before :meth:`start`; ``limit``:
    most jobs waiting (0: no limit)."""

    def __init__(self, count: int, *, name: str = "bind", limit: int = 0) -> None:
        self.count = count
        self.name = name
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(limit)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return bool(self._threads)

    def start(self) -> None:
        """Start the threads."""
        with self._lock:
            self._threads = [threading.Thread(target=self._work, name=f"ljrk-{self.name}-{n}", daemon=True)
                             for n in range(self.count)]
            for thread in self._threads:
                thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        """Hand ``job`` over (it runs on the first free thread); False when it was refused (not running, or the
        limit reached)."""
        with self._lock:
            if not self._threads:
                return False
            try:
                self._jobs.put_nowait(job)
            except queue.Full:
                return False
            return True

    def stop(self) -> None:
        """Let every job handed over run, then end the threads and wait for them."""
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._jobs.put(None)  # past any limit: blocks only while the queue is full
        for thread in threads:
            thread.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a worker outlives any job
                log.exception("worker job failed", extra=fields(worker=self.name))
