"""MIG through the scheduler component (entrypoints.scheduler): the service, the extender, the flag, a replay.

Behaviours covered:

* static strategy: a pending pod asking for ``alibabacloud.com/mig-3g.40gb: 1`` is reserved on a free instance,
  the plan annotation the binding carries names that instance (GPU UUID, start, instance id), the bound pod's
  plan confirms the reservation; a second pod takes the other instance, a third finds none (reason names the
  profile); a restart rebuild counts the bound pods from their plans;
* dynamic strategy: placements chosen by fragmentation loss (a 3g at slice 4 of an empty GPU) with ``create``;
* B30: an unknown profile comes back unscheduled with "invalid request … unknown profile", counted as an invalid
  request in the metrics, and the standalone loop records it in a FailedScheduling event (never a silent Pending);
* reservations: a repeated cycle keeps a valid MIG reservation, decides again when its GPU turns unhealthy, expiry
  and lost leadership release the instances, a commit without MIG reservation fails and releases;
* extender: ``filter`` answers for MIG pods with the chosen node and per-node MIG reasons; an unknown profile is an
  invalid request on every candidate;
* ``--mig-strategy`` reaches the service; unknown strategies are refused;
* replay: the issue's MIG workload (``domain.scheduling.mig.replay``) replayed through the scheduler service — pods
  created, scheduled, committed and deleted — places exactly the requests the MIG plugin's own replay places, static and
  dynamic, because both go through the same :class:`~domain.scheduling.mig.plugin.MigPlugin`.
"""

from __future__ import annotations

import heapq

import attrs
import pytest

from adapters.prometheus import PrometheusSchedulerMetrics
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations import decode_mig_plan
from domain.kube.objects import NodeObject, PodObject
from domain.scheduling.mig.replay import MigReplayConfig, mig_cluster, run_replay, synthetic_jobs
from domain.scheduling.sync import Tombstone
from entrypoints.scheduler.__main__ import build_parser, settings_from_args
from entrypoints.scheduler.app import SchedulerSettings, SettingsError
from entrypoints.scheduler.containers import service_config
from entrypoints.scheduler.extender_json import ExtenderJson
from services.scheduler.extender import Extender
from services.scheduler.service import CommitError, SchedulerService, ServiceConfig
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import KEYS, NOW, PROTOCOL, Clock, make_node
from support.mig_builders import mig_gpus, mig_node, mig_pod
from support.scheduler_world import FlakyCluster

RESOURCE = "alibabacloud.com/mig-3g.40gb"


@attrs.define
class MigWorld:
    cluster: FlakyCluster
    service: SchedulerService
    metrics: PrometheusSchedulerMetrics
    clock: Clock

    def node(self, node: NodeObject) -> None:
        self.service.on_node(self.cluster.create_node(node))

    def pending(self, name: str, profile: str = "3g.40gb", count: int = 1) -> PodObject:
        pod = self.cluster.create_pod(attrs.evolve(mig_pod("", profile, count), name=name))
        self.service.on_pod(pod)
        return pod

    def place(self, pod: PodObject) -> PodObject:
        result = self.service.schedule_pod(pod)
        assert result.allocation is not None, result.reason
        self.service.commit(pod, result.allocation)
        bound = self.cluster.get_pod("default", pod.name)
        self.service.on_pod(bound)
        return bound


def mig_world(strategy: str = "static") -> MigWorld:
    clock = Clock(NOW)
    cluster = FlakyCluster()
    metrics = PrometheusSchedulerMetrics()
    service = SchedulerService(cluster, PROTOCOL, metrics, config=ServiceConfig(
        policy="binpack", mig_strategy=strategy, admission_hold_seconds=None), clock=clock)  # no device plugin
    return MigWorld(cluster, service, metrics, clock)


def plan_of(w: MigWorld, pod: PodObject) -> list[tuple[int, str, str, int, bool, str | None]]:
    [container] = decode_mig_plan(pod.annotations[KEYS.pod_plan], key=KEYS.pod_plan, pod_uid=pod.uid,
                                  node=pod.node_name, node_gpus=w.service.sync.ledger.inventory(pod.node_name).gpus)
    return [(i.gpu_index, i.gpu_uuid, i.profile, i.start, i.create, i.instance_id) for i in container.instances]


