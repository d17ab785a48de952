"""Series of ended pods leave ``/metrics`` at the next pull, on the in-process Runtime,
pod-resources and cluster.

Kubelets before 1.34 keep listing a terminated pod in pod-resources until the pod is deleted, and the Runtime keeps its
record until the device plugin releases it (``--release-interval``, up to about a minute), so the exporter learns
from the API too, through a watch of the node's pods (a pull makes no API request). "The next pull" is the first
pull after the watch delivered the change (:meth:`World.settle` waits for that condition). Behaviours covered:
- a pod that turns Succeeded (or Failed) while kubelet and the Runtime still list it has no series from the first
  pull after (measured in pulls: 1); a pod deleted from the API, or replaced by a pod of the same name with a new
  UID, likewise; its MIG instance is reported free; it stays gone;
- a pod deleted before the exporter's first pull leaves at that first pull (the first LIST waits for it);
- a pod whose container restarted (same UID, still Running) keeps its series and its Runtime record;
- without pod-resources, the API alone removes ended pods;
- a failing API (list and watch) keeps what was learned (an ended pod is never resurrected, a new pod is never
  dropped), is logged and counted (``exporter_pod_api_errors_total``: failed list/watch attempts);
- a pod the watch has not delivered yet is kept even once it is gone from the API (no evidence); one the view never
  saw is dropped after a relist (410 Gone) that started after it appeared in the Runtime's data;
- a pull makes no API request: one LIST and one WATCH for many pulls;
- the pure rules: ``ended_uids`` (terminal or absent from a listing taken after the rows) and ``drop_pods``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.podresources import InMemoryPodResources
from domain.exporter.attribution import PodContainerDevices
from domain.exporter.liveness import drop_pods, ended_uids
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import ContainerSpec, Listing, PodObject, PodPhase, WatchEvent
from domain.mig.gpu import MigOwner
from domain.runtime.types import (
    ContainerAllocationRequest,
    ContainerData,
    ContainerGpuData,
    ExporterData,
    MigInstanceData,
    MigInstanceInfo,
    PlannedGpu,
)
from entrypoints.exporter.app import ExporterApp, ExporterSettings
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.cluster import UnavailableError
from services.exporter.podphases import EndedPods
from support.polling import wait_for

GIB = 1 << 30
NODE = "n1"
GPUS = [Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(2)]
LIMIT = "lj_runtimekit_container_gpu_core_limit_ratio"


def _pods_on_metrics(app: ExporterApp) -> set[str]:
    out = set()
    for family in text_string_to_metric_families(app.exposition().decode()):
        for sample in family.samples:
            if sample.name == LIMIT:
                out.add(sample.labels["pod"])
    return out


class World:
    """Runtime, kubelet's pod-resources and the API as the exporter container sees them."""

    def __init__(self, tmp_path: Path, *, pod_resources: bool = True, cluster: InMemoryCluster | None = None,
                 watch_timeout_s: float = 0.3) -> None:
        self.runtime = InProcessRuntime(GPUS)
        self.kubelet = InMemoryPodResources()
        self.cluster = cluster or InMemoryCluster()
        settings = ExporterSettings(node_name=NODE, runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0",
                                    pod_resources_socket=tmp_path / "pr.sock" if pod_resources else None,
                                    watch_timeout_s=watch_timeout_s)  # short: close() waits for the watch
        self.container = ExporterContainer(settings=settings)
        self.container.runtime.override(providers.Object(self.runtime))
        self.container.pod_resources.override(providers.Object(self.kubelet if pod_resources else None))
        self.container.cluster.override(providers.Object(self.cluster))
        self.app = self.container.app()
        self.app.collector.start()  # the watch of the node's pods, as ExporterApp.start does
        self.listed: dict[str, PodContainerDevices] = {}

    @property
    def ended_pods(self) -> EndedPods:
        ended = self.container.ended_pods()
        assert ended is not None
        return ended

    def settle(self) -> None:
        """Wait until the exporter's view of the node's pods has applied the cluster's last write (which must be
        a change of a pod on the node)."""
        assert wait_for(lambda: self.ended_pods.resource_version == self.cluster.resource_version), (
            self.ended_pods.resource_version, self.cluster.resource_version)

    def run_pod(self, name: str, gpu: int = 0) -> PodObject:
        pod = self.cluster.create_pod(PodObject("", "ns", name, (ContainerSpec("main"),)))
        self.cluster.bind_pod("ns", name, uid=pod.uid, node=NODE)
        pod = self.cluster.set_pod_phase("ns", name, PodPhase.RUNNING)
        self.runtime.allocate(ContainerAllocationRequest(pod.uid, "ns", name, "main",
                                                         (PlannedGpu(gpu, GpuUuid(f"GPU-{gpu}"), core_milli=250),)))
        self.listed[name] = PodContainerDevices("ns", name, "main", [f"GPU-{gpu}::core::0"])
        self.kubelet.set_containers(self.listed.values())
        return pod

    def pull(self) -> set[str]:
        self.app.collector.refresh()
        return _pods_on_metrics(self.app)

    def snapshot_runtime_up(self) -> bool:
        return self.app.collector.snapshot().runtime_up

    def close(self) -> None:
        self.app.collector.close()


