"""The standalone scheduling loop (entrypoints.scheduler.standalone) driven attempt by attempt.

Covers: only pending pods with our schedulerName are queued, FIFO, and leave the queue once bound or deleted;
a successful attempt binds with the plan and records a Scheduled Event; a failure records FailedScheduling with
the cycle's reason and backs off 1 s doubling to 60 s; a node addition or pod deletion moves backed-off pods
back (rate-limited); node fit (nodeSelector, taints) is enforced; a standby never attempts or writes.
"""

from __future__ import annotations

import threading

from kube_builders import KEYS
from scheduler_world import new_pod, world

from domain.kube.objects import PodObject, Taint, TaintEffect
from entrypoints.scheduler.standalone import StandaloneLoop


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