# ---------------------------------------------------------------------------------------------- service
def test_static_pods_take_free_instances_and_the_plan_names_them() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}, gpus=mig_gpus("n1", 1)))
    first = w.place(w.pending("a"))
    second = w.place(w.pending("b"))
    plans = [plan_of(w, first), plan_of(w, second)]
    assert sorted(plans) == [[(0, "GPU-n1-0", "3g.40gb", 0, False, "1")],
                             [(0, "GPU-n1-0", "3g.40gb", 4, False, "5")]]
    assert w.service.sync.books.assumed == {}  # confirmed by the plans
    third = w.service.schedule_pod(w.pending("c"))
    assert third.allocation is None
    assert "no free instance or placement for 3g.40gb" in third.reason
    # a restarted replica counts the bound pods from their plans
    fresh = w.service.sync.rebuild(w.cluster.list_nodes().items, w.cluster.list_pods().items)
    assert set(fresh.mig.node("n1").records()) == {first.uid, second.uid}


def test_dynamic_placement_creates_at_the_least_fragmenting_start() -> None:
    w = mig_world("dynamic")
    w.node(mig_node("n1", gpus=mig_gpus("n1", 1), strategy="dynamic"))
    first = w.place(w.pending("a"))
    assert plan_of(w, first) == [(0, "GPU-n1-0", "3g.40gb", 4, True, None)]
    second = w.place(w.pending("b", "4g.40gb"))
    assert plan_of(w, second) == [(0, "GPU-n1-0", "4g.40gb", 0, True, None)]
    assert w.service.schedule_pod(w.pending("c", "1g.10gb")).allocation is None


def test_b30_unknown_profile_is_reported_never_silently_pending() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0)]}))
    pod = w.pending("bad", "3g.41gb")
    result = w.service.schedule_pod(pod)
    assert result.allocation is None
    assert result.reason.startswith("invalid request")
    assert "unknown profile" in result.reason
    assert w.metrics.registry.get_sample_value(
        "lj_runtimekit_scheduler_failures_total", {"reason": "invalid-request"}) == 1.0
    w.service.start_leading()
    loop = StandaloneLoop(w.service, clock=w.clock)
    loop.offer(pod)
    assert not loop.attempt(pod)
    [event] = [e for e in w.cluster.events if e.reason == "FailedScheduling"]
    assert "unknown profile" in event.message
    assert f"{RESOURCE[:-len('3g.40gb')]}3g.41gb" in event.message


def test_reservation_kept_while_valid_and_released_when_not() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0)], 1: [("3g.40gb", 0)]}))
    pod = w.pending("a")
    first = w.service.schedule_pod(pod)
    assert first.allocation is not None
    assert w.service.schedule_pod(pod).reason == "already reserved"
    [booking] = w.service.sync.books.assumed[pod.uid].bookings
    w.service.on_node(mig_node("n1", {0: [("3g.40gb", 0)], 1: [("3g.40gb", 0)]},
                               gpus=mig_gpus("n1", unhealthy=(booking.gpu_index,)), heartbeat=NOW + 1))
    again = w.service.schedule_pod(pod)
    assert again.allocation is not None
    assert again.reason == ""
    [moved] = w.service.sync.books.assumed[pod.uid].bookings
    assert moved.gpu_index != booking.gpu_index
    w.clock.now += 3600
    assert w.service.expire_assumed() == [pod.uid]
    assert w.service.sync.books.record(pod.uid) is None


def test_commit_without_mig_reservation_fails_and_releases() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0)]}))
    pod = w.pending("a")
    result = w.service.schedule_pod(pod)
    assert result.allocation is not None
    w.service.release(pod.uid)
    with pytest.raises(CommitError, match="no MIG reservation"):
        w.service.commit(pod, result.allocation)
    assert KEYS.pod_plan not in w.cluster.get_pod("default", "a").annotations
    assert w.service.reservation(pod.uid) is None


def test_leadership_loss_drops_uncommitted_mig_reservations() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0)]}))
    w.service.start_leading()
    pod = w.pending("a")
    assert w.service.schedule_pod(pod).allocation is not None
    w.service.stop_leading()
    assert w.service.sync.books.record(pod.uid) is None


# ---------------------------------------------------------------------------------------------- extender
def pod_json(pod: PodObject) -> dict[str, object]:
    containers = [{"name": c.name, "resources": {"limits": dict(c.limits)}} for c in pod.containers]
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "spec": {"containers": containers, "schedulerName": PROTOCOL.scheduler_name}, "status": {}}


