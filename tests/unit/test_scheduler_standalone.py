"""The standalone scheduling loop (services.scheduler.standalone) driven attempt by attempt.

Covers: only pending pods with our schedulerName are queued, FIFO, and leave the queue once bound or deleted; a
successful attempt binds with the plan and records a Scheduled Event; a failure records FailedScheduling with the
cycle's reason and backs off 1 s doubling to 60 s, and retries failing for one reason raise one Event's count (5
failures: one Event, count 5); a node addition or pod deletion moves backed-off pods back (rate-limited: a change
inside the interval brings them back at its end); node fit (nodeSelector, taints) is enforced; a standby never
attempts or writes; an Event that cannot be written (transport error, raw OSError, bug) changes nothing; the worker
survives exceptions in any part of a round (the cycle, the commit, the Event after them, the leadership check) and
goes on binding.
"""

from __future__ import annotations

import threading

import pytest

from domain.kube.objects import PodObject, Taint, TaintEffect
from ports.cluster import UnavailableError
from services.scheduler import standalone
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import KEYS
from support.polling import wait_for
from support.scheduler_world import new_pod, world


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_our_pending_pods_are_queued_fifo() -> None:
    w = world()
    loop = StandaloneLoop(w.service)
    a = w.pending("a", core="10", mem="1")
    w.pending("other", core="10", mem="1", scheduler="default-scheduler")
    w.pending("b", core="10", mem="1")
    assert loop.pending() == ["default/a", "default/b"]
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)
    w.service.on_pod_deleted(a)
    assert loop.pending() == ["default/b"]


def test_attempt_binds_and_records_a_scheduled_event() -> None:
    w = world()
    w.node("n1", 1)
    loop = StandaloneLoop(w.service)
    pod = w.pending("a", core="30", mem="4")
    assert loop.attempt(pod) is True
    bound = w.deliver("a")
    assert bound.node_name == "n1"
    assert KEYS.pod_plan in bound.annotations
    assert loop.pending() == []
    assert [(e.reason, e.type) for e in w.cluster.events] == [("Scheduled", "Normal")]


def test_failure_records_the_reason_and_backs_off_doubling_to_a_bound() -> None:
    w = world()
    clock = Monotonic()
    loop = StandaloneLoop(w.service, clock=clock, min_wake_interval=0)
    pod = w.pending("a", core="30", mem="4")
    delays = []
    for _ in range(9):
        assert loop.attempt(pod) is False
        delays.append(loop.delay(pod.key))
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    event = w.cluster.events[-1]
    assert (event.reason, event.type, event.name) == ("FailedScheduling", "Warning", "a")
    assert "0 nodes available" in event.message
    stop = threading.Event()
    assert loop._next(stop, 0) is None  # still backing off
    w.node("n1", 1)  # a node appears: the pod is due at once
    assert loop._next(stop, 0) == pod
    assert loop.attempt(pod) is True


def backed_off_pod() -> tuple[Monotonic, StandaloneLoop, PodObject, threading.Event]:
    """A loop (wakes at most every 0.5 s) on a hand clock, with one pending pod that did not fit and backs off."""
    w = world()
    clock = Monotonic()
    loop = StandaloneLoop(w.service, clock=clock, min_wake_interval=0.5)
    pod = w.pending("a", core="30", mem="4")
    assert loop.attempt(pod) is False
    return clock, loop, pod, threading.Event()


def test_a_wake_inside_the_interval_is_due_at_its_end_not_lost() -> None:
    """Two capacity changes 0.1 s apart (a DRA pod ends, then its claim is deallocated): the second, rate-limited,
    still brings the backed-off pod back, when the interval ends, not after its whole backoff."""
    clock, loop, pod, stop = backed_off_pod()
    loop.wake()  # the first change: due at once
    assert loop._next(stop, 0) == pod
    clock.now += 0.05
    assert loop.attempt(pod) is False  # still no room: backed off 2 s
    clock.now += 0.05
    loop.wake()  # the second change, 0.1 s after the first
    assert loop._next(stop, 0) is None
    clock.now += 0.39
    assert loop._next(stop, 0) is None
    clock.now += 0.01  # the interval's end, long before the 2 s backoff
    assert loop._next(stop, 0) == pod


def test_a_burst_of_wakes_does_not_push_the_next_one_away() -> None:
    """A hundred changes at once make one wake at the interval's end; a change after it is served at once."""
    clock, loop, pod, stop = backed_off_pod()
    for _ in range(100):
        loop.wake()
    assert loop.waking() == [pod.key]  # brought forward by the first wake: due at once, not tried yet
    assert loop._next(stop, 0) == pod
    assert loop.waking() == []
    assert loop.attempt(pod) is False  # backed off 2 s
    assert loop.waking() == []  # waiting out its own backoff: not "waking"
    clock.now += 1.0
    loop.wake()
    assert loop.waking() == [pod.key]
    assert loop._next(stop, 0) == pod
    assert loop.waking() == []