def test_completed_pod_leaves_metrics_at_the_next_pull_while_kubelet_and_runtime_still_list_it(
        tmp_path: Path) -> None:
    world = World(tmp_path)
    try:
        world.run_pod("done")
        world.run_pod("crashed", gpu=1)
        world.run_pod("stays")
        assert world.pull() == {"done", "crashed", "stays"}
        world.cluster.set_pod_phase("ns", "done", PodPhase.SUCCEEDED)
        world.cluster.set_pod_phase("ns", "crashed", PodPhase.FAILED)
        world.settle()
        pulls = 1
        while world.pull() != {"stays"} and pulls < 10:
            pulls += 1
        assert pulls == 1  # gone at the first pull after completion
        assert {r.pod_name for r in world.runtime.exporter_data().containers} == {"done", "crashed", "stays"}
        assert len(world.kubelet.list_containers()) == 3  # a kubelet before 1.34 still lists them
        world.cluster.delete_pod("ns", "done")
        assert world.pull() == {"stays"}
    finally:
        world.close()


def test_deleted_or_replaced_pod_leaves_at_the_next_pull(tmp_path: Path) -> None:
    world = World(tmp_path)
    try:
        world.run_pod("deleted")
        old = world.run_pod("web-0", gpu=1)
        assert world.pull() == {"deleted", "web-0"}
        world.cluster.delete_pod("ns", "deleted", grace_period_seconds=0)  # gone from the API; kubelet still lists it
        world.cluster.delete_pod("ns", "web-0", grace_period_seconds=0)
        fresh = world.cluster.create_pod(PodObject("", "ns", "web-0", (ContainerSpec("main"),)))
        world.cluster.bind_pod("ns", "web-0", uid=fresh.uid, node=NODE)
        world.cluster.set_pod_phase("ns", "web-0", PodPhase.RUNNING)  # same name, new UID, no record yet
        assert fresh.uid != old.uid
        world.settle()
        assert world.pull() == set()
        assert world.pull() == set()
    finally:
        world.close()


def test_restarted_container_keeps_its_series_and_reservation(tmp_path: Path) -> None:
    world = World(tmp_path)
    try:
        pod = world.run_pod("flaky")
        for _ in range(3):  # the container exits and kubelet restarts it: same pod UID, still Running
            world.kubelet.set_containers(world.listed.values())
            assert world.pull() == {"flaky"}
        assert world.cluster.get_pod("ns", "flaky").phase is PodPhase.RUNNING
        assert [r.pod_uid for r in world.runtime.exporter_data().containers] == [pod.uid]
    finally:
        world.close()


