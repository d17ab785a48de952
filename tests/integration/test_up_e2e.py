"""``ljrk up`` end to end: every component wired as in production (``entrypoints.up.containers.UpContainer``) on
the in-memory cluster, talking over its real protocols — the Runtime's gRPC contract and config service, kubelet's
device-plugin Registration/Allocate and pod-resources on unix sockets, the exporters' and the scheduler's HTTP
``/metrics`` — with only kubelet and the container runtime emulated.

Covers, on two simulated nodes (durations in wall seconds: speedup 1):
- a pod lifecycle through every component with departures: whole-GPU, shared and CPU-only pods are scheduled,
  admitted through GetPreferredAllocation + Allocate, run, depart (``Succeeded``); departed pods' Runtime records are
  released, the exporter stops serving them, the ledger frees them; a long-running pod stays everywhere;
- a kubelet restart in the middle: running pods keep their devices and records, the plugins re-register, a pod bound
  right after the restart is admitted once they are back (``registration_wait_s``) and later departs;
- a Runtime restart (server and service stopped and served again on the same socket and state directory): the
  allocation records persist unchanged, the device plugin, exporter and releaser reconnect, new pods are admitted,
  departures are released in the new Runtime;
- a node toggled off and on through the enable label: controller → Job → job runner → job agent → config service
  (Runtime disabled/enabled, verified by GetStatus) → node state annotation → the scheduler stops, then resumes,
  placing GPU pods there;
- after each scenario the ledger, the Runtimes' records and the exporters' pages agree at a quiescent point (no
  disagreement, nothing in flight), and the stack stops cleanly (no thread left, host directories deleted);
- the CLI as a subprocess: ``ljrk up --nodes 2 …`` exits 0 with the tables, a ``report.json`` whose disagreement
  list is empty and nothing left in its work folder; SIGINT in the middle exits 130 and cleans up too;
- ``--topology nvlink-islands-2x4`` on an 8-GPU node: after a 1-GPU pod, a 4-GPU pod gets one whole NVLink island
  (without the topology the first free GPUs, 1-4, would cross islands);
- ``--kubeconfig`` against the test control plane (``k8s``: skipped without it): the toggle Jobs run through the real
  Job controller, the components agree, and the nodes and pods it created are gone afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from dependency_injector import providers
from k8s_harness import ControlPlane

from adapters.grpc import GrpcNodeConfig
from adapters.grpc.kubelet_emulator import DURATION_ANNOTATION
from domain.kube.objects import PodObject, PodPhase
from domain.runtime.types import RuntimeState
from domain.simulation.workload import TracePod
from entrypoints.up.app import UpApp, UpSettings
from entrypoints.up.containers import UpContainer
from entrypoints.up.simnode import HOSTNAME_LABEL, SimNode
from entrypoints.up.workload import Arrival, pod_object
from ports.cluster import NotFoundError
from support.polling import TIMEOUT, eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE0, NODE1 = "ljrk-up-node-0", "ljrk-up-node-1"


@attrs.define
class Harness:
    """A running stack of two nodes and helpers to drive it."""

    app: UpApp
    container: UpContainer

    @property
    def cluster(self):  # type: ignore[no-untyped-def]
        return self.app.cluster

    def node(self, name: str) -> SimNode:
        return self.app.stack.nodes[name]

    def submit(self, name: str, *, gpus: int = 0, share: int = 0, duration: float | None = None,
               node: str | None = None, cpu_milli: int = 1000) -> PodObject:
        """Create a pod: ``gpus`` whole GPUs or a ``share`` in milli-GPU (or neither: CPU only), running
        ``duration`` seconds (None = until the end), pinned to ``node`` by its hostname label when given."""
        milli = 1000 if gpus else share
        trace = TracePod(name, cpu_milli, 1024, gpus or (1 if share else 0), milli)
        pod = pod_object(Arrival(trace, 0.0, duration), self.app.protocol, duration_annotation=DURATION_ANNOTATION)
        if node is not None:
            pod = attrs.evolve(pod, node_selector={HOSTNAME_LABEL: node})
        return self.cluster.create_pod(pod)

    def pod(self, name: str) -> PodObject | None:
        try:
            return self.cluster.get_pod("default", name)
        except NotFoundError:
            return None

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        eventually(predicate, timeout, what)

    def wait_phase(self, name: str, phase: PodPhase, timeout: float = TIMEOUT) -> PodObject:
        self.wait(f"{name} {phase.value}", lambda: (p := self.pod(name)) is not None and p.phase is phase, timeout)
        pod = self.pod(name)
        assert pod is not None
        return pod

    def records(self, node: str) -> dict[str, float]:
        """``namespace/pod/container`` → allocated_at of the node Runtime's records (over gRPC)."""
        data = self.node(node).runtime_data()
        return {f"{c.namespace}/{c.pod_name}/{c.container}": c.allocated_at for c in data.containers}

    def exporter_pods(self, node: str) -> set[str]:
        """Pods with container series on the node exporter's page (a fresh scrape)."""
        samples = self.app.scrape(self.node(node).exporter_url, 5.0)
        return {s.labels["pod"] for s in samples if s.name == "lj_runtimekit_container_gpu_core_limit_ratio"}

    def ledger_pods(self) -> set[str]:
        scheduler = self.app.stack.scheduler
        assert scheduler is not None
        with scheduler.service.books() as books:
            uids = set(books.ledger.records())
        return {p.name for p in self.cluster.list_pods().items if p.uid in uids}

    def assert_agreement(self) -> None:
        """Freeze departures, settle, and require no disagreement (then let time flow again)."""
        self.app.stack.clock.pause()
        try:
            settled = self.app.settle(threading.Event())
        finally:
            self.app.stack.clock.resume()
        assert settled.settled, f"not quiescent: {settled.in_flight}"
        assert not settled.disagreements, [d.describe() for d in settled.disagreements]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Harness]:
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))  # unix socket paths: at most 107 bytes
    settings = UpSettings(nodes=2, pods=1, output_dir=tmp_path / "out", progress=False, settle_timeout_s=10.0,
                          ready_timeout_s=20.0, work_dir=work)
    container = UpContainer(settings=settings)
    container.speedup.override(providers.Object(1.0))  # emulated durations in wall seconds
    container.init_resources()
    before = {t.ident for t in threading.enumerate()}
    app = container.app()
    harness = Harness(app, container)
    try:
        app.start(threading.Event())
        yield harness
    finally:
        app.shutdown()
        container.shutdown_resources()
        left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()
                and t.name != "tqdm_monitor"]  # tqdm's one monitor thread per process, not the stack's
        leftovers = list(work.iterdir())
        shutil.rmtree(work, ignore_errors=True)
    assert not left, f"threads left running: {left}"
    assert not leftovers, f"host directories left: {leftovers}"