def test_retries_failing_for_one_reason_make_one_event_with_a_rising_count() -> None:
    w = world()
    loop = StandaloneLoop(w.service, clock=Monotonic(), min_wake_interval=0)
    pod = w.pending("a", core="30", mem="4")
    for _ in range(5):
        assert loop.attempt(pod) is False
    [event] = w.cluster.events  # was one FailedScheduling object per retry
    assert (event.reason, event.name, event.uid, event.count) == ("FailedScheduling", "a", pod.uid, 5)
    assert event.first_timestamp is not None
    assert event.last_timestamp is not None
    assert event.last_timestamp >= event.first_timestamp
    w.node("n1", 1)
    assert loop.attempt(pod) is True
    assert [(e.reason, e.count) for e in w.cluster.events] == [("FailedScheduling", 5), ("Scheduled", 1)]


def test_node_selector_and_taints_are_enforced() -> None:
    w = world()
    w.node("n1", 1, labels={"pool": "a"})
    w.node("n2", 1, labels={"pool": "b"}, taints=(Taint("dedicated", TaintEffect.NO_SCHEDULE, "x"),))
    w.node("n3", 1, labels={"pool": "b"})
    loop = StandaloneLoop(w.service)
    template = new_pod(w.cluster, "template", core="10", mem="1")
    pod = w.cluster.create_pod(PodObject("", "default", "sel", containers=template.containers,
                                         scheduler_name=template.scheduler_name, node_selector={"pool": "b"}))
    w.service.on_pod(pod)
    assert loop.attempt(pod) is True
    assert w.deliver("sel").node_name == "n3"


def test_a_standby_loop_attempts_nothing_and_writes_nothing() -> None:
    w = world()
    w.node("n1", 1)
    w.leader[0] = False
    loop = StandaloneLoop(w.service)
    w.pending("a", core="10", mem="1")
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,))
    thread.start()
    try:
        stop.wait(0.3)
    finally:
        stop.set()
        thread.join()
    assert loop.attempts == 0
    assert w.cluster.events == []
    assert loop.pending() == ["default/a"]


ERRORS = [UnavailableError("create event: API server unavailable"), OSError("connection reset"), RuntimeError("bug")]


@pytest.mark.parametrize("error", ERRORS, ids=["unavailable", "raw-oserror", "bug"])
def test_an_event_that_cannot_be_written_changes_nothing(error: Exception) -> None:
    w = world()
    w.node("n1", 1)
    loop = StandaloneLoop(w.service)

    def broken(event: object) -> None:
        raise error

    w.cluster.create_event = broken  # type: ignore[method-assign,assignment]
    assert loop.attempt(w.pending("a", core="30", mem="4")) is True
    assert w.deliver("a").node_name == "n1"
    assert loop.attempt(w.pending("b", core="90", mem="4")) is False  # FailedScheduling not recorded either
    assert loop.delay("default/b") == 1


def test_the_worker_survives_exceptions_anywhere_in_a_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(standalone, "ERROR_BACKOFF", 0.01)
    w = world()
    w.service.start_leading()
    loop = StandaloneLoop(w.service, initial_backoff=0.01, max_backoff=0.02, min_wake_interval=0)
    failures = {"serving": 2, "schedule": 2}
    serving = type(w.service).serving

    def flaky_serving(self: object) -> bool:
        if failures["serving"]:
            failures["serving"] -= 1
            raise OSError("leadership check blew up")
        return bool(serving.fget(self))  # type: ignore[attr-defined]

    schedule = w.service.schedule_pod

    def flaky_schedule(pod: PodObject, **kwargs: object) -> object:
        if failures["schedule"]:
            failures["schedule"] -= 1
            raise RuntimeError("a bug in the cycle")
        return schedule(pod, **kwargs)  # type: ignore[arg-type]

    def broken(event: object) -> None:
        raise OSError("events are down")

    monkeypatch.setattr(type(w.service), "serving", property(flaky_serving))
    w.service.schedule_pod = flaky_schedule  # type: ignore[method-assign,assignment]
    w.cluster.create_event = broken  # type: ignore[method-assign,assignment]
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), kwargs={"poll": 0.05})
    thread.start()
    try:
        w.pending("a", core="30", mem="4")
        assert wait_for(lambda: failures == {"serving": 0, "schedule": 0})
        w.node("n1", 1)
        assert wait_for(lambda: w.cluster.get_pod("default", "a").node_name == "n1")
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
