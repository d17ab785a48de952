"""The kubelet emulator end to end on one node: in-memory cluster, the in-process Runtime behind gRPC, the real device
plugin (``dp_world``), the emulator's device manager, pod-resources server and pod runner (``NodeKubelet``).

Covers: a bound pod with a plan → Running with the planned GPU's ``NVIDIA_VISIBLE_DEVICES``, its kubelet-chosen IDs
steered to that GPU, listed by the exporter's ``GrpcPodResourcesLister``; after its (sped-up) duration →
Succeeded, devices freed, gone from pod-resources; a deleted pod frees its devices at once and is removed;
insufficient devices, a plugin's Allocate refusal and an unregistered resource → Failed with kubelet's reason, a
Warning event and no devices held; a kubelet restart mid-run keeps the running pod's allocation, plugins
re-register and new pods get other IDs; a pod bound before they are back is rejected ("no healthy devices
present"), unless ``registration_wait_s`` lets admission wait for them; an
init-container-only pod; init containers lending their IDs to app containers; a multi-container pod (one Runtime
Allocate per container, envs per container); a malformed duration; pod-resources rate limiting; Register refusing
a bad resource name and an unreachable plugin; stop releasing threads and sockets. CDI (``--cdi``): a planned pod's
containers get the planned GPUs' CDI names, the emulated runtime resolves them in the spec directory and records
their env edits, a name missing from the spec fails the pod (``CreateContainerError``), the spec stays once the
plugin stops, and a spec that cannot be written leaves the names out (the pod runs on its environment);
pod-resources ``Get`` answers one pod, and a kubelet without it is served by ``List``. Pure helpers:
kubelet's ID pick (reuse, preferred, shortfall), the response merge, duration parsing.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import pytest
from dp_world import NAMES, NODE, PROTOCOL, World, make_world, share, share_plan, whole, whole_plan

from adapters.grpc import KubeletRegistrationError, register
from adapters.grpc.kubelet_emulator import (
    CREATE_CONTAINER_ERROR,
    DURATION_ANNOTATION,
    INVALID_DURATION_REASON,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    DeviceManager,
    ManualClock,
    NodeKubelet,
    PodResourcesServer,
    merge_responses,
    parse_duration,
    pick_devices,
)
from adapters.grpc.podresources import GrpcPodResourcesLister
from domain.allocation import ContainerGrant, PodAllocation
from domain.device_plugin.devices import parse_device_id
from domain.exporter.attribution import PodContainerDevices
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.runtime.types import ContainerAllocationResponse, DeviceSpec, Mount
from ports.cluster import NotFoundError
from ports.pod_resources import PodNotFoundError, PodResourcesError

GPU, CORE, MEM = NAMES.values()


@attrs.define
class Node:
    """A dp_world plus the emulator's pod runner and pod-resources server."""

    world: World
    kubelet: NodeKubelet
    clock: ManualClock
    pod_resources: PodResourcesServer

    def bind(self, name: str, containers: Sequence[ContainerSpec], plan: Sequence[ContainerGrant] | None, *,
             duration: str | None = None) -> PodObject:
        """Create (with the duration annotation), annotate with ``plan`` and bind a pod; returns it."""
        annotations = {} if duration is None else {DURATION_ANNOTATION: duration}
        cluster = self.world.cluster
        created = cluster.create_pod(PodObject("", "default", name, tuple(containers), annotations=annotations))
        if plan is not None:
            text = encode_plan(PodAllocation(created.uid, NODE, tuple(plan)), self.world.gpus)
            cluster.patch_pod_annotations("default", name, {PROTOCOL.annotations.pod_plan: text})
        cluster.bind_pod("default", name, uid=created.uid, node=NODE)
        return cluster.get_pod("default", name)

    def phase(self, name: str) -> PodPhase | None:
        """The pod's phase in the cluster, None once it is gone."""
        try:
            return self.world.cluster.get_pod("default", name).phase
        except NotFoundError:
            return None

    def wait_phase(self, name: str, phase: PodPhase | None, timeout: float = 5.0) -> bool:
        """Wait until the pod reaches ``phase`` (None = deleted)."""
        return self.kubelet.wait_for(lambda: self.phase(name) is phase, timeout)

    def listed(self) -> tuple[PodContainerDevices, ...]:
        """pod-resources ``List`` through the exporter's client (a fresh channel each time)."""
        lister = GrpcPodResourcesLister.connect(self.pod_resources.socket, timeout_s=5)
        try:
            return lister.list_containers()
        finally:
            lister.close()


