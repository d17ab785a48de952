"""``ljrk exporter`` against real gRPC: the in-process Runtime behind ``GrpcRuntimeServer`` and a fake kubelet
pod-resources server, both on unix sockets; scraped over HTTP.

Covers: the gRPC pod-resources client maps ``List`` to domain rows; the command serves ``/metrics`` (parsed by
``prometheus_client.parser``) with every GPU and only the containers pod-resources lists, drops a pod at the next
pull once kubelet stops listing it, and ``/healthz``; a DRA claim's grant is served for the container kubelet lists
as using it (``dynamic_resources``), with the claim labels, and goes when no listed container uses it; a Runtime
without the ``exporter-data`` feature exits 1; bad flags exit 2; the process exits 0 on SIGTERM.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.grpc import GrpcRuntimeServer
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from adapters.grpc.client import unix_target
from adapters.grpc.podresources import GrpcPodResourcesLister
from domain.dra.claims import AllocationResult, ClaimRef, plan_claim
from domain.exporter.attribution import PodContainerDevices
from domain.gpu import Gpu, GpuUuid
from domain.runtime.features import SemVer
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from entrypoints.exporter.__main__ import main as exporter_main
from entrypoints.runtime.inprocess import InProcessRuntime
from support.polling import eventually

GIB = 1 << 30
REPO_ROOT = Path(__file__).resolve().parents[2]


class FakePodResources(pr_grpc.PodResourcesListerServicer):
    """Kubelet's pod-resources List over a settable pod list."""

    def __init__(self) -> None:
        self.pods: list[pr.PodResources] = []

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:  # noqa: N802 (proto RPC name)
        return pr.ListPodResourcesResponse(pod_resources=list(self.pods))


def _pod(name: str, gpu: int) -> pr.PodResources:
    devices = [pr.ContainerDevices(resource_name="ljrk.io/gpu-core", device_ids=[f"GPU-{gpu}::core::0"]),
               pr.ContainerDevices(resource_name="example.com/nic", device_ids=["nic0"])]
    return pr.PodResources(name=name, namespace="ns", containers=[pr.ContainerResources(name="main", devices=devices)])


def _request(pod: str, gpu: int) -> ContainerAllocationRequest:
    return ContainerAllocationRequest(f"uid-{pod}", "ns", pod, "main",
                                      (PlannedGpu(gpu, GpuUuid(f"GPU-{gpu}"), core_milli=500),))


class World:
    def __init__(self, root: Path, *, capabilities: frozenset[str] | None = None) -> None:
        gpus = [Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(4)]
        self.runtime = InProcessRuntime(gpus, version=SemVer(1, 0, 0), capabilities=capabilities)
        self.runtime_server = GrpcRuntimeServer(root / "rt.sock", self.runtime, max_workers=4)
        self.kubelet = FakePodResources()
        self.pr_socket = root / "pr.sock"
        self.pr_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(self.kubelet, self.pr_server)
        self.pr_server.add_insecure_port(unix_target(self.pr_socket))

    def start(self) -> None:
        self.runtime_server.start()
        self.pr_server.start()

    def stop(self) -> None:
        self.pr_server.stop(0).wait()
        self.runtime_server.stop(0.2)


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ljexp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def world(root: Path) -> Iterator[World]:
    w = World(root)
    w.start()
    yield w
    w.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return int(reply.status), bytes(reply.read())


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    _, body = _get(f"http://127.0.0.1:{port}/metrics")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


_wait = functools.partial(eventually, ignoring=(OSError,))
"""Wait on the exporter's HTTP answers: a refused or reset connection counts as not yet."""


def test_grpc_pod_resources_client(world: World) -> None:
    world.kubelet.pods = [_pod("p1", 2)]
    client = GrpcPodResourcesLister.connect(world.pr_socket, timeout_s=5)
    try:
        [row] = client.list_containers()
    finally:
        client.close()
    assert row == PodContainerDevices("ns", "p1", "main", ["GPU-2::core::0", "nic0"])
    assert row.gpu_uuids == {"GPU-2"}


