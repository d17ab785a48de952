"""In-process scheduler throughput: filter + score + reserve over a synthetic cluster.

Method (after kube-scheduler's scheduler_perf, kubernetes ``test/integration/scheduler_perf``): N nodes with
``--gpus-per-node`` GPUs (16 GiB each, 64 cores, 256 GiB), a warm-up fill of ``--prefill`` of GPU capacity with a
mixed workload, then ``--pods`` measured pods drawn from the published pod mix (synthetic workload of
:mod:`domain.simulation.synthetic`) scheduled one at a time through the same framework, ledger and policy as
production. Pods that do not fit count as decisions too. Prints a table and, as its last lines,
``pods_per_second=<float>`` and ``p99_ms=<float>``; with ``--compare OTHER`` it then measures OTHER the same way
in the same run and prints ``<OTHER>_pods_per_second`` and ``ratio=`` (``--policy`` pods/s ÷ OTHER's: on a noisy
machine the ratio is the figure to quote).

Targets: ≥ 270 pods/s (kube-scheduler's SchedulingBasic 5000-node gate) and p99 ≤ 20 ms at 5000 × 8
for ``binpack`` and ``fgd``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.scheduling.framework import Scheduler
from domain.scheduling.registry import build_profile, get_policy
from domain.simulation.replay import typical_pods
from domain.simulation.synthetic import synthetic_pods
from domain.units import GiB


def cluster(nodes: int, gpus: int) -> list[NodeInventory]:
    """``nodes`` identical nodes: ``gpus`` × 16 GiB A100, 64 cores, 256 GiB, 110 pod slots."""
    return [
        NodeInventory(
            NodeName(f"node-{n:05d}"),
            tuple(Gpu(i, GpuUuid(f"GPU-{n:05d}-{i}"), "A100", 16 * GiB) for i in range(gpus)),
            cpu_milli=64000, memory_bytes=256 * GiB, max_pods=110,
        )
        for n in range(nodes)
    ]


def measure(policy: str, args: argparse.Namespace) -> tuple[float, float]:
    """Prefill and measure one policy (module docstring); prints its table, returns (pods/s, p99 ms)."""
    get_policy(policy)
    workload = synthetic_pods(scale=1.0, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    ledger = ClusterLedger(cluster(args.nodes, args.gpus_per_node), max_gpus=args.gpus_per_node)
    profile = build_profile(policy, ledger, rng=rng, typical=typical_pods(workload))
    scheduler = Scheduler(ledger, profile)
    capacity = args.nodes * args.gpus_per_node * 1000
    filled, number = 0, 0
    started = time.perf_counter()
    while filled < args.prefill * capacity:
        pod = workload[int(rng.integers(len(workload)))]
        result = scheduler.schedule(pod.request(uid=f"prefill-{number}"))
        number += 1
        if result.allocation is not None:
            filled += result.allocation.gpu_milli
        elif number > 20 * args.nodes:
            break
    prefill_seconds = time.perf_counter() - started
    latencies = np.empty(args.pods)
    placed = 0
    started = time.perf_counter()
    for i in range(args.pods):
        pod = workload[int(rng.integers(len(workload)))].request(uid=f"measured-{i}")
        t0 = time.perf_counter()
        result = scheduler.schedule(pod)
        latencies[i] = time.perf_counter() - t0
        placed += result.allocation is not None
    wall = time.perf_counter() - started
    print(f"nodes={args.nodes} gpus_per_node={args.gpus_per_node} policy={policy}")
    print(f"prefill: {number} pods, {100 * filled / capacity:.1f} % of GPU milli, {prefill_seconds:.1f} s")
    print(f"measured: {args.pods} pods, {placed} placed, {wall:.2f} s")
    print(f"latency ms: p50={1000 * np.percentile(latencies, 50):.2f} p90={1000 * np.percentile(latencies, 90):.2f} "
          f"p99={1000 * np.percentile(latencies, 99):.2f} max={1000 * latencies.max():.2f}")
    return args.pods / wall, float(1000 * np.percentile(latencies, 99))


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--compare", metavar="POLICY", help="also measure POLICY in this run and print the ratio")
    parser.add_argument("--pods", type=int, default=3000, help="measured pods")
    parser.add_argument("--prefill", type=float, default=0.5, help="fraction of GPU capacity filled before measuring")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    rate, p99 = measure(args.policy, args)
    if args.compare:
        other, _ = measure(args.compare, args)
        print(f"{args.compare}_pods_per_second={other:.1f}")
        print(f"ratio={rate / other:.3f}")
    print(f"pods_per_second={rate:.1f}")
    print(f"p99_ms={p99:.2f}")


if __name__ == "__main__":
    main()