def start_node(gpu_count: int = 2, *, registration_wait_s: float = 0.0, speedup: float = 10.0, cdi: bool = False,
               get: bool = True, cdi_dir: Path | None = None) -> Node:
    """A registered world with the runner and pod-resources (``get``: serving ``Get``) started."""
    world = make_world(gpu_count, cdi=cdi, cdi_dir=cdi_dir)
    assert world.wait_registered(), "plugin did not register all three resources"
    clock = ManualClock()
    pod_resources = PodResourcesServer(world.root / "pr", world.kubelet.admitted, qps=None, get=get)
    kubelet = NodeKubelet(world.cluster, node=NODE, device_manager=world.kubelet, pod_resources=pod_resources,
                          clock=clock, speedup=speedup, watch_timeout_s=0.5, registration_wait_s=registration_wait_s)
    kubelet.start()
    assert kubelet.wait_synced(5)
    return Node(world, kubelet, clock, pod_resources)


@pytest.fixture
def node() -> Iterator[Node]:
    running = start_node(2)
    try:
        yield running
    finally:
        running.kubelet.stop()
        running.world.close()


def _uuids(ids: Sequence[str]) -> set[str]:
    return {str(parse_device_id(i).uuid) for i in ids}


# ---------------------------------------------------------------------- lifecycle
def test_planned_pod_runs_is_listed_then_succeeds_and_frees_devices(node: Node) -> None:
    pod = node.bind("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)],
                    duration="30")
    assert node.wait_phase("a", PodPhase.RUNNING)
    admission = node.world.kubelet.admission(pod.uid)
    assert admission is not None
    [main] = admission.containers
    assert main.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == node.world.gpus[1].uuid
    assert {r: len(ids) for r, ids in main.devices.items()} == {CORE: 60, MEM: 8}
    assert _uuids([i for ids in main.devices.values() for i in ids]) == {node.world.gpus[1].uuid}  # preferred
    [request] = node.world.runtime.requests
    assert (request.pod_uid, request.container, request.gpus[0].index) == (pod.uid, "main", 1)

    [row] = node.listed()
    assert row.key == ("default", "a", "main")
    assert sorted(row.device_ids) == sorted(i for ids in main.devices.values() for i in ids)
    assert row.gpu_uuids == {node.world.gpus[1].uuid}

    node.clock.advance(2.9)  # 30 s of trace time at speedup 10 = 3 s
    assert not node.wait_phase("a", PodPhase.SUCCEEDED, 0.3)
    node.clock.advance(0.2)
    assert node.wait_phase("a", PodPhase.SUCCEEDED)
    assert node.world.kubelet.allocated_devices() == {}
    assert node.listed() == ()
    assert node.kubelet.counts() == {"admitted": 1, "rejected": 0, "succeeded": 1, "deleted": 0}


def test_deleted_pod_frees_devices_at_once_and_is_removed(node: Node) -> None:
    node.bind("a", [whole("main", 1)], [whole_plan("main", [0])])  # no duration: runs until deleted
    assert node.wait_phase("a", PodPhase.RUNNING)
    assert len(node.world.kubelet.allocated_devices()[GPU]) == 1
    node.world.cluster.delete_pod("default", "a")  # graceful (30 s): the kubelet finishes it with grace 0
    assert node.wait_phase("a", None)
    assert node.world.kubelet.allocated_devices() == {}
    assert node.kubelet.counts()["deleted"] == 1
    assert node.kubelet.wait_for(lambda: node.kubelet.phases() == {})