def test_pod_lifecycle_through_every_component_with_departures(stack: Harness) -> None:
    stack.submit("whole-a", gpus=1, duration=1.0)
    stack.submit("share-b", share=300, duration=1.5)
    stack.submit("share-c", share=500, duration=1.0)
    stack.submit("cpu-d", duration=1.0)
    stack.submit("long-e", share=200)
    for name in ("whole-a", "share-b", "share-c", "cpu-d", "long-e"):
        pod = stack.wait_phase(name, PodPhase.RUNNING)
        assert pod.node_name in (NODE0, NODE1)
    long_node = stack.pod("long-e").node_name  # type: ignore[union-attr]
    assert "default/long-e/main" in stack.records(long_node)
    plugin_page = stack.app.scrape(stack.node(long_node).device_plugin_url, 5.0)
    assert {s.labels.get("component") for s in plugin_page if s.name == "lj_runtimekit_protocol_info"} == {
        "device-plugin"}
    stack.assert_agreement()  # while they all run: every grant in the ledger, the Runtime and the exporter

    for name in ("whole-a", "share-b", "share-c", "cpu-d"):
        stack.wait_phase(name, PodPhase.SUCCEEDED)
    stack.wait("departed records released",
               lambda: all(set(stack.records(n)) <= {"default/long-e/main"} for n in (NODE0, NODE1)))
    assert stack.ledger_pods() == {"long-e"}
    stack.wait("exporter drops departed pods",
               lambda: stack.exporter_pods(NODE0) | stack.exporter_pods(NODE1) == {"long-e"})
    stack.assert_agreement()
    released = sum(n.releaser.released for n in stack.app.stack.nodes.values() if n.releaser is not None)
    assert released == 3  # whole-a, share-b, share-c (cpu-d had no record)


def test_kubelet_restart_in_the_middle(stack: Harness) -> None:
    stack.submit("before", share=400, node=NODE0)
    stack.wait_phase("before", PodPhase.RUNNING)
    held = stack.records(NODE0)
    node = stack.node(NODE0)
    updates = dict(node.kubelet.device_manager.updates)  # type: ignore[union-attr]
    node.restart_kubelet()
    stack.submit("after", gpus=1, duration=1.0, node=NODE0)  # bound before the plugins are back, most likely
    stack.wait_phase("after", PodPhase.RUNNING)
    assert stack.pod("before").phase is PodPhase.RUNNING  # type: ignore[union-attr]
    plugin = node.device_plugin
    assert plugin is not None
    stack.wait("plugins re-registered", lambda: plugin.reregistrations >= 1)
    assert node.kubelet.device_manager.updates != updates  # type: ignore[union-attr]
    assert held.items() <= stack.records(NODE0).items()  # the running pod's record is untouched
    stack.assert_agreement()
    stack.wait_phase("after", PodPhase.SUCCEEDED)
    stack.wait("released after the restart", lambda: "default/after/main" not in stack.records(NODE0))
    stack.assert_agreement()


