"""The standalone loop keeps a pod that fitted nowhere aside until something may have made room
(``StandaloneLoop._no_room_yet``, ``SchedulerService.room_unchanged_since``), as kube-scheduler's unschedulable
queue does: its backoff ends without a cycle or an Event while nothing changed, up to the longest backoff."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from domain.allocation import PodAllocation
from domain.kube.objects import PodObject
from domain.scheduling.preemption.victims import Victims
from services.scheduler.standalone import StandaloneLoop
from support.scheduler_world import World, world


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def full_node() -> tuple[World, Monotonic, StandaloneLoop, PodObject]:
    """One node whose only GPU a Running pod holds, and a pending whole-GPU pod that failed once (backoff 1 s)."""
    w = world()
    w.node("n1", 1)
    w.running("holder", "n1", whole=1, gpu="1")
    clock = Monotonic()
    loop = StandaloneLoop(w.service, clock=clock, min_wake_interval=0)
    pod = w.pending("a", gpu="1")
    assert loop.attempt(pod) is False
    assert loop.delay(pod.key) == 1
    return w, clock, loop, pod


def due_after(clock: Monotonic, loop: StandaloneLoop, seconds: float) -> PodObject | None:
    clock.now += seconds
    return loop._next(threading.Event(), 0)


def test_a_pod_that_fitted_nowhere_backs_off_without_attempts_until_the_longest_backoff() -> None:
    w, clock, loop, pod = full_node()
    for delay in (1, 2, 4, 8, 16, 32):
        assert due_after(clock, loop, delay) is None  # nothing changed: backed off again, not tried
    assert loop.skipped == 6
    assert loop.attempts == 1
    [event] = w.cluster.events
    assert event.count == 1  # no Event for a retry not made
    assert loop.delay(pod.key) == 60
    assert due_after(clock, loop, 59.9) is None
    assert due_after(clock, loop, 0.1) == pod  # the longest backoff: tried, whatever changed
    assert loop.skipped == 6


def test_a_node_event_lets_the_next_retry_run_without_waking_anyone() -> None:
    w, clock, loop, pod = full_node()
    node = w.cluster.get_node("n1")
    w.service.on_node(node)  # an update (labels, heartbeat...): may make room, wakes nobody
    assert loop.waking() == []
    assert due_after(clock, loop, 0.5) is None  # its own backoff still runs
    assert due_after(clock, loop, 0.5) == pod
    assert loop.skipped == 0


def test_a_released_reservation_wakes_the_pods_that_fitted_nowhere() -> None:
    w, _clock, loop, pod = full_node()
    w.node("n2", 1)
    other = w.pending("b", gpu="1")
    result = w.service.schedule_pod(other)  # reserves n2's GPU; its commit is yet to come
    assert result.allocation is not None
    assert result.allocation.node == "n2"
    assert loop.attempt(pod) is False
    assert loop.waking() == []
    assert w.service.release(other.uid)  # the commit failed: its reservation goes, room appears
    assert loop.waking() == [pod.key]
    assert loop.attempt(pod) is True


def test_a_changed_booking_of_a_bound_pod_counts_as_room_that_may_have_appeared() -> None:
    w, _clock, loop, pod = full_node()
    version = w.service.room_version
    w.deliver("holder")  # the same booking again: nothing may have changed
    assert w.service.room_version == version
    w.service.on_pod_deleted(w.cluster.get_pod("default", "holder"))  # deleted: a wake
    assert w.service.room_version > version
    assert loop.waking() == [pod.key]


def test_other_failures_nominations_and_changed_pods_keep_the_plain_backoff() -> None:
    w, clock, loop, _pod = full_node()
    changed = w.cluster.patch_pod_annotations("default", "a", {"note": "x"})
    w.service.on_pod(changed)  # the pod itself changed: it may fit now
    assert due_after(clock, loop, 1) == changed
    assert loop.attempt(changed) is False
    loop._fail(changed, "claims not ready")  # not a "fits nowhere" failure: retried on its backoff
    assert due_after(clock, loop, 4) == changed
    assert loop.attempt(changed) is False  # fits nowhere again
    victims = Victims("n1", (), 0, PodAllocation(changed.uid, "n1", ()))
    w.service.nominations.add(changed, w.service.sync.requests.get(changed), victims)
    assert due_after(clock, loop, 8) == changed  # a nomination exists: its hold ends by decisions of its own
    assert loop.skipped == 0



def test_room_that_may_appear_during_the_failing_cycle_is_not_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    w, clock, loop, pod = full_node()
    schedule = w.service.schedule_pod

    def with_a_node_event_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = schedule(*args, **kwargs)
        w.service.on_node(w.cluster.get_node("n1"))  # another thread's event, after the cycle read the books
        return result

    monkeypatch.setattr(w.service, "schedule_pod", with_a_node_event_meanwhile)
    clock.now += 1
    assert loop.attempt(pod) is False
    assert due_after(clock, loop, 2) == pod  # the event came after the books were read: tried again
