"""``ljrk exporter`` scraped by a real Prometheus server (Debian's ``prometheus``) on 127.0.0.1, checked through
Prometheus's HTTP API; and ``promtool check metrics`` on the exporter's page.

The stack: the reference Runtime built by its own container (what ``ljrk runtime --backend simulated`` runs;
in-process so an XID can be injected) over two simulated GPUs from a YAML inventory (fixed UUIDs, two models), the
fake kubelet pod-resources server of ``test_exporter_cli`` on a unix socket, the ``ljrk exporter`` command as a
subprocess, and Prometheus started with a temporary config (scrape every 1 s, TSDB under ``tmp_path``) and killed
afterwards. Waits poll with deadlines; nothing sleeps for a fixed time.

Covers: ``promtool check metrics`` exits 0 and reports nothing, on the stack's page and on a page with MIG series
(an allocated and a free instance with measurements, a GPU instance without compute instance; built in-process from
the in-process Runtime: the stack has no MIG GPU, so the counts below hold no MIG series); Prometheus scrapes the
target (``up`` 1) and its latest samples hold exactly the expected series per family, with exact label sets and
values (per GPU: node, gpu_index, gpu_uuid, model; per container: plus namespace, pod, container; per node:
allocatable versus allocated; the exporter's own health; the XID counter), ``/api/v1/series`` lists them and
``/api/v1/metadata`` types and helps match the spec tables; a pod kubelet no longer lists is gone from ``/metrics``
and, through its staleness marker, from Prometheus's instant queries at the next scrape, while every GPU stays
(B20, B22); the exporter exits 0 on SIGTERM.

Binaries: ``prometheus`` and ``promtool`` on PATH (``bash scripts/prometheus.sh install``). Without them the tests
are skipped, unless ``LJRK_REQUIRE_PROMETHEUS=1`` (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import attrs
import grpc
import pytest
from runtime_node import RunningRuntime
from test_exporter_cli import FakePodResources, _free_port, _get, _scrape, _wait
from test_runtime_grpc import LJRK

from adapters.grpc import GrpcNodeConfig, GrpcNodeRuntime
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from adapters.grpc.client import unix_target
from adapters.prometheus.exporter import PrometheusExporterMetrics
from adapters.simulated import SimulatedGpuBackend
from domain.exporter.metrics import CONTAINER_METRICS, GPU_METRICS, NODE_METRICS, PREFIX
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ContainerAllocationRequest, MigInstanceData, MigInstanceInfo, PlannedGpu, PlannedMig
from entrypoints.runtime.app import RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from entrypoints.runtime.inprocess import InProcessRuntime

pytestmark = pytest.mark.prometheus

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
NODE = "gpu-node-1"
JOB = "ljrk-exporter"
RESOURCES = ProtocolConstants().resources
UUID_A = "GPU-aaaaaaaa-0000-1111-2222-333333333333"
UUID_B = "GPU-bbbbbbbb-0000-1111-2222-333333333333"
INVENTORY = (f"gpus:\n  - {{model: A100, memory: 16Gi, uuid: {UUID_A}}}\n"
             f"  - {{model: H100, memory: 80Gi, uuid: {UUID_B}}}\n")
XID = 79  # "GPU has fallen off the bus": counted, and the GPU turns unhealthy
ALL_SERIES = '{__name__=~"lj_runtimekit_.+"}'
EXPORTER_GAUGES = ("exporter_runtime_up", "exporter_data_stale", "exporter_pod_resources_up",
                   "exporter_data_age_seconds", "exporter_attribution_mismatched_containers")
EXPORTER_COUNTERS = ("exporter_runtime_errors_total", "exporter_pod_resources_errors_total")

Labels = dict[str, str]
Series = dict[str, list[tuple[Labels, float]]]


@attrs.frozen
class Pod:
    """One single-container pod holding a share of one GPU."""

    namespace: str
    name: str
    container: str
    gpu: int
    uuid: str
    core_milli: int
    memory_bytes: int

    def request(self) -> ContainerAllocationRequest:
        return ContainerAllocationRequest(f"uid-{self.name}", self.namespace, self.name, self.container,
                                          (PlannedGpu(self.gpu, GpuUuid(self.uuid), core_milli=self.core_milli,
                                                      memory_bytes=self.memory_bytes),))

    def listed(self) -> pr.PodResources:
        """As kubelet's pod-resources List shows it: our device IDs embed the UUID, plus a foreign device."""
        devices = [pr.ContainerDevices(resource_name=RESOURCES.core, device_ids=[f"{self.uuid}::core::0"]),
                   pr.ContainerDevices(resource_name=RESOURCES.memory, device_ids=[f"{self.uuid}::memory::0"]),
                   pr.ContainerDevices(resource_name="example.com/nic", device_ids=["nic0"])]
        return pr.PodResources(name=self.name, namespace=self.namespace,
                               containers=[pr.ContainerResources(name=self.container, devices=devices)])