def test_runtime_restart_keeps_records(stack: Harness) -> None:
    stack.submit("kept", gpus=1, node=NODE0)
    stack.submit("short", share=300, duration=2.0, node=NODE0)
    stack.wait_phase("kept", PodPhase.RUNNING)
    stack.wait_phase("short", PodPhase.RUNNING)
    before = stack.records(NODE0)
    node = stack.node(NODE0)
    node.restart_runtime()
    assert stack.records(NODE0) == before  # same records, same allocation times, from the state directory
    stack.submit("new", share=200, duration=1.0, node=NODE0)
    stack.wait_phase("new", PodPhase.RUNNING, timeout=15)
    stack.wait_phase("short", PodPhase.SUCCEEDED)
    stack.wait("a departure released in the new Runtime", lambda: "default/short/main" not in stack.records(NODE0))
    assert stack.records(NODE0)["default/kept/main"] == before["default/kept/main"]
    stack.assert_agreement()


def test_node_toggled_off_and_on_through_the_label(stack: Harness) -> None:
    keys = stack.app.protocol.annotations
    label = stack.app.protocol.node_label

    def state(node: str) -> str:
        return stack.cluster.get_node(node).annotations.get(keys.node_state, "")

    def runtime_state(node: str) -> RuntimeState:
        with GrpcNodeConfig.connect(stack.node(node).runtime_socket) as config:
            return config.status().state

    stack.submit("running", share=300, node=NODE1)
    stack.wait_phase("running", PodPhase.RUNNING)
    stack.cluster.patch_node_metadata(NODE1, labels={label: "false"})
    stack.wait("node disabled", lambda: state(NODE1) == "disabled")
    assert runtime_state(NODE1) is RuntimeState.DISABLED
    stack.submit("pinned", share=300, node=NODE1)
    stack.submit("elsewhere", share=300)
    assert stack.wait_phase("elsewhere", PodPhase.RUNNING).node_name == NODE0
    stack.wait("pinned refused", lambda: (e := stack.app.tap.last_event("Pod", "default", "pinned")) is not None
               and e.reason == "FailedScheduling")
    assert stack.pod("pinned").node_name == ""  # type: ignore[union-attr]
    assert stack.pod("running").phase is PodPhase.RUNNING  # type: ignore[union-attr]
    stack.assert_agreement()

    stack.cluster.patch_node_metadata(NODE1, labels={label: "true"})
    stack.wait("node enabled", lambda: state(NODE1) == "enabled")
    assert runtime_state(NODE1) is RuntimeState.ENABLED
    assert stack.wait_phase("pinned", PodPhase.RUNNING, timeout=20).node_name == NODE1
    jobs = stack.app.stack.jobs
    assert jobs is not None
    assert jobs.succeeded == 4
    assert jobs.failed == 0
    stack.assert_agreement()


LJRK = shutil.which("ljrk", path=str(Path(sys.executable).parent))
needs_script = pytest.mark.skipif(LJRK is None, reason="the ljrk console script is not installed next to python")