# ---------------------------------------------------------------------- rejections
def test_insufficient_devices_fail_the_pod_with_kubelets_reason(node: Node) -> None:
    node.bind("big", [whole("main", 3)], None)
    assert node.wait_phase("big", PodPhase.FAILED)
    rejection = node.kubelet.rejections()["default/big"]
    assert rejection.reason == UNEXPECTED_ADMISSION_ERROR
    assert rejection.message == (f"Allocate failed due to requested number of devices unavailable for {GPU}. "
                                 "Requested: 3, Available: 2, which is unexpected")
    [event] = [e for e in node.world.cluster.events if e.reason == UNEXPECTED_ADMISSION_ERROR]
    assert (event.kind, event.name, event.type) == ("Pod", "big", "Warning")
    assert node.world.runtime.requests == []
    assert node.world.kubelet.allocated_devices() == {}


def test_plugin_refusal_and_unregistered_resource_fail_the_pod(node: Node) -> None:
    node.bind("noplan", [share("main", core=40, memory=3)], None)
    assert node.wait_phase("noplan", PodPhase.FAILED)
    rejection = node.kubelet.rejections()["default/noplan"]
    assert rejection.reason == UNEXPECTED_ADMISSION_ERROR
    assert "rpc error: code = FailedPrecondition desc = " in rejection.message
    assert "no trusted plan" in rejection.message
    assert node.world.kubelet.allocated_devices() == {}  # the reserved IDs went back

    node.bind("fpga", [ContainerSpec("main", limits={"example.com/fpga": "1"})], None)
    assert node.wait_phase("fpga", PodPhase.FAILED)
    rejection = node.kubelet.rejections()["default/fpga"]
    assert rejection.reason == "OutOfexample.com/fpga"
    assert "requested: 1, used: 0, capacity: 0" in rejection.message


def test_malformed_duration_fails_the_pod(node: Node) -> None:
    node.bind("bad", [ContainerSpec("main")], None, duration="soon")
    assert node.wait_phase("bad", PodPhase.FAILED)
    assert node.kubelet.rejections()["default/bad"].reason == INVALID_DURATION_REASON


def test_pod_without_device_requests_runs_and_is_listed(node: Node) -> None:
    node.bind("cpu", [ContainerSpec("main", limits={"cpu": "2"})], None)
    assert node.wait_phase("cpu", PodPhase.RUNNING)
    assert [(r.key, r.device_ids) for r in node.listed()] == [(("default", "cpu", "main"), ())]
    assert node.world.runtime.requests == []
    node.bind("zero", [ContainerSpec("main")], None, duration="0")
    assert node.wait_phase("zero", PodPhase.SUCCEEDED)


# ---------------------------------------------------------------------- kubelet restart
def test_kubelet_restart_keeps_running_allocations_and_plugins_reregister(node: Node) -> None:
    pod = node.bind("a", [whole("main", 1)], [whole_plan("main", [1])])
    assert node.wait_phase("a", PodPhase.RUNNING)
    held = node.world.kubelet.allocated_devices()[GPU]
    registrations = len(node.world.kubelet.registrations)

    node.kubelet.restart()
    assert node.world.wait_registered(5)
    assert node.world.kubelet.wait_for(lambda: len(node.world.kubelet.registrations) >= registrations + 3, 5)
    assert node.world.kubelet.wait_for(lambda: len(node.world.kubelet.healthy(GPU)) == 2, 5)
    assert node.world.kubelet.allocated_devices()[GPU] == held
    assert node.phase("a") is PodPhase.RUNNING
    assert [r.key for r in node.listed()] == [("default", "a", "main")]

    node.bind("b", [whole("main", 1)], [whole_plan("main", [0])])
    assert node.wait_phase("b", PodPhase.RUNNING)
    assert len(node.world.kubelet.allocated_devices()[GPU]) == 2  # b got the other ID
    node.bind("c", [whole("main", 1)], [whole_plan("main", [0])])
    assert node.wait_phase("c", PodPhase.FAILED)  # both IDs held
    admission = node.world.kubelet.admission(pod.uid)
    assert admission is not None
    assert admission.containers[0].devices[GPU] == tuple(held)