TRAINER = Pod("team-a", "trainer", "main", 0, UUID_A, core_milli=500, memory_bytes=4 * GIB)
SERVER = Pod("team-b", "server", "infer", 1, UUID_B, core_milli=250, memory_bytes=8 * GIB)


# ------------------------------------------------------------------------------------------------ binaries
def _missing(reason: str) -> None:
    hint = f"{reason}; install them with: bash scripts/prometheus.sh install"
    if os.environ.get("LJRK_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"LJRK_REQUIRE_PROMETHEUS=1 but Prometheus is unavailable: {hint}", pytrace=False)
    pytest.skip(f"no Prometheus: {hint}")


def _binary(name: str) -> Path:
    path = shutil.which(name)
    if path is None:
        _missing(f"{name} is not on PATH")
    return Path(str(path))


@pytest.fixture(scope="module")
def promtool() -> Path:
    """``promtool`` (skips/fails when absent)."""
    return _binary("promtool")


@pytest.fixture(scope="module")
def prometheus_server() -> Path:
    """``prometheus`` (skips/fails when absent)."""
    return _binary("prometheus")


# ------------------------------------------------------------------------------------------------ the stack
@attrs.define
class Stack:
    """Runtime, fake kubelet pod-resources and the exporter process (the ``stack`` fixture stops them)."""

    root: Path
    node: RunningRuntime
    kubelet: FakePodResources
    exporter: subprocess.Popen[bytes]
    port: int

    @property
    def target(self) -> str:
        """The exporter's ``host:port``, as Prometheus's ``instance`` label shows it."""
        return f"127.0.0.1:{self.port}"

    def exporter_log(self) -> str:
        return (self.root / "exporter.log").read_text(errors="replace")[-4000:]

    def stop_exporter(self) -> int:
        """SIGTERM the exporter; its exit code."""
        if self.exporter.poll() is None:
            self.exporter.send_signal(signal.SIGTERM)
            try:
                self.exporter.wait(10)
            except subprocess.TimeoutExpired:
                self.exporter.kill()
                self.exporter.wait()
        return self.exporter.returncode


def _start_runtime(root: Path, cleanup: contextlib.ExitStack) -> RunningRuntime:
    (root / "gpus.yaml").write_text(INVENTORY)
    settings = RuntimeSettings(socket=root / "rt.sock", backend="simulated", simulated_gpus_file=root / "gpus.yaml",
                               state_dir=root / "state", log_level="WARNING")
    container = RuntimeContainer(settings=settings)
    app = container.app()
    app.start()
    cleanup.callback(app.stop, 0.5)
    runtime = cleanup.enter_context(GrpcNodeRuntime.connect(settings.socket, timeout_s=5))
    runtime.wait_ready(5)
    config = cleanup.enter_context(GrpcNodeConfig.connect(settings.socket, timeout_s=5))
    return RunningRuntime(container, app, runtime, config)


def _exporter_env() -> dict[str, str]:
    """This environment without a Kubernetes API (no in-cluster config: no Events, so no Event series)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_") and k != "KUBECONFIG"}
    return {**env, "PYTHONPATH": str(REPO_ROOT / "src")}


def _settled(stack: Stack) -> bool:
    """The exporter's page shows the fixture's final state (both containers, the XID and its health change)."""
    page = _scrape(stack.port)
    health = {labels["gpu_uuid"]: v for labels, v in page.get(f"{PREFIX}gpu_healthy", [])}
    return (len(page.get(f"{PREFIX}container_gpu_core_limit_ratio", [])) == 2
            and len(page.get(f"{PREFIX}gpu_xid_errors_total", [])) == 1 and health == {UUID_A: 1.0, UUID_B: 0.0})


@pytest.fixture
def stack() -> Iterator[Stack]:
    """Two GPUs, TRAINER on GPU 0 and SERVER on GPU 1 (allocated and listed by kubelet), XID 79 on GPU 1, and
    ``ljrk exporter`` pulling every 0.2 s; yielded once its page shows all of that."""
    root = Path(tempfile.mkdtemp(prefix="ljprom", dir="/tmp"))  # short: unix socket paths are limited
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        node = _start_runtime(root, cleanup)
        for pod in (TRAINER, SERVER):
            node.runtime.allocate(pod.request())
        backend = node.container.backend()
        assert isinstance(backend, SimulatedGpuBackend)
        backend.inject_xid(UUID_B, XID)
        kubelet = FakePodResources()
        kubelet.pods = [TRAINER.listed(), SERVER.listed()]
        pr_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(kubelet, pr_server)
        pr_server.add_insecure_port(unix_target(root / "pr.sock"))
        pr_server.start()
        cleanup.callback(lambda: pr_server.stop(0).wait())
        port = _free_port()
        with (root / "exporter.log").open("wb") as log:
            exporter = subprocess.Popen(
                [*LJRK, "exporter", "--node-name", NODE, "--runtime-socket", str(root / "rt.sock"),
                 "--listen", f"127.0.0.1:{port}", "--pod-resources-socket", str(root / "pr.sock"),
                 "--interval", "0.2", "--deadline", "2", "--log-level", "WARNING"],
                env=_exporter_env(), stdout=subprocess.DEVNULL, stderr=log,
            )
        running = Stack(root, node, kubelet, exporter, port)
        cleanup.callback(running.stop_exporter)
        try:
            _wait(lambda: exporter.poll() is None and _settled(running), timeout=20)
        except AssertionError:
            raise AssertionError(f"the exporter did not serve the fixture:\n{running.exporter_log()}") from None
        yield running


# ------------------------------------------------------------------------------------------------ prometheus
@attrs.define
class Prometheus:
    """A Prometheus server on 127.0.0.1 scraping one target every second."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a successful ``/api/v1/<path>`` reply."""
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def instant(self, query: str) -> list[tuple[Labels, float]]:
        """An instant query at now: (labels, value) per series."""
        data = self.api("query", query=query)
        assert data["resultType"] == "vector", data
        return [(dict(row["metric"]), float(row["value"][1])) for row in data["result"]]

    def latest(self) -> Series:
        """Every ``lj_runtimekit_`` series of the latest scrape, by name; ``__name__`` removed from the labels."""
        out: Series = {}
        for labels, value in self.instant(ALL_SERIES):
            out.setdefault(labels.pop("__name__"), []).append((labels, value))
        return out


@pytest.fixture
def prometheus(prometheus_server: Path, stack: Stack, tmp_path: Path) -> Iterator[Prometheus]:
    """Prometheus scraping ``stack``'s exporter, ready (``/-/ready``) when yielded; killed afterwards."""
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [stack.target]}]}],
    }))
    port, log = _free_port(), tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(prometheus_server), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
        )
    server = Prometheus(process, port, log)
    try:
        try:
            _wait(lambda: process.poll() is None and _get(f"{server.base}/-/ready")[0] == 200, timeout=15)
        except AssertionError:
            tail = log.read_text(errors="replace")[-4000:]
            raise AssertionError(f"Prometheus did not become ready:\n{tail}") from None
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ------------------------------------------------------------------------------------------------ expectations
def _gpu_labels(target: str, index: int) -> Labels:
    uuid, model = ((UUID_A, "A100"), (UUID_B, "H100"))[index]
    return {"job": JOB, "instance": target, "node": NODE, "gpu_index": str(index), "gpu_uuid": uuid, "model": model}