@needs_script
def test_cli_runs_two_nodes_and_reports_agreement(tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        done = subprocess.run(
            [str(LJRK), "up", "--nodes", "2", "--pods", "24", "--duration", "3", "--no-progress",
             "--output-dir", str(tmp_path / "out"), "--work-dir", str(work)],
            capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT)
        leftovers = list(work.iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agreement (ledger = Runtime records = exporter /metrics" in done.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["agreement"]["settled"] is True
    assert report["agreement"]["disagreements"] == []
    assert report["pods"]["submitted"] == 24
    assert report["pods"]["placed"] > 0
    assert len(report["gpus"]) == 4
    assert len(report["endpoints"]["exporters"]) == 2
    for url in (report["endpoints"]["scheduler"], *report["endpoints"]["device_plugins"].values()):
        assert url.startswith("http://127.0.0.1:")
    assert report["components"]["toggle_jobs"] == {"succeeded": 2, "failed": 0}
    assert (tmp_path / "out" / "ljrk-up.log").stat().st_size > 0
    assert not leftovers


@needs_script
def test_cli_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        process = subprocess.Popen(
            [str(LJRK), "up", "--nodes", "1", "--pods", "100", "--duration", "60", "--no-progress",
             "--output-dir", str(tmp_path / "out"), "--work-dir", str(work)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log = tmp_path / "out" / "ljrk-up.log"
        deadline = time.monotonic() + 30
        while not (log.exists() and "admitted" in log.read_text()):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no pod admitted within 30 s"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        leftovers = list(work.iterdir())
    finally:
        if process.poll() is None:
            process.kill()
        shutil.rmtree(work, ignore_errors=True)
    assert process.returncode == 130, out + err
    assert not leftovers
    assert not (tmp_path / "out" / "report.json").exists()


@needs_script
@pytest.mark.k8s
def test_cli_against_a_real_api_server(k8s_control_plane: ControlPlane, tmp_path: Path) -> None:
    """``--kubeconfig``: the same stack on kube-apiserver, whose Job controller runs the toggle Jobs' pods on the
    emulated nodes; everything ``ljrk up`` created is deleted at the end."""
    from kubernetes import client

    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        done = subprocess.run(
            [str(LJRK), "up", "--kubeconfig", str(k8s_control_plane.kubeconfig), "--nodes", "2", "--pods", "16",
             "--duration", "3", "--no-progress", "--output-dir", str(tmp_path / "out"), "--work-dir", str(work)],
            capture_output=True, text=True, timeout=180, check=False, cwd=REPO_ROOT)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["agreement"]["disagreements"] == []
    assert report["pods"]["placed"] > 0
    assert report["components"]["toggle_jobs"] == {"succeeded": 2, "failed": 0}
    with k8s_control_plane.api_client() as api:
        core = client.CoreV1Api(api)
        assert not [n.metadata.name for n in core.list_node().items if n.metadata.name.startswith("ljrk-up-node-")]
        assert not [p.metadata.name for p in core.list_namespaced_pod("default").items
                    if (p.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "ljrk-up"]


@needs_script
def test_cli_topology_gives_a_four_gpu_pod_one_nvlink_island(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
                    "one,1000,1024,1,1000,,0,100000\nfour,1000,1024,4,1000,,10,100000\n")
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        done = subprocess.run(
            [str(LJRK), "up", "--nodes", "1", "--gpus-per-node", "8x16Gi:A100", "--topology", "nvlink-islands-2x4",
             "--workload", str(pods), "--pods", "2", "--duration", "2", "--no-progress",
             "--output-dir", str(tmp_path / "out"), "--work-dir", str(work)],
            capture_output=True, text=True, timeout=180, check=False, cwd=REPO_ROOT)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["pods"]["placed"] == 2
    used = {g["index"] for g in report["gpus"] if g["core_allocated_milli"] == 1000}
    assert len(used) == 5
    islands = ({0, 1, 2, 3}, {4, 5, 6, 7})  # the 1-GPU pod first takes one GPU; the 4-GPU pod a whole island
    assert any(island <= used and len(used - island) == 1 for island in islands), used


@needs_script
def test_cli_dra_mode_places_claims_and_the_books_agree(tmp_path: Path) -> None:
    """``--dra``: no device plugin; each GPU pod asks through a ResourceClaim our scheduler allocates, the emulated
    kubelet prepares it with the DRA driver (NodePrepareResources, CDI), and the ledger, the Runtime's records and
    the exporter agree per GPU and per container; the pod that ends gives its claim back."""
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
                    "brief,1000,1024,1,500,,0,1\nshare,1000,1024,1,300,,1,100000\n"
                    "two,1000,1024,2,1000,,2,100000\ncpu,1000,1024,0,0,,3,100000\n")
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        done = subprocess.run(
            [str(LJRK), "up", "--dra", "--nodes", "1", "--gpus-per-node", "4x16Gi:A100", "--workload", str(pods),
             "--duration", "3", "--no-progress", "--output-dir", str(tmp_path / "out"), "--work-dir", str(work)],
            capture_output=True, text=True, timeout=180, check=False, cwd=REPO_ROOT)
        leftovers = list(work.iterdir())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["settings"]["gpus_through"] == "dra"
    assert report["agreement"]["settled"] is True
    assert report["agreement"]["disagreements"] == []
    assert (report["pods"]["placed"], report["pods"]["running"], report["pods"]["succeeded"]) == (4, 3, 1)
    used = sorted((g["core_allocated_milli"], g["memory_allocated_bytes"]) for g in report["gpus"])
    assert used == [(0, 0), (300, 5 * 2**30), (1000, 16 * 2**30), (1000, 16 * 2**30)]
    assert report["agreement"]["containers_compared"] == 3  # the share's GPU and the two whole GPUs
    assert report["components"]["claims_released"] == 1  # brief's, when it ended
    assert report["endpoints"]["device_plugins"] == {"ljrk-up-node-0": ""}
    assert not leftovers
