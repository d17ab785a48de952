"""Standalone preemption (services.scheduler.standalone + .nominations) on the in-memory cluster: the queue takes
the highest priority first; a pod that fits nowhere evicts the victim on the GPU it will use (gracefully, with a
``Preempted`` Event naming it and, before the delete, kube-scheduler's ``DisruptionTarget`` condition; a victim
whose condition cannot be written is not deleted), is nominated, evicts nothing more while its victim
terminates, and the freed GPU is held against a lower-priority pod until the preemptor is bound (only while that
pod is what would stop the preemptor from fitting); a nomination the pod can no longer use ends, its
``status.nominatedNodeName`` cleared; ``preemptionPolicy: Never`` evicts nobody; a new leader restores the
nominations its predecessor wrote (from ``status.nominatedNodeName``) and holds their nodes."""

from __future__ import annotations

import logging
import threading

import attrs
import pytest

from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import encode_plan
from domain.kube.objects import PodObject, PodPhase
from domain.kube.podconditions import PodCondition
from domain.units import GiB
from ports.cluster import UnavailableError
from services.scheduler.service import SchedulerService
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import KEYS, make_gpus, make_pod
from support.scheduler_world import NONE_SCHEDULER, World, plan_of, world


def pending(w: World, name: str, percent: int, priority: int, *, policy: str = "PreemptLowerPriority") -> PodObject:
    template = make_pod("template", core=str(percent), mem="1")
    pod = w.cluster.create_pod(PodObject("", "default", name, containers=template.containers,
                                         scheduler_name=w.service.protocol.scheduler_name, priority=priority,
                                         preemption_policy=policy))
    w.service.on_pod(pod)
    return pod


def running(w: World, name: str, node: str, gpu: int, percent: int, priority: int) -> PodObject:
    template = make_pod("template", core=str(percent), mem="1")
    pod = w.cluster.create_pod(PodObject("", "default", name, containers=template.containers,
                                         scheduler_name=NONE_SCHEDULER, priority=priority))
    grant = ContainerGrant("main", (GpuGrant(gpu, percent * 10, GiB),))
    plan = encode_plan(PodAllocation(pod.uid, node, (grant,)), make_gpus(node, 2), writer=NONE_SCHEDULER)
    w.cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
    w.cluster.bind_pod("default", name, uid=pod.uid, node=node)
    bound = w.cluster.set_pod_phase("default", name, PodPhase.RUNNING)
    w.service.on_pod(bound)
    return bound


def kubelet_removes(w: World, name: str) -> None:
    """The terminating pod's containers ended: the pod object goes."""
    pod = w.deliver(name)
    assert pod.deletion_timestamp is not None
    w.cluster.delete_pod("default", name, grace_period_seconds=0)
    w.service.on_pod_deleted(pod)


def setup() -> tuple[World, StandaloneLoop]:
    w = world()
    w.node("n1", 2)
    assert w.service.start_leading()
    running(w, "a", "n1", 0, 40, priority=5)
    running(w, "d", "n1", 0, 30, priority=30)
    running(w, "b", "n1", 1, 60, priority=10)
    return w, StandaloneLoop(w.service)


def test_the_queue_takes_the_highest_priority_first_then_first_come() -> None:
    w = world()
    loop = StandaloneLoop(w.service)
    for name, priority in (("low", 0), ("high-1", 10), ("mid", 5), ("high-2", 10)):
        pending(w, name, 10, priority)
    stop = threading.Event()
    taken = [pod.name for _ in range(4) if (pod := loop._next(stop, 0)) is not None]
    assert taken == ["high-1", "high-2", "mid", "low"]


def test_a_preemptor_evicts_the_victim_on_its_gpu_is_nominated_and_holds_the_freed_gpu() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=1000)
    assert loop.attempt(hi) is False
    assert w.deliver("b").deletion_timestamp is not None  # graceful: terminating, not gone
    assert w.deliver("a").deletion_timestamp is None
    assert w.deliver("d").deletion_timestamp is None
    assert w.cluster.get_pod("default", "hi").nominated_node_name == "n1"
    (preempted,) = [e for e in w.cluster.events if e.reason == "Preempted"]
    assert preempted.name == "b"
    assert "default/hi" in preempted.message
    assert preempted.type == "Normal"
    failed = [e.message for e in w.cluster.events if e.reason == "FailedScheduling" and e.name == "hi"]
    assert failed[-1].endswith("preemption: nominated to node n1, evicting default/b")

    assert loop.attempt(w.deliver("hi")) is False  # b still terminating: nothing more is evicted
    assert w.deliver("a").deletion_timestamp is None
    assert w.deliver("d").deletion_timestamp is None

    kubelet_removes(w, "b")
    sneak = pending(w, "sneak", 50, priority=1)  # would fit GPU 1 now, but it is held for hi
    assert loop.attempt(sneak) is False
    why = [e.message for e in w.cluster.events if e.reason == "FailedScheduling" and e.name == "sneak"][-1]
    assert "held for the nominated pod default/hi" in why
    assert w.deliver("a").deletion_timestamp is None  # sneak (priority 1) may not evict a (5) either

    assert loop.attempt(w.deliver("hi")) is True
    w.deliver("hi")
    assert plan_of(w, "hi").containers[0].grants == (GpuGrant(1, 800, 1 * GiB),)
    assert w.service.nominations.get(hi.uid) is None