def _container_labels(target: str, pod: Pod) -> Labels:
    return {**_gpu_labels(target, pod.gpu), "namespace": pod.namespace, "pod": pod.name, "container": pod.container}


def _node_labels(target: str) -> Labels:
    return {"job": JOB, "instance": target, "node": NODE}


# Simulated usage model (adapters.simulated.backend): a container granted c % core and m bytes uses 0.8 c % and
# m / 2 bytes; temperature 30 + 0.4 × utilization °C, power 50 + 250 × utilization / 100 W.
GPU_VALUES: dict[str, tuple[float, float]] = {
    "gpu_utilization_ratio": (0.4, 0.2),
    "gpu_memory_used_bytes": (2 * GIB, 4 * GIB),
    "gpu_memory_total_bytes": (16 * GIB, 80 * GIB),
    "gpu_temperature_celsius": (46.0, 38.0),
    "gpu_power_watts": (150.0, 100.0),
    "gpu_healthy": (1.0, 0.0),  # GPU 1 saw XID 79
    "gpu_core_allocated_ratio": (0.5, 0.25),
    "gpu_memory_allocated_bytes": (4 * GIB, 8 * GIB),
}
CONTAINER_VALUES: dict[str, dict[str, float]] = {  # by pod
    "container_gpu_core_limit_ratio": {"trainer": 0.5, "server": 0.25},
    "container_gpu_memory_limit_bytes": {"trainer": 4 * GIB, "server": 8 * GIB},
    "container_gpu_utilization_ratio": {"trainer": 0.4, "server": 0.2},
    "container_gpu_memory_used_bytes": {"trainer": 2 * GIB, "server": 4 * GIB},
}
NODE_VALUES: dict[str, float] = {
    "node_gpu_core_allocatable_gpus": 1.0,  # healthy GPUs only
    "node_gpu_core_allocated_gpus": 0.75,
    "node_gpu_memory_allocatable_bytes": 16 * GIB,
    "node_gpu_memory_allocated_bytes": 12 * GIB,
    "node_gpus": 2.0,
    "node_containers": 2.0,
}


