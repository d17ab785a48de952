"""In-process scheduler throughput: filter + score + reserve over a synthetic cluster.

Method (after kube-scheduler's scheduler_perf, kubernetes ``test/integration/scheduler_perf``): N nodes with
``--gpus-per-node`` GPUs (16 GiB each, 64 cores, 256 GiB), a warm-up fill of ``--prefill`` of GPU capacity with a
mixed workload, then ``--pods`` measured pods drawn from the published pod mix (synthetic workload of
:mod:`domain.simulation.synthetic`) scheduled one at a time through the same framework, ledger and policy as
production. Pods that do not fit count as decisions too. Pods/s is measured pods ÷ the summed time of their
``schedule`` calls. Prints a table and, as its last lines, ``peak_rss_mib=`` (``ru_maxrss`` of this process),
``pods_per_second=<float>`` and ``p99_ms=<float>``; each policy's table ends with ``<policy>_cpu_ms_per_pod=``
(process CPU time over its measured ``schedule`` calls ÷ pods: the figure that load on a noisy machine disturbs
least). With ``--compare OTHER`` both clusters are prefilled first and
the measured pods are then scheduled in interleaved rounds of ``--round`` pods per policy, so load on a noisy
machine falls on both alike; it prints ``<OTHER>_pods_per_second`` and ``ratio=`` (``--policy`` pods/s ÷ OTHER's:
the figure to quote on a noisy machine). ``--record FILE`` writes those figures as this invocation's row of the
performance table (:func:`adapters.reportfiles.results_table.record_bench_run`; ``bench/results/performance.md``).

``--whole-gpus-left F`` measures the late regime instead: after the prefill, GPU pods with little CPU (shares and
1-, 2- and 4-GPU pods of 0-5 cores; the published mix's CPU per GPU would stop the fill near 76 % of GPU milli) are
placed by the policy until at most ``F`` of the schedulable GPUs are fully free, and the measured pods are one-GPU
pods of 0-8 cores (``fgd-staged`` places those by FGD-deficit-scarce, its reserve nodes aside); measure fewer pods
than the fully free GPUs it prints, or the rest are turned away.

Targets at 5000 × 8 on a quiet machine: ``fgd`` ≥ 1,000 pods/s with p99 ≤ 5 ms, ``binpack`` ≥ 3,000 pods/s, and
``--policy fgd --compare binpack`` ratio ≥ 0.5; at 10,000 × 8 ``peak_rss_mib`` ≤ 1024; at 20,000 × 8 ``--policy fgd``
(the scheduler's default policy) ≥ 1,000 pods/s with p99 ≤ 5 ms and ``peak_rss_mib`` ≤ 1024.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import attrs
import numpy as np

from adapters.reportfiles.results_table import RunStart, record_bench_run
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.policies.fgd.staged import saturated
from domain.scheduling.registry import build_profile, get_policy
from domain.simulation.replay import typical_pods
from domain.simulation.synthetic import synthetic_pods
from domain.simulation.workload import TracePod
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


@attrs.define
class Run:
    """One policy's prefilled scheduler and its measured latencies (seconds)."""

    policy: str
    scheduler: Scheduler
    rng: np.random.Generator
    workload: list[TracePod]
    prefill_pods: int
    prefill_milli: int
    prefill_seconds: float
    late: bool = False
    whole_left: int = 0
    latencies: list[float] = attrs.Factory(list)
    placed: int = 0
    cpu_seconds: float = 0.0

    def step(self, count: int) -> None:
        """Schedule the next ``count`` measured pods, one at a time, timing each ``schedule`` call."""
        for _ in range(count):
            number = len(self.latencies)
            uid = f"measured-{number}"
            if self.late:
                pod = single_container_pod(uid, cpu_milli=int(self.rng.integers(0, 9)) * 1000, gpus=1)
            else:
                pod = self.workload[int(self.rng.integers(len(self.workload)))].request(uid=uid)
            cpu = time.process_time()
            started = time.perf_counter()
            result = self.scheduler.schedule(pod)
            self.latencies.append(time.perf_counter() - started)
            self.cpu_seconds += time.process_time() - cpu
            self.placed += result.allocation is not None