def test_a_higher_priority_pod_may_take_a_held_node() -> None:
    w, loop = setup()
    assert loop.attempt(pending(w, "hi", 80, priority=1000)) is False
    kubelet_removes(w, "b")
    assert loop.attempt(pending(w, "higher", 50, priority=2000)) is True


def test_preemption_policy_never_and_no_lower_pods_evict_nobody() -> None:
    w, loop = setup()
    never = pending(w, "never", 80, priority=1000, policy="Never")
    assert loop.attempt(never) is False
    peer = pending(w, "peer", 80, priority=5)  # a has priority 5 too, b 10, d 30: none is strictly lower
    assert loop.attempt(peer) is False
    assert [e for e in w.cluster.events if e.reason == "Preempted"] == []
    assert all(w.deliver(name).deletion_timestamp is None for name in ("a", "b", "d"))
    messages = {e.name: e.message for e in w.cluster.events if e.reason == "FailedScheduling"}
    assert "preemptionPolicy is Never" in messages["never"]
    assert "0/1 nodes" in messages["peer"]
    assert w.cluster.get_pod("default", "never").nominated_node_name == ""


def test_a_hold_the_nominee_cannot_use_anyway_does_not_refuse_a_lower_pod() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=1000)
    assert loop.attempt(hi) is False  # evicts b (GPU 1)
    kubelet_removes(w, "b")
    assert loop.attempt(pending(w, "higher", 50, priority=2000)) is True  # takes half of GPU 1: hi fits nowhere now
    assert w.service.nominations.get(hi.uid) is not None  # hi has not come back yet
    low = pending(w, "low", 10, priority=1)  # takes nothing hi could use: hi does not fit with or without it
    assert loop.attempt(low) is True
    assert w.service.reservation(low.uid) is not None


def test_a_nominee_that_can_no_longer_preempt_there_loses_its_nomination_and_the_status_field() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=20)  # may evict a (5) and b (10), never d (30)
    assert loop.attempt(hi) is False  # evicts b (GPU 1)
    assert w.cluster.get_pod("default", "hi").nominated_node_name == "n1"
    kubelet_removes(w, "b")
    assert loop.attempt(pending(w, "higher", 50, priority=2000)) is True  # half of GPU 1 taken for good
    assert loop.attempt(w.deliver("hi")) is False  # evicting a leaves GPU 0 at 70 %: nothing makes hi fit now
    assert w.service.nominations.get(hi.uid) is None
    assert w.cluster.get_pod("default", "hi").nominated_node_name == ""
    why = [e.message for e in w.cluster.events if e.reason == "FailedScheduling" and e.name == "hi"][-1]
    assert "nomination to node n1 ended" in why
    assert w.deliver("a").deletion_timestamp is None


def test_a_nominee_placed_on_another_node_loses_its_nomination_and_the_status_field() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=1000)
    assert loop.attempt(hi) is False  # evicts b; b terminates slowly
    w.node("n2", 1)
    assert loop.attempt(w.deliver("hi")) is True
    assert plan_of(w, "hi").node == "n2"
    assert w.service.nominations.get(hi.uid) is None  # ended at once, before the watch shows it bound
    assert w.cluster.get_pod("default", "hi").nominated_node_name == ""


def test_a_nominee_whose_node_no_longer_takes_it_loses_its_nomination_and_the_status_field() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=1000)
    assert loop.attempt(hi) is False
    node = w.cluster.get_node("n1")
    cordoned = attrs.evolve(node, unschedulable=True, resource_version=str(int(node.resource_version) + 1))
    w.service.on_node(cordoned)  # preempting there helps no more
    assert loop.attempt(w.deliver("hi")) is False
    assert w.service.nominations.get(hi.uid) is None
    assert w.cluster.get_pod("default", "hi").nominated_node_name == ""


def test_a_victim_recreated_under_its_name_is_not_deleted() -> None:
    w, loop = setup()
    old_b = w.cluster.get_pod("default", "b")
    w.cluster.delete_pod("default", "b", grace_period_seconds=0)  # gone and recreated (a controller's new pod);
    template = make_pod("template", core="60", mem="1")  # the informer has shown neither yet
    new_b = w.cluster.create_pod(PodObject("", "default", "b", containers=template.containers, priority=10))
    assert new_b.uid != old_b.uid
    assert loop.attempt(pending(w, "hi", 80, priority=1000)) is False  # the books still hold the old b on GPU 1
    assert w.cluster.get_pod("default", "b").uid == new_b.uid
    assert w.cluster.get_pod("default", "b").deletion_timestamp is None
    assert w.cluster.get_pod("default", "b").conditions == ()  # not marked either
    why = [e.message for e in w.cluster.events if e.reason == "FailedScheduling" and e.name == "hi"][-1]
    assert why.endswith("evicting nothing (condition writes or deletes failed)")