def test_pod_bound_before_plugins_come_back_is_rejected_like_kubelet(node: Node) -> None:
    node.world.stop.set()  # the device plugin stops: nothing re-registers after the restart
    node.world.thread.join(timeout=10)
    node.kubelet.restart()
    node.bind("a", [whole("main", 1)], [whole_plan("main", [0])])
    assert node.wait_phase("a", PodPhase.FAILED)
    message = node.kubelet.rejections()["default/a"].message
    assert "no healthy devices present; cannot allocate unhealthy devices" in message


def test_registration_wait_admits_a_pod_bound_during_the_restart() -> None:
    node = start_node(2, registration_wait_s=5.0)
    try:
        node.kubelet.restart()
        node.bind("a", [whole("main", 1)], [whole_plan("main", [0])])
        assert node.wait_phase("a", PodPhase.RUNNING, 8)
    finally:
        node.kubelet.stop()
        node.world.close()


# ---------------------------------------------------------------------- containers
def test_init_container_only_pod(node: Node) -> None:
    pod = node.bind("i", [share("setup", core=20, memory=1, init=True), share("app")],
                    [share_plan("setup", 1, core=20, memory_gib=1, init=True)], duration="5")
    assert node.wait_phase("i", PodPhase.RUNNING)
    [request] = node.world.runtime.requests
    assert (request.pod_uid, request.container, request.init, request.gpus[0].index) == (pod.uid, "setup", True, 1)
    admission = node.world.kubelet.admission(pod.uid)
    assert admission is not None
    setup, app = admission.containers
    assert (setup.name, setup.init, app.name, app.devices) == ("setup", True, "app", {})
    assert setup.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == node.world.gpus[1].uuid
    [row] = node.listed()  # kubelet lists app containers only
    assert (row.container, row.device_ids) == ("app", ())
    node.clock.advance(0.5)
    assert node.wait_phase("i", PodPhase.SUCCEEDED)
    assert node.world.kubelet.allocated_devices() == {}


def test_init_container_lends_its_ids_to_the_app_container(node: Node) -> None:
    pod = node.bind("lend", [ContainerSpec("init", limits={GPU: "1"}, init=True), whole("app", 1)],
                    [attrs.evolve(whole_plan("init", [0]), init=True), whole_plan("app", [0])])
    assert node.wait_phase("lend", PodPhase.RUNNING)
    admission = node.world.kubelet.admission(pod.uid)
    assert admission is not None
    init, app = admission.containers
    assert init.devices[GPU] == app.devices[GPU]  # kubelet's devicesToReuse
    assert len(node.world.kubelet.allocated_devices()[GPU]) == 1
    assert [(r.container, len(r.device_ids)) for r in node.listed()] == [("app", 1)]


def test_multi_container_pod(node: Node) -> None:
    pod = node.bind("m", [share("c1", core=30, memory=2), share("c2", core=30, memory=2)],
                    [share_plan("c1", 0, core=30, memory_gib=2), share_plan("c2", 1, core=30, memory_gib=2)])
    assert node.wait_phase("m", PodPhase.RUNNING)
    assert [(r.container, r.gpus[0].index) for r in node.world.runtime.requests] == [("c1", 0), ("c2", 1)]
    admission = node.world.kubelet.admission(pod.uid)
    assert admission is not None
    c1, c2 = admission.containers
    assert c1.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == node.world.gpus[0].uuid
    assert c2.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == node.world.gpus[1].uuid
    assert not set(c1.devices[CORE]) & set(c2.devices[CORE])
    rows = {r.container: r for r in node.listed()}
    assert rows["c1"].gpu_uuids == {node.world.gpus[0].uuid}
    assert rows["c2"].gpu_uuids == {node.world.gpus[1].uuid}
    assert len(rows["c1"].device_ids) == len(rows["c2"].device_ids) == 32