def _expected_counts(pods: int) -> dict[str, int]:
    """Series per family name for 2 GPUs, ``pods`` one-GPU containers, one XID code on one GPU."""
    return {
        **{PREFIX + spec.name: 2 for spec in GPU_METRICS},
        f"{PREFIX}gpu_xid_errors_total": 1,
        **{PREFIX + spec.name: pods for spec in CONTAINER_METRICS},
        **{PREFIX + spec.name: 1 for spec in NODE_METRICS},
        **{PREFIX + name: 1 for name in (*EXPORTER_GAUGES, *EXPORTER_COUNTERS)},
        f"{PREFIX}protocol_info": 1,  # component="exporter", the embedded protocol's fingerprint
        f"{PREFIX}node_missing_gpus": 1,  # 0: no container holds a GPU the Runtime no longer lists
        f"{PREFIX}share_enforcement": 1,  # mode="none": the simulated Runtime has no HAMi-core
    }


def _settle(predicate: Callable[[], bool], timeout_s: float) -> None:
    """Wait until ``predicate`` holds, at most ``timeout_s``; the precise assertions that follow say what is wrong."""
    with contextlib.suppress(AssertionError):
        _wait(predicate, timeout=timeout_s)


def _key(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _table(rows: list[tuple[Labels, float]]) -> dict[tuple[tuple[str, str], ...], float]:
    """Value by label set, rounded to 9 digits (series counts are checked apart)."""
    return {_key(labels): round(value, 9) for labels, value in rows}


# ------------------------------------------------------------------------------------------------ tests
def test_promtool_check_metrics_passes(stack: Stack, promtool: Path) -> None:
    status, body = _get(f"http://{stack.target}/metrics")
    assert status == 200
    result = subprocess.run([str(promtool), "check", "metrics"], input=body, capture_output=True, timeout=30,
                            check=False)
    report = (result.stdout + result.stderr).decode()
    assert (result.returncode, report) == (0, ""), body.decode()


def test_promtool_check_metrics_passes_with_mig_series(promtool: Path) -> None:
    uuid = GpuUuid(UUID_B)
    runtime = InProcessRuntime([Gpu(0, uuid, "NVIDIA H100 80GB HBM3", 80 * GIB, mig_mode=MigMode.ENABLED)],
                                  mig_layouts={0: [("3g.40gb", 0), ("1g.10gb", 4)]})
    runtime.allocate(ContainerAllocationRequest("uid-mig", "team-c", "mig", "main", (),
                                                mig=(PlannedMig(0, uuid, "3g.40gb", 0),)))
    data = runtime.exporter_data()
    bare = MigInstanceInfo(0, uuid, gpu_instance_id=7, compute_instance_id=None, profile="1g.10gb", start=6, size=1,
                           compute_slices=1, memory_bytes=10 * GIB, uuid="")
    rows = tuple(attrs.evolve(m, memory_used_bytes=GIB, utilization_percent=12.5) for m in data.mig)
    data = attrs.evolve(data, mig=(*rows, MigInstanceData(bare, error="no compute instance")))
    body = PrometheusExporterMetrics(lambda: Snapshot(data=data, pulled_at=1.0, runtime_up=True), node=NODE,
                                     clock=lambda: 2.0).exposition()
    assert b"lj_runtimekit_container_mig_utilization_ratio{" in body
    assert b'compute_instance_id=""' in body
    result = subprocess.run([str(promtool), "check", "metrics"], input=body, capture_output=True, timeout=30,
                            check=False)
    report = (result.stdout + result.stderr).decode()
    assert (result.returncode, report) == (0, ""), body.decode()


def test_prometheus_scrapes_series_and_labels_and_drops_gone_pods(stack: Stack, prometheus: Prometheus) -> None:
    target, node = stack.target, _key(_node_labels(stack.target))
    _settle(lambda: _expected_counts(2) == {n: len(rows) for n, rows in prometheus.latest().items()}, timeout_s=15)
    assert prometheus.instant(f'up{{job="{JOB}"}}') == [({"__name__": "up", "job": JOB, "instance": target}, 1.0)]
    latest = prometheus.latest()
    assert {n: len(rows) for n, rows in latest.items()} == _expected_counts(2)
    for name, (first, second) in GPU_VALUES.items():
        assert _table(latest[PREFIX + name]) == {_key(_gpu_labels(target, 0)): first,
                                                 _key(_gpu_labels(target, 1)): second}, name
    assert latest[f"{PREFIX}gpu_xid_errors_total"] == [({**_gpu_labels(target, 1), "xid": str(XID)}, 1.0)]
    for name, by_pod in CONTAINER_VALUES.items():
        expected = {_key(_container_labels(target, pod)): by_pod[pod.name] for pod in (TRAINER, SERVER)}
        assert _table(latest[PREFIX + name]) == expected, name
    for name, value in NODE_VALUES.items():
        assert _table(latest[PREFIX + name]) == {node: value}, name
    health = {name.removeprefix(PREFIX): _table(rows) for name, rows in latest.items() if "_exporter_" in name}
    assert 0.0 <= health.pop("exporter_data_age_seconds")[node] < 5.0
    assert health == {"exporter_runtime_up": {node: 1.0}, "exporter_data_stale": {node: 0.0},
                      "exporter_pod_resources_up": {node: 1.0},
                      "exporter_attribution_mismatched_containers": {node: 0.0},
                      "exporter_runtime_errors_total": {node: 0.0},
                      "exporter_pod_resources_errors_total": {node: 0.0}}

    listed = prometheus.api("series", **{"match[]": f'{{__name__=~"{PREFIX}container_.+"}}'})
    assert sorted((s["__name__"], s["namespace"], s["pod"], s["container"], s["gpu_uuid"]) for s in listed) == sorted(
        (PREFIX + spec.name, pod.namespace, pod.name, pod.container, pod.uuid)
        for spec in CONTAINER_METRICS for pod in (TRAINER, SERVER))
    metadata = prometheus.api("metadata")
    gauges = [(s.name, s.help) for s in GPU_METRICS] + [(s.name, s.help) for s in CONTAINER_METRICS] + [
        (s.name, s.help) for s in NODE_METRICS]
    for name, help_text in gauges:
        assert metadata[PREFIX + name] == [{"type": "gauge", "help": help_text, "unit": ""}], name
    for name in ("gpu_xid_errors_total", *EXPORTER_COUNTERS):
        assert [m["type"] for m in metadata[PREFIX + name]] == ["counter"], name

    # B20: kubelet stops listing SERVER (the Runtime still holds its record); its series go at the next scrape.
    stack.kubelet.pods = [TRAINER.listed()]
    _settle(lambda: len(_scrape(stack.port).get(f"{PREFIX}container_gpu_core_limit_ratio", [])) == 1, timeout_s=10)
    page = _scrape(stack.port)
    assert [labels["pod"] for spec in CONTAINER_METRICS for labels, _ in page.get(PREFIX + spec.name, [])] == [
        "trainer"] * len(CONTAINER_METRICS)
    _settle(lambda: len(prometheus.instant(f"{PREFIX}container_gpu_core_limit_ratio")) == 1, timeout_s=15)
    latest = prometheus.latest()
    assert {n: len(rows) for n, rows in latest.items()} == _expected_counts(1)
    for name, by_pod in CONTAINER_VALUES.items():
        assert _table(latest[PREFIX + name]) == {_key(_container_labels(target, TRAINER)): by_pod["trainer"]}, name
    assert _table(latest[f"{PREFIX}node_containers"]) == {node: 1.0}
    assert _table(latest[f"{PREFIX}gpu_healthy"]) == {_key(_gpu_labels(target, 0)): 1.0,
                                                      _key(_gpu_labels(target, 1)): 0.0}  # B22
    # Gone through its staleness marker, not for lack of data: the range selector still sees the old samples.
    assert prometheus.instant(f'{PREFIX}container_gpu_core_limit_ratio{{pod="server"}}') == []
    query = f'last_over_time({PREFIX}container_gpu_core_limit_ratio{{pod="server"}}[5m])'
    [(labels, value)] = prometheus.instant(query)
    labels.pop("__name__", None)  # kept by some Prometheus versions, dropped by others
    assert (labels, value) == (_container_labels(target, SERVER), 0.25)

    assert stack.stop_exporter() == 0, stack.exporter_log()
