"""The scheduler service (services.scheduler.service) on the in-memory cluster.

Covers: the issue's scenario (core=60 mem=8 where only one node has a GPU with that much free → bound there, plan
annotation carried by the binding); failure cases B01 (tombstone; resync variant), B03 (restart rebuild with a
terminating pod), B04 (repeated adds after our reservation), B06 (bind 500 and 409 → unreserve, neither node nor plan on
the pod; retry succeeds with one record), B07 (leftover plan on a pending pod), B08 (foreign pods counted), B14
(unhealthy GPU, unrelated node update); a pod changed since the service read it is still bound (the binding has no
resourceVersion precondition); leader gating (a standby never writes; serving needs leadership and a rebuild; losing it
drops uncommitted reservations); assumed-pod expiry; resync repairs drift and counts it in the metrics; per-pod policy
override (unknown → unschedulable with a reason); GPU UUID selection; FGD is the default and its typical pods blend
observed and synthetic pods; a huge gpu-memory or cpu request is refused with the field and value named (it used to
escape as OverflowError), and a foreign pod with such a request gates its node (GPU usage unknown) instead of being
booked as less than it may hold, also across a resync, until it goes."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import attrs
import pytest

from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, PodObject, Taint, TaintEffect
from domain.scheduling.sync import Tombstone
from domain.units import GiB
from ports.cluster import ClusterError, ConflictError, UnavailableError
from services.scheduler.service import (
    CommitError,
    NotLeaderError,
    SchedulerService,
    ServiceConfig,
    StaleListingError,
    drift_count,
)
from support.kube_builders import GPU16, KEYS, PROTOCOL, make_gpus, make_node
from support.ledger_poke import corrupt_core_used
from support.polling import wait_for
from support.scheduler_world import World, new_pod, plan_of, schedule_and_commit, world


# ---------------------------------------------------------------------------------------------- the scenario
def test_core60_mem8_is_bound_to_the_only_gpu_with_room_and_annotated() -> None:
    w = world(policy="fgd")
    for name in ("n1", "n2", "n3"):
        w.node(name, 2)
    w.running("f1a", "n1", {0: (50, 4)})
    w.running("f1b", "n1", {1: (50, 4)})
    w.running("f2a", "n2", {0: (20, 12)})
    w.running("f2b", "n2", {1: (20, 12)})
    w.running("f3a", "n3", {0: (50, 4)})
    w.running("f3b", "n3", {1: (30, 4)})
    pod = w.pending("want", core="60", mem="8")
    allocation = schedule_and_commit(w, pod)
    bound = w.cluster.get_pod("default", "want")
    assert bound.node_name == "n3"
    plan = plan_of(w, "want")
    assert plan.containers[0].grants == (GpuGrant(1, 600, 8 * GiB),)
    assert allocation.node == "n3"
    assert w.used("n3") == [(500, 4), (900, 12)]
    assert w.sample("lj_runtimekit_scheduler_decisions_total", result="scheduled") == 1


def test_the_plan_annotation_travels_in_the_binding() -> None:
    w = world()
    w.node("n1", 1)
    pod = w.pending("a", core="50", mem="8")
    seen: list[tuple[str, bool]] = []
    bind = w.cluster.bind_pod

    def spy(namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        seen.append((node, KEYS.pod_plan in (annotations or {})))
        bind(namespace, name, uid=uid, node=node, annotations=annotations)

    w.cluster.bind_pod = spy  # type: ignore[method-assign]
    schedule_and_commit(w, pod)
    assert seen == [("n1", True)]


def test_default_policy_is_fgd_and_typical_pods_blend_observed_with_synthetic() -> None:
    assert ServiceConfig().policy == "fgd"
    w = world(policy="fgd")
    w.node("n1", 1)
    w.running("r", "n1", {0: (30, 4)})
    typical = w.service.schedulers.typical_pods()
    assert typical.total_pods > 100  # the synthetic workload is in until 200 pods are observed
    small = SchedulerService(w.cluster, PROTOCOL, PrometheusSchedulerMetrics(),
                             config=ServiceConfig(policy="fgd", min_observed_pods=1), clock=w.clock)
    small.on_node(w.cluster.get_node("n1"))
    small.on_pod(w.cluster.get_pod("default", "r"))
    assert small.schedulers.typical_pods().total_pods == 1


# ---------------------------------------------------------------------------------------------- failure cases
def test_b01_delete_as_tombstone_releases_and_the_gauge_follows() -> None:
    w = world()
    w.node("n1", 1)
    a = w.pending("a", core="100", mem="16")
    schedule_and_commit(w, a)
    last = w.cluster.get_pod("default", "a")
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)
    w.service.on_pod_deleted(Tombstone("default/a", last))
    assert w.used("n1") == [(0, 0)]
    schedule_and_commit(w, w.pending("b", core="50", mem="8"))
    labels = {"node": "n1", "gpu_index": "0", "gpu_uuid": "GPU-n1-0", "model": "A100"}
    assert w.sample("lj_runtimekit_scheduler_gpu_memory_allocated_bytes", **labels) == 8 * GiB


def test_b01_missed_delete_is_released_by_the_periodic_resync() -> None:
    w = world()
    w.node("n1", 1)
    schedule_and_commit(w, w.pending("a", core="100", mem="16"))
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)  # no event reaches the service
    report = w.service.resync()
    assert report.extra
    assert w.used("n1") == [(0, 0)]


def test_b03_restart_rebuild_keeps_a_terminating_pod_until_it_is_gone() -> None:
    w = world()
    w.node("n1", 1)
    w.running("a", "n1", {0: (80, 12)})
    w.cluster.delete_pod("default", "a", grace_period_seconds=300)
    restarted = SchedulerService(w.cluster, PROTOCOL, PrometheusSchedulerMetrics(), config=ServiceConfig(
        policy="binpack"), clock=w.clock)
    restarted.resync()
    assert [(g.core_used, g.memory_used) for g in restarted.gpus("n1")] == [(800, 12 * GiB)]
    b = new_pod(w.cluster, "b", core="50", mem="8")
    assert restarted.schedule_pod(b).allocation is None
    gone = w.cluster.get_pod("default", "a")
    w.cluster.finalize_deletions()
    restarted.on_pod_deleted(gone)
    assert restarted.schedule_pod(b).allocation is not None


def test_b04_repeated_adds_after_our_reservation_count_once() -> None:
    w = world()
    w.node("n1", 2)
    a = w.pending("a", core="40", mem="4")
    schedule_and_commit(w, a)
    w.deliver("a")
    w.deliver("a")
    assert w.used("n1") == [(400, 4), (0, 0)]
    schedule_and_commit(w, w.pending("b", core="40", mem="4"))
    assert w.used("n1") == [(800, 8), (0, 0)]


@pytest.mark.parametrize("error", [ClusterError("HTTP 500"), ConflictError("already assigned")],
                         ids=["500", "409"])
def test_b06_failed_bind_unreserves_and_removes_the_plan(error: ClusterError) -> None:
    if not isinstance(error, ConflictError):
        error.status = 500
    w = world()
    w.node("n1", 1)
    a = w.pending("a", core="60", mem="10")
    result = w.service.schedule_pod(a)
    assert result.allocation is not None
    w.cluster.bind_failures.append(error)
    with pytest.raises(CommitError, match="pod not bound when re-read"):
        w.service.commit(a, result.allocation)
    after = w.deliver("a")
    assert KEYS.pod_plan not in after.annotations
    assert not after.node_name
    assert w.used("n1") == [(0, 0)]
    assert w.service.reservation(a.uid) is None
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="bind-failed") == 1
    # (b) the retry succeeds and holds exactly one record
    schedule_and_commit(w, after)
    assert w.used("n1") == [(600, 10)]
    # (a) B no longer fits while A holds GPU0
    assert w.service.schedule_pod(w.pending("b", core="60", mem="10")).allocation is None


def test_a_pod_changed_since_the_service_read_it_is_still_bound() -> None:
    w = world()
    w.node("n1", 1)
    a = w.pending("a", core="30", mem="4")
    w.cluster.patch_pod_annotations("default", "a", {"unrelated": "x"})  # the service's copy is now stale
    schedule_and_commit(w, a)
    assert w.cluster.get_pod("default", "a").node_name == "n1"


def test_b07_leftover_plan_on_a_pending_pod_is_ignored_and_replaced() -> None:
    w = world()
    w.node("n1", 2)
    gpus = make_gpus("n1", 2)
    leftover = encode_plan(PodAllocation("old", "n1", (ContainerGrant("main", (GpuGrant(0, 1000, GPU16),)),)), gpus)
    a = w.pending("a", core="100", mem="16", annotations={KEYS.pod_plan: leftover})
    w.running("c", "n1", {0: (100, 16)})
    assert w.used("n1") == [(1000, 16), (0, 0)]
    schedule_and_commit(w, a)
    assert plan_of(w, "a").containers[0].grants[0].gpu_index == 1
    assert all(core <= 1000 for core, _ in w.used("n1"))


def test_b08_pods_of_other_schedulers_are_counted() -> None:
    w = world()
    w.node("n1", 2)
    w.running("x", "n1", gpu="1", scheduler="default-scheduler")  # no plan: inferred
    w.running("y", "n1", {0: (50, 8)}, scheduler="other")
    assert sorted(w.used("n1")) == [(500, 8), (1000, 16)]
    assert w.service.schedule_pod(w.pending("z", gpu="1")).allocation is None


def test_b14_unhealthy_gpu_and_unrelated_node_update_keep_usage() -> None:
    w = world()
    w.node("n1", 4)
    w.running("a", "n1", whole=4, gpu="4")
    node = make_node("n1", 4, unhealthy=(3,), labels={"unrelated": "changed"})
    w.cluster.patch_node_metadata("n1", labels=dict(node.labels), annotations=dict(node.annotations))
    w.service.on_node(w.cluster.get_node("n1"))
    assert w.used("n1") == [(1000, 16)] * 4
    b, c = w.pending("b", gpu="1"), w.pending("c", core="50", mem="8")
    assert w.service.schedule_pod(b).allocation is None
    assert w.service.schedule_pod(c).allocation is None
    gone = w.cluster.get_pod("default", "a")
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)
    w.service.on_pod_deleted(gone)
    placed = [schedule_and_commit(w, p) for p in (b, c)]
    assert all(g.gpu_index != 3 for p in placed for c_ in p.containers for g in c_.grants)


# ------------------------------------------------------------------------------ leadership, expiry, drift
def test_a_standby_never_writes() -> None:
    w = world()
    w.node("n1", 1)
    a = w.pending("a", core="30", mem="4")
    w.leader[0] = False
    result = w.service.schedule_pod(a)
    assert result.allocation is not None
    version = w.cluster.resource_version
    with pytest.raises(NotLeaderError):
        w.service.commit(a, result.allocation)
    assert w.cluster.resource_version == version
    assert w.service.reservation(a.uid) is None
    assert w.cluster.get_pod("default", "a").annotations == {}


def test_serving_needs_leadership_and_a_rebuild_and_losing_it_drops_reservations() -> None:
    w = world()
    w.node("n1", 1)
    assert not w.service.serving  # leader, but not rebuilt yet
    w.service.start_leading()
    assert w.service.serving
    assert w.sample("lj_runtimekit_scheduler_leader") == 1
    a = w.pending("a", core="30", mem="4")
    assert w.service.schedule_pod(a).allocation is not None
    w.leader[0] = False
    w.service.stop_leading()
    assert not w.service.serving
    assert w.service.reservation(a.uid) is None
    assert w.used("n1") == [(0, 0)]
    assert w.sample("lj_runtimekit_scheduler_leader") == 0


def test_uncommitted_reservations_expire_and_committed_ones_do_not() -> None:
    w = world()
    w.node("n1", 2)
    a, b = w.pending("a", core="30", mem="4"), w.pending("b", core="30", mem="4")
    assert w.service.schedule_pod(a).allocation is not None
    result_b = w.service.schedule_pod(b)
    assert result_b.allocation is not None
    w.service.commit(b, result_b.allocation)  # bound, but the watch has not confirmed it yet
    w.clock.now += 59
    assert w.service.expire_assumed() == []
    w.clock.now += 2
    assert w.service.expire_assumed() == [a.uid]
    assert w.service.reservation(a.uid) is None
    assert w.service.reservation(b.uid) is not None


def test_resync_repairs_drift_and_counts_it() -> None:
    w = world()
    w.node("n1", 2)
    w.running("a", "n1", {0: (30, 4)})
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)  # missed delete → extra
    hidden = new_pod(w.cluster, "h", core="20", mem="2", scheduler="other")
    w.cluster.bind_pod("default", "h", uid=hidden.uid, node="n1")  # missed add → missing
    report = w.service.resync()
    assert len(report.extra) == 1
    assert len(report.missing) == 1
    assert list(report.totals) == ["n1"]
    assert w.sample("lj_runtimekit_scheduler_drift_repairs_total") == 3  # two pods and n1's totals
    assert w.service.resync().clean


def test_corrupted_totals_alone_count_as_drift() -> None:
    w = world()
    w.node("n1", 2)
    w.running("a", "n1", {0: (30, 4)})
    ledger = w.service.sync.ledger
    corrupt_core_used(ledger, "n1", 1, delta=300)  # a bug elsewhere corrupts a running total; records agree
    report = w.service.resync()
    assert (report.missing, report.extra, report.changed) == ((), (), ())
    assert drift_count(report) == 1
    assert w.sample("lj_runtimekit_scheduler_drift_repairs_total") == 1
    assert w.used("n1") == [(300, 4), (0, 0)]


# ---------------------------------------------------------------------------------------------- policies and selectors
def test_per_pod_policy_override_and_unknown_policy() -> None:
    w = world(policy="binpack")
    w.node("n1", 2)
    w.running("r", "n1", {0: (50, 8)})
    packed = w.service.schedule_pod(w.pending("p", core="10", mem="1"))
    spread = w.service.schedule_pod(w.pending("s", core="10", mem="1", annotations={KEYS.pod_policy: "spread"}))
    assert packed.allocation is not None
    assert spread.allocation is not None
    assert packed.allocation.containers[0].grants[0].gpu_index == 0
    assert spread.allocation.containers[0].grants[0].gpu_index == 1
    bad = w.service.schedule_pod(w.pending("u", core="10", mem="1", annotations={KEYS.pod_policy: "nope"}))
    assert bad.allocation is None
    assert "nope" in bad.reason
    assert "known policies" in bad.reason
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="unknown-policy") == 1


def test_gpu_uuid_selection_annotation_is_honoured() -> None:
    w = world()
    w.node("n1", 2)
    pod = w.pending("a", core="10", mem="1", annotations={KEYS.pod_gpu_uuids: "GPU-n1-1"})
    assert schedule_and_commit(w, pod).containers[0].grants[0].gpu_index == 1
    avoid = w.pending("b", core="10", mem="1", annotations={KEYS.pod_gpu_uuids_exclude: "GPU-n1-0,GPU-n1-1"})
    assert w.service.schedule_pod(avoid).allocation is None


def test_invalid_request_is_unschedulable_with_the_field_named() -> None:
    w = world()
    w.node("n1", 1)
    result = w.service.schedule_pod(w.pending("a", core="150", mem="1"))
    assert result.allocation is None
    assert "gpu-core.percentage" in result.reason
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="invalid-request") == 1


@pytest.mark.parametrize(("mem", "cpu"), [("8589934591", None), ("99999999999999999999", None), ("1", "1e20")])
def test_a_huge_request_is_refused_with_the_field_and_value_named(mem: str, cpu: str | None) -> None:
    w = world()
    w.node("n1", 1)
    limits = {PROTOCOL.resources.memory: mem, **({"cpu": cpu} if cpu else {})}
    pod = w.cluster.create_pod(PodObject("", "default", "a", containers=(ContainerSpec("main", limits=limits),),
                                         scheduler_name=PROTOCOL.scheduler_name))
    result = w.service.schedule_pod(pod)  # was OverflowError "Python int too large to convert to C long"
    assert result.allocation is None
    field, value = ("cpu", cpu) if cpu else (PROTOCOL.resources.memory, mem)
    assert f"pod[default/a].container[main].{field}=" in result.reason
    assert value in result.reason
    assert "at most" in result.reason
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="invalid-request") == 1


def test_a_foreign_pod_with_an_impossible_request_makes_its_node_unusable_not_a_smaller_booking() -> None:
    w = world()
    w.node("n1", 2)
    w.node("n2", 1)
    w.running("x", "n1", mem="8589934591", scheduler="default-scheduler")  # 2^63 - 2^30 bytes of GPU memory
    assert w.used("n1") == [(0, 0), (0, 0)]  # no guess on some GPU (was core 1000 and the memory on GPU 0)

    def gate() -> str:
        return w.service.sync.gates.get("n1", "")

    assert "GPU usage is unknown" in gate()
    assert f"pod[default/x].container[main].{PROTOCOL.resources.memory}=8589934591" in gate()
    result = w.service.schedule_pod(w.pending("z", core="10", mem="1"))
    assert result.allocation is not None
    assert result.allocation.node == "n2"
    w.service.resync()  # books rebuilt from a listing keep the node gated
    assert "GPU usage is unknown" in gate()
    w.cluster.delete_pod("default", "x", grace_period_seconds=0)
    w.service.on_pod_deleted(Tombstone("default/x"))
    assert gate() == ""


def test_a_foreign_pod_asking_for_zero_gpu_does_not_gate_its_node() -> None:
    w = world()
    w.node("n1", 1)
    w.running("x", "n1", core="0", scheduler="default-scheduler")  # kubelet hands it no device
    assert w.service.sync.gates.get("n1", "") == ""
    result = w.service.schedule_pod(w.pending("z", core="10", mem="1"))
    assert result.allocation is not None
    assert result.allocation.node == "n1"


# ---------------------------------------------------------------------------------------------- terms and rebuilds
QUICK = (0.01, 0.02)


def test_a_failed_rebuild_on_gaining_leadership_never_serves_and_is_retried() -> None:
    w = world()
    w.node("n1", 1)
    w.cluster.list_failures.extend([UnavailableError("list pods: API server unavailable")] * 2)
    states: list[bool] = []
    w.cluster.on_list = lambda: states.append(w.service.serving)
    assert w.service.start_leading(backoff=QUICK) is True
    assert states == [False, False, False]  # two failed rebuilds, then the one that worked
    assert w.service.serving
    assert w.sample("lj_runtimekit_scheduler_leader") == 1


def test_the_rebuild_waits_for_both_informers_and_stops_with_its_term() -> None:
    w = world()
    w.node("n1", 1)
    checks = {"n": 0}

    def ready() -> bool:
        checks["n"] += 1
        return checks["n"] > 3

    assert w.service.start_leading(ready=ready, backoff=QUICK)
    assert checks["n"] == 4
    term = w.service.begin_leading()
    w.cluster.on_list = w.service.stop_leading  # leadership ends while the new term lists
    assert w.service.rebuild_ledger(term, backoff=QUICK) is False
    assert not w.service.serving
    assert w.sample("lj_runtimekit_scheduler_leader") == 0
    stale = w.service.begin_leading()
    w.cluster.on_list = None
    newer = w.service.begin_leading()
    assert w.service.rebuild_ledger(stale) is False  # a late rebuild of an old term serves nothing
    assert not w.service.serving
    assert w.service.rebuild_ledger(newer) is True
    assert w.service.serving


def test_a_rebuild_thread_of_an_old_term_gives_up_while_failing() -> None:
    w = world()
    w.cluster.list_failures.extend([UnavailableError("unreachable")] * 1000)
    stop = threading.Event()
    term = w.service.begin_leading()
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.append(w.service.rebuild_ledger(term, stop=stop, backoff=QUICK)))
    thread.start()
    try:
        assert wait_for(lambda: len(w.cluster.list_failures) < 995)
        assert not w.service.serving
        w.service.stop_leading()
        thread.join(5)
        assert done == [False]
    finally:
        stop.set()
        thread.join(5)


# ---------------------------------------------------------------------------------------------- resync off the lock
def test_resync_lists_and_rebuilds_without_holding_the_lock() -> None:
    w = world()
    w.node("n1", 1)
    free: list[bool] = []

    def probe() -> None:  # another thread (an informer, a cycle) must get the lock while we list
        got: list[bool] = []

        def grab() -> None:
            lock = w.service._lock  # the test asserts the lock is free while the service lists
            if lock.acquire(timeout=1):
                lock.release()
                got.append(True)

        thread = threading.Thread(target=grab)
        thread.start()
        thread.join(5)
        free.append(got == [True])

    w.cluster.on_list = probe
    w.service.resync()
    assert free == [True]


def test_resync_adopts_only_a_listing_at_least_as_new_as_the_informers() -> None:
    w = world()
    w.node("n1", 1)
    schedule_and_commit(w, w.pending("a", core="100", mem="16"))
    applied = {"pods": "0"}
    w.service.listing.watermarks = lambda: ("0", applied["pods"])

    def informer_overtakes() -> None:  # the pod is deleted, and its delete applied, after this listing
        w.cluster.on_list = None
        gone = w.cluster.get_pod("default", "a")
        w.cluster.delete_pod("default", "a", grace_period_seconds=0)
        applied["pods"] = w.cluster.resource_version
        w.service.on_pod_deleted(gone)

    listed = w.cluster.list_pods
    versions: list[str] = []

    def spying_list(*, field_selector: str = "") -> object:
        listing = listed(field_selector=field_selector)
        versions.append(listing.resource_version)
        informer_overtakes() if len(versions) == 1 else None
        return listing

    w.cluster.list_pods = spying_list  # type: ignore[method-assign,assignment]
    report = w.service.resync()
    assert len(versions) == 2  # the first listing still had the deleted pod: not adopted
    assert report.clean
    assert w.used("n1") == [(0, 0)]
    applied["pods"] = str(10**9)
    with pytest.raises(StaleListingError):
        w.service.resync()
    assert w.used("n1") == [(0, 0)]


def test_events_already_in_the_adopted_listing_are_not_reapplied() -> None:
    w = world()
    w.node("n1", 1)
    schedule_and_commit(w, w.pending("a", core="100", mem="16"))
    pending_copy = w.cluster.get_pod("default", "a")
    w.service.resync()
    stale = attrs.evolve(pending_copy, node_name="", resource_version=str(int(pending_copy.resource_version) - 1))
    w.service.on_pod(stale)  # a late watch event older than the listing: the books already hold the newer state
    assert w.used("n1") == [(1000, 16)]


# ---------------------------------------------------------------------------------------------- identity
def test_a_pod_recreated_under_the_same_name_releases_the_old_uid() -> None:
    w = world()
    w.node("n1", 1)
    schedule_and_commit(w, w.pending("a", core="100", mem="16"))
    old = w.cluster.get_pod("default", "a")
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)  # the delete never reaches the service
    again = w.pending("a", core="100", mem="16")
    assert again.uid != old.uid
    assert w.used("n1") == [(0, 0)]
    assert w.service.schedule_pod(again).allocation is not None


# ---------------------------------------------------------------------------------------------- held reservations
def held_on_n1(w: World, **annotations: str) -> tuple[PodObject, PodAllocation]:
    w.node("n1", 2)
    w.node("n2", 2)
    pod = w.pending("a", core="30", mem="4", annotations=annotations or None)
    result = w.service.schedule_pod(pod, candidates=["n1"])
    assert result.allocation is not None
    assert result.allocation.node == "n1"
    return pod, result.allocation


def test_a_valid_held_reservation_is_kept() -> None:
    w = world()
    pod, allocation = held_on_n1(w)
    again = w.service.schedule_pod(pod, candidates=["n1", "n2"])
    assert again.reason == "already reserved"
    assert again.allocation == allocation


@pytest.mark.parametrize("change", ["stale-inventory", "cordoned", "tainted", "selector", "gpu-excluded",
                                    "unhealthy-gpu"])
def test_a_held_reservation_that_no_longer_passes_is_redone(change: str) -> None:
    w = world()
    pod, allocation = held_on_n1(w)
    gpu = allocation.containers[0].grants[0].gpu_index
    if change == "stale-inventory":
        w.clock.now += PROTOCOL.inventory_stale_seconds + 1
        w.service.sync.tick()  # staleness only: the service's tick would also expire the reservation (TTL 60 s)
        w.service.on_node(make_node("n2", 2, heartbeat=w.clock.now))
    elif change in ("cordoned", "tainted", "unhealthy-gpu"):
        node = make_node("n1", 2, unschedulable=change == "cordoned", unhealthy=(gpu,) if change == "unhealthy-gpu"
                         else (), taints=(Taint("dedicated", TaintEffect.NO_SCHEDULE),) if change == "tainted" else ())
        w.cluster.patch_node_metadata("n1", annotations=dict(node.annotations))
        w.service.on_node(node)
    elif change == "selector":
        pod = attrs.evolve(pod, node_selector={"pool": "b"})
        w.service.on_node(make_node("n2", 2, labels={"pool": "b"}))
    else:
        pod = attrs.evolve(pod, annotations={KEYS.pod_gpu_uuids_exclude: f"GPU-n1-{gpu}"})
    assert w.service.reservation(pod.uid) == allocation
    again = w.service.schedule_pod(pod, candidates=["n1", "n2"])
    assert again.reason != "already reserved"
    assert again.allocation is not None
    placed = (again.allocation.node, again.allocation.containers[0].grants[0].gpu_index)
    assert placed != ("n1", gpu)
    assert w.service.reservation(pod.uid) == again.allocation


def test_node_component_with_another_protocol_gets_an_event_a_metric_and_no_gpu_pods() -> None:
    w = world()
    w.node("n1")
    keys = PROTOCOL.annotations
    ours = PROTOCOL.fingerprint()
    assert w.sample("lj_runtimekit_protocol_info", component="scheduler", fingerprint=ours) == 1
    assert w.sample("lj_runtimekit_scheduler_protocol_mismatch_nodes", component="exporter") == 0
    node = w.cluster.patch_node_metadata("n1", annotations={keys.node_exporter_protocol: "f" * 16})
    w.service.on_node(node)
    w.service.on_node(node)  # the same state again: no second Event
    assert w.sample("lj_runtimekit_scheduler_protocol_mismatch_nodes", component="exporter") == 1
    [event] = [e for e in w.cluster.events if e.reason == "ProtocolMismatch"]
    assert (event.kind, event.name, event.type, event.uid) == ("Node", "n1", "Warning", node.uid)
    assert event.count == 1  # not even a repeat of it (the cluster folds repeats into the count)
    assert f"exporter on node n1 runs protocol {'f' * 16}, the scheduler {ours}" in event.message
    result = w.service.schedule_pod(w.pending("p", core="50", mem="4"))
    assert not result.scheduled
    node = w.cluster.patch_node_metadata("n1", annotations={keys.node_exporter_protocol: ours})
    w.service.on_node(node)
    assert w.sample("lj_runtimekit_scheduler_protocol_mismatch_nodes", component="exporter") == 0
    assert w.service.schedule_pod(w.pending("q", core="50", mem="4")).scheduled
    w.service.on_node_deleted("n1")
    assert [e.count for e in w.cluster.events if e.reason == "ProtocolMismatch"] == [1]


def test_a_follower_records_the_mismatch_metric_but_no_event() -> None:
    w = world()
    w.leader[0] = False
    w.node("n1")
    node = w.cluster.patch_node_metadata("n1", annotations={PROTOCOL.annotations.node_protocol: "0" * 16})
    w.service.on_node(node)
    assert w.sample("lj_runtimekit_scheduler_protocol_mismatch_nodes", component="device-plugin") == 1
    assert not [e for e in w.cluster.events if e.reason == "ProtocolMismatch"]
