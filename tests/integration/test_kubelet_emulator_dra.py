"""The kubelet emulator's DRA manager end to end on one node: an in-memory cluster and ResourceClaims, the reference
Runtime over simulated GPUs, the real ``ljrk dra-driver`` (its container, sharing the cluster and the claims)
registering through the plugin registry, and ``NodeKubelet.create(registry_dir=..., claims=...)``.

Covers: the driver registers (GetInfo, NotifyRegistrationStatus) and unregisters when its socket goes; a pod
whose claim is allocated and reserved for it runs, its container gets the claim's CDI env (the GPU and the
Runtime's limits), pod-resources lists the claim (through the exporter's ``GrpcPodResourcesLister`` and the raw
``dynamic_resources``), the Runtime holds the grant; deleting the pod unprepares the claim and empties the
Runtime's book; a claim not reserved for the pod, not allocated, of an unregistered driver, missing, or refused by
the driver fails the pod with ``FailedPrepareDynamicResources`` and leaks nothing (a good claim prepared in the
same call is unprepared again); a claim shared by two pods is prepared once and unprepared after the second
goes; a kubelet restart keeps the prepared claim and registers the driver again; a plugin with no supported
version is refused; admission waits for a driver registering late (``registration_wait_s``); a pod whose
device-plugin devices were allocated and whose claim is refused gives them back (``dp_world``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from pathlib import Path

import dp_world
import grpc
import pytest
import runtime_node
from dependency_injector import providers
from dp_world import make_world, share, share_plan

from adapters.grpc import unix_channel
from adapters.grpc._pb.kubelet.pluginregistration.v1 import api_pb2 as reg
from adapters.grpc._pb.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from adapters.grpc.client import unix_target
from adapters.grpc.kubelet_emulator import FAILED_PREPARE_REASON, DraManager, NodeKubelet
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.memory.cluster import InMemoryCluster
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.allocation import PodAllocation
from domain.dra.claims import AllocationResult, ClaimAllocation, ClaimRef
from domain.dra.prepared import ClaimOutcome
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodClaim, PodObject, PodPhase
from entrypoints.dra_driver.app import DraDriverSettings
from entrypoints.dra_driver.containers import ApiAccess, DraDriverContainer
from ports.cluster import NotFoundError

DRIVER = "gpu.lj-runtimekit.io"
NODE = "n1"
NS = "default"


class Driver:
    """``ljrk dra-driver`` on a thread, over the test's cluster and claims; counts NodePrepareResources claims."""

    def __init__(self, directory: Path, runtime: runtime_node.RunningRuntime, api: ApiAccess) -> None:
        settings = DraDriverSettings(node_name=NODE, runtime_socket=directory / "runtime.sock", in_memory=True,
                                     plugins_registry=directory / "reg", plugins_dir=directory / "plugins",
                                     cdi_dir=directory / "cdi")
        self.container = DraDriverContainer(settings=settings)
        self.container.runtime.override(providers.Object(runtime.runtime))
        self.container.api.override(providers.Object(api))
        preparer = self.container.preparer()
        original = preparer.prepare
        self.prepared: list[str] = []

        def counting(claims: Iterable[ClaimRef]) -> dict[str, ClaimOutcome]:
            claims = list(claims)
            self.prepared += [c.name for c in claims]
            return original(claims)

        preparer.prepare = counting  # type: ignore[method-assign]
        self.app = self.container.app()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.app.run, args=(self.stopping,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


class World:
    """The node: cluster, claims, Runtime, emulated kubelet (DRA on), and the driver once :meth:`start_driver`."""

    def __init__(self, directory: Path, runtime: runtime_node.RunningRuntime) -> None:
        self.directory = directory
        self.runtime = runtime
        self.cluster = InMemoryCluster()
        self.cluster.create_node(NodeObject(NODE))
        self.claims = InMemoryResourceClaims()
        self.kubelet = NodeKubelet.create(self.cluster, node=NODE, plugin_dir=directory / "dp",
                                          pod_resources_dir=directory / "pr", registry_dir=directory / "reg",
                                          claims=self.claims, cdi_dir=directory / "cdi", speedup=10.0)
        self.kubelet.start()
        assert self.kubelet.wait_synced(5)
        self.driver: Driver | None = None

    @property
    def dra(self) -> DraManager:
        dra = self.kubelet.device_manager.dra
        assert dra is not None
        return dra

    def start_driver(self) -> Driver:
        self.driver = Driver(self.directory, self.runtime, ApiAccess(self.cluster, InMemoryResourceSlices(),
                                                                      self.claims))
        assert self.dra.wait_registered(DRIVER, 10), "the DRA driver did not register"
        return self.driver

    def pod(self, name: str, *claims: str) -> PodObject:
        """Create a pod using ``claims`` (PodClaim names ``c0``, ``c1``…); not bound yet."""
        entries = tuple(PodClaim(f"c{i}", claim_name=claim) for i, claim in enumerate(claims))
        return self.cluster.create_pod(PodObject("", NS, name, (ContainerSpec("main"),), resource_claims=entries))

    def claim(self, name: str, *reserved: PodObject, device: str = "gpu-0", driver: str = DRIVER,
              allocated: bool = True) -> ClaimAllocation:
        result = AllocationResult(request="gpu", driver=driver, pool=NODE, device=device,
                                  consumed={"cores": "30", "memory": "4Gi"}, share_id="share-1")
        return self.claims.put(ClaimAllocation(NS, name, f"uid-{name}", (result,) if allocated else (),
                                               allocated=allocated, reserved_for=tuple(p.uid for p in reserved)))

    def bind(self, pod: PodObject) -> None:
        self.cluster.bind_pod(NS, pod.name, uid=pod.uid, node=NODE)

    def phase(self, name: str) -> PodPhase | None:
        try:
            return self.cluster.get_pod(NS, name).phase
        except NotFoundError:
            return None

    def wait_phase(self, name: str, phase: PodPhase | None, timeout: float = 10.0) -> bool:
        return self.kubelet.wait_for(lambda: self.phase(name) is phase, timeout)

    def booked(self) -> list[str]:
        """Pod UIDs (claim UIDs for claims) in the Runtime's book."""
        return sorted(c.pod_uid for c in self.runtime.runtime.exporter_data().containers)

    def close(self) -> None:
        self.kubelet.stop()
        if self.driver is not None:
            self.driver.stop()


@pytest.fixture
def world(sock_dir: Path) -> Iterator[World]:
    runtime = runtime_node.start(sock_dir)
    node = World(sock_dir, runtime)
    try:
        yield node
    finally:
        node.close()
        runtime.stop()


def test_claimed_pod_runs_is_listed_and_its_deletion_unprepares(world: World) -> None:
    driver = world.start_driver()
    assert world.dra.registered() == {DRIVER}
    pod = world.pod("a", "gpu-a")
    world.claim("gpu-a", pod)
    world.bind(pod)
    assert world.wait_phase("a", PodPhase.RUNNING)
    assert driver.prepared == ["gpu-a"]
    assert world.booked() == ["uid-gpu-a"]
    assert world.dra.prepared() == {"uid-gpu-a": {pod.uid}}

    admission = world.kubelet.device_manager.admission(pod.uid)
    assert admission is not None
    [main] = admission.containers
    gpu0 = world.runtime.runtime.list_devices()[0].gpu.uuid
    assert main.cdi_env["NVIDIA_VISIBLE_DEVICES"] == gpu0
    assert (main.cdi_env["CUDA_DEVICE_MEMORY_LIMIT_0"], main.cdi_env["CUDA_DEVICE_SM_LIMIT"]) == ("4096m", "30")
    cdi_id = "lj-runtimekit.io/claim=uid-gpu-a-gpu-0"
    assert [(c.name, [(d.driver, d.pool, d.device, d.cdi_ids, d.share_id) for d in c.devices])
            for c in main.claims] == [("gpu-a", [(DRIVER, NODE, "gpu-0", (cdi_id,), "share-1")])]

    assert world.kubelet.pod_resources is not None
    lister = GrpcPodResourcesLister.connect(world.kubelet.pod_resources.socket, timeout_s=5)
    try:
        [row] = lister.list_containers()
    finally:
        lister.close()
    assert (row.pod, row.container, list(row.claims)) == ("a", "main", [(NS, "gpu-a")])
    with unix_channel(world.kubelet.pod_resources.socket) as channel:
        reply = pr_grpc.PodResourcesListerStub(channel).List(pr.ListPodResourcesRequest(), timeout=5)
    [resource] = reply.pod_resources[0].containers[0].dynamic_resources[0].claim_resources
    assert ([d.name for d in resource.cdi_devices], resource.driver_name, resource.pool_name, resource.device_name,
            resource.share_id) == ([cdi_id], DRIVER, NODE, "gpu-0", "share-1")

    world.cluster.delete_pod(NS, "a")
    assert world.wait_phase("a", None)
    assert world.kubelet.wait_for(lambda: not world.booked() and not world.dra.prepared())
    assert not (world.directory / "cdi" / "lj-runtimekit.io-claim-uid-gpu-a.json").exists()


@pytest.mark.parametrize(("case", "expected"), [
    ("unreserved", "is not reserved for pod default/p"),
    ("unallocated", "is not allocated"),
    ("other-driver", "DRA driver other.example.com is not registered"),
    ("missing", "claim default/gpu-p: the ResourceClaim does not exist"),
    ("driver-error", "this node has no GPU 9"),
])
def test_claim_that_cannot_be_prepared_fails_the_pod_and_leaks_nothing(world: World, case: str,
                                                                       expected: str) -> None:
    driver = world.start_driver()
    pod = world.pod("p", "good", "gpu-p")
    world.claim("good", pod)  # prepared first in the same call when the bad one fails at the driver
    if case != "missing":
        world.claim("gpu-p", *(() if case == "unreserved" else (pod,)), allocated=case != "unallocated",
                    driver="other.example.com" if case == "other-driver" else DRIVER,
                    device="gpu-9" if case == "driver-error" else "gpu-0")
    world.bind(pod)
    assert world.wait_phase("p", PodPhase.FAILED)
    rejection = world.kubelet.rejections()["default/p"]
    assert rejection.reason == FAILED_PREPARE_REASON
    assert "gpu-p" in rejection.message, rejection.message
    assert expected in rejection.message, rejection.message
    assert [e.reason for e in world.cluster.events if e.name == "p"] == [FAILED_PREPARE_REASON]
    assert world.kubelet.wait_for(lambda: not world.booked() and not world.dra.prepared())
    assert world.kubelet.device_manager.admitted() == ()
    assert driver.prepared == (["good", "gpu-p"] if case == "driver-error" else [])


def test_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(world: World) -> None:
    driver = world.start_driver()
    first, second = world.pod("a", "shared"), world.pod("b", "shared")
    world.claim("shared", first, second)
    world.bind(first)
    assert world.wait_phase("a", PodPhase.RUNNING)
    world.bind(second)
    assert world.wait_phase("b", PodPhase.RUNNING)
    assert driver.prepared == ["shared"]
    assert world.dra.prepared() == {"uid-shared": {first.uid, second.uid}}
    assert world.booked() == ["uid-shared"]

    world.cluster.delete_pod(NS, "a")
    assert world.wait_phase("a", None)
    assert world.dra.prepared() == {"uid-shared": {second.uid}}
    assert world.booked() == ["uid-shared"]
    world.cluster.delete_pod(NS, "b")
    assert world.wait_phase("b", None)
    assert world.kubelet.wait_for(lambda: not world.booked() and not world.dra.prepared())


def test_restart_keeps_the_prepared_claim_and_registers_the_driver_again(world: World) -> None:
    driver = world.start_driver()
    first, second = world.pod("a", "shared"), world.pod("b", "shared")
    world.claim("shared", first, second)
    world.bind(first)
    assert world.wait_phase("a", PodPhase.RUNNING)
    assert world.dra.registrations == [DRIVER]

    world.kubelet.restart()
    assert world.dra.wait_registered(DRIVER, 10)
    assert world.dra.registrations == [DRIVER, DRIVER]
    assert world.dra.prepared() == {"uid-shared": {first.uid}}
    world.bind(second)  # admitted on the kept claim: no second NodePrepareResources
    assert world.wait_phase("b", PodPhase.RUNNING)
    assert driver.prepared == ["shared"]
    assert world.phase("a") is PodPhase.RUNNING
    assert world.booked() == ["uid-shared"]

    driver.stop()  # its sockets go: unregistered
    world.driver = None
    assert world.kubelet.wait_for(lambda: not world.dra.registered())


class _OldPlugin(reg_grpc.RegistrationServicer):
    """A DRA plugin speaking only a version kubelet does not know; records kubelet's verdict."""

    def __init__(self) -> None:
        self.statuses: list[tuple[bool, str]] = []

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802
        return reg.PluginInfo(type="DRAPlugin", name="old.example.com", endpoint="/nowhere.sock",
                              supported_versions=["v1alpha4.DRAPlugin"])

    def NotifyRegistrationStatus(  # noqa: N802
            self, request: reg.RegistrationStatus, context: grpc.ServicerContext) -> reg.RegistrationStatusResponse:
        self.statuses.append((request.plugin_registered, request.error))
        return reg.RegistrationStatusResponse()


def test_plugin_without_a_supported_version_is_refused(world: World) -> None:
    plugin = _OldPlugin()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    reg_grpc.add_RegistrationServicer_to_server(plugin, server)
    assert server.add_insecure_port(unix_target(world.directory / "reg" / "old-reg.sock"))
    server.start()
    try:
        assert world.kubelet.wait_for(lambda: bool(plugin.statuses))
        [(registered, error)] = plugin.statuses
        assert not registered
        assert "v1alpha4.DRAPlugin" in error, error
        assert "v1.DRAPlugin" in error, error
        assert world.dra.registered() == frozenset()
    finally:
        server.stop(0).wait()


def test_admission_waits_for_a_driver_that_registers_late(world: World) -> None:
    world.dra.registration_wait_s = 10.0
    pod = world.pod("late", "gpu-late")
    world.claim("gpu-late", pod)
    world.bind(pod)  # admission waits for the driver instead of refusing the claim
    world.start_driver()
    assert world.wait_phase("late", PodPhase.RUNNING)
    assert world.booked() == ["uid-gpu-late"]


def test_rejected_claim_gives_back_the_device_plugin_devices() -> None:
    dp = make_world(2)
    try:
        assert dp.wait_registered()
        claims = InMemoryResourceClaims()
        dp.kubelet.dra = DraManager(node=dp_world.NODE, registry_dir=dp.root / "reg", claims=claims)
        created = dp.cluster.create_pod(PodObject("", NS, "both", (share("main", core=60, memory=8),),
                                                  resource_claims=(PodClaim("c0", claim_name="x"),)))
        text = encode_plan(PodAllocation(created.uid, dp_world.NODE, (share_plan("main", 1, core=60, memory_gib=8),)),
                           dp.gpus)
        dp.cluster.patch_pod_annotations(NS, "both", {dp_world.PROTOCOL.annotations.pod_plan: text})
        dp.cluster.bind_pod(NS, "both", uid=created.uid, node=dp_world.NODE)
        result = dp.kubelet.admit_pod(dp.cluster.get_pod(NS, "both"))  # claim "x" does not exist
        assert (result.admission, result.reason) == (None, FAILED_PREPARE_REASON)
        assert "claim default/x: the ResourceClaim does not exist" in result.message
        assert [r.pod_uid for r in dp.runtime.requests] == [created.uid]  # the device plugin had allocated
        assert dp.kubelet.allocated_devices() == {}
        assert dp.kubelet.admitted() == ()
    finally:
        dp.close()