def test_extender_filter_answers_for_mig_pods() -> None:
    w = mig_world()
    w.node(mig_node("n1", {0: [("3g.40gb", 0)]}))
    w.node(mig_node("n2", {0: [("1g.10gb", 0)]}))
    w.node(make_node("n3", 2, heartbeat=NOW))
    w.service.start_leading()
    extender = ExtenderJson(Extender(w.service))
    pod = w.pending("a")
    reply = extender.filter({"Pod": pod_json(pod), "NodeNames": ["n1", "n2", "n3"]})
    assert reply["NodeNames"] == ["n1"]
    assert reply["FailedNodes"] == {}
    other = w.pending("b")
    refused = extender.filter({"Pod": pod_json(other), "NodeNames": ["n1", "n2", "n3"]})
    assert refused["NodeNames"] == []
    failed = refused["FailedNodes"]
    assert isinstance(failed, dict)
    assert failed["n3"] == "MIG: not a MIG node"
    assert failed["n2"].startswith("MIG: ")
    assert "3g.40gb" in failed["n1"]
    assert extender.prioritize({"Pod": pod_json(pod), "NodeNames": ["n1", "n2", "n3"]}) == [
        {"Host": "n1", "Score": 10}, {"Host": "n2", "Score": 0}, {"Host": "n3", "Score": 0}]
    assert extender.bind({"PodName": "a", "PodNamespace": "default", "PodUID": pod.uid, "Node": "n1"}) == {"Error": ""}
    assert w.cluster.get_pod("default", "a").node_name == "n1"
    bad = w.pending("bad", "3g.41gb")
    invalid = extender.filter({"Pod": pod_json(bad), "NodeNames": ["n1", "n2"]})
    failed = invalid["FailedNodes"]
    assert isinstance(failed, dict)
    assert set(failed) == {"n1", "n2"}
    assert all("unknown profile" in why for why in failed.values())


# ---------------------------------------------------------------------------------------------- flag
def test_mig_strategy_flag_reaches_the_service() -> None:
    args = build_parser().parse_args(["--mode", "standalone", "--listen", ":0", "--mig-strategy", "dynamic"])
    settings = settings_from_args(args)
    assert settings.mig_strategy == "dynamic"
    assert service_config(settings).mig_strategy == "dynamic"
    assert build_parser().parse_args(["--mode", "extender", "--listen", "127.0.0.1:0"]).mig_strategy == "static"
    with pytest.raises(SettingsError, match="mig_strategy"):
        SchedulerSettings(mig_strategy="sometimes")
    with pytest.raises(ValueError, match="mig_strategy"):
        ServiceConfig(mig_strategy="sometimes")


# ---------------------------------------------------------------------------------------------- replay
@pytest.mark.parametrize("mode", ["static:all-balanced", "static:mixed", "dynamic"])
def test_scheduler_replay_places_what_the_mig_plugin_replay_places(mode: str) -> None:
    config = MigReplayConfig(nodes=2, gpus_per_node=4, requests=160, load=1.3, mean_duration=50.0)
    expected = run_replay(config, seed=7, mode=mode)
    strategy = "dynamic" if mode == "dynamic" else "static"
    w = mig_world(strategy)
    reference = mig_cluster(config, mode)
    for name in reference.node_names():
        books = reference.node(name).gpus()
        gpus = tuple(Gpu(g.index, GpuUuid(g.uuid), g.model.key, g.model.memory_bytes, mig_mode=MigMode.ENABLED)
                     for g in books)
        layout = {g.index: [(i.profile.name, i.start) for i in g.instances] for g in books}
        w.node(mig_node(name, layout, gpus=gpus, strategy=strategy))
    placed = dict.fromkeys((name for name, _ in config.mix), 0)
    rejected = dict(placed)
    departures: list[tuple[float, str]] = []
    for job in synthetic_jobs(config, seed=7):
        while departures and departures[0][0] <= job.arrival:
            _, name = heapq.heappop(departures)
            gone = w.cluster.get_pod("default", name)
            w.cluster.delete_pod("default", name, grace_period_seconds=0)
            w.service.on_pod_deleted(Tombstone(gone.key, gone))
        pod = w.pending(job.uid, job.profile)
        result = w.service.schedule_pod(pod)
        if result.allocation is None:
            rejected[job.profile] += 1
            w.cluster.delete_pod("default", job.uid, grace_period_seconds=0)
            w.service.on_pod_deleted(pod)
            continue
        w.service.commit(pod, result.allocation)
        w.service.on_pod(w.cluster.get_pod("default", job.uid))
        placed[job.profile] += 1
        heapq.heappush(departures, (job.arrival + job.duration, job.uid))
    assert tuple((name, placed[name], rejected[name]) for name, _ in config.mix) == expected.per_profile
    assert expected.rejected > 0  # the workload is large enough to exercise refusals
