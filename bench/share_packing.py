"""Share-packing model: the trace replay's arrivals packed into GPUs alone, to compare GPU-choice rules.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/share_packing.py [--nodes ../shared/traces/openb/openb_node_list_gpu_node.csv]
        [--pods ../shared/traces/openb/openb_pod_list_gpushare80.csv] [--seeds 42-51] [--tune 1.3]
        [--record bench/results/share_packing.md]

The model keeps only the GPUs: every GPU of the node list is a bin of 1000 milli, with no nodes, CPU, memory or
models. The arrival stream is the replay's own (:func:`domain.simulation.replay.planned_arrivals`, same seed, same
tuning). A whole-GPU pod of ``k`` GPUs takes ``k`` fully free GPUs anywhere; a share takes one GPU by the rule;
CPU-only pods are skipped (their arrival still counts, as in the replay); a pod that fits nowhere is dropped.

Rules: ``best-fit`` (the fitting GPU with the least free milli, fully free last) and ``gap-balance`` (the share
rule of ``fgd-plus``: :func:`domain.scheduling.policies.fgd.gapbalance.option_keys`, closing first, then sum of squares,
then best fit; the first GPU on ties). Printed per rule: mean alloc% at x = 100 and x = 130 (the replay's binning,
:func:`domain.simulation.curves.allocation_curve`) and the last lines ``<rule>_alloc{100,130}=…``. ``--record FILE``
also writes the means as the pod file's row of the Markdown table in FILE (other pod files' rows are kept, rows
sorted by name): ``bench/results/share_packing.md``, the table the documentation quotes.

Without CPU or nodes the model is no bound on the replay, only a like-for-like comparison of the rules on the
same arrivals. Not part of the test run; ``tests/unit/test_bench_smoke.py`` covers :func:`pack`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adapters.csvtrace.reader import CsvTraceReader
from adapters.reportfiles.results_table import record_row, seeds_label, workload_name
from domain.scheduling.policies.fgd.gapbalance import gap_histogram_of, option_keys
from domain.simulation.curves import allocation_curve
from domain.simulation.replay import ReplayConfig, planned_arrivals
from domain.simulation.workload import TracePod
from domain.units import MILLI_PER_GPU
from entrypoints.simulate.__main__ import parse_seeds

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb"
RULES = ("best-fit", "gap-balance")
RECORD_HEADER = ("| pod file | seeds | `best-fit` alloc % @100 / @130 | gap balance alloc % @100 / @130 |\n"
                 "|---|---|---|---|")


def _choose(rule: str, free: np.ndarray, need: int) -> int | None:
    """GPU index for a share of ``need`` milli under ``rule``, or None when none fits."""
    fit = free >= need
    if not fit.any():
        return None
    if rule == "best-fit":
        return int(np.argmin(np.where(fit, free, 2 * MILLI_PER_GPU)))
    row = free[None, :]
    keys = option_keys(row, np.full_like(row, MILLI_PER_GPU), np.full_like(row, need), fit[None, :],
                       gap_histogram_of(free, np.full_like(free, MILLI_PER_GPU)))
    return int(np.argmax(keys[0]))


def pack(rule: str, gpus: int, stream: Sequence[TracePod]) -> tuple[list[int], list[int]]:
    """``(arrived, used)`` milli-GPU after each arrival of ``stream`` packed by ``rule`` (module docstring) into
    ``gpus`` GPUs. Raises ``ValueError`` for an unknown rule."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    free = np.full(gpus, MILLI_PER_GPU, np.int64)
    arrived_series: list[int] = []
    used_series: list[int] = []
    arrived = used = 0
    for pod in stream:
        arrived += pod.total_gpu_milli
        if pod.num_gpu and pod.gpu_milli >= MILLI_PER_GPU:
            whole = np.flatnonzero(free == MILLI_PER_GPU)[: pod.num_gpu]
            if len(whole) == pod.num_gpu:
                free[whole] = 0
                used += pod.total_gpu_milli
        elif pod.num_gpu:
            index = _choose(rule, free, pod.gpu_milli)
            if index is not None:
                free[index] -= pod.gpu_milli
                used += pod.gpu_milli
        arrived_series.append(arrived)
        used_series.append(used)
    return arrived_series, used_series


def record(path: Path, pods_file: str, seeds: str, means: dict[str, tuple[float, float]]) -> None:
    """Write ``means`` (rule → mean alloc% at x = 100 and 130) as the row of ``pods_file``'s workload (the name
    after ``openb_pod_list_``) in the Markdown table at ``path``, keeping the other workloads' rows."""
    cells = [seeds, *(f"{means[rule][0]:.2f} / {means[rule][1]:.2f}" for rule in RULES)]
    record_row(path, RECORD_HEADER, workload_name(pods_file), cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=str(TRACES / "openb_node_list_gpu_node.csv"))
    parser.add_argument("--pods", default=str(TRACES / "openb_pod_list_gpushare80.csv"))
    parser.add_argument("--seeds", default="42-51", type=parse_seeds)
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the means as this pod file's table row")
    args = parser.parse_args(argv)
    reader = CsvTraceReader()
    nodes, pods = reader.read_nodes(Path(args.nodes)), reader.read_pods(Path(args.pods))
    gpus = sum(n.gpus for n in nodes)
    results: dict[str, list[tuple[float, float]]] = {rule: [] for rule in RULES}
    for seed in args.seeds:
        stream, _ = planned_arrivals(nodes, pods, ReplayConfig("best-fit", seed, args.tune))
        for rule in RULES:
            curve = allocation_curve(*pack(rule, gpus, stream), gpus)
            results[rule].append((curve[100], curve[130]))
            print(f"seed={seed} {rule:12s} alloc@100={curve[100]:.2f} alloc@130={curve[130]:.2f}", flush=True)
    means = {rule: (statistics.fmean(v[0] for v in values), statistics.fmean(v[1] for v in values))
             for rule, values in results.items()}
    for rule, (at100, at130) in means.items():
        print(f"{rule.replace('-', '_')}_alloc100={at100:.3f}")
        print(f"{rule.replace('-', '_')}_alloc130={at130:.3f}")
    if args.record is not None:
        record(args.record, args.pods, seeds_label(args.seeds), means)
    return 0


if __name__ == "__main__":
    sys.exit(main())
