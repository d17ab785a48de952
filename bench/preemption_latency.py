"""Standalone preemption latency on a full cluster: how long one preemption decision takes at 5000 nodes.

Method: an in-memory API server (``adapters.memory``) holds ``--nodes`` nodes with ``--gpus-per-node`` 16 GiB GPUs
(an inventory annotation each) and, on every GPU, one Running pod of priority 0 with a plan for a ``--victim-core``
% / 8 GiB share, so no GPU has room for the preemptor. A scheduler service rebuilds its books from that cluster
(``resync``), then ``--preemptors`` pending pods of priority 1000, each asking ``--preemptor-core`` % / 4 GiB, are,
after their failed cycle, handed one at a time to :meth:`SchedulerService.preempt_for` — the whole standalone
preemption decision: the preemptable nodes (filters), victim selection per node
(:mod:`domain.scheduling.preemption`), the best node by kube-scheduler's order, the nomination (each nominated node
is then held for its nominee, so later preemptors go elsewhere, as in a burst of arrivals). Victims are not deleted
(no kubelet, no loop). A full garbage collection runs once after the build; the collector stays on during the
decisions. Prints per-decision wall-clock p50/p99/max, the CPU time per decision, and as its last lines
``preemption_p99_ms=<float>`` and ``peak_rss_mib=<float>``. ``--record FILE`` writes the figures as this
invocation's row of the performance table.
"""

from __future__ import annotations

import argparse
import gc
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
from domain.scheduling.preemption.victims import Victims
from domain.units import GiB
from services.scheduler.service import SchedulerService


def full_cluster(nodes: int, gpus_per_node: int, victim_core: int, protocol: ProtocolConstants) -> InMemoryCluster:
    """``nodes`` nodes, each GPU holding one Running priority-0 pod of ``victim_core`` % and 8 GiB."""
    keys, names = protocol.annotations, protocol.resources
    now = time.time()
    cluster = InMemoryCluster()
    for n in range(nodes):
        name = f"node-{n:05d}"
        gpus = tuple(Gpu(i, GpuUuid(f"GPU-{n:05d}-{i}"), "A100", 16 * GiB) for i in range(gpus_per_node))
        cluster.create_node(NodeObject(name, annotations={
            keys.node_inventory: encode_inventory(gpus, heartbeat=now, protocol=protocol.fingerprint())},
            allocatable={"cpu": "256", "memory": "2Ti", "pods": "110", names.gpu: str(gpus_per_node),
                         names.core: str(100 * gpus_per_node), names.memory: str(16 * gpus_per_node)}))
        for gpu in range(gpus_per_node):
            limits = {names.core: str(victim_core), names.memory: "8", "cpu": "1", "memory": "1Gi"}
            pod = cluster.create_pod(PodObject("", "default", f"low-{n:05d}-{gpu}", node_name=name,
                                               containers=(ContainerSpec("main", limits=limits),),
                                               scheduler_name=protocol.scheduler_name))
            grant = GpuGrant(gpu, victim_core * 10, 8 * GiB)
            allocation = PodAllocation(pod.uid, name, (ContainerGrant("main", (grant,)),), cpu_milli=1000,
                                       memory_bytes=GiB)
            cluster.patch_pod_annotations("default", pod.name, {keys.pod_plan: encode_plan(allocation, gpus)})
            cluster.set_pod_phase("default", pod.name, PodPhase.RUNNING)
    return cluster


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--victim-core", type=int, default=60, help="%% of a GPU each resident pod holds")
    parser.add_argument("--preemptor-core", type=int, default=80, help="%% of a GPU each preemptor asks")
    parser.add_argument("--preemptors", type=int, default=30)
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()
    protocol = ProtocolConstants()
    t0 = time.perf_counter()
    cluster = full_cluster(args.nodes, args.gpus_per_node, args.victim_core, protocol)
    service = SchedulerService(cluster, protocol, PrometheusSchedulerMetrics())
    service.resync()
    assert service.start_leading()
    gc.collect()  # the build's own full collection, so it is not billed to the first decision
    built = time.perf_counter() - t0
    names = protocol.resources
    walls, cpus, nominated = [], [], 0
    for i in range(args.preemptors):
        limits = {names.core: str(args.preemptor_core), names.memory: "4", "cpu": "1", "memory": "1Gi"}
        pod = cluster.create_pod(PodObject("", "default", f"high-{i}", priority=1000,
                                           containers=(ContainerSpec("main", limits=limits),),
                                           scheduler_name=protocol.scheduler_name))
        service.on_pod(pod)
        assert service.schedule_pod(pod).allocation is None  # the failed cycle that precedes preemption (untimed)
        w0, c0 = time.perf_counter(), time.process_time()
        planned = service.preempt_for(pod)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        nominated += isinstance(planned, Victims) and bool(planned.pods)
    ms = np.array(walls) * 1000
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    p50, p99 = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
    print(f"nodes={args.nodes} gpus_per_node={args.gpus_per_node} resident pods={args.nodes * args.gpus_per_node} "
          f"(cluster and books built in {built:.1f} s)")
    print(f"preemptions: {args.preemptors} decisions, {nominated} nominated with victims; wall ms p50 {p50:.1f} "
          f"p99 {p99:.1f} max {ms.max():.1f}; CPU ms per decision mean {1000 * float(np.mean(cpus)):.1f} "
          f"max {1000 * max(cpus):.1f} (wall above CPU: waiting for a busy core)")
    print(f"preemption_p99_ms={p99:.2f}")
    print(f"peak_rss_mib={rss:.0f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"{args.nodes:,} × {args.gpus_per_node} full: preemption p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                         f"{1000 * float(np.mean(cpus)):.1f} ms CPU/decision, {nominated}/{args.preemptors} "
                         f"nominated, RSS {rss:.0f} MiB", start)


if __name__ == "__main__":
    main()
