"""Exporter benchmark: ``/metrics`` scrape latency on a full node, and memory and series count under pod churn.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/exporter_scrape.py [--gpus 16] [--containers-per-gpu 64] [--scrapes 200]
        [--interval 10] [--cycles 1000] [--warmup-cycles 100] [--churn-interval 0.1]

Set-up: separate processes, every hop the production one.

* The reference node Runtime, ``ljrk runtime --backend simulated --simulated-gpus <gpus>x80Gi:H100`` (its usage
  model fills measured utilization and memory for every container), on a unix socket.
* ``ljrk exporter --pod-resources-socket …``: its collector pulls ``ExporterGetDataList`` over gRPC and kubelet's
  pod-resources ``List`` in the background and serves ``GET /metrics`` on 127.0.0.1.
* This process: the kubelet side. A fake pod-resources server (``PodResourcesLister.List`` on a unix socket)
  lists the pods; each pod's one container gets onto the Runtime through the gRPC client's ``Allocate``, holds
  device IDs ``<uuid>::core::<n>`` and ``<uuid>::memory::<n>``, and leaves through ``Release``. Scrapes are real
  HTTP requests, one connection each, timed from the request to the last byte of the body.

Phases:

1. **Fill**: ``--containers-per-gpu`` one-container pods on each GPU (before any exporter starts).
2. **Steady scrapes**: an exporter at ``--interval`` (default 10 s, the command's default) shows the full node;
   ``--scrapes`` back-to-back scrapes of it are timed. Target p99 ≤ 100 ms.
3. **Churn**: a second exporter at ``--churn-interval`` (fast, so 1,000 cycles take minutes, not hours; each
   cycle's scrapes then compete with a pull every ``--churn-interval``). A cycle creates one pod (Allocate, then
   listed by pod-resources), scrapes until the page shows it (so the exporter has refreshed, and the previous
   cycle's pod must be gone from that page), then deletes it (unlisted, Release). After the last cycle, scrapes
   until the page is back to the fill. Those scrapes are timed too and reported apart, as a stress figure.

Memory is the churn exporter's resident set (``VmRSS`` of ``/proc/<pid>/status``) once it shows the full node
("start"), after ``--warmup-cycles`` cycles ("warm") and after the last cycle ("end"), plus a trajectory every
tenth of the churn. The series set (every sample's name and labels, values ignored) must be the same before and
after the churn (failure case B20); the process exits 1 when it is not.

The last lines are ``key=value`` figures (``scrape_p99_ms=…`` of the steady phase, ``series_before_churn=…``,
``rss_end_mib=…``, …).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import attrs
import grpc

from adapters.grpc import GrpcNodeRuntime, unix_target
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from domain.device_plugin.devices import DeviceId, ResourceKind
from domain.gpu import Gpu
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from domain.units import GiB, percent_to_milli

NODE = "bench-node"
NAMESPACE = "bench"
GPU_MEMORY = "80Gi"
PREFIX = "lj_runtimekit_"
FILL_CORE_PERCENT, FILL_MEMORY_GIB = 90, 72
"""What the fill grants on each GPU, split over its pods; the rest (10 %, 8 GiB) leaves room for churn pods."""
CHURN_CORE_PERCENT, CHURN_MEMORY_GIB = 1, 1


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def rss_mib(pid: int) -> float:
    """Resident set of process ``pid`` in MiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def series_of(body: bytes) -> frozenset[str]:
    """Every sample of a text-format page by name and labels (values and comments dropped)."""
    return frozenset(line.rpartition(" ")[0] for line in body.decode().splitlines() if line and line[0] != "#")


def gauge(body: bytes, name: str) -> float | None:
    """The value of the per-node gauge ``lj_runtimekit_<name>`` on the page, or None when absent."""
    match = re.search(rb"^" + re.escape((PREFIX + name).encode()) + rb"\{[^}]*\} (\S+)$", body, re.MULTILINE)
    return None if match is None else float(match.group(1))