def test_without_pod_resources_the_api_alone_removes_ended_pods(tmp_path: Path) -> None:
    world = World(tmp_path, pod_resources=False)
    try:
        world.run_pod("done")
        world.run_pod("stays", gpu=1)
        assert world.pull() == {"done", "stays"}
        world.cluster.set_pod_phase("ns", "done", PodPhase.SUCCEEDED)
        world.settle()
        assert world.pull() == {"stays"}
    finally:
        world.close()


def test_a_pod_deleted_before_the_first_pull_leaves_at_the_first_pull(tmp_path: Path) -> None:
    world = World(tmp_path)
    try:
        world.run_pod("old")
        world.run_pod("stays", gpu=1)
        world.cluster.delete_pod("ns", "old", grace_period_seconds=0)  # the Runtime still holds its record
        assert world.pull() == {"stays"}  # the first LIST started after this pull read the Runtime
    finally:
        world.close()


class FlakyCluster(InMemoryCluster):
    """``list_pods`` and ``watch_pods`` raise while ``down``; a running watch breaks at its next event. Counts the
    pod requests in ``requests``."""

    down = False

    def __init__(self) -> None:
        super().__init__()
        self.requests = {"list": 0, "watch": 0}

    def list_pods(self, *, field_selector: str = "", label_selector: str = "", namespace: str = ""
                  ) -> Listing[PodObject]:
        self.requests["list"] += 1
        if self.down:
            raise UnavailableError("API server unreachable")
        return super().list_pods(field_selector=field_selector, label_selector=label_selector, namespace=namespace)

    def watch_pods(self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
                   ) -> Iterator[WatchEvent[PodObject]]:
        self.requests["watch"] += 1
        if self.down:
            raise UnavailableError("API server unreachable")
        for event in super().watch_pods(resource_version=resource_version, timeout_seconds=timeout_seconds,
                                        field_selector=field_selector):
            if self.down:
                raise UnavailableError("watch stream broken")
            yield event


def test_failing_api_keeps_what_was_learned_and_is_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    flaky = FlakyCluster()
    world = World(tmp_path, cluster=flaky)
    try:
        world.run_pod("done")
        world.run_pod("stays")
        assert world.pull() == {"done", "stays"}
        flaky.set_pod_phase("ns", "done", PodPhase.SUCCEEDED)
        world.settle()
        assert world.pull() == {"stays"}
        with caplog.at_level(logging.WARNING):
            flaky.down = True
            world.run_pod("new", gpu=1)  # allocated while the API is down: never dropped on old evidence
            assert wait_for(lambda: world.ended_pods.errors >= 1)  # the watch broke at the pod's first event
            assert world.pull() == {"stays", "new"}  # "done" is not resurrected
        assert "pods of the node (spec.nodeName=n1): watch stream broken" in caplog.text
        errors = [s.value for f in text_string_to_metric_families(world.app.exposition().decode())
                  for s in f.samples if s.name == "lj_runtimekit_exporter_pod_api_errors_total"]
        assert len(errors) == 1
        assert errors[0] >= 1.0  # failed list/watch attempts: retries count too
        assert world.snapshot_runtime_up()  # an API outage never counts against the Runtime
        flaky.down = False
        flaky.set_pod_phase("ns", "new", PodPhase.FAILED)
        world.settle()  # the informer resumed the watch after its backoff
        assert world.pull() == {"stays"}
    finally:
        world.close()


