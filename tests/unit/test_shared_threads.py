"""``entrypoints._shared.threads.ReplicaThreads``: the controller's and the scheduler's thread handling.

Watched threads that end make :meth:`health` fail (until stop); unwatched ones (the protocol publisher, rebuilds) do
not; without an elector the replica leads at once on the caller's thread; with one, the elector runs on
``leader-election`` and is joined before the listeners stop and before the other threads; stop is idempotent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from entrypoints._shared.threads import ELECTOR_THREAD, ReplicaThreads


class _Elector:
    """Stands in for a :class:`LeaderElector`: leads at once, steps down when stopped (records the order)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def run(self, stop: threading.Event, *, on_started: Callable[[], None] = lambda: None,
            on_stopped: Callable[[], None] = lambda: None) -> None:
        on_started()
        stop.wait()
        self.log.append(f"elector released on {threading.current_thread().name}")
        on_stopped()


def test_watched_thread_that_ends_fails_health_until_stop() -> None:
    threads = ReplicaThreads()
    done = threading.Event()
    thread = threads.spawn("worker", done.set)
    assert done.wait(5)
    thread.join(5)
    assert threads.health() == (False, "threads stopped: worker")
    threads.stop(join_seconds=1.0)
    assert threads.health() == (True, "ok")


def test_unwatched_thread_may_end_and_publisher_gets_the_stop_event() -> None:
    threads = ReplicaThreads()
    got: list[threading.Event] = []
    threads.spawn("informer", threads.stop_event.wait)
    threads.publish(got.append)
    threads.publish(None)  # nothing to publish: no thread
    for thread in threading.enumerate():
        if thread.name == "publish-protocol":
            thread.join(5)
    assert got == [threads.stop_event]
    assert threads.health() == (True, "ok")
    threads.stop(join_seconds=1.0)


def test_without_elector_leads_at_once_on_the_callers_thread() -> None:
    threads = ReplicaThreads()
    where: list[str] = []
    threads.lead(None, on_started=lambda: where.append(threading.current_thread().name),
                 on_stopped=lambda: where.append("stopped"))
    assert where == [threading.current_thread().name]
    threads.stop(join_seconds=1.0)
    assert where == [threading.current_thread().name]


def test_stop_joins_the_elector_before_the_listeners_then_the_rest() -> None:
    threads = ReplicaThreads()
    log: list[str] = []
    started = threading.Event()
    elector = _Elector(log)
    threads.lead(elector, on_started=started.set, on_stopped=lambda: log.append("stopped leading"))
    assert started.wait(5)

    def worker() -> None:
        threads.stop_event.wait()
        log.append("worker ended")

    threads.spawn("worker", worker)
    assert threads.health() == (True, "ok")
    threads.stop(join_seconds=5.0, then=lambda: log.append("listeners stopped"))
    released = log.index(f"elector released on {ELECTOR_THREAD}")
    assert released < log.index("stopped leading") < log.index("listeners stopped")
    assert "worker ended" in log
    assert not any(t.name in (ELECTOR_THREAD, "worker") and t.is_alive() for t in threading.enumerate())
    threads.stop(join_seconds=0.1)  # idempotent
