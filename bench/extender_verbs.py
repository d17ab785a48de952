"""CPU time of the extender's ``filter`` and ``bind`` verbs per pod, in process, without an API server.

Method: one scheduler replica in extender mode (``SchedulerApp`` + ``SchedulerService``) over the in-memory cluster
(``adapters.memory``, informers running), ``--nodes`` nodes with ``--gpus-per-node`` 16 GiB GPUs (cpu 64, memory
256Gi, pods 110), then ``--pods`` pods asking for GPU shares in the rotation of ``bench/extender_throughput.py``.
Each pod goes through the verbs as kube-scheduler calls them with ``nodeCacheCapable``: the ``ExtenderArgs`` JSON
(the pod and every node name) decoded, ``filter``, the reply encoded; then ``ExtenderBindingArgs`` decoded,
``bind``, the reply encoded (the HTTP layer's JSON work, without its sockets). The calling thread's CPU time
(``time.thread_time``) is summed over the verbs alone; the informers' work on the other threads is not in it.
Repeated ``--repeat`` times on fresh replicas; the best run is quoted (the least disturbed by other load).

Printed: per-verb CPU ms per pod and, as its last lines, ``filter_cpu_ms=<float>``, ``bind_cpu_ms=<float>`` and
``verbs_cpu_ms_per_pod=<float>`` (filter + bind, JSON included). Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus import PrometheusSchedulerMetrics
from adapters.reportfiles.results_table import RunStart, record_bench_run
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory
from domain.kube.objects import ContainerSpec, NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from services.scheduler.service import SchedulerService, ServiceConfig

SHARES = ((10, 1), (20, 2), (25, 2), (30, 3), (50, 4))
"""(core %, GPU memory GiB) of the measured pods, in rotation (as ``bench/extender_throughput.py``)."""


def wait(check: Any, what: str, seconds: float = 60.0) -> None:
    """Poll ``check()`` every 10 ms until true. Raises RuntimeError naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def raw_pod(pod: PodObject) -> dict[str, Any]:
    """``pod`` as kube-scheduler sends it in ``ExtenderArgs.Pod`` (core/v1 JSON, the fields we read)."""
    return {
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                     "resourceVersion": pod.resource_version, "labels": dict(pod.labels)},
        "spec": {"schedulerName": pod.scheduler_name,
                 "containers": [{"name": c.name, "resources": {"limits": dict(c.limits), "requests": dict(c.requests)}}
                                for c in pod.containers]},
        "status": {"phase": "Pending"},
    }


def run_once(args: argparse.Namespace) -> tuple[float, float, int]:
    """One fresh replica: (filter CPU s, bind CPU s, pods bound). Raises RuntimeError if the replica never serves."""
    protocol = ProtocolConstants(inventory_stale_seconds=3600)
    res = protocol.resources
    cluster = InMemoryCluster()
    metrics = PrometheusSchedulerMetrics()
    service = SchedulerService(cluster, protocol, metrics,
                               config=ServiceConfig(policy=args.policy, admission_hold_seconds=None))
    settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=0, policy=args.policy,
                                 identity="verbs-bench", watch_timeout_seconds=1)
    app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None,
                       metrics_text=metrics.exposition)
    names = [f"n-{i:05d}" for i in range(args.nodes)]
    allocatable = {"cpu": "64", "memory": "256Gi", "pods": "110", res.gpu: str(args.gpus_per_node),
                   res.core: str(100 * args.gpus_per_node), res.memory: str(16 * args.gpus_per_node)}
    for name in names:
        gpus = tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", 16 * GiB) for i in range(args.gpus_per_node))
        inventory = encode_inventory(gpus, heartbeat=time.time(), protocol=protocol.fingerprint())
        cluster.create_node(NodeObject(name, annotations={protocol.annotations.node_inventory: inventory},
                                       allocatable=dict(allocatable)))
    app.start()
    filter_cpu = bind_cpu = 0.0
    bound = 0
    try:
        wait(lambda: service.serving and all(service.knows_node(n) for n in names), "the replica to serve")
        verbs = app.http.verbs
        for i in range(args.pods):
            core_pct, mem = SHARES[i % len(SHARES)]
            wanted = {"cpu": "100m", "memory": "128Mi", res.core: str(core_pct), res.memory: str(mem)}
            pod = cluster.create_pod(PodObject("", "default", f"p-{i:05d}", containers=(
                ContainerSpec("main", requests=dict(wanted), limits=dict(wanted)),)))
            body = json.dumps({"Pod": raw_pod(pod), "NodeNames": names}).encode()
            started = time.thread_time()
            reply = verbs["filter"](json.loads(body))
            encoded = json.dumps(reply, separators=(",", ":")).encode()
            filter_cpu += time.thread_time() - started
            chosen = json.loads(encoded)["NodeNames"]
            if not chosen:
                continue
            body = json.dumps({"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid,
                               "Node": chosen[0]}).encode()
            started = time.thread_time()
            answer = verbs["bind"](json.loads(body))
            json.dumps(answer, separators=(",", ":")).encode()
            bind_cpu += time.thread_time() - started
            bound += 1
    finally:
        app.stop(join_seconds=5)
    return filter_cpu, bind_cpu, bound


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500, help="nodes (default: %(default)s)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="16 GiB GPUs per node (default: %(default)s)")
    parser.add_argument("--pods", type=int, default=1000, help="measured pods (default: %(default)s)")
    parser.add_argument("--policy", default="fgd", help="the extender's policy (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh replicas measured (default: %(default)s)")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row "
                        "(adapters.reportfiles.results_table.record_bench_run)")
    args = parser.parse_args(argv)
    start = RunStart.now()
    if min(args.nodes, args.gpus_per_node, args.pods, args.repeat) < 1:
        parser.error("--nodes, --gpus-per-node, --pods and --repeat must be >= 1")
    print(f"extender verbs: nodes={args.nodes} gpus_per_node={args.gpus_per_node} pods={args.pods} "
          f"policy={args.policy} repeat={args.repeat}", flush=True)
    best = (math.inf, math.inf)
    for run in range(args.repeat):
        filter_cpu, bind_cpu, bound = run_once(args)
        per_filter, per_bind = 1000 * filter_cpu / args.pods, 1000 * bind_cpu / max(bound, 1)
        print(f"run {run + 1}: {bound} of {args.pods} pods bound; filter {per_filter:.3f} ms CPU per pod, "
              f"bind {per_bind:.3f} ms CPU per pod", flush=True)
        if per_filter + per_bind < sum(best):
            best = (per_filter, per_bind)
    print(f"filter_cpu_ms={best[0]:.3f}")
    print(f"bind_cpu_ms={best[1]:.3f}")
    print(f"verbs_cpu_ms_per_pod={sum(best):.3f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"best of {args.repeat}: {best[0]:.2f} ms of CPU per `filter`, {best[1]:.2f} ms per `bind`",
                         start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