# ---------------------------------------------------------------------- pod-resources
def test_pod_resources_rate_limit_answers_resource_exhausted(node: Node) -> None:
    limited = PodResourcesServer(node.world.root / "limited", node.world.kubelet.admitted, qps=0.001, burst=2)
    limited.start()
    lister = GrpcPodResourcesLister.connect(limited.socket, timeout_s=5)
    try:
        lister.list_containers()
        lister.list_containers()
        with pytest.raises(PodResourcesError, match="RESOURCE_EXHAUSTED"):
            lister.list_containers()
    finally:
        lister.close()
        limited.stop()
    assert not limited.socket.exists()


def test_stop_ends_threads_and_removes_sockets() -> None:
    before = threading.active_count()
    node = start_node(1)
    node.kubelet.stop()
    assert not node.pod_resources.socket.exists()
    assert not node.world.kubelet.socket.exists()
    node.world.close()
    assert threading.active_count() <= before + 3, [t.name for t in threading.enumerate()]


def test_register_refuses_bad_requests_and_unreachable_plugins() -> None:
    root = Path(tempfile.mkdtemp(prefix="ljke", dir="/tmp"))
    manager = DeviceManager(root, dial_timeout_s=0.5)
    manager.start()
    try:
        with pytest.raises(KubeletRegistrationError, match="the ResourceName 'gpu' is invalid"):
            register(manager.socket, endpoint="x.sock", resource_name="gpu", timeout_s=5)
        with pytest.raises(KubeletRegistrationError, match="is invalid"):
            register(manager.socket, endpoint="x.sock", resource_name="kubernetes.io/gpu", timeout_s=5)
        with pytest.raises(KubeletRegistrationError, match="failed to dial device plugin"):
            register(manager.socket, endpoint="absent.sock", resource_name="example.com/gpu", timeout_s=5)
        assert manager.registrations == []
        assert manager.known_resources == frozenset()
    finally:
        manager.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert not manager.socket.exists()


# ---------------------------------------------------------------------- pure helpers
def test_pick_devices_reuses_then_prefers_then_fills() -> None:
    calls: list[tuple[list[str], list[str], int]] = []

    def preferred(available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        calls.append((list(available), list(must), size))
        return ["x", "d", "c"]  # "x" is not available: dropped

    ids = pick_devices(resource="r/x", required=4, reusable=["a"], available=["b", "c", "d", "e"], preferred=preferred)
    assert ids == ["a", "d", "c", "b"]
    assert calls == [(["b", "c", "d", "e", "a"], ["a"], 4)]
    assert pick_devices(resource="r/x", required=1, reusable=["a", "z"], available=[], preferred=None) == ["a"]
    with pytest.raises(AdmissionError, match="Requested: 3, Available: 2"):
        pick_devices(resource="r/x", required=3, reusable=[], available=["b", "c"], preferred=preferred)


def test_merge_keeps_the_first_value_per_key_and_path() -> None:
    first = ContainerAllocationResponse(envs={"A": "1"}, devices=(DeviceSpec("/dev/x", "/dev/x0"),),
                                        mounts=(Mount("/m", "/h1"),), annotations={"k": "v"})
    second = ContainerAllocationResponse(envs={"A": "2", "B": "3"}, devices=(DeviceSpec("/dev/x", "/dev/x1"),),
                                         mounts=(Mount("/m", "/h2"), Mount("/n", "/h3")))
    merged = merge_responses([first, second], container="c")
    assert dict(merged.envs) == {"A": "1", "B": "3"}
    assert [d.host_path for d in merged.devices] == ["/dev/x0"]
    assert [(m.container_path, m.host_path) for m in merged.mounts] == [("/m", "/h1"), ("/n", "/h3")]
    assert dict(merged.annotations) == {"k": "v"}


def test_parse_duration() -> None:
    def pod(value: str | None) -> PodObject:
        return PodObject("u", "d", "p", annotations={} if value is None else {DURATION_ANNOTATION: value})

    assert parse_duration(pod(None)) is None
    assert parse_duration(pod("2.5")) == 2.5
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError):  # noqa: PT011 (float() and our check both raise plain ValueError)
            parse_duration(pod(bad))


