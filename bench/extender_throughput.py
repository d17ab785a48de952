"""End-to-end scheduling throughput through the extender, against a real API server and a real kube-scheduler.

Method (after kube-scheduler's scheduler_perf ``SchedulingThroughput``, kubernetes
``test/integration/scheduler_perf``):

1. start etcd + kube-apiserver + kube-scheduler of the live version on 127.0.0.1 (``k8s_harness.py``; binaries of
   ``$LJRK_K8S_BIN`` or ``scripts/k8s-control-plane.sh bin-dir``), kube-scheduler configured with our extender as
   in ``test_scheduler_k8s.py``: filter, prioritize and bind verbs, ``nodeCacheCapable``, ``managedResources`` =
   our three resources, weight 1, ``percentageOfNodesToScore: 100``, client QPS ``--kube-scheduler-qps`` (below);
2. run one scheduler replica in extender mode in this process (``SchedulerApp`` over ``KubernetesCluster``, leading);
3. create ``--nodes`` nodes with ``--gpus-per-node`` 16 GiB GPUs (inventory annotation written once, staleness limit
   raised past the run; allocatable cpu 64 / memory 256Gi / pods 110 / our resources, not-ready taint removed);
4. create ``--pods`` pods for the default scheduler, each asking for a GPU share (core 10–50 %, 1–4 GiB; cpu 100m,
   memory 128Mi; they all fit), from ``--create-workers`` threads as fast as the API server takes them;
5. a watch records when each pod is first seen bound; the bound count is sampled every second. Steps 4 and 5 run
   in this process beside the extender (sharing its GIL), or with ``--load-apart`` in a child process with its own
   API client (the extender has the interpreter to itself, but the child competes with kube-scheduler for CPU);
6. then as many pods asking only for cpu and memory, which kube-scheduler places alone (it does not call our
   extender for pods without our ``managedResources``), on the same nodes and API server.

Printed for both batches: setup times, the average throughput (pods ÷ seconds from the first create request to the
last binding seen), percentiles of the 1 s throughput samples (as scheduler_perf reports them), per-pod create→bound
latency percentiles (create request to the watch event showing ``spec.nodeName``), our extender's verb latencies.
Last lines: ``kube_scheduler_alone_pods_per_second=``, ``extender_ratio=`` (ours ÷ kube-scheduler alone, same run:
the machine's speed cancels), ``pods_per_second=``, ``p99_ms=`` (create→bound p99, ours), ``cpu_ms_per_pod=`` /
``cpu_ms_per_pod_alone=`` (this process's CPU per pod per batch; with in-process load it includes the load's).
``--record FILE`` writes the figures as this invocation's row of the performance table
(:func:`adapters.reportfiles.results_table.record_bench_run`).

Like with like: alone, kube-scheduler writes each Binding and ``Scheduled`` Event through its own client (QPS 50,
burst 100 by default), while the extender's bind verb writes ours with our client; ``--kube-scheduler-qps 5000``
lifts that cap for both batches. Without control-plane binaries it says so and exits 0. Not part of the test run.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO / "scripts" / "k8s-control-plane.sh"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NAMESPACE = "default"
SHARES = ((10, 1), (20, 2), (25, 2), (30, 3), (50, 4))
"""(core %, GPU memory GiB) of the measured pods, in rotation."""


def bin_dir() -> Path | None:
    """The control-plane binaries (``$LJRK_K8S_BIN`` or the install script's cache), or None when not built."""
    env = os.environ.get("LJRK_K8S_BIN")
    if env:
        return Path(env) if (Path(env) / "kube-apiserver").is_file() else None
    try:
        result = subprocess.run(["bash", str(INSTALL_SCRIPT), "bin-dir"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else None
    return path if path is not None and (path / "kube-apiserver").is_file() else None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank ``q``-th percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(max(1, math.ceil(q / 100 * len(ordered))), len(ordered)) - 1]


def timed(verb: Callable[[object], object], sink: list[float], cpu: list[float]) -> Callable[[object], object]:
    """``verb`` recording its duration (wall s) in ``sink`` and its thread's CPU time (s) in ``cpu``."""

    def call(body: object) -> object:
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            return verb(body)
        finally:
            sink.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - cpu_started)

    return call


def connections(api: Any) -> int:
    """New connections opened so far by the pools of ``api`` (a ``kubernetes.client.ApiClient``; urllib3's
    ``HTTPConnectionPool.num_connections``)."""
    pools = api.rest_client.pool_manager.pools
    keys = pools.keys()  # RecentlyUsedContainer: no iteration, keys() is its thread-safe snapshot
    return sum(pools[key].num_connections for key in keys)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=50, help="nodes (default: %(default)s)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="16 GiB GPUs per node (default: %(default)s)")
    parser.add_argument("--pods", type=int, default=500, help="measured pods (default: %(default)s)")
    parser.add_argument("--policy", default="fgd", help="the extender's policy (default: %(default)s)")
    parser.add_argument("--create-workers", type=int, default=4, help="threads creating pods (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many s (default: 600)")
    parser.add_argument("--kube-scheduler-qps", type=float, default=50.0,
                        help="kube-scheduler's client QPS (burst twice it; default: %(default)s, its own default)")
    parser.add_argument("--load-apart", action="store_true", help="create and watch the pods from a child process")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    from adapters.reportfiles.results_table import RunStart, record_bench_run
    start = RunStart.now()
    if min(args.nodes, args.gpus_per_node, args.pods, args.create_workers) < 1:
        parser.error("--nodes, --gpus-per-node, --pods and --create-workers must be >= 1")
    binaries = bin_dir()
    if binaries is None:
        print("SKIPPED: no Kubernetes control-plane binaries (etcd, kube-apiserver, kube-scheduler); build them with: "
              f"bash {INSTALL_SCRIPT.relative_to(REPO)} install   (or set LJRK_K8S_BIN)")
        return 0
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # "pool is full": concurrent binds
    return run(binaries, args, lambda measured: record_bench_run(args.record, __file__, argv, measured, start))


class Phase:
    """One measured batch of pods: when each was created and first seen bound (monotonic s), 1 s samples."""

    def __init__(self, what: str, created: dict[str, float], bound: dict[str, float], samples: list[int]) -> None:
        self.what, self.created, self.bound, self.samples = what, created, bound, samples
        self.cpu, self.verb_cpu, self.connections = math.nan, 0.0, 0
        """CPU s of this process in the batch (with in-process load: the load's too), CPU s inside extender verbs,
        connections the scheduler's API client opened (urllib3 pools' count)."""

    @property
    def average(self) -> float:
        """Pods ÷ seconds from the first create request to the last binding seen."""
        return len(self.bound) / (max(self.bound.values()) - min(self.created.values()))

    @property
    def latencies(self) -> list[float]:
        """Create→bound latency per pod, ms."""
        return [1000 * (self.bound[n] - self.created[n]) for n in self.bound]

    def report(self) -> None:
        """Print the phase's throughput and latency lines."""
        first, last = min(self.created.values()), max(self.bound.values())
        per_second = [b - a for a, b in zip([0, *self.samples], self.samples, strict=False)]
        full = per_second[:-1] if len(per_second) > 1 else per_second
        latencies = self.latencies
        print(f"{self.what}: {len(self.bound)} pods bound in {last - first:.2f} s (creation took "
              f"{max(self.created.values()) - first:.2f} s); average {self.average:.1f} pods/s; 1 s samples "
              f"({len(full)}): p50 {percentile(full, 50):.0f}, p90 {percentile(full, 90):.0f}, max "
              f"{max(full, default=0):.0f} pods/s; create→bound p50 {percentile(latencies, 50):.0f} ms, "
              f"p99 {percentile(latencies, 99):.0f} ms")
        pods = max(len(self.bound), 1)
        print(f"{self.what}: this process's CPU {1000 * self.cpu / pods:.2f} ms per pod, in extender verbs "
              f"{1000 * self.verb_cpu / pods:.2f} ms per pod; scheduler API client opened {self.connections} "
              "connections")


def measure(core: Any, load: Any, run_id: str, what: str, resources: Callable[[int], dict[str, str]],
            args: argparse.Namespace) -> Phase:
    """Create ``args.pods`` pods (``resources(i)`` as requests = limits) from ``args.create_workers`` threads and
    watch until each is bound (or ``args.timeout``); pods asking for our resources go through the extender
    (``managedResources``), the others through kube-scheduler alone."""
    from kubernetes import watch

    from domain.kube.objects import ContainerSpec, PodObject

    label = {"ljrk-bench": run_id}
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()
    listing = core.list_namespaced_pod(NAMESPACE, label_selector=f"ljrk-bench={run_id}")

    def watch_bindings() -> None:
        rv = listing.metadata.resource_version
        stream = watch.Watch()
        while not done.is_set():
            for event in stream.stream(core.list_namespaced_pod, NAMESPACE, resource_version=rv,
                                       label_selector=f"ljrk-bench={run_id}", timeout_seconds=5):
                obj = event["object"]
                rv = obj.metadata.resource_version
                if obj.spec.node_name:
                    with lock:
                        bound.setdefault(obj.metadata.name, time.monotonic())
                        if len(bound) >= args.pods:
                            done.set()
                if done.is_set():
                    stream.stop()
                    break

    pods = [f"p-{run_id}-{i:05d}" for i in range(args.pods)]

    def create(worker: int) -> None:
        for i in range(worker, args.pods, args.create_workers):
            wanted = resources(i)
            pod = PodObject("", NAMESPACE, pods[i], labels=label, containers=(
                ContainerSpec("main", requests=dict(wanted), limits=dict(wanted)),))
            with lock:
                created[pods[i]] = time.monotonic()
            load.create_pod(pod)

    watcher = threading.Thread(target=watch_bindings, name="bound-watch", daemon=True)
    watcher.start()
    samples: list[int] = []
    creators = [threading.Thread(target=create, args=(w,), daemon=True) for w in range(args.create_workers)]
    started = time.monotonic()
    for thread in creators:
        thread.start()
    give_up = started + args.timeout
    while not done.wait(1.0):
        with lock:
            samples.append(len(bound))
        if time.monotonic() > give_up:
            break
    with lock:
        samples.append(len(bound))
        bound_at, created_at = dict(bound), dict(created)
    for thread in creators:
        thread.join(10)
    done.set()
    return Phase(what, created_at, bound_at, samples)


def resources_of(kind: str, i: int) -> dict[str, str]:
    """Requests (= limits) of the ``i``-th measured pod: ``share`` a GPU share from :data:`SHARES` in rotation,
    ``plain`` cpu and memory only."""
    from domain.kube.protocol import ProtocolConstants

    res = ProtocolConstants().resources
    if kind == "plain":
        return {"cpu": "100m", "memory": "128Mi"}
    core_pct, mem = SHARES[i % len(SHARES)]
    return {"cpu": "100m", "memory": "128Mi", res.core: str(core_pct), res.memory: str(mem)}


def _measure_child(conn: Any, server: tuple[str, str, str], run_id: str, what: str, kind: str,
                   args: argparse.Namespace) -> None:
    """:func:`measure` in a child process over its own API client (``server`` = host, CA file, bearer token);
    sends ``(created, bound, samples)`` back over ``conn``."""
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster

    host, ca_file, token = server
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert, configuration.verify_ssl = host, ca_file, True
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as api:
        phase = measure(client.CoreV1Api(api), KubernetesCluster(api), run_id, what,
                        lambda i: resources_of(kind, i), args)
    conn.send((phase.created, phase.bound, phase.samples))
    conn.close()


def measure_apart(server: tuple[str, str, str], run_id: str, what: str, kind: str, args: argparse.Namespace) -> Phase:
    """:func:`measure` run by :func:`_measure_child` in a spawned process (``kind`` as :func:`resources_of`).
    Raises RuntimeError when the child sends nothing (it failed: its traceback is on stderr)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_measure_child, args=(send, server, run_id, what, kind, args), daemon=True)
    child.start()
    send.close()
    try:
        created, bound, samples = receive.recv()
    except EOFError:
        raise RuntimeError(f"the load process of {what!r} sent nothing (exit code {child.exitcode})") from None
    finally:
        child.join(30)
    return Phase(what, created, bound, samples)


def run(binaries: Path, args: argparse.Namespace, record: Callable[[str], None]) -> int:
    from k8s_harness import control_plane, free_ports
    from kubernetes import client

    from adapters.kubernetes import CONNECTION_POOL_MAXSIZE, KubernetesCluster
    from adapters.prometheus import PrometheusSchedulerMetrics
    from domain.gpu import Gpu, GpuUuid
    from domain.kube.annotations import encode_inventory
    from domain.kube.protocol import ProtocolConstants
    from domain.units import GiB
    from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
    from services.scheduler.service import SchedulerService, ServiceConfig

    # no device plugin refreshes the inventory heartbeats here: written once, they must outlast the whole run
    protocol = ProtocolConstants(inventory_stale_seconds=math.ceil(3 * args.timeout) + 600)
    res, keys = protocol.resources, protocol.annotations
    port = free_ports(1)[0]
    extender = {
        "urlPrefix": f"http://127.0.0.1:{port}", "filterVerb": "filter", "prioritizeVerb": "prioritize",
        "bindVerb": "bind", "weight": 1, "enableHTTPS": False, "nodeCacheCapable": True,
        "managedResources": [{"name": name, "ignoredByScheduler": False} for name in (res.gpu, res.core, res.memory)],
    }
    run_id = uuid.uuid4().hex[:6]
    print(f"extender throughput: nodes={args.nodes} gpus_per_node={args.gpus_per_node} pods={args.pods} "
          f"policy={args.policy} create_workers={args.create_workers} kube_scheduler_qps={args.kube_scheduler_qps:g} "
          f"load={'child process' if args.load_apart else 'in-process'} binaries={binaries}", flush=True)
    started = time.perf_counter()
    with control_plane(binaries, scheduler=True,
                       scheduler_config={"extenders": [extender], "percentageOfNodesToScore": 100,
                                         "clientConnection": {"qps": args.kube_scheduler_qps,
                                                              "burst": int(2 * args.kube_scheduler_qps)}}) as plane:
        print(f"control plane up in {time.perf_counter() - started:.1f} s", flush=True)
        scheduler_config = plane.client_configuration()  # the pool size from_kubeconfig gives the deployed one
        scheduler_config.connection_pool_maxsize = max(scheduler_config.connection_pool_maxsize,
                                                       CONNECTION_POOL_MAXSIZE)
        api, load_api = client.ApiClient(scheduler_config), plane.api_client()  # the scheduler's; the load's
        core = client.CoreV1Api(load_api)
        cluster = KubernetesCluster(api)
        load = KubernetesCluster(load_api)
        metrics = PrometheusSchedulerMetrics()
        config = ServiceConfig(policy=args.policy, admission_hold_seconds=None)  # no device plugin marks pods
        service = SchedulerService(cluster, protocol, metrics, config=config)
        settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=port, policy=args.policy,
                                     identity="throughput-bench", watch_timeout_seconds=1)
        app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None,
                           metrics_text=metrics.exposition)
        verb_latency: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}
        verb_cpu: list[float] = []
        app.http.verbs = {name: timed(verb, verb_latency[name], verb_cpu) for name, verb in app.http.verbs.items()}
        app.start()
        try:
            nodes_started = time.perf_counter()
            names = [f"bench-{run_id}-{i:04d}" for i in range(args.nodes)]
            allocatable = {"cpu": "64", "memory": "256Gi", "pods": "110", res.gpu: str(args.gpus_per_node),
                           res.core: str(100 * args.gpus_per_node), res.memory: str(16 * args.gpus_per_node)}
            for name in names:
                gpus = tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", 16 * GiB) for i in range(args.gpus_per_node))
                inventory = encode_inventory(gpus, heartbeat=time.time(), protocol=protocol.fingerprint())
                core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
                    name=name, annotations={keys.node_inventory: inventory})))
                core.patch_node_status(name, {"status": {"capacity": allocatable, "allocatable": allocatable}})
                taints = core.read_node(name).spec.taints or []
                kept = [t.to_dict() for t in taints if t.key != NOT_READY_TAINT]
                core.patch_node(name, {"spec": {"taints": kept or None}})
            deadline = time.monotonic() + 60
            while not (service.serving and all(service.knows_node(n) for n in names)):
                if time.monotonic() > deadline:
                    raise RuntimeError("the extender never saw every node")
                time.sleep(0.05)
            print(f"{args.nodes} nodes ready in {time.perf_counter() - nodes_started:.1f} s", flush=True)

            batches = ((f"{run_id}-x", "through the extender (GPU shares)", "share"),
                       (f"{run_id}-k", "kube-scheduler alone (cpu/memory only)", "plain"))
            server = (plane.host, str(plane.ca_file), plane.token)
            phases = []
            for rid, what, kind in batches:
                cpu_started, verb_started, opened = time.process_time(), len(verb_cpu), connections(api)
                if args.load_apart:
                    phase = measure_apart(server, rid, what, kind, args)
                else:
                    phase = measure(core, load, rid, what, lambda i, k=kind: resources_of(k, i), args)
                phase.cpu = time.process_time() - cpu_started
                phase.verb_cpu = math.fsum(verb_cpu[verb_started:])
                phase.connections = connections(api) - opened
                phases.append(phase)
            ours, alone = phases
        finally:
            app.stop(join_seconds=5)
            api.close()
            load_api.close()
    for phase in (ours, alone):
        if len(phase.bound) < args.pods:
            print(f"FAILED: {phase.what}: only {len(phase.bound)} of {args.pods} pods bound within "
                  f"{args.timeout:.0f} s")
            return 1
    print()
    for phase in (ours, alone):
        phase.report()
    for verb, values in verb_latency.items():
        if values:
            ms = [1000 * v for v in values]
            print(f"extender {verb}: {len(ms)} calls, mean {statistics.fmean(ms):.1f} ms, "
                  f"p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms")
    print(f"kube_scheduler_alone_pods_per_second={alone.average:.3f}")
    print(f"extender_ratio={ours.average / alone.average:.3f}")
    print(f"pods_per_second={ours.average:.3f}")
    print(f"p99_ms={percentile(ours.latencies, 99):.3f}")
    print(f"cpu_ms_per_pod={1000 * ours.cpu / len(ours.bound):.3f}")
    print(f"cpu_ms_per_pod_alone={1000 * alone.cpu / len(alone.bound):.3f}")
    if args.record is not None:
        record(f"kube-scheduler QPS {args.kube_scheduler_qps:g}: ours {ours.average:.1f} pods/s, alone "
               f"{alone.average:.1f}, ratio {ours.average / alone.average:.2f}; ours create→bound p50 / p99 "
               f"{percentile(ours.latencies, 50):,.0f} / {percentile(ours.latencies, 99):,.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
