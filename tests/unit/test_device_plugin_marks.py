"""The device plugin's allocated mark and release reconciler on in-memory adapters (no sockets):
``services.device_plugin.service`` / ``.marks`` / ``.reconciler`` / ``.app`` status.

Behaviours covered:

* mark: written once, after the last resource of the last container of a pod (two containers, core + memory),
  never before, and never from inside Allocate (the write waits for the marker's pass); a MIG pod; an
  init-container-only pod; a failed patch is logged, leaves Allocate untouched and is retried; a 409 is retried at
  once with a fresh listing; a pod deleted, or re-created under the same name, before the write is not marked;
  a pod already carrying the mark is not patched again;
* reconciler: a deleted pod's records are released once older than the grace (or on the next pass), a running pod's
  are kept, a pod re-created with a new UID loses only the old UID's records; a Release that fails is retried on the
  next pass; a second releaser racing it (``ljrk up``'s emulated container runtime) is harmless (Release is
  idempotent, nothing is counted twice); a Runtime or API failure skips the pass; the count reaches the status and
  ``/metrics`` (``lj_runtimekit_device_plugin_released_records_total``);
* ``--release-interval`` parses into the settings and must be > 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.device_plugin import PrometheusDevicePluginMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.device_plugin.devices import MigResource, ResourceKind
from domain.device_plugin.pods import resource_names
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, Listing, NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.runtime.types import ContainerAllocationRequest, ExporterData, PlannedGpu
from domain.units import GiB
from entrypoints.device_plugin.__main__ import build_parser, settings_from_args
from entrypoints.device_plugin.app import DevicePluginApp, SettingsError
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.cluster import ConflictError, UnavailableError
from ports.runtime import NodeRuntimeError
from services.device_plugin.reconciler import RecordReconciler
from services.device_plugin.service import DevicePluginService
from support.kube_builders import Clock
from support.mig_builders import ALLOCATABLE, mig_pod, with_mig_plan
from support.polling import wait_for

NODE = "n1"
PROTOCOL = ProtocolConstants()
MARK = PROTOCOL.annotations.pod_allocated
CORE, MEMORY = ResourceKind.CORE, ResourceKind.MEMORY
GPUS = [Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GiB) for i in range(2)]


class FlakyCluster(InMemoryCluster):
    """An in-memory cluster that counts pod annotation patches and fails the next ``fail`` of them with
    ``error``; ``before_patch`` runs first (to change the pod under the writer)."""

    def __init__(self) -> None:
        super().__init__()
        self.patches: list[tuple[str, Mapping[str, str | None]]] = []
        self.fail = 0
        self.error: Exception = UnavailableError("connection refused")
        self.before_patch: list[Callable[[], None]] = []

    def patch_pod_annotations(
        self, namespace: str, name: str, changes: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> PodObject:
        if MARK in changes:
            self.patches.append((name, dict(changes)))
            if self.before_patch:
                self.before_patch.pop(0)()
            if self.fail:
                self.fail -= 1
                raise self.error
        return super().patch_pod_annotations(namespace, name, changes, resource_version=resource_version)


def plugin(gpus: Sequence[Gpu] = GPUS, **runtime_args: object) -> tuple[DevicePluginService, FlakyCluster,
                                                                         InProcessRuntime]:
    runtime = InProcessRuntime(gpus, **runtime_args)  # type: ignore[arg-type]
    cluster = FlakyCluster()
    cluster.create_node(NodeObject(NODE, allocatable=dict(ALLOCATABLE)))
    service = DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL, clock=Clock(1234.9))
    return service, cluster, runtime


def share(name: str, core: int, memory: int, *, init: bool = False) -> ContainerSpec:
    names = resource_names(PROTOCOL)
    return ContainerSpec(name, limits={names[CORE]: str(core), names[MEMORY]: str(memory)}, init=init)


def grant(name: str, gpu: int, core: int, memory: int, *, init: bool = False) -> ContainerGrant:
    return ContainerGrant(name, (GpuGrant(gpu, core * 10, memory * GiB),), init=init)


def bound_pod(cluster: InMemoryCluster, name: str, containers: Sequence[ContainerSpec],
              plan: Sequence[ContainerGrant]) -> PodObject:
    created = cluster.create_pod(PodObject("", "default", name, tuple(containers)))
    text = encode_plan(PodAllocation(created.uid, NODE, tuple(plan)), GPUS)
    cluster.patch_pod_annotations("default", name, {PROTOCOL.annotations.pod_plan: text})
    cluster.bind_pod("default", name, uid=created.uid, node=NODE)
    return cluster.get_pod("default", name)


def ids(count: int) -> list[str]:
    return [f"id-{i}" for i in range(count)]  # tokens only: the plan decides


# ------------------------------------------------------------------ the allocated mark
def test_mark_written_once_after_the_last_resource_of_the_last_container() -> None:
    service, cluster, _ = plugin()
    pod = bound_pod(cluster, "two", [share("a", 30, 2), share("b", 40, 3)],
                    [grant("a", 0, 30, 2), grant("b", 1, 40, 3)])
    steps = [(CORE, 30), (MEMORY, 2), (MEMORY, 3), (CORE, 40)]
    for number, (kind, count) in enumerate(steps, 1):
        service.allocate(kind, ids(count))
        assert cluster.patches == []  # never written from inside Allocate
        if number < len(steps):
            assert service.marker.pending() == ()
            assert service.marker.flush() == 0
    assert [p.uid for p in service.marker.pending()] == [pod.uid]
    assert service.marker.flush() == 1
    assert cluster.get_pod("default", "two").annotations[MARK] == "1234"
    assert service.marker.flush() == 0
    assert service.marker.pending() == ()
    assert len(cluster.patches) == 1
    assert service.marker.written == 1


def test_mig_pod_is_marked_after_its_one_mig_resource() -> None:
    gpus = (Gpu(0, GpuUuid("GPU-mig-0"), "NVIDIA A100-SXM4-80GB", 80 * GiB, mig_mode=MigMode.ENABLED),)
    service, cluster, _ = plugin(gpus, mig_layouts={0: [("3g.40gb", 0), ("3g.40gb", 4)]})
    created = cluster.create_pod(attrs.evolve(mig_pod(""), name="m"))
    allocation = MigPodAllocation(created.uid, NODE, (MigBooking(0, "3g.40gb", 4, "main"),))
    text = with_mig_plan(created, allocation, gpus, bind=False).annotations[PROTOCOL.annotations.pod_plan]
    cluster.patch_pod_annotations("default", "m", {PROTOCOL.annotations.pod_plan: text})
    cluster.bind_pod("default", "m", uid=created.uid, node=NODE)
    service.allocate(MigResource("3g.40gb"), ["x"])
    assert service.marker.flush() == 1
    assert MARK in cluster.get_pod("default", "m").annotations


def test_init_container_only_pod_is_marked_after_the_init_container() -> None:
    service, cluster, _ = plugin()
    bound_pod(cluster, "init", [share("setup", 20, 1, init=True), ContainerSpec("app")],
              [grant("setup", 1, 20, 1, init=True)])
    service.allocate(MEMORY, ids(1))
    assert service.marker.pending() == ()
    service.allocate(CORE, ids(20))
    assert service.marker.flush() == 1
    assert MARK in cluster.get_pod("default", "init").annotations


def test_failed_patch_never_fails_allocate_and_is_retried() -> None:
    service, cluster, _ = plugin()
    bound_pod(cluster, "a", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    cluster.fail = 2
    service.allocate(CORE, ids(50))
    response = service.allocate(MEMORY, ids(4))
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-0"
    assert service.marker.flush() == 0
    assert len(service.marker.pending()) == 1
    assert service.marker.flush() == 0
    assert service.marker.failures == 2
    assert service.marker.flush() == 1
    assert MARK in cluster.get_pod("default", "a").annotations
    assert len(cluster.patches) == 3


def test_conflict_is_retried_at_once_with_a_fresh_listing() -> None:
    service, cluster, _ = plugin()
    bound_pod(cluster, "a", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    cluster.fail, cluster.error = 1, ConflictError("the object has been modified")
    service.allocate(CORE, ids(50))
    service.allocate(MEMORY, ids(4))
    assert service.marker.flush() == 1
    assert len(cluster.patches) == 2


def test_pod_replaced_or_deleted_before_the_write_is_not_marked() -> None:
    service, cluster, _ = plugin()
    old = bound_pod(cluster, "web", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    service.allocate(CORE, ids(50))
    service.allocate(MEMORY, ids(4))
    cluster.delete_pod("default", "web", grace_period_seconds=0)
    new = bound_pod(cluster, "web", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    assert new.uid != old.uid
    assert service.marker.flush() == 0
    assert service.marker.pending() == ()
    assert MARK not in cluster.get_pod("default", "web").annotations
    # re-created between the listing and the patch: the resourceVersion precondition refuses the write
    service2, cluster2, _ = plugin()
    bound_pod(cluster2, "web", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    service2.allocate(CORE, ids(50))
    service2.allocate(MEMORY, ids(4))

    def replace() -> None:
        cluster2.delete_pod("default", "web", grace_period_seconds=0)
        bound_pod(cluster2, "web", [share("main", 50, 4)], [grant("main", 0, 50, 4)])

    cluster2.before_patch.append(replace)
    assert service2.marker.flush() == 0
    assert MARK not in cluster2.get_pod("default", "web").annotations
    assert service2.marker.pending() == ()


def test_pod_already_marked_is_not_patched_again() -> None:
    service, cluster, _ = plugin()
    bound_pod(cluster, "a", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    service.allocate(CORE, ids(50))
    service.allocate(MEMORY, ids(4))
    InMemoryCluster.patch_pod_annotations(cluster, "default", "a", {MARK: "1"})  # e.g. a previous plugin's write
    assert service.marker.flush() == 0
    assert cluster.get_pod("default", "a").annotations[MARK] == "1"
    assert cluster.patches == []


def test_marker_worker_writes_on_submit_and_stops() -> None:
    service, cluster, _ = plugin()
    bound_pod(cluster, "a", [share("main", 50, 4)], [grant("main", 0, 50, 4)])
    stop = threading.Event()
    worker = threading.Thread(target=service.marker.run, args=(stop,), daemon=True)
    worker.start()
    try:
        service.allocate(CORE, ids(50))
        service.allocate(MEMORY, ids(4))
        assert wait_for(lambda: MARK in cluster.get_pod("default", "a").annotations)
    finally:
        stop.set()
        service.marker.wake()
        worker.join(5)
    assert not worker.is_alive()


# ------------------------------------------------------------------ the release reconciler
def allocate_record(runtime: InProcessRuntime, pod: PodObject, container: str = "main") -> None:
    runtime.allocate(ContainerAllocationRequest(pod.uid, pod.namespace, pod.name, container,
                                                (PlannedGpu(0, GPUS[0].uuid, core_milli=100, memory_bytes=GiB),)))


def reconciler_world() -> tuple[RecordReconciler, InMemoryCluster, InProcessRuntime, Clock]:
    clock = Clock(10_000.0)
    runtime = InProcessRuntime(GPUS, clock=clock)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE))
    return RecordReconciler(node=NODE, runtime=runtime, cluster=cluster, interval_s=30, clock=clock), cluster, \
        runtime, clock


def running_pod(cluster: InMemoryCluster, name: str) -> PodObject:
    created = cluster.create_pod(PodObject("", "default", name, (ContainerSpec("main"),)))
    cluster.bind_pod("default", name, uid=created.uid, node=NODE)
    return cluster.set_pod_phase("default", name, PodPhase.RUNNING)


def held(runtime: InProcessRuntime) -> set[str]:
    return {c.pod_uid for c in runtime.exporter_data().containers}


def test_reconciler_releases_a_deleted_pod_after_the_grace_and_keeps_a_running_one() -> None:
    reconciler, cluster, runtime, clock = reconciler_world()
    assert reconciler.grace_s == 60
    gone, kept = running_pod(cluster, "gone"), running_pod(cluster, "kept")
    for pod in (gone, kept):
        allocate_record(runtime, pod)
    allocate_record(runtime, gone, "sidecar")
    cluster.delete_pod("default", "gone", grace_period_seconds=0)
    clock.now += 10
    assert reconciler.run_once().due == ()  # in grace: suspected only
    assert held(runtime) == {gone.uid, kept.uid}
    clock.now += 30
    assert reconciler.run_once().due_uids == (gone.uid,)  # second sighting
    assert held(runtime) == {kept.uid}
    assert reconciler.released == 2
    clock.now += 1000
    reconciler.run_once()
    assert held(runtime) == {kept.uid}
    assert reconciler.passes == 3


def test_reconciler_releases_terminal_and_replaced_pods() -> None:
    reconciler, cluster, runtime, clock = reconciler_world()
    done, old = running_pod(cluster, "done"), running_pod(cluster, "web")
    allocate_record(runtime, done)
    allocate_record(runtime, old)
    cluster.set_pod_phase("default", "done", PodPhase.SUCCEEDED)
    cluster.delete_pod("default", "web", grace_period_seconds=0)
    new = running_pod(cluster, "web")
    allocate_record(runtime, new)
    clock.now += 61
    assert set(reconciler.run_once().due_uids) == {done.uid, old.uid}
    assert held(runtime) == {new.uid}


class FlakyRuntime(InProcessRuntime):
    """Fails the next ``fail`` Release calls; ``racer`` runs just before each Release (another releaser)."""

    fail = 0
    racer: object = None

    def release(self, pod_uid: str, container: str | None = None) -> int:
        if callable(self.racer):
            self.racer(pod_uid)
        if self.fail:
            self.fail -= 1
            raise NodeRuntimeError("MIG instance busy")
        return super().release(pod_uid, container)


def test_failed_release_is_retried_and_a_racing_releaser_is_harmless() -> None:
    clock = Clock(10_000.0)
    runtime = FlakyRuntime(GPUS, clock=clock)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE))
    reconciler = RecordReconciler(node=NODE, runtime=runtime, cluster=cluster, interval_s=30, clock=clock)
    a, b = running_pod(cluster, "a"), running_pod(cluster, "b")
    allocate_record(runtime, a)
    allocate_record(runtime, b)
    for name in ("a", "b"):
        cluster.delete_pod("default", name, grace_period_seconds=0)
    clock.now += 100
    runtime.fail = 1
    reconciler.run_once()  # the first (by UID) fails and is kept for the next pass, the other goes
    failed = min(a.uid, b.uid)
    assert held(runtime) == {failed}
    assert reconciler.released == 1
    other_released: list[int] = []
    runtime.racer = lambda uid: other_released.append(InProcessRuntime.release(runtime, uid))
    reconciler.run_once()  # the other releaser gets there first: Release returns 0, nothing counted twice
    assert held(runtime) == set()
    assert other_released == [1]
    assert reconciler.released == 1
    assert InProcessRuntime.release(runtime, failed) == 0  # idempotent


def test_reconciler_skips_a_pass_when_the_runtime_or_the_api_fails(caplog: pytest.LogCaptureFixture) -> None:
    reconciler, cluster, runtime, clock = reconciler_world()
    pod = running_pod(cluster, "a")
    allocate_record(runtime, pod)
    cluster.delete_pod("default", "a", grace_period_seconds=0)

    class DownCluster(InMemoryCluster):
        def list_pods(self, *, field_selector: str = "") -> Listing[PodObject]:
            raise UnavailableError("connection refused")

    class DownRuntime(InProcessRuntime):
        def exporter_data(self) -> ExporterData:
            raise NodeRuntimeError("unavailable")

    down = RecordReconciler(node=NODE, runtime=runtime, cluster=DownCluster(), interval_s=0.01, clock=clock)
    clock.now += 100
    with pytest.raises(UnavailableError):
        down.run_once()
    assert held(runtime) == {pod.uid}
    for broken in (down, RecordReconciler(node=NODE, runtime=DownRuntime(GPUS), cluster=cluster, interval_s=0.01)):
        stop = threading.Event()
        loop = threading.Thread(target=broken.run, args=(stop,), daemon=True)
        loop.start()
        assert wait_for(lambda: sum("release pass skipped" in r.message for r in caplog.records) >= 2)
        assert loop.is_alive()  # failures are logged, the loop goes on
        stop.set()
        loop.join(5)
        assert not loop.is_alive()
        caplog.clear()
    assert held(runtime) == {pod.uid}
    assert reconciler.run_once().due_uids == (pod.uid,)


def test_released_count_reaches_status_and_metrics(tmp_path: Path) -> None:
    reconciler, cluster, runtime, clock = reconciler_world()
    pod = running_pod(cluster, "a")
    allocate_record(runtime, pod)
    cluster.delete_pod("default", "a", grace_period_seconds=0)
    clock.now += 100
    reconciler.run_once()
    service = DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL)
    app = DevicePluginApp(service, plugin_dir=tmp_path, names=resource_names(PROTOCOL), reconciler=reconciler)
    assert app.status().released_records == 1
    metrics = PrometheusDevicePluginMetrics()
    metrics.watch(app.status)
    assert "lj_runtimekit_device_plugin_released_records_total 1.0" in metrics.exposition().decode()
    no_loop = DevicePluginApp(service, plugin_dir=tmp_path, names=resource_names(PROTOCOL))
    assert no_loop.status().released_records == 0


def test_release_interval_flag() -> None:
    base = ["--node-name", "n1", "--runtime-socket", "/tmp/rt.sock"]
    assert settings_from_args(build_parser().parse_args(base)).release_interval_s == 30.0
    assert settings_from_args(build_parser().parse_args([*base, "--release-interval", "5"])).release_interval_s == 5
    with pytest.raises(SettingsError, match="release_interval_s"):
        settings_from_args(build_parser().parse_args([*base, "--release-interval", "0"]))
    with pytest.raises(ValueError, match="interval_s"):
        RecordReconciler(node=NODE, runtime=InProcessRuntime(GPUS), cluster=InMemoryCluster(), interval_s=0)