# ---------------------------------------------------------------------- CDI and pod-resources Get
def test_cdi_names_resolve_in_the_spec_dir_and_a_missing_one_fails_the_pod() -> None:
    node = start_node(2, cdi=True)
    spec_file = node.world.root / "cdi" / "lj-runtimekit.io-gpu.json"
    try:
        assert spec_file.exists()  # written before the plugin registered
        pod = node.bind("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)],
                        duration="30")
        assert node.wait_phase("a", PodPhase.RUNNING)
        admission = node.world.kubelet.admission(pod.uid)
        assert admission is not None
        [main] = admission.containers
        gpu = node.world.gpus[1].uuid
        assert main.runtime.cdi_devices == (f"lj-runtimekit.io/gpu={gpu}",)  # once, though two resources answered
        assert all(r.cdi_devices == main.runtime.cdi_devices for r in main.responses.values())
        assert main.cdi_env == {"LJRK_CDI_DEVICE_1": gpu}
        assert main.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == gpu  # the env answer stays beside the names

        spec_file.write_text(spec_file.read_text().replace(node.world.gpus[0].uuid, "GPU-not-this-node"))
        node.bind("b", [share("main", core=30, memory=4)], [share_plan("main", 0, core=30, memory_gib=4)])
        assert node.wait_phase("b", PodPhase.FAILED)
        rejection = node.kubelet.rejections()["default/b"]
        assert rejection.reason == CREATE_CONTAINER_ERROR
        assert "unresolvable CDI devices" in rejection.message
        node.world.stop.set()  # the plugin stops; kubelet restarts running pods' containers with the names it kept
        node.world.thread.join(timeout=10)
        assert not node.world.thread.is_alive()
        assert spec_file.exists(), "the spec outlives the plugin"
    finally:
        node.kubelet.stop()
        node.world.close()


def test_a_spec_that_cannot_be_written_leaves_the_names_out_and_the_pod_runs_on_its_environment(
        tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the CDI folder should be\n")
    node = start_node(2, cdi=True, cdi_dir=blocker / "cdi")
    try:
        pod = node.bind("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)],
                        duration="30")
        assert node.wait_phase("a", PodPhase.RUNNING)
        admission = node.world.kubelet.admission(pod.uid)
        assert admission is not None
        [main] = admission.containers
        assert main.runtime.cdi_devices == ()
        assert main.runtime.envs["NVIDIA_VISIBLE_DEVICES"] == node.world.gpus[1].uuid
    finally:
        node.kubelet.stop()
        node.world.close()


@pytest.mark.parametrize("get", [True, False], ids=["get", "list-fallback"])
def test_pod_resources_get_answers_one_pod(get: bool) -> None:
    node = start_node(2, get=get)
    try:
        node.bind("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)])
        node.bind("b", [share("main", core=30, memory=4)], [share_plan("main", 0, core=30, memory_gib=4)])
        assert node.wait_phase("a", PodPhase.RUNNING)
        assert node.wait_phase("b", PodPhase.RUNNING)
        lister = GrpcPodResourcesLister.connect(node.pod_resources.socket, timeout_s=5)
        try:
            [row] = lister.pod_containers("default", "b")
            assert row.gpu_uuids == {node.world.gpus[0].uuid}
            assert lister.get_supported is get
            with pytest.raises(PodNotFoundError):
                lister.pod_containers("default", "nope")
        finally:
            lister.close()
    finally:
        node.kubelet.stop()
        node.world.close()
