"""Book problems made visible by the scheduler service (services.scheduler.alerts).

Behaviours covered:

* item 5: plans of pods bound by another scheduler that book a GPU beyond its core and memory quarantine the node
  on the informer event itself (no resync): a Warning Event ``ImpossibleBooks`` on the node naming the GPU and the
  pods, ``lj_runtimekit_scheduler_overbooked_nodes`` 1, new pods go elsewhere with the quarantine as the reason; a
  repeated informer update adds no second Event object; once a pod is deleted the node takes pods and the gauge
  reads 0; a resync neither lifts the quarantine nor repeats the Event;
* item 6: a GPU vanishing from the inventory while a pod's plan holds it: the pod stays counted, a Warning Event
  ``GpuVanished`` on the pod and on the node, ``lj_runtimekit_scheduler_vanished_gpu_pods`` 1; the GPU back, the
  gauge reads 0;
* a follower logs and counts but writes no Event; once it leads, it writes them.
"""

from __future__ import annotations

import pytest

from domain.kube.objects import ClusterEvent
from domain.scheduling.sync import Tombstone
from support.kube_builders import make_node
from support.scheduler_world import World, world

OVERBOOKED = "lj_runtimekit_scheduler_overbooked_nodes"
VANISHED = "lj_runtimekit_scheduler_vanished_gpu_pods"


def events(w: World, reason: str) -> list[ClusterEvent]:
    return [e for e in w.cluster.events if e.reason == reason]


def test_impossible_books_quarantine_the_node_with_an_event_and_a_metric_at_once() -> None:
    w = world()
    w.node("n1", 2)
    w.node("n2", 1)
    assert w.sample(OVERBOOKED) == 0
    w.running("x", "n1", {0: (60, 10)}, scheduler="other")
    w.running("y", "n1", {0: (60, 10)}, scheduler="other")  # 120 % core, 20 GiB of 16 on GPU 0
    [event] = events(w, "ImpossibleBooks")
    assert (event.kind, event.name, event.type) == ("Node", "n1", "Warning")
    assert "GPU 0 (GPU-n1-0) is booked 1200 of 1000 milli-GPU core and 20Gi of 16Gi memory" in event.message
    assert "default/x, default/y" in event.message
    assert w.sample(OVERBOOKED) == 1
    assert w.used("n1") == [(1200, 20), (0, 0)]  # both pods counted
    result = w.service.schedule_pod(w.pending("z", core="10", mem="1"))
    assert result.allocation is not None
    assert result.allocation.node == "n2"
    w.deliver("y")  # a repeated informer update
    w.service.resync()
    assert [e.count for e in events(w, "ImpossibleBooks")] == [1]
    assert "n1" in w.service.sync.ledger.quarantine
    gone = w.cluster.get_pod("default", "y")
    w.cluster.delete_pod("default", "y", grace_period_seconds=0)
    w.service.on_pod_deleted(gone)
    assert w.sample(OVERBOOKED) == 0
    assert w.service.sync.ledger.quarantine == {}
    again = w.service.schedule_pod(w.pending("v", core="10", mem="1"))
    assert again.allocation is not None
    assert again.allocation.node == "n1"


def vanish(w: World, node: str, count: int) -> None:
    shrunk = make_node(node, count)
    w.cluster.patch_node_metadata(node, labels=dict(shrunk.labels), annotations=dict(shrunk.annotations))
    w.service.on_node(w.cluster.get_node(node))


def test_a_gpu_vanishing_under_a_pod_gives_events_on_pod_and_node_and_a_metric() -> None:
    w = world()
    w.node("n1", 2)
    x = w.running("x", "n1", {1: (60, 10)}, scheduler="other")
    w.running("a", "n1", {0: (30, 4)})
    assert w.sample(VANISHED) == 0
    vanish(w, "n1", 1)  # GPU 1 (GPU-n1-1) is gone
    assert x.uid in w.service.sync.ledger  # still counted
    on_pod = [e for e in events(w, "GpuVanished") if e.kind == "Pod"]
    on_node = [e for e in events(w, "GpuVanished") if e.kind == "Node"]
    assert [(e.name, e.namespace, e.uid, e.type) for e in on_pod] == [("x", "default", x.uid, "Warning")]
    assert "GPU-n1-1" in on_pod[0].message
    assert [(e.name, e.type) for e in on_node] == [("n1", "Warning")]
    assert "default/x" in on_node[0].message
    assert "GPU-n1-1" in on_node[0].message
    assert w.sample(VANISHED) == 1
    w.service.tick()
    assert len(events(w, "GpuVanished")) == 2
    vanish(w, "n1", 2)
    assert w.sample(VANISHED) == 0


@pytest.mark.parametrize("problem", ["overbooked", "vanished"])
def test_a_follower_counts_but_writes_no_event(problem: str) -> None:
    w = world()
    w.leader[0] = False
    w.node("n1", 2)
    if problem == "overbooked":
        w.running("x", "n1", {0: (60, 10)}, scheduler="other")
        w.running("y", "n1", {0: (60, 10)}, scheduler="other")
    else:
        w.running("x", "n1", {1: (60, 10)}, scheduler="other")
        vanish(w, "n1", 1)
    assert w.sample(OVERBOOKED if problem == "overbooked" else VANISHED) == 1
    assert w.cluster.events == []
    w.leader[0] = True
    w.service.start_leading()  # the new leader writes what it saw as a follower
    reason = "ImpossibleBooks" if problem == "overbooked" else "GpuVanished"
    assert events(w, reason)
    w.cluster.delete_pod("default", "x", grace_period_seconds=0)
    w.service.on_pod_deleted(Tombstone("default/x"))
    assert w.sample(OVERBOOKED) == 0
    assert w.sample(VANISHED) == 0