def prefill(policy: str, args: argparse.Namespace) -> Run:
    """A fresh cluster filled to ``args.prefill`` of its GPU milli by ``policy`` itself (module docstring)."""
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
    if args.whole_gpus_left is not None:
        while not saturated(ledger, args.whole_gpus_left) and number <= 40 * args.nodes:
            uid = f"late-fill-{number}"
            cpu = int(rng.integers(0, 6)) * 1000
            if rng.random() < 0.4:
                pod = single_container_pod(uid, cpu_milli=cpu, core_milli=int(rng.choice([100, 230, 470, 650, 810])))
            else:
                pod = single_container_pod(uid, cpu_milli=cpu, gpus=int(rng.choice([1, 1, 1, 2, 4])))
            result = scheduler.schedule(pod)
            number += 1
            if result.allocation is not None:
                filled += result.allocation.gpu_milli
    return Run(policy, scheduler, rng, list(workload), number, filled, time.perf_counter() - started,
               late=args.whole_gpus_left is not None, whole_left=int(ledger.free_gpus[: ledger.rows].sum()))


def report(run: Run, args: argparse.Namespace) -> tuple[float, float, float]:
    """Print ``run``'s table; return (pods/s over its measured calls, p99 latency in ms, CPU ms per pod)."""
    latencies = np.array(run.latencies)
    capacity = args.nodes * args.gpus_per_node * 1000
    wall = float(latencies.sum())
    print(f"nodes={args.nodes} gpus_per_node={args.gpus_per_node} policy={run.policy}")
    print(f"prefill: {run.prefill_pods} pods, {100 * run.prefill_milli / capacity:.1f} % of GPU milli, "
          f"{run.prefill_seconds:.1f} s")
    if run.late:
        whole = run.whole_left
        print(f"late regime: {whole} fully free GPUs after the prefill ({100 * whole / (capacity // 1000):.1f} %); "
              "measured pods ask one GPU each")
    print(f"measured: {len(latencies)} pods, {run.placed} placed, {wall:.2f} s in schedule()")
    print(f"latency ms: p50={1000 * np.percentile(latencies, 50):.2f} p90={1000 * np.percentile(latencies, 90):.2f} "
          f"p99={1000 * np.percentile(latencies, 99):.2f} max={1000 * latencies.max():.2f}")
    cpu_ms = 1000 * run.cpu_seconds / len(latencies)
    print(f"{run.policy}_cpu_ms_per_pod={cpu_ms:.3f}")
    return len(latencies) / wall, float(1000 * np.percentile(latencies, 99)), cpu_ms


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", default="binpack")
    parser.add_argument("--compare", metavar="POLICY", help="also measure POLICY in this run and print the ratio")
    parser.add_argument("--pods", type=int, default=3000, help="measured pods")
    parser.add_argument("--prefill", type=float, default=0.5, help="fraction of GPU capacity filled before measuring")
    parser.add_argument("--round", type=int, default=50, help="pods per policy per interleaved round (--compare)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--whole-gpus-left", type=float, metavar="F",
                        help="fill on until at most F of the GPUs are fully free; measure one-GPU pods (docstring)")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()
    runs = [prefill(args.policy, args)]
    if args.compare:
        runs.append(prefill(args.compare, args))
    for done in range(0, args.pods, args.round):
        for run in runs:
            run.step(min(args.round, args.pods - done))
    rate, p99, cpu_ms = report(runs[0], args)
    measured = f"`{args.policy}` {rate:,.0f} pods/s, p99 {p99:.2f} ms, {cpu_ms:.2f} ms of CPU per pod"
    if args.compare:
        other, other_p99, _ = report(runs[1], args)
        print(f"{args.compare}_pods_per_second={other:.1f}")
        print(f"ratio={rate / other:.3f}")
        measured += f"; `{args.compare}` {other:,.0f} pods/s, p99 {other_p99:.2f} ms; ratio {rate / other:.3f}"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak_rss_mib={rss:.0f}")
    print(f"pods_per_second={rate:.1f}")
    print(f"p99_ms={p99:.2f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"{measured}; peak RSS {rss:.0f} MiB", start)


if __name__ == "__main__":
    main()