class FakePodResources(pr_grpc.PodResourcesListerServicer):
    """Kubelet's pod-resources ``List`` over the pods the benchmark says run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, pr.PodResources] = {}

    def add(self, pod: pr.PodResources) -> None:
        with self._lock:
            self._pods[pod.name] = pod

    def remove(self, name: str) -> None:
        with self._lock:
            del self._pods[name]

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:  # noqa: N802 (proto RPC name)
        with self._lock:
            pods = list(self._pods.values())
        return pr.ListPodResourcesResponse(pod_resources=pods)


class Node:
    """The kubelet side: creates and deletes one-container pods on the Runtime and in pod-resources."""

    def __init__(self, runtime: GrpcNodeRuntime, kubelet: FakePodResources, gpus: Sequence[Gpu]) -> None:
        self.runtime = runtime
        self.kubelet = kubelet
        self.gpus = gpus
        self._names = ProtocolConstants().resources
        self._next_id = {(g.uuid, kind): 0 for g in gpus for kind in ResourceKind}

    def _ids(self, gpu: Gpu, kind: ResourceKind, count: int) -> list[str]:
        first = self._next_id[(gpu.uuid, kind)]
        self._next_id[(gpu.uuid, kind)] = first + count
        return [str(DeviceId(gpu.uuid, kind, n)) for n in range(first, first + count)]

    def create(self, name: str, gpu: Gpu, *, core_percent: int, memory_gib: int) -> float:
        """Allocate the pod's container on ``gpu``, then list it (kubelet's order); returns Allocate's ms."""
        started = time.perf_counter()
        self.runtime.allocate(ContainerAllocationRequest(
            f"uid-{name}", NAMESPACE, name, "main",
            (PlannedGpu(gpu.index, gpu.uuid, core_milli=percent_to_milli(core_percent),
                        memory_bytes=memory_gib * GiB),)))
        elapsed = (time.perf_counter() - started) * 1000
        devices = [
            pr.ContainerDevices(resource_name=self._names.core,
                                device_ids=self._ids(gpu, ResourceKind.CORE, core_percent)),
            pr.ContainerDevices(resource_name=self._names.memory,
                                device_ids=self._ids(gpu, ResourceKind.MEMORY, memory_gib)),
        ]
        self.kubelet.add(pr.PodResources(name=name, namespace=NAMESPACE, containers=[
            pr.ContainerResources(name="main", devices=devices)]))
        return elapsed

    def delete(self, name: str) -> float:
        """Unlist the pod (kubelet forgets a terminated pod), then Release it; returns Release's ms."""
        self.kubelet.remove(name)
        started = time.perf_counter()
        self.runtime.release(f"uid-{name}")
        return (time.perf_counter() - started) * 1000


class Scraper:
    """Times ``GET /metrics`` on 127.0.0.1:``port``, one new connection per scrape, into :attr:`timings_ms`."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.timings_ms: list[float] = []

    def scrape(self, *, record: bool = True) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        started = time.perf_counter()
        try:
            connection.request("GET", "/metrics")
            reply = connection.getresponse()
            body = reply.read()
        finally:
            connection.close()
        elapsed = (time.perf_counter() - started) * 1000
        if reply.status != 200:
            raise RuntimeError(f"GET /metrics: HTTP {reply.status}")
        if record:
            self.timings_ms.append(elapsed)
        return body

    def until(self, ready: Callable[[bytes], bool], *, timeout_s: float, record: bool = True) -> bytes:
        """Scrape until ``ready(body)``; raises TimeoutError after ``timeout_s``. Unrecorded scrapes also wait
        for the listener to come up."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                body = self.scrape(record=record)
            except OSError:
                if record or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            if ready(body):
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"the exporter page did not reach the expected state within {timeout_s:g} s")


