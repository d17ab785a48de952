"""The standalone loop keeps a pod that fitted nowhere aside until something may have made room
(``StandaloneLoop._no_room_yet``, ``SchedulerService.room_unchanged_since``), as kube-scheduler's unschedulable
queue does: its backoff ends without a cycle or an Event while nothing changed, up to the longest backoff."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest

from domain.allocation import PodAllocation
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.kube.objects import ContainerSpec, PodClaim, PodObject, PodPhase, Taint, TaintEffect, Toleration
from domain.scheduling.preemption.victims import Victims
from ports.cluster import UnavailableError
from services.scheduler.commit import CommitError
from services.scheduler.retries import FutileRetries
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import GPU16, NOW, PROTOCOL, Clock, make_node, make_pod
from support.mig_builders import mig_node
from support.scheduler_world import World, world


def full_node() -> tuple[World, Clock, StandaloneLoop, PodObject]:
    """One node whose only GPU a Running pod holds, and a pending whole-GPU pod that failed once (backoff 1 s)."""
    w = world()
    w.node("n1", 1)
    w.running("holder", "n1", whole=1, gpu="1")
    clock = Clock(100.0)
    loop = StandaloneLoop(w.service, clock=clock, min_wake_interval=0)
    pod = w.pending("a", gpu="1")
    assert loop.attempt(pod) is False
    assert loop.delay(pod.key) == 1
    return w, clock, loop, pod


def due_after(clock: Clock, loop: StandaloneLoop, seconds: float) -> PodObject | None:
    clock.now += seconds
    return loop._next(threading.Event(), 0)


def test_a_pod_that_fitted_nowhere_backs_off_without_attempts_until_the_longest_backoff() -> None:
    w, clock, loop, pod = full_node()
    for delay in (1, 2, 4, 8, 16, 32):
        assert due_after(clock, loop, delay) is None  # nothing changed: backed off again, not tried
    assert loop.retries.skipped == 6
    assert loop.attempts == 1
    [event] = w.cluster.events
    assert event.count == 1  # no Event for a retry not made
    assert loop.delay(pod.key) == 60
    assert due_after(clock, loop, 59.9) is None
    assert due_after(clock, loop, 0.1) == pod  # the longest backoff: tried, whatever changed
    assert loop.retries.skipped == 6


def test_a_node_update_a_fit_reads_lets_the_next_retry_run_without_waking_anyone() -> None:
    w, clock, loop, pod = full_node()
    w.service.on_node(make_node("n1", 1, labels={"zone": "a"}))  # a label: may make room, wakes nobody
    assert loop.waking() == []
    assert due_after(clock, loop, 0.5) is None  # its own backoff still runs
    assert due_after(clock, loop, 0.5) == pod
    assert loop.retries.skipped == 0


def test_a_heartbeat_alone_counts_no_room_and_keeps_the_pod_aside() -> None:
    w, clock, loop, pod = full_node()
    version = w.service.room_version
    stamp = w.service.sync.ledger.capacity_generation
    for beat in (5.0, 10.0):
        w.service.on_node(make_node("n1", 1, heartbeat=NOW + beat))  # the device plugin's heartbeat, every 10 s
    assert w.service.room_unchanged_since(version)
    assert w.service.sync.ledger.capacity_generation == stamp  # the policies' capacity memos stay too
    assert due_after(clock, loop, 1) is None
    assert loop.retries.skipped == 1
    w.service.on_node(make_node("n1", 1, heartbeat=NOW + 15, labels={"zone": "a"}))  # a label this time
    assert due_after(clock, loop, 0) == pod


def test_a_mig_layout_that_changed_counts_as_room_and_its_heartbeat_does_not() -> None:
    w = world()
    w.service.on_node(mig_node("m1", {0: [("3g.40gb", 0)]}))
    version = w.service.room_version
    w.service.on_node(mig_node("m1", {0: [("3g.40gb", 0)]}, heartbeat=NOW + 10))
    assert w.service.room_unchanged_since(version)
    w.service.on_node(mig_node("m1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}, heartbeat=NOW + 20))  # one more instance
    assert not w.service.room_unchanged_since(version)


@pytest.mark.parametrize("change", [
    {"labels": {"zone": "b"}},
    {"taints": (Taint("k", "v", TaintEffect.NO_SCHEDULE),)},
    {"unschedulable": True},
    {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "example.com/fpga": "1"}},  # not ours
    {"unhealthy": (0,)},
    {"memory": 2 * GPU16},
    {"heartbeat": NOW - 2 * PROTOCOL.inventory_stale_seconds},  # the gate closes: still counted (it may reopen)
])
def test_each_change_a_fit_reads_counts_as_room(change: dict[str, Any]) -> None:
    w = world()
    w.node("n1", 1)
    version = w.service.room_version
    w.service.on_node(make_node("n1", 1, **change))
    assert not w.service.room_unchanged_since(version)


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


def test_a_failed_binding_gives_its_room_back_and_wakes_the_pods_that_fitted_nowhere() -> None:
    w, _clock, loop, pod = full_node()
    w.node("n2", 1)
    other = w.pending("b", gpu="1")
    result = w.service.schedule_pod(other)
    assert result.allocation is not None
    assert loop.attempt(pod) is False  # n2's GPU is reserved for b
    w.cluster.bind_failures.append(UnavailableError("API server down"))
    with pytest.raises(CommitError):
        w.service.commit(other, result.allocation)
    assert loop.waking() == [pod.key]
    assert loop.attempt(pod) is True


def test_the_same_booking_again_counts_nothing_and_a_deleted_pod_wakes() -> None:
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
    assert loop.retries.skipped == 0


def test_room_that_may_appear_during_the_failing_cycle_is_not_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    w, clock, loop, pod = full_node()
    schedule = w.service.schedule_pod

    def with_a_node_event_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = schedule(*args, **kwargs)
        w.service.on_node(make_node("n1", 1, labels={"zone": "a"}))  # another thread's event, after the cycle
        return result

    monkeypatch.setattr(w.service, "schedule_pod", with_a_node_event_meanwhile)
    clock.now += 1
    assert loop.attempt(pod) is False
    assert due_after(clock, loop, 2) == pod  # the event came after the books were read: tried again


def test_a_pod_edited_during_its_failing_cycle_is_not_kept_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    w.node("n1", 1, taints=(Taint("gpu", TaintEffect.NO_SCHEDULE, "x"),))
    clock = Clock(100.0)
    loop = StandaloneLoop(w.service, clock=clock, min_wake_interval=0)
    pod = w.pending("a", gpu="1")
    assert loop.attempt(pod) is False  # an untolerated taint: fits nowhere
    schedule = w.service.schedule_pod
    tolerant = attrs.evolve(pod, tolerations=(Toleration("gpu", "Equal", "x"),), resource_version="999")

    def with_an_update_meanwhile(*args: Any, **kwargs: Any) -> Any:
        result = schedule(*args, **kwargs)
        w.service.on_pod(tolerant)  # the informer delivers the edited pod while the cycle runs
        return result

    monkeypatch.setattr(w.service, "schedule_pod", with_an_update_meanwhile)
    clock.now += 1
    assert loop.attempt(pod) is False
    monkeypatch.setattr(w.service, "schedule_pod", schedule)
    assert due_after(clock, loop, 2) == tolerant  # the failure was the old object's
    assert loop.attempt(tolerant) is True


def test_a_nomination_held_or_ended_counts_as_room() -> None:
    w, _clock, _loop, pod = full_node()
    version = w.service.room_version
    victims = Victims("n1", (), 0, PodAllocation(pod.uid, "n1", ()))
    w.service.nominations.add(pod, w.service.sync.requests.get(pod), victims)
    assert not w.service.room_unchanged_since(version)  # a hold exists: it ends by decisions of its own
    w.service.nominations.end(pod.uid)  # its hold on n1 ended (placed elsewhere, say)
    assert not len(w.service.nominations)
    assert not w.service.room_unchanged_since(version)


def test_a_bound_pod_whose_booking_shrinks_counts_as_room() -> None:
    w = world()
    w.node("n1", 1)
    big = w.cluster.create_pod(attrs.evolve(make_pod("big", cpu="60", scheduler="nobody"), uid=""))
    w.service.on_pod(big)
    w.cluster.bind_pod("default", "big", uid=big.uid, node="n1")
    bound = w.cluster.set_pod_phase("default", "big", PodPhase.RUNNING)
    w.service.on_pod(bound)
    loop = StandaloneLoop(w.service, clock=Clock(100.0), min_wake_interval=0)
    waiting = w.cluster.create_pod(attrs.evolve(make_pod("q", gpu="1", cpu="8"), uid=""))
    w.service.on_pod(waiting)
    assert loop.attempt(waiting) is False  # the node's CPU is taken
    version = w.service.room_version
    w.service.on_pod(attrs.evolve(bound, containers=(ContainerSpec("main", limits={"cpu": "4"}),),
                                  resource_version="9999"))  # resized in place
    assert not w.service.room_unchanged_since(version)
    assert w.service.schedule_pod(waiting).allocation is not None


def test_a_gate_lapsing_at_a_tick_and_a_resync_count_as_room() -> None:
    w = world()
    limit = PROTOCOL.inventory_stale_seconds
    node = w.cluster.create_node(make_node("n1", 1, heartbeat=NOW + 2 * limit))
    w.service.on_node(node)
    assert "future" in w.service.sync.gates["n1"]
    version = w.service.room_version
    w.service.tick()
    assert w.service.room_unchanged_since(version)  # still future-dated: nothing changed
    w.clock.now += 2 * limit
    w.service.tick()
    assert "n1" not in w.service.sync.gates
    assert not w.service.room_unchanged_since(version)
    version = w.service.room_version
    w.service.resync()
    assert not w.service.room_unchanged_since(version)


def test_an_expired_reservation_wakes_the_pods_that_fitted_nowhere() -> None:
    w, _clock, loop, pod = full_node()
    w.node("n2", 1)
    other = w.pending("b", gpu="1")
    assert w.service.schedule_pod(other).allocation is not None  # reserved; no commit ever comes
    assert loop.attempt(pod) is False
    w.service.expire_assumed()
    assert loop.waking() == []
    w.clock.now += w.service.config.assumed_ttl_seconds + 1
    assert w.service.expire_assumed() == [other.uid]
    assert loop.waking() == [pod.key]


def test_a_change_counted_after_a_skip_was_decided_makes_the_pod_due_at_once() -> None:
    w, clock, loop, pod = full_node()
    assert due_after(clock, loop, 1) is None  # skipped: nothing counted yet
    w.service.on_node(make_node("n1", 1, labels={"zone": "a"}))  # a change whose count comes after that decision
    assert due_after(clock, loop, 0) == pod  # due at once, not after the doubled backoff


def test_an_event_of_a_pods_claim_ends_its_keeping_aside() -> None:
    retries = FutileRetries(lambda version: True)
    uses = attrs.evolve(make_pod("a", gpu="1"), resource_claims=(PodClaim("gpu", claim_name="shared"),))
    made = attrs.evolve(make_pod("b", gpu="1"), resource_claims=(PodClaim("gpu", template_name="t",
                                                                           generated="b-gpu-x"),))
    pods = {"default/a": uses, "default/b": made}
    for key in pods:
        retries.failed(key, 7)
        assert retries.skip(key, woken=False, delay=1, longest=60)
    assert retries.claim_changed(pods, "default", "other") == []
    assert retries.claim_changed(pods, "elsewhere", "shared") == []
    assert retries.claim_changed(pods, "default", "shared") == ["default/a"]
    assert not retries.skip("default/a", woken=False, delay=2, longest=60)  # no longer kept aside
    assert retries.claim_changed(pods, "default", "b-gpu-x") == ["default/b"]
    assert retries.room_changed() == []


def test_claim_events_count_their_booking_changes_and_reach_the_claim_listeners() -> None:
    w = world()
    w.node("n1", 2)
    heard: list[tuple[str, str]] = []
    w.service.claim_listeners.append(lambda namespace, name: heard.append((namespace, name)))

    def on(device: str, version: str) -> ClaimAllocation:
        return ClaimAllocation("ns", "c", "u1", (AllocationResult("r", PROTOCOL.dra.driver, "n1", device),),
                               resource_version=version)

    version = w.service.room_version
    w.service.on_claim(on("gpu-0", "1"))  # booked: takes room, gives none
    assert w.service.room_unchanged_since(version)
    w.service.on_claim(on("gpu-1", "2"))  # its booking moved
    assert not w.service.room_unchanged_since(version)
    assert heard == [("ns", "c"), ("ns", "c")]


def claim_pod(w: World, loop: StandaloneLoop) -> PodObject:
    """A pending pod using the ResourceClaim ``default/shared``, kept aside: it fitted nowhere, then its backoff
    ended with nothing changed (skipped once)."""
    pod = w.cluster.create_pod(attrs.evolve(make_pod("p", gpu="1"), uid="",
                                            resource_claims=(PodClaim("g", claim_name="shared"),)))
    w.service.on_pod(pod)
    loop._fail(pod, "fits nowhere", no_room_at=w.service.room_version, claims_at=loop.retries.claim_events)
    return pod


def test_an_event_of_its_claim_makes_a_pod_kept_aside_due_at_once() -> None:
    w, clock, loop, _pod = full_node()
    pod = claim_pod(w, loop)
    assert due_after(clock, loop, 1) is None  # both pods kept aside
    assert loop.retries.skipped == 2
    w.service.on_claim(ClaimAllocation("default", "other", "u8", ()))
    assert due_after(clock, loop, 0) is None  # not its claim
    w.service.on_claim(ClaimAllocation("default", "shared", "u9", ()))  # allocated for another pod, say
    assert due_after(clock, loop, 0) == pod


def test_a_claim_event_during_the_failing_cycle_keeps_the_pod_from_being_kept_aside() -> None:
    w, clock, loop, _pod = full_node()
    pod = w.cluster.create_pod(attrs.evolve(make_pod("p", gpu="1"), uid="",
                                            resource_claims=(PodClaim("g", claim_name="shared"),)))
    w.service.on_pod(pod)
    version, claims_at = w.service.room_version, loop.retries.claim_events  # read before its cycle
    w.service.on_claim(ClaimAllocation("default", "any", "u9", ()))  # a claim event while the cycle runs
    loop._fail(pod, "fits nowhere", no_room_at=version, claims_at=claims_at)
    assert due_after(clock, loop, 1) == pod  # tried on its backoff, not kept aside


def test_nominations_replaced_or_dropped_with_their_node_and_admission_holds_count_as_room() -> None:
    w, _clock, _loop, pod = full_node()
    request = w.service.sync.requests.get(pod)
    w.service.nominations.add(pod, request, Victims("n1", (), 0, PodAllocation(pod.uid, "n1", ())))
    version = w.service.room_version
    w.service.nominations.add(pod, request, Victims("n1", (), 0, PodAllocation(pod.uid, "n1", ())))
    assert w.service.room_version == version  # the same nomination again
    w.service.nominations.add(pod, request, Victims("n2", (), 0, PodAllocation(pod.uid, "n2", ())))
    assert w.service.room_version > version  # its hold on n1 ended
    version = w.service.room_version
    w.service.nominations.node_deleted("n2")
    assert w.service.room_version > version
    held = world(admission_hold_seconds=60.0)
    held.node("n1", 1)
    waiting = held.pending("w", gpu="1")
    version = held.service.room_version
    assert held.service.room_unchanged_since(version)
    held.service.sync.holds.hold(waiting.uid, "n1", request, label=waiting.key, now=NOW)
    assert not held.service.room_unchanged_since(version)  # a hold lapses by time: nothing kept aside meanwhile
