"""The standalone loop's worker threads (``services.scheduler.bindworkers.BindWorkers``): jobs run in order on one
thread, a job is refused before start, after stop and past the limit, stop waits for every job handed over, and a
job that raises does not end its worker; the loop writes its Events on their own thread, dropping past the
backlog, and commits a pod itself when the workers are stopping."""

from __future__ import annotations

import threading

import pytest

from services.scheduler import standalone
from services.scheduler.bindworkers import BindWorkers
from services.scheduler.standalone import StandaloneLoop
from support.polling import wait_for
from support.scheduler_world import world


def test_jobs_run_in_order_and_stop_waits_for_every_one_handed_over() -> None:
    workers = BindWorkers(1)
    ran: list[int] = []
    assert not workers.submit(lambda: ran.append(0))  # not started
    workers.start()
    gate = threading.Event()
    assert workers.submit(lambda: gate.wait(10))
    for n in range(1, 6):
        assert workers.submit(lambda n=n: ran.append(n))  # type: ignore[misc]
    assert workers.submit(lambda: 1 / 0)  # raises: logged, the worker goes on
    assert workers.submit(lambda: ran.append(6))
    gate.set()
    workers.stop()
    assert ran == [1, 2, 3, 4, 5, 6]
    assert not workers.running
    assert not workers.submit(lambda: ran.append(7))  # stopped
    assert ran == [1, 2, 3, 4, 5, 6]


def test_a_job_past_the_limit_is_refused() -> None:
    workers = BindWorkers(1, limit=2)
    workers.start()
    gate = threading.Event()
    assert workers.submit(lambda: gate.wait(10))
    assert wait_for(lambda: workers._jobs.empty())  # the first job runs: the queue holds none
    assert workers.submit(lambda: None)
    assert workers.submit(lambda: None)
    assert not workers.submit(lambda: None)  # two wait already
    gate.set()
    workers.stop()


def test_the_loop_drops_events_past_its_backlog_and_writes_them_in_order(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(standalone, "EVENT_BACKLOG", 2)
    w = world()
    gate = threading.Event()
    create = w.cluster.create_event

    def held(event: object) -> None:
        assert gate.wait(10)
        create(event)  # type: ignore[arg-type]

    w.cluster.create_event = held  # type: ignore[method-assign,assignment]
    loop = StandaloneLoop(w.service, bind_workers=2)
    loop._events.start()
    pods = [w.pending(f"p{n}", core="10", mem="1") for n in range(4)]
    loop._event(pods[0], "FailedScheduling", "first", "Warning")  # taken by the Event thread: waits at the gate
    assert wait_for(lambda: loop._events._jobs.empty())
    for pod in pods[1:]:
        loop._event(pod, "FailedScheduling", "later", "Warning")  # p1 and p2 wait; p3 is one too many
    assert "event dropped: too many waiting" in caplog.text
    gate.set()
    loop._events.stop()
    assert [e.name for e in w.cluster.events] == ["p0", "p1", "p2"]
