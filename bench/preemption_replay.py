"""Preemption in the trace replay: does evicting low-priority pods for high-priority ones fragment the cluster more
than the policy alone? The published replay (``domain.simulation.replay``: arrivals only, tune 1.3) run twice per
(policy, seed) on the same arrivals: without priorities, and with ``--high-share`` of the arrivals high priority
(each one that fits nowhere evicts low-priority pods as the scheduler's preemption chooses them, then is placed by
the policy; an evicted pod is gone).

Usage (from the repository root)::

    .venv/bin/python bench/preemption_replay.py [--nodes ../shared/traces/openb/openb_node_list_gpu_node.csv]
        [--pods ../shared/traces/openb/openb_pod_list_default.csv] [--policy fgd] [--seeds 42-44]
        [--high-share 0.1] [--plot FILE.png]

Printed per x (arrived GPU % of capacity), means over seeds: the allocation % and the frag ratio % (the share of
the idle GPU capacity that typical pods cannot use, the published measure) without and with preemption, and the
difference with its range over seeds; then preemptions, evicted pods and evicted GPU milli per seed. ``--plot``
draws both curves of both runs. Figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from adapters.csvtrace import CsvTraceReader  # noqa: E402
from domain.simulation.replay import ReplayConfig, ReplayResult, replay, typical_pods  # noqa: E402

TRACES = REPO.parent / "shared" / "traces" / "openb"
POINTS = (50, 60, 70, 80, 90, 100, 110, 120, 130)


def seeds_of(text: str) -> list[int]:
    """``42-44`` or ``42,43`` → the seeds."""
    if "-" in text:
        first, last = text.split("-", 1)
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def row(label: str, base: np.ndarray, prio: np.ndarray, x: int) -> str:
    delta = prio[:, x] - base[:, x]
    return (f"{label:>6} x={x:>3}  {base[:, x].mean():7.2f}  {prio[:, x].mean():7.2f}  {delta.mean():+6.2f} "
            f"[{delta.min():+.2f}..{delta.max():+.2f}]")


def plot(path: Path, base: list[ReplayResult], prio: list[ReplayResult], share: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(131))
    fig, (alloc_ax, frag_ax) = plt.subplots(1, 2, figsize=(11, 4))
    for runs, label, style in ((base, "policy alone", "-"), (prio, f"{share:.0%} high priority, preempting", "--")):
        alloc = np.mean([r.allocation_curve() for r in runs], axis=0)
        frag = np.mean([r.fragmentation_curve() for r in runs], axis=0)
        alloc_ax.plot(xs, alloc, style, label=label)
        frag_ax.plot(xs, frag, style, label=label)
    alloc_ax.set(xlabel="arrived GPU % of capacity", ylabel="allocated GPU %", title="allocation")
    frag_ax.set(xlabel="arrived GPU % of capacity", ylabel="frag ratio %", title="fragmentation")
    alloc_ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=Path, default=TRACES / "openb_node_list_gpu_node.csv")
    parser.add_argument("--pods", type=Path, default=TRACES / "openb_pod_list_default.csv")
    parser.add_argument("--policy", default="fgd")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--high-share", type=float, default=0.1)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    reader = CsvTraceReader()
    nodes, pods = reader.read_nodes(args.nodes), reader.read_pods(args.pods)
    typical = typical_pods(pods)
    base, prio = [], []
    for seed in seeds_of(args.seeds):
        for share, runs in ((0.0, base), (args.high_share, prio)):
            config = ReplayConfig(policy=args.policy, seed=seed, tune=args.tune, high_share=share)
            runs.append(replay(nodes, pods, config, typical=typical))
    print(f"{args.pods.name}, {args.policy}, seeds {args.seeds}, high-priority share {args.high_share}: "
          "means over seeds, without / with preemption, difference [range over seeds]")
    alloc_b = np.array([r.allocation_curve() for r in base])
    alloc_p = np.array([r.allocation_curve() for r in prio])
    frag_b = np.array([r.fragmentation_curve() for r in base])
    frag_p = np.array([r.fragmentation_curve() for r in prio])
    for x in POINTS:
        print(row("alloc", alloc_b, alloc_p, x))
    for x in POINTS:
        print(row("frag", frag_b, frag_p, x))
    for result in prio:
        print(f"seed {result.config.seed}: {result.high_arrivals} high-priority arrivals, {result.preemptions} placed "
              f"by preemption, {result.evicted_pods} pods evicted ({result.evicted_milli} milli-GPU); failed "
              f"{result.failed_pods} vs {base[prio.index(result)].failed_pods} without priorities")
    if args.plot is not None:
        plot(args.plot, base, prio, args.high_share)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
