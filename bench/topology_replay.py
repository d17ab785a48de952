"""Topology replay: do whole NVLink islands stay free for large pods? The published trace replay (arrivals only,
``domain.simulation.replay`` steps 1-5) on nodes given a simulated machine's topology, run three times per (policy,
seed): with the topology known to the scheduler (best-connected whole GPUs, ``domain.scheduling.framework.topology``),
known and placed topology first (``--gpu-topology-first``: multi-GPU pods only on the nodes offering their best
connection), and without (the first free GPUs by index, the published rule). All are judged against the same
topology.

Usage (from the repository root)::

    .venv/bin/python bench/topology_replay.py [--nodes ../shared/traces/openb/openb_node_list_gpu_node.csv]
        [--pods ../shared/traces/openb/openb_pod_list_multigpu30.csv] [--machine nvlink-islands-2x4]
        [--policies fgd,best-fit] [--seeds 42-44] [--tune 1.3]

Nodes with an even GPU count get the machine's topology of that count (8 GPUs: two islands of 4); others none.
Printed per policy and mode (means over seeds): arrived GPU % of capacity at the end, allocated GPU %; pods of 2
and of 4 whole GPUs placed and the share of them whose GPUs are NVLink-connected (one island); pods of 8 GPUs
placed (on two 4-GPU islands never NVLink-connected); pods of 2 or more GPUs refused; and whole islands (every GPU
untouched) free when arrivals reach 80 % of capacity.

``--churn LOAD [--arrivals N]``: a churn replay instead (pods also leave, module function :func:`churn`): after
the first half of the arrivals, the mean allocated GPU %, the share of the 2-, 4- and 8-GPU pods placed, of
the placed 2- and 4-GPU pods on one island, and the mean whole islands free (sampled every 50 arrivals). Figures
only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from pathlib import Path

import attrs
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from adapters.csvtrace import CsvTraceReader  # noqa: E402
from domain.ledger import ClusterLedger  # noqa: E402
from domain.scheduling.framework.cycle import Scheduler  # noqa: E402
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel  # noqa: E402
from domain.scheduling.policies.fgd.nodestates import NodeStateCache  # noqa: E402
from domain.scheduling.registry import build_profile  # noqa: E402
from domain.simulation.replay import ReplayConfig, planned_arrivals, replay, typical_pods  # noqa: E402
from domain.simulation.topology_tally import TopologyTally, node_topologies  # noqa: E402
from domain.simulation.workload import TraceNode, TracePod  # noqa: E402
from domain.topology import Tier  # noqa: E402
from domain.units import MILLI_PER_GPU  # noqa: E402

TRACES = REPO.parent / "shared" / "traces" / "openb"


MODES = (("first by index", False, False), ("topology-aware", True, False), ("topology first", True, True))
"""(row label, topology told to the scheduler, ``--gpu-topology-first``) of the three runs per policy and seed."""


def run(nodes: list[TraceNode], pods: list[TracePod], policy: str, seed: int, tune: float, machine: str,
        aware: bool, first: bool = False) -> dict[str, float]:
    """One replay (module docstring) through the product's own (``ljrk simulate --topology``,
    :mod:`domain.simulation.topology_tally`); returns its figures."""
    result = replay(nodes, pods, ReplayConfig(policy=policy, seed=seed, tune=tune, topology=machine,
                                              topology_known=aware, topology_first=first))
    figures = result.topology
    assert figures is not None
    capacity = result.total_gpus * MILLI_PER_GPU
    refused = sum(1 for _, size in result.failures if size in ("2", "4", "8", ">8"))
    return {
        "arrived%": 100 * result.arrived_milli[-1] / capacity, "alloc%": 100 * result.used_milli[-1] / capacity,
        "2-GPU placed": figures.placed(2), "2-GPU nvlink%": figures.share(2, Tier.NVLINK),
        "4-GPU placed": figures.placed(4), "4-GPU nvlink%": figures.share(4, Tier.NVLINK),
        "8-GPU placed": figures.placed(8), "multi refused": refused,
        "islands free@80": float(figures.islands_free_at_80 if figures.islands_free_at_80 is not None else -1),
    }


def churn(nodes: list[TraceNode], pods: list[TracePod], policy: str, seed: int, machine: str, aware: bool,
          load: float, arrivals: int, first: bool = False) -> dict[str, float]:
    """The churn replay (module docstring): ``arrivals`` pods of the seed's arrival stream (cycled), each leaving
    after an exponential lifetime (in arrivals) whose mean holds ``load`` of the GPU capacity by Little's law; the
    lifetimes come from their own generator, one draw per arrival, so both modes see the same departures."""
    config = ReplayConfig(policy=policy, seed=seed)
    typical = typical_pods(pods)
    ordered = sorted(nodes, key=lambda n: n.name)
    judged = node_topologies(machine, [n.inventory() for n in ordered])
    inventories = [attrs.evolve(n.inventory(), topology=judged.get(n.name) if aware else None) for n in ordered]
    stream, rng = planned_arrivals(nodes, pods, config)
    lifetimes = np.random.default_rng(seed + 1_000_003)
    ledger = ClusterLedger(inventories)
    tally = TopologyTally(machine, known=aware, topologies=judged, ledger=ledger, capacity_milli=0)  # islands only
    states = NodeStateCache(FragmentationModel(typical, ledger))
    scheduler = Scheduler(ledger, build_profile(policy, ledger, rng=rng, states=states, tie_break=config.tie_break,
                                                topology_first=first))
    capacity = sum(n.gpus for n in nodes) * MILLI_PER_GPU
    mean_lifetime = load * capacity / (sum(p.total_gpu_milli for p in stream) / len(stream))
    leaving: list[tuple[float, str]] = []
    warmup = arrivals // 2
    offered = {2: 0, 4: 0, 8: 0}
    placed = {2: 0, 4: 0, 8: 0}
    connected = {2: 0, 4: 0, 8: 0}
    islands: list[int] = []
    allocated: list[float] = []
    for now in range(arrivals):
        pod = stream[now % len(stream)]
        lifetime = float(lifetimes.exponential(mean_lifetime))
        while leaving and leaving[0][0] <= now:
            ledger.release(heapq.heappop(leaving)[1])
        uid = f"{pod.name}#{now}"
        result = scheduler.schedule(pod.request(uid=uid))
        if result.allocation is not None:
            heapq.heappush(leaving, (now + lifetime, uid))
        if now < warmup:
            continue
        if pod.num_gpu in offered:
            offered[pod.num_gpu] += 1
            if result.allocation is not None:
                indexes = [g.gpu_index for c in result.allocation.containers for g in c.grants]
                topology = judged.get(result.allocation.node)
                placed[pod.num_gpu] += 1
                connected[pod.num_gpu] += topology is not None and topology.tier(indexes) is Tier.NVLINK
        if now % 50 == 0:
            islands.append(tally.whole_islands())
            allocated.append(100 * sum(int(ledger.core_used[ledger.slot(n.name)].sum()) for n in ordered) / capacity)
    share = {k: 100 * placed[k] / offered[k] if offered[k] else 0.0 for k in offered}
    return {
        "alloc%": sum(allocated) / len(allocated), "2-GPU placed%": share[2],
        "2-GPU nvlink%": 100 * connected[2] / placed[2] if placed[2] else 0.0, "4-GPU placed%": share[4],
        "4-GPU nvlink%": 100 * connected[4] / placed[4] if placed[4] else 0.0, "8-GPU placed%": share[8],
        "islands free (mean)": sum(islands) / len(islands),
    }


def _seeds(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, default=TRACES / "openb_node_list_gpu_node.csv")
    parser.add_argument("--pods", type=Path, default=TRACES / "openb_pod_list_multigpu30.csv")
    parser.add_argument("--machine", default="nvlink-islands-2x4")
    parser.add_argument("--policies", default="fgd,best-fit")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--churn", type=float, default=None, metavar="LOAD",
                        help="churn replay holding LOAD (e.g. 0.9) of the GPU capacity instead of arrivals only")
    parser.add_argument("--arrivals", type=int, default=20000, help="arrivals of the churn replay")
    args = parser.parse_args(argv)
    reader = CsvTraceReader()
    nodes, pods = reader.read_nodes(args.nodes), reader.read_pods(args.pods)
    print(f"nodes={args.nodes.name} pods={args.pods.name} machine={args.machine} tune={args.tune} seeds={args.seeds}")
    keys = ["arrived%", "alloc%", "2-GPU placed", "2-GPU nvlink%", "4-GPU placed", "4-GPU nvlink%", "8-GPU placed",
            "multi refused", "islands free@80"]
    if args.churn is not None:
        keys = ["alloc%", "2-GPU placed%", "2-GPU nvlink%", "4-GPU placed%", "4-GPU nvlink%", "8-GPU placed%",
                "islands free (mean)"]
        print(f"churn load={args.churn} arrivals={args.arrivals} (first half not measured)")
    print("| policy | scheduler | " + " | ".join(keys) + " | s/run |")
    print("|---" * (len(keys) + 3) + "|")
    for policy in args.policies.split(","):
        for mode, aware, first in MODES:
            started = time.perf_counter()
            runs = [run(nodes, pods, policy, seed, args.tune, args.machine, aware, first) if args.churn is None
                    else churn(nodes, pods, policy, seed, args.machine, aware, args.churn, args.arrivals, first)
                    for seed in _seeds(args.seeds)]
            seconds = (time.perf_counter() - started) / len(runs)
            means = {k: sum(r[k] for r in runs) / len(runs) for k in keys}
            print(f"| {policy} | {mode} | " + " | ".join(f"{means[k]:.1f}" for k in keys) + f" | {seconds:.0f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