def test_exporter_serves_attributed_metrics(world: World) -> None:
    world.runtime.allocate(_request("p1", 1))
    world.runtime.allocate(_request("p2", 3))
    world.kubelet.pods = [_pod("p1", 1), _pod("p2", 3)]
    port, stop, codes = _free_port(), threading.Event(), {}
    thread = threading.Thread(target=lambda: codes.setdefault("rc", exporter_main(
        ["--node-name", "node-a", "--runtime-socket", str(world.runtime_server.socket_path),
         "--listen", f"127.0.0.1:{port}", "--pod-resources-socket", str(world.pr_socket), "--interval", "0.1",
         "--deadline", "2"], stop=stop)))
    thread.start()
    try:
        _wait(lambda: "lj_runtimekit_container_gpu_core_limit_ratio" in _scrape(port))
        parsed = _scrape(port)
        assert sorted(labels["gpu_index"] for labels, _ in parsed["lj_runtimekit_gpu_healthy"]) == ["0", "1", "2", "3"]
        limits = {labels["pod"]: (labels["gpu_uuid"], labels["node"], v)
                  for labels, v in parsed["lj_runtimekit_container_gpu_core_limit_ratio"]}
        assert limits == {"p1": ("GPU-1", "node-a", 0.5), "p2": ("GPU-3", "node-a", 0.5)}
        assert parsed["lj_runtimekit_exporter_runtime_up"] == [({"node": "node-a"}, 1.0)]
        assert parsed["lj_runtimekit_node_gpu_core_allocated_gpus"] == [({"node": "node-a"}, 1.0)]
        world.kubelet.pods = [_pod("p1", 1)]  # p2 terminated; the Runtime still holds its record
        _wait(lambda: len(_scrape(port)["lj_runtimekit_container_gpu_core_limit_ratio"]) == 1)
        [(labels, _)] = _scrape(port)["lj_runtimekit_container_gpu_memory_limit_bytes"]
        assert labels["pod"] == "p1"
        assert _get(f"http://127.0.0.1:{port}/healthz") == (200, b"ok\n")
    finally:
        stop.set()
        thread.join(10)
    assert codes == {"rc": 0}