def _conditions_at_delete(w: World, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[PodCondition, ...]]:
    """Record, per pod name, its conditions when ``delete_pod`` is called on it (before the delete runs)."""
    seen: dict[str, tuple[PodCondition, ...]] = {}
    delete = w.cluster.delete_pod

    def recording(namespace: str, name: str, **kwargs: object) -> None:
        seen[name] = w.cluster.get_pod(namespace, name).conditions
        delete(namespace, name, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(w.cluster, "delete_pod", recording)
    return seen


def test_a_victim_is_marked_disruption_target_by_our_scheduler_before_it_is_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    w, loop = setup()
    at_delete = _conditions_at_delete(w, monkeypatch)
    assert loop.attempt(pending(w, "hi", 80, priority=1000)) is False
    name = w.service.protocol.scheduler_name
    [condition] = at_delete["b"]
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "DisruptionTarget", "True", "PreemptionByScheduler", f"{name}: preempting to accommodate a higher priority pod")
    assert condition.last_transition_time is not None
    assert w.deliver("b").conditions == (condition,)
    assert w.deliver("b").deletion_timestamp is not None
    assert w.deliver("a").conditions == ()  # only the victim
    assert w.deliver("d").conditions == ()


def test_a_victim_whose_condition_cannot_be_written_is_not_deleted_until_a_later_attempt_marks_it(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    w, loop = setup()
    at_delete = _conditions_at_delete(w, monkeypatch)
    write = w.cluster.set_pod_condition
    failures = [UnavailableError("connection reset")]

    def flaky(namespace: str, name: str, condition: PodCondition, *, uid: str | None = None) -> PodObject:
        if failures:
            raise failures.pop()
        return write(namespace, name, condition, uid=uid)

    monkeypatch.setattr(w.cluster, "set_pod_condition", flaky)
    hi = pending(w, "hi", 80, priority=1000)
    with caplog.at_level(logging.WARNING, logger="services.scheduler.standalone"):
        assert loop.attempt(hi) is False
    assert at_delete == {}  # as kube-scheduler: no delete without the condition
    assert w.deliver("b").deletion_timestamp is None
    assert any("not marked DisruptionTarget" in r.getMessage() and "connection reset" in str(r.__dict__)
               for r in caplog.records)
    why = [e.message for e in w.cluster.events if e.reason == "FailedScheduling" and e.name == "hi"][-1]
    assert why.endswith("evicting nothing (condition writes or deletes failed)")
    assert loop.attempt(w.deliver("hi")) is False  # the next attempt chooses b again: marked, then deleted
    assert [c.reason for c in at_delete["b"]] == ["PreemptionByScheduler"]
    assert w.deliver("b").deletion_timestamp is not None


def test_a_new_leader_restores_the_nominations_its_predecessor_wrote_and_holds_their_nodes() -> None:
    w, loop = setup()
    hi = pending(w, "hi", 80, priority=1000)
    assert loop.attempt(hi) is False  # b evicted (terminating), hi nominated to n1 by this replica
    successor = SchedulerService(w.cluster, w.service.protocol, PrometheusSchedulerMetrics(),
                                 config=w.service.config, clock=w.clock)
    assert successor.start_leading()  # its books come from the listing: the nomination from hi's status
    assert successor.nominated_node(hi.uid) == "n1"
    b = w.deliver("b")
    w.cluster.delete_pod("default", "b", grace_period_seconds=0)
    successor.on_pod_deleted(b)
    sneak = w.cluster.create_pod(PodObject("", "default", "sneak", containers=make_pod("t", core="50", mem="1")
                                           .containers, scheduler_name=w.service.protocol.scheduler_name, priority=1))
    successor.on_pod(sneak)
    result = successor.schedule_pod(sneak)
    assert result.allocation is None
    assert "held for the nominated pod default/hi" in result.reason
    successor.on_pod(w.cluster.nominate_pod("default", "hi", ""))  # the field cleared: the restored one ends
    assert successor.nominated_node(hi.uid) == ""


def test_a_new_leader_does_not_restore_nominations_of_pods_of_other_schedulers() -> None:
    w, _ = setup()
    foreign = w.cluster.create_pod(PodObject("", "default", "foreign", containers=make_pod("t", core="80", mem="1")
                                             .containers, scheduler_name=NONE_SCHEDULER, priority=1000))
    w.cluster.nominate_pod("default", "foreign", "n1")
    successor = SchedulerService(w.cluster, w.service.protocol, PrometheusSchedulerMetrics(),
                                 config=w.service.config, clock=w.clock)
    assert successor.start_leading()
    assert successor.nominated_node(foreign.uid) == ""