def ljrk(*args: str) -> list[str]:
    """The ``ljrk`` command beside this interpreter (through ``entrypoints.cli`` when the script is missing)."""
    script = Path(sys.executable).parent / "ljrk"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "import sys; from entrypoints.cli import main; sys.exit(main())", *args]


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Bench:
    """The processes and sockets of the set-up (module docstring) under ``root``."""

    def __init__(self, root: Path, gpus: int) -> None:
        self.root = root
        src = str(Path(__file__).resolve().parents[1] / "src")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE")}  # no Events
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        self._env = env
        self.kubelet = FakePodResources()
        self._pr_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="bench-pr"))
        pr_grpc.add_PodResourcesListerServicer_to_server(self.kubelet, self._pr_server)
        self._pr_server.add_insecure_port(unix_target(root / "pr.sock"))
        self._pr_server.start()
        self._runtime_process = self._spawn(
            "runtime", "--socket", str(root / "rt.sock"), "--backend", "simulated", "--simulated-gpus",
            f"{gpus}x{GPU_MEMORY}:H100", "--state-dir", str(root), "--log-level", "WARNING")
        self.runtime = GrpcNodeRuntime.connect(root / "rt.sock", timeout_s=30)
        try:
            self.runtime.wait_ready(30)
            self.node = Node(self.runtime, self.kubelet, [d.gpu for d in self.runtime.list_devices()])
        except Exception:
            self.close()
            raise

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(ljrk(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self._env)

    @contextmanager
    def exporter(self, interval: float, containers: int) -> Iterator[tuple[int, Scraper]]:
        """An exporter at ``interval`` s, yielded (pid, scraper) once its page shows ``containers``; stopped after."""
        port = free_port()
        process = self._spawn(
            "exporter", "--node-name", NODE, "--runtime-socket", str(self.root / "rt.sock"), "--listen",
            f"127.0.0.1:{port}", "--pod-resources-socket", str(self.root / "pr.sock"), "--interval", f"{interval:g}",
            "--deadline", "5", "--log-level", "WARNING")
        try:
            scraper = Scraper(port)
            scraper.until(lambda b: gauge(b, "node_containers") == containers, timeout_s=60, record=False)
            yield process.pid, scraper
        finally:
            stop_process(process)

    def close(self) -> None:
        stop_process(self._runtime_process)
        self.runtime.close()
        self._pr_server.stop(0).wait()


@attrs.define
class Churn:
    """What the churn phase measured."""

    scrape_ms: list[float]
    allocate_ms: list[float]
    release_ms: list[float]
    series_before: frozenset[str]
    series_after: frozenset[str]
    rss_mib: dict[str, float]
    trajectory_mib: list[float]


def churn(bench: Bench, pid: int, scraper: Scraper, *, cycles: int, warmup: int, interval: float,
          containers: int) -> Churn:
    """The churn phase (module docstring) on a page that shows ``containers`` (the fill)."""
    node, gpus = bench.node, bench.node.gpus
    wait_s = 20 * interval + 10
    result = Churn([], [], [], series_of(scraper.scrape(record=False)), frozenset(), {"start": rss_mib(pid)}, [])
    result.trajectory_mib.append(result.rss_mib["start"])
    previous = ""
    for cycle in range(cycles):
        name = f"churn-{cycle}"
        result.allocate_ms.append(node.create(name, gpus[cycle % len(gpus)], core_percent=CHURN_CORE_PERCENT,
                                              memory_gib=CHURN_MEMORY_GIB))
        marker = f'pod="{name}"'.encode()
        body = scraper.until(lambda b: marker in b, timeout_s=wait_s)  # noqa: B023 (used before the next cycle)
        if previous and f'pod="{previous}"'.encode() in body:
            raise AssertionError(f"{previous} is still on the page after {name} appeared")
        if gauge(body, "node_containers") != containers + 1:
            raise AssertionError(f"{name}: expected {containers + 1} containers, the page says "
                                 f"{gauge(body, 'node_containers')}")
        result.release_ms.append(node.delete(name))
        previous = name
        if cycle + 1 == warmup:
            result.rss_mib["warm"] = rss_mib(pid)
        if (cycle + 1) % max(1, cycles // 10) == 0:
            result.trajectory_mib.append(rss_mib(pid))
    result.rss_mib.setdefault("warm", result.rss_mib["start"])
    result.scrape_ms = list(scraper.timings_ms)
    body = scraper.until(lambda b: gauge(b, "node_containers") == containers and b"churn-" not in b,
                         timeout_s=wait_s, record=False)
    result.series_after = series_of(body)
    result.rss_mib["end"] = rss_mib(pid)
    return result


def summary(label: str, values: Sequence[float]) -> str:
    return (f"{label}, n={len(values)}: p50={statistics.median(values):.2f} ms p95={percentile(values, 0.95):.2f} ms "
            f"p99={percentile(values, 0.99):.2f} ms max={max(values):.2f} ms")


def report(args: argparse.Namespace, *, fill_s: float, steady_ms: Sequence[float], body: bytes, result: Churn,
           wall_s: float) -> None:
    """Print the figures: readable lines, then ``key=value`` lines."""
    total = args.gpus * args.containers_per_gpu
    before, after, rss = result.series_before, result.series_after, result.rss_mib
    changed = f"CHANGED: {len(after - before)} new, {len(before - after)} gone"
    print(f"node: {args.gpus} GPUs x {args.containers_per_gpu} one-container pods = {total} containers; "
          f"fill (Allocate + pod-resources) took {fill_s:.1f} s")
    print(f"page: {len(body)} bytes, {len(series_of(body))} series")
    print(summary(f"scrape, steady back-to-back (exporter --interval {args.interval:g})", steady_ms)
          + " (target p99 <= 100 ms)")
    print(summary(f"scrape, during churn (exporter --interval {args.churn_interval:g}, until the new pod shows)",
                  result.scrape_ms))
    print(summary("Runtime Allocate during churn", result.allocate_ms))
    print(summary("Runtime Release during churn", result.release_ms))
    print(f"series before churn {len(before)}, after {args.cycles} cycles {len(after)}: "
          f"{'identical set' if before == after else changed}")
    print(f"exporter RSS: start {rss['start']:.1f} MiB, after {args.warmup_cycles} cycles {rss['warm']:.1f} MiB, "
          f"end {rss['end']:.1f} MiB; trajectory: {' '.join(f'{v:.1f}' for v in result.trajectory_mib)}")
    figures = {
        "scrape_p50_ms": f"{statistics.median(steady_ms):.3f}",
        "scrape_p95_ms": f"{percentile(steady_ms, 0.95):.3f}",
        "scrape_p99_ms": f"{percentile(steady_ms, 0.99):.3f}",
        "scrape_max_ms": f"{max(steady_ms):.3f}",
        "churn_scrape_p99_ms": f"{percentile(result.scrape_ms, 0.99):.3f}",
        "body_bytes": str(len(body)),
        "series": str(len(series_of(body))),
        "series_before_churn": str(len(before)),
        "series_after_churn": str(len(after)),
        "series_flat": "yes" if before == after else "no",
        "rss_start_mib": f"{rss['start']:.1f}",
        "rss_warm_mib": f"{rss['warm']:.1f}",
        "rss_end_mib": f"{rss['end']:.1f}",
        "rss_growth_after_warmup_mib": f"{rss['end'] - rss['warm']:.1f}",
        "cycles": str(args.cycles),
        "total_wall_seconds": f"{wall_s:.1f}",
    }
    for key, value in figures.items():
        print(f"{key}={value}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--gpus", type=int, default=16, help="simulated 80 GiB GPUs (default: %(default)s)")
    parser.add_argument("--containers-per-gpu", type=int, default=64,
                        help="one-container pods on each GPU (default: %(default)s)")
    parser.add_argument("--scrapes", type=int, default=200, help="steady back-to-back scrapes (default: %(default)s)")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="the steady exporter's --interval, s (default: %(default)s)")
    parser.add_argument("--cycles", type=int, default=1000, help="pod create/delete cycles (default: %(default)s)")
    parser.add_argument("--warmup-cycles", type=int, default=100,
                        help="cycles before the 'warm' RSS reading (default: %(default)s)")
    parser.add_argument("--churn-interval", type=float, default=0.1,
                        help="the churn exporter's --interval, s (default: %(default)s)")
    args = parser.parse_args(argv)
    if min(args.gpus, args.scrapes, args.cycles) < 1 or not 1 <= args.containers_per_gpu <= FILL_CORE_PERCENT:
        parser.error(f"--gpus, --scrapes and --cycles must be >= 1, --containers-per-gpu 1..{FILL_CORE_PERCENT}")
    if not 0 <= args.warmup_cycles <= args.cycles:
        parser.error("--warmup-cycles must be 0..--cycles")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the figures (module docstring); returns 1 when the series set changed."""
    args = parse_args(argv)
    started = time.perf_counter()
    total = args.gpus * args.containers_per_gpu
    root = Path(tempfile.mkdtemp(prefix="ljbench", dir="/tmp"))
    bench: Bench | None = None
    try:
        bench = Bench(root, args.gpus)
        core, memory = FILL_CORE_PERCENT // args.containers_per_gpu, max(1, FILL_MEMORY_GIB // args.containers_per_gpu)
        fill_started = time.perf_counter()
        for gpu in bench.node.gpus:
            for k in range(args.containers_per_gpu):
                bench.node.create(f"fill-{gpu.index}-{k}", gpu, core_percent=core, memory_gib=memory)
        fill_s = time.perf_counter() - fill_started
        with bench.exporter(args.interval, total) as (_, steady):
            for _ in range(args.scrapes):
                body = steady.scrape()
        with bench.exporter(args.churn_interval, total) as (pid, scraper):
            result = churn(bench, pid, scraper, cycles=args.cycles, warmup=args.warmup_cycles,
                           interval=args.churn_interval, containers=total)
        report(args, fill_s=fill_s, steady_ms=steady.timings_ms, body=body, result=result,
               wall_s=time.perf_counter() - started)
        return 0 if result.series_before == result.series_after else 1
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
