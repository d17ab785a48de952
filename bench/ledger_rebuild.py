"""Ledger rebuild from the API: what a new scheduler leader does before it serves (``SchedulerService.resync``).

Method: an in-memory API server (``adapters.memory``) holds ``--nodes`` nodes with ``--gpus-per-node`` 16 GiB GPUs
(an inventory annotation each, as the device plugin writes it) and ``--pods`` pods bound to them and Running (what
a new leader finds after a restart), each with a plan annotation for a GPU share (10-50 % core, 1-8 GiB) and
``--planless`` of them without a plan (counted by inference, the slower path). A scheduler service on that cluster
then resyncs once: LIST nodes and pods, rebuild the books from the objects, adopt them. Prints the listing and the
resync times, what the books hold, the resync's CPU time (the wall clock on a shared machine includes waiting for
a core), a reference loop's CPU time (how fast this machine's core runs Python), and as its last lines
``rebuild_seconds=<float>`` (wall clock) and ``peak_rss_mib=<float>``. The defaults are the target's size.
``--record FILE`` writes the figures as this invocation's row of the performance table
(:func:`adapters.reportfiles.results_table.record_bench_run`).

Target: 5,000 nodes × 8 GPUs with 50,000 bound pods rebuilt in ≤ 5 s.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.scheduler import PrometheusSchedulerMetrics
from adapters.reportfiles.results_table import RunStart, record_bench_run
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from services.scheduler.service import SchedulerService


def reference_seconds() -> float:
    """CPU seconds of a fixed pure-Python loop (20,000 × ``sum(range(1000))``): the same figure on two machines
    says their cores run this code at the same speed, so the resync times compare."""
    started = time.process_time()
    for _ in range(20_000):
        sum(range(1000))
    return time.process_time() - started


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--planless", type=float, default=0.05, help="fraction of pods without a plan annotation")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()
    protocol = ProtocolConstants()
    keys, names = protocol.annotations, protocol.resources
    now = time.time()
    cluster = InMemoryCluster()
    gpus_of: dict[str, tuple[Gpu, ...]] = {}
    for n in range(args.nodes):
        name = f"node-{n:05d}"
        gpus = tuple(Gpu(i, GpuUuid(f"GPU-{n:05d}-{i}"), "A100", 16 * GiB) for i in range(args.gpus_per_node))
        gpus_of[name] = gpus
        cluster.create_node(NodeObject(name, annotations={
            keys.node_inventory: encode_inventory(gpus, heartbeat=now, protocol=protocol.fingerprint())},
            allocatable={"cpu": "256", "memory": "2Ti", "pods": "110"}))
    rng = np.random.default_rng(args.seed)
    free = {name: [1000] * args.gpus_per_node for name in gpus_of}  # milli-GPU core left per GPU
    free_gib = {name: [16] * args.gpus_per_node for name in gpus_of}  # GiB left per GPU
    node_names = list(gpus_of)
    started = time.perf_counter()
    placed = 0
    for i in range(args.pods):
        core = int(rng.choice([100, 200, 250, 300, 400, 500]))
        gib = int(rng.choice([1, 2, 4, 8]))
        node = node_names[i % len(node_names)]
        gpu = next((g for g in range(args.gpus_per_node) if free[node][g] >= core and free_gib[node][g] >= gib), None)
        if gpu is None:
            continue
        free[node][gpu] -= core
        free_gib[node][gpu] -= gib
        memory = gib * GiB
        limits = {names.core: str(core // 10), names.memory: str(gib), "cpu": "1", "memory": "1Gi"}
        spec = (ContainerSpec("main", limits=limits),)
        pod = cluster.create_pod(PodObject("", "default", f"pod-{i}", containers=spec, node_name=node,
                                           scheduler_name=protocol.scheduler_name))
        if rng.random() >= args.planless:  # the plan names the pod's UID, which the API server assigns
            allocation = PodAllocation(pod.uid, node, (ContainerGrant("main", (GpuGrant(gpu, core, memory),)),),
                                       cpu_milli=1000, memory_bytes=GiB)
            cluster.patch_pod_annotations("default", pod.name, {keys.pod_plan: encode_plan(allocation, gpus_of[node])})
        cluster.set_pod_phase("default", pod.name, PodPhase.RUNNING)  # create_pod stores Pending; kubelet ran it
        placed += 1
    built = time.perf_counter() - started
    service = SchedulerService(cluster, protocol, PrometheusSchedulerMetrics())
    t0 = time.perf_counter()
    nodes, pods = cluster.list_nodes(), cluster.list_pods()
    listing = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    report = service.resync()
    rebuild, cpu = time.perf_counter() - t0, time.process_time() - c0
    with service.books() as books:
        counted = len(books.ledger.records())
        inferred = sum(1 for source in books.sources.values() if source.name == "INFERRED")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"nodes={args.nodes} gpus_per_node={args.gpus_per_node} pods={placed} (made in {built:.1f} s)")
    running = sum(1 for pod in pods.items if pod.phase is PodPhase.RUNNING)
    print(f"listing alone: {len(nodes.items)} nodes, {len(pods.items)} pods ({running} Running) in {listing:.2f} s")
    print(f"resync (list + rebuild + adopt): {rebuild:.2f} s; books: {counted} pods ({inferred} inferred), "
          f"drift entries {len(report.missing)}")
    print(f"resync CPU time of this process: {cpu:.2f} s (wall clock above includes waiting for a busy CPU)")
    reference = reference_seconds()
    print(f"cpu_reference_seconds={reference:.2f} (the core's speed; see reference_seconds)")
    print(f"rebuild_seconds={rebuild:.2f}")
    print(f"peak_rss_mib={rss:.0f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"{args.nodes:,} nodes, {counted:,} pods ({inferred:,} inferred): resync {rebuild:.2f} s, "
                         f"{cpu:.2f} s of CPU, peak RSS {rss:.0f} MiB (reference loop {reference:.2f} s)", start)


if __name__ == "__main__":
    main()
