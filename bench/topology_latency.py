"""Decision latency of whole-GPU pods with and without GPU topology (the best-connected choice, the tie refiner and
the required-topology filter, ``domain.scheduling.framework.topology``).

Usage (from the repository root)::

    .venv/bin/python bench/topology_latency.py [--nodes 5000] [--pods 300]

``--nodes`` empty 8-GPU nodes (machine ``none``: no topology, as before; ``nvlink-islands-2x4``: two islands of 4),
policy ``binpack``; ``--pods`` one-container whole-GPU pods scheduled one after another (2 or 4 GPUs, with and
without the ``nvlink`` requirement, and placed topology first, ``--gpu-topology-first``); every node starts tied, the
worst case of the tie refiner. Printed per case:
median and 99th-percentile wall time of ``Scheduler.schedule``, ms. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attrs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.registry import build_profile
from domain.topology import Tier
from domain.topology.machines import machine_topology
from domain.units import GiB


def nodes(count: int, machine: str) -> list[NodeInventory]:
    """``count`` empty 8-GPU nodes of ``machine``."""
    out = []
    for k in range(count):
        gpus = tuple(Gpu(i, GpuUuid(f"GPU-{k}-{i}"), "H100", 80 * GiB) for i in range(8))
        out.append(NodeInventory(NodeName(f"n{k:05d}"), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB,
                                 topology=machine_topology(machine, 8)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=300)
    args = parser.parse_args(argv)
    print(f"nodes={args.nodes} pods={args.pods} policy=binpack")
    print("| machine | GPUs per pod | required | topology first | median ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    cases = [(machine, gpus, tier, False) for machine in ("none", "nvlink-islands-2x4")
             for gpus, tier in ((2, Tier.SYSTEM), (4, Tier.SYSTEM), (4, Tier.NVLINK))
             if machine != "none" or tier is not Tier.NVLINK]  # a requirement is refused on every node without one
    for machine, gpus, tier, first in [*cases, ("nvlink-islands-2x4", 4, Tier.SYSTEM, True)]:
        ledger = ClusterLedger(nodes(args.nodes, machine))
        scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0),
                                                    topology_first=first))
        times = []
        for n in range(args.pods):
            pod = attrs.evolve(single_container_pod(f"p{n}", gpus=gpus), gpu_topology=tier)
            started = time.perf_counter()
            result = scheduler.schedule(pod)
            times.append(time.perf_counter() - started)
            if result.allocation is None:
                raise SystemExit(f"pod {n} not placed: {result.reason}")
        times.sort()
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
        print(f"| {machine} | {gpus} | {tier.label} | {'yes' if first else 'no'} | "
              f"{1000 * times[len(times) // 2]:.2f} | {1000 * p99:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