def test_a_pod_gone_unseen_is_kept_until_a_relist_that_started_after_it_appeared(tmp_path: Path) -> None:
    flaky = FlakyCluster()
    world = World(tmp_path, cluster=flaky)
    try:
        world.run_pod("stays")
        assert world.pull() == {"stays"}
        flaky.down = True
        world.run_pod("ghost", gpu=1)  # the view never sees it: the watch breaks at its first event
        assert wait_for(lambda: world.ended_pods.errors >= 1)
        assert world.pull() == {"stays", "ghost"}
        flaky.delete_pod("ns", "ghost", grace_period_seconds=0)  # gone from the API, the Runtime keeps its record
        assert world.pull() == {"stays", "ghost"}  # unknown to the view is no evidence
        flaky.compact()  # the watch's resourceVersion is now too old: 410 Gone, relist
        flaky.down = False
        assert wait_for(lambda: world.ended_pods.informer.relists == 2)
        assert world.pull() == {"stays"}
        assert world.pull() == {"stays"}
    finally:
        world.close()


class HeldCluster(InMemoryCluster):
    """``watch_pods`` delivers no event while ``held`` is clear (a watch that lags behind the API)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = threading.Event()
        self.held.set()

    def watch_pods(self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
                   ) -> Iterator[WatchEvent[PodObject]]:
        for event in super().watch_pods(resource_version=resource_version, timeout_seconds=timeout_seconds,
                                        field_selector=field_selector):
            self.held.wait()
            yield event


def test_a_pod_the_watch_has_not_delivered_yet_is_kept_even_once_gone(tmp_path: Path) -> None:
    held = HeldCluster()
    world = World(tmp_path, cluster=held)
    try:
        world.run_pod("stays")
        assert world.pull() == {"stays"}
        held.held.clear()
        world.run_pod("late", gpu=1)  # in the Runtime's data before the view heard of it
        assert world.pull() == {"stays", "late"}
        held.delete_pod("ns", "late", grace_period_seconds=0)
        assert world.pull() == {"stays", "late"}  # still no evidence: the view lags
        held.held.set()
        world.settle()  # ADDED, MODIFIED, then DELETED arrive
        assert world.pull() == {"stays"}
        assert world.ended_pods.errors == 0
    finally:
        world.close()


def test_pulls_make_no_api_request(tmp_path: Path) -> None:
    flaky = FlakyCluster()
    world = World(tmp_path, cluster=flaky, watch_timeout_s=30.0)  # no WATCH ends during the test
    try:
        world.run_pod("a")
        for _ in range(20):
            assert world.pull() == {"a"}
        assert wait_for(lambda: flaky.requests["watch"] == 1)
        assert flaky.requests == {"list": 1, "watch": 1}  # one LIST at start, one WATCH still open
    finally:
        world.close()


def _row(uid: str) -> ContainerData:
    return ContainerData(uid, "ns", f"pod-{uid}", "main", False, (ContainerGpuData(0, GpuUuid("GPU-0"), 250, GIB),))


def _instance(owner: str | None) -> MigInstanceData:
    return MigInstanceData(MigInstanceInfo(0, GpuUuid("GPU-0"), 1, 0, "1g.10gb", 0, 1, 1, 10 * GIB, "MIG-1",
                                           None if owner is None else MigOwner(owner, "main")))


def test_ended_uids_and_drop_pods() -> None:
    pods = [PodObject("a", "ns", "a", phase=PodPhase.RUNNING), PodObject("b", "ns", "b", phase=PodPhase.SUCCEEDED),
            PodObject("p", "ns", "p", phase=PodPhase.PENDING), PodObject("f", "ns", "f", phase=PodPhase.FAILED)]
    assert ended_uids(["a", "b", "p", "f", "gone", ""], pods) == {"b", "f", "gone"}
    data = ExporterData(containers=(_row("a"), _row("b")), mig=(_instance("b"), _instance("a"), _instance(None)))
    assert drop_pods(data, frozenset()) is data
    assert drop_pods(data, {"zzz"}) is data
    dropped = drop_pods(data, {"b"})
    assert [r.pod_uid for r in dropped.containers] == ["a"]
    assert [None if m.instance.owner is None else m.instance.owner.pod_uid for m in dropped.mig] == [None, "a", None]
    assert dropped.gpus == data.gpus