def test_runtime_without_exporter_data_exits_1(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(root, capabilities=frozenset({"inventory"}))
    w.start()
    try:
        code = exporter_main(["--node-name", "n", "--runtime-socket", str(w.runtime_server.socket_path),
                              "--listen", "127.0.0.1:0", "--runtime-wait", "5"])
    finally:
        w.stop()
    assert code == 1
    assert "exporter-data" in capsys.readouterr().err


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert exporter_main(["--node-name", "n", "--runtime-socket", "/x", "--listen", "nope"]) == 2
    assert exporter_main(["--node-name", "n"]) == 2
    assert "error" in capsys.readouterr().err


def test_process_exits_0_on_sigterm(world: World) -> None:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoints.exporter", "--node-name", "n", "--runtime-socket",
         str(world.runtime_server.socket_path), "--listen", f"127.0.0.1:{port}", "--interval", "0.2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        _wait(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=20)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
        assert process.returncode == 0, err.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_exporter_attributes_a_dra_claim_to_the_containers_using_it(world: World) -> None:
    claim = ClaimRef("team", "claim-uid", "gpu-claim")
    result = AllocationResult("share", "gpu.lj-runtimekit.io", "node-a", "gpu-2", {"cores": "40", "memory": "2Gi"})
    world.runtime.allocate(plan_claim(claim, [result], world.runtime.list_devices()))  # what the DRA plugin asks
    uses = [pr.DynamicResource(claim_name="gpu-claim", claim_namespace="team", claim_resources=[pr.ClaimResource(
        cdi_devices=[pr.CDIDevice(name="lj-runtimekit.io/claim=claim-uid-gpu-2")], driver_name="gpu.lj-runtimekit.io",
        pool_name="node-a", device_name="gpu-2")])]
    world.kubelet.pods = [pr.PodResources(name="trainer", namespace="team", containers=[
        pr.ContainerResources(name="main", dynamic_resources=uses), pr.ContainerResources(name="idle")])]
    port, stop, codes = _free_port(), threading.Event(), {}
    thread = _run_exporter(world, port, stop, codes, "--pod-resources-socket", str(world.pr_socket))
    try:
        _wait(lambda: "lj_runtimekit_container_gpu_core_limit_ratio" in _scrape(port))
        [(labels, value)] = _scrape(port)["lj_runtimekit_container_gpu_core_limit_ratio"]
        assert (labels["namespace"], labels["pod"], labels["container"], labels["claim_namespace"],
                labels["claim_name"], labels["gpu_uuid"], value) == ("team", "trainer", "main", "team", "gpu-claim",
                                                                     "GPU-2", 0.4)
        world.kubelet.pods = []  # the pod ended; the claim is not unprepared yet
        _wait(lambda: "lj_runtimekit_container_gpu_core_limit_ratio" not in _scrape(port))
    finally:
        stop.set()
        thread.join(10)
    assert codes == {"rc": 0}


# ---------------------------------------------------------------- Events on the node (--kubeconfig)


def _run_exporter(world: World, port: int, stop: threading.Event, codes: dict[str, int],
                  *extra: str, node: str = "node-a") -> threading.Thread:
    thread = threading.Thread(target=lambda: codes.setdefault("rc", exporter_main(
        ["--node-name", node, "--runtime-socket", str(world.runtime_server.socket_path),
         "--listen", f"127.0.0.1:{port}", "--interval", "0.1", "--deadline", "2", *extra], stop=stop)))
    thread.start()
    return thread


def test_unloadable_kubeconfig_serves_metrics_without_events(
    world: World, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port, stop, codes = _free_port(), threading.Event(), {}
    thread = _run_exporter(world, port, stop, codes, "--kubeconfig", str(root / "missing.yaml"))
    try:
        _wait(lambda: "lj_runtimekit_gpu_healthy" in _scrape(port))
        assert "lj_runtimekit_exporter_events_total" not in _scrape(port)
    finally:
        stop.set()
        thread.join(10)
    assert codes == {"rc": 0}
    disabled = [line for line in capsys.readouterr().err.splitlines() if "Events on node" in line]
    assert len(disabled) == 1
    assert "disabled" in disabled[0]


@pytest.mark.k8s
def test_detector_writes_node_events_to_a_real_api_server(world: World, k8s_bin_dir: Path) -> None:
    from k8s_harness import control_plane
    from kubernetes import client

    from domain.gpu import Health

    with control_plane(k8s_bin_dir) as plane:
        api = plane.api_client()
        core = client.CoreV1Api(api)
        name = "exporter-node-1"
        uid = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name))).metadata.uid
        selector = f"involvedObject.kind=Node,involvedObject.name={name},involvedObject.uid={uid}"

        def reasons() -> list[str]:
            return [e.reason for e in core.list_namespaced_event("default", field_selector=selector).items]

        port, stop, codes = _free_port(), threading.Event(), {}
        thread = _run_exporter(world, port, stop, codes, "--kubeconfig", str(plane.kubeconfig), node=name)
        try:
            _wait(lambda: "lj_runtimekit_exporter_event_errors_total" in _scrape(port))
            world.runtime.set_health("GPU-2", Health.UNHEALTHY, "XID 79")
            _wait(lambda: reasons() == ["GpuUnhealthy"])
            time.sleep(1.0)  # ten more refreshes: still one Event
            [event] = core.list_namespaced_event("default", field_selector=selector).items
            assert (event.type, event.source.component, event.involved_object.namespace) == (
                "Warning", "lj-runtimekit-exporter", None)
            assert event.message == "GPU 2 (GPU-2) became unhealthy: XID 79"
            world.runtime.set_health("GPU-2", Health.HEALTHY)
            _wait(lambda: sorted(reasons()) == ["GpuRecovered", "GpuUnhealthy"])
            sent = {labels["reason"]: v for labels, v in _scrape(port)["lj_runtimekit_exporter_events_total"]}
            assert sent == {"GpuUnhealthy": 1.0, "GpuRecovered": 1.0}
        finally:
            stop.set()
            thread.join(10)
            api.close()
    assert codes == {"rc": 0}
