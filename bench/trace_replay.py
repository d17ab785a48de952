"""Trace-replay benchmark: the published FGD experiment (USENIX ATC '23) against its published per-policy means.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/trace_replay.py [--nodes ../shared/traces/openb/openb_node_list_gpu_node.csv]
        [--pods ../shared/traces/openb/openb_pod_list_default.csv] [--policies published|all|a,b]
        [--seeds 42-51] [--tune 1.3] [--tie-break fixed-order] [--jobs 1]

Every (policy, seed) run happens in a fresh child process (``spawn`` context, one task per child), so the peak
RSS a child reports (``resource.getrusage``: ``ru_maxrss``, KiB on Linux) is the peak of that single run.

Printed: per policy the mean and min–max over seeds of alloc% at x = 100 and x = 130 and the frag ratio (% of
idle) at x = 80, each next to the published 10-seed mean and the difference in percentage points (published
figures exist only for the ``default`` pod file; other files print ``n/a``), the wall time per run (mean/max)
and the peak RSS per run (max); then the curve shape (mean alloc% at x = 50, 80, 90, 95, 98). The last lines are
machine-readable ``key=value`` pairs (``fgd_wall_seconds_max``, ``peak_rss_mib_max``, ...).

Published values: trace-replay-method.md §5 (``analysis_allo_discrete.csv`` / ``analysis_frag_ratio_discrete.csv``
of the simulator's ``expected_results``). This script is not part of the test run; ``tests/unit/
test_bench_smoke.py`` covers its pure helpers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import math
import multiprocessing
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

DEFAULT_TRACES = os.path.join("..", "shared", "traces", "openb")
DEFAULT_NODES = os.path.join(DEFAULT_TRACES, "openb_node_list_gpu_node.csv")
DEFAULT_PODS = os.path.join(DEFAULT_TRACES, "openb_pod_list_default.csv")

PUBLISHED_ORDER = ("random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd")
"""The six policies of the published experiment, in the paper's order (our registry names)."""

CURVE_XS = (50, 80, 90, 95, 98)
"""x values of the published ``default`` curve-shape table (§5)."""

PUBLISHED_DEFAULT: dict[str, dict[str, float]] = {
    # alloc% @x=100, alloc% @x=130: §5 table, workload default; frag80: "default frag ratio at x = 80" line.
    "random": {"alloc100": 86.30, "alloc130": 87.47, "frag80": 74.6},
    "dot-product": {"alloc100": 90.62, "alloc130": 90.85, "frag80": 50.5},
    "gpu-clustering": {"alloc100": 91.65, "alloc130": 91.88, "frag80": 46.9},
    "gpu-packing": {"alloc100": 91.78, "alloc130": 92.00, "frag80": 46.4},
    "best-fit": {"alloc100": 92.86, "alloc130": 93.08, "frag80": 41.5},
    "fgd": {"alloc100": 95.23, "alloc130": 95.39, "frag80": 29.9},
}
"""Published 10-seed means for the ``default`` workload (trace-replay-method.md §5)."""

PUBLISHED_DEFAULT_CURVE: dict[str, tuple[float, ...]] = {
    "random": (49.97, 78.66, 85.02, 85.72, 86.08),
    "dot-product": (50.01, 80.02, 89.98, 90.58, 90.61),
    "gpu-clustering": (50.01, 80.02, 89.98, 91.61, 91.63),
    "gpu-packing": (50.01, 80.02, 89.98, 91.74, 91.76),
    "best-fit": (50.01, 80.02, 89.99, 92.82, 92.85),
    "fgd": (50.01, 80.02, 89.98, 94.91, 95.21),
}
"""Published ``default`` curve shape: mean alloc% at x = 50, 80, 90, 95, 98 (§5, last table)."""

METRICS = (("alloc100", "alloc@100"), ("alloc130", "alloc@130"), ("frag80", "frag%@80"))


# ---------------------------------------------------------------------------------------------- pure helpers
def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` → 42..51; also comma lists of numbers and ranges (``"42,45-46"``). Order kept, duplicates
    dropped. Raises ValueError for an empty or malformed spec or a descending range."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"empty seed in {text!r}")
        low, sep, high = part.partition("-")
        if sep:
            start, stop = int(low), int(high)
            if stop < start:
                raise ValueError(f"descending seed range {part!r}")
            values: Iterable[int] = range(start, stop + 1)
        else:
            values = (int(part),)
        seeds.extend(v for v in values if v not in seeds)
    return seeds


def parse_policies(text: str, known: Sequence[str]) -> list[str]:
    """``published`` (the six published policies), ``all`` (every registered policy) or a comma list of names.
    Raises ValueError naming an unknown policy."""
    if text == "published":
        return list(PUBLISHED_ORDER)
    if text == "all":
        return [*PUBLISHED_ORDER, *(k for k in known if k not in PUBLISHED_ORDER)]
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no policy named")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(known)}")
    return names


def published_for(pods_path: str) -> dict[str, dict[str, float]] | None:
    """The published means when ``pods_path`` is the ``default`` pod file, else None."""
    return PUBLISHED_DEFAULT if os.path.basename(pods_path) == "openb_pod_list_default.csv" else None


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, min, max)``; NaN values are ignored; all NaN (or empty) gives NaNs."""
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return math.nan, math.nan, math.nan
    return statistics.fmean(clean), min(clean), max(clean)


def fmt(value: float | None, digits: int = 2, *, signed: bool = False) -> str:
    """A number with ``digits`` decimals, ``n/a`` for None or NaN."""
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: columns padded to their widest cell, first column left-aligned, others right."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        padded = (str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs)
        return "  ".join(padded)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def summary_rows(
    runs: Sequence[dict[str, Any]], policies: Sequence[str], published: dict[str, dict[str, float]] | None
) -> list[list[str]]:
    """One row per policy: runs, then per metric ``mean (min–max)``, published mean and Δ pp; wall mean/max; RSS."""
    rows: list[list[str]] = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        row = [policy, str(len(mine))]
        for key, _ in METRICS:
            mean, low, high = spread([r[key] for r in mine])
            pub = published.get(policy, {}).get(key) if published else None
            diff = mean - pub if pub is not None else None
            row += [f"{fmt(mean)} ({fmt(low)}–{fmt(high)})", fmt(pub), fmt(diff, signed=True)]
        wall_mean, _, wall_max = spread([r["wall_seconds"] for r in mine])
        row += [
            f"{fmt(wall_mean, 1)}/{fmt(wall_max, 1)}",
            fmt(max(r["rss_mib"] for r in mine), 0),
            fmt(statistics.fmean(r["failed"] for r in mine), 0),
            fmt(statistics.fmean(r["arrivals"] for r in mine), 0),
        ]
        rows.append(row)
    return rows


SUMMARY_HEADER = (
    "policy", "runs", "alloc@100 mean (min–max)", "pub", "Δpp", "alloc@130 mean (min–max)", "pub", "Δpp",
    "frag%@80 mean (min–max)", "pub", "Δpp", "wall s mean/max", "RSS MiB max", "failed", "arrivals",
)


def curve_rows(
    runs: Sequence[dict[str, Any]], policies: Sequence[str], published: bool
) -> list[list[str]]:
    """Mean alloc% at each x of :data:`CURVE_XS`, ``ours / published`` per cell."""
    rows: list[list[str]] = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        pub_curve = PUBLISHED_DEFAULT_CURVE.get(policy) if published else None
        cells = [policy]
        for i, x in enumerate(CURVE_XS):
            mean = spread([r["curve"][str(x)] for r in mine])[0]
            cells.append(f"{fmt(mean)} / {fmt(pub_curve[i] if pub_curve else None)}")
        rows.append(cells)
    return rows


def closing_lines(runs: Sequence[dict[str, Any]], published: dict[str, dict[str, float]] | None) -> list[str]:
    """Machine-readable ``key=value`` lines printed last."""
    fgd = [r["wall_seconds"] for r in runs if r["policy"] == "fgd"]
    lines = [
        f"runs={len(runs)}",
        f"wall_seconds_max={max((r['wall_seconds'] for r in runs), default=math.nan):.3f}",
        f"fgd_wall_seconds_max={max(fgd, default=math.nan):.3f}",
        f"peak_rss_mib_max={max((r['rss_mib'] for r in runs), default=math.nan):.1f}",
    ]
    if published:
        diffs = []
        for policy in {r["policy"] for r in runs} & set(published):
            mean = spread([r["alloc130"] for r in runs if r["policy"] == policy])[0]
            diffs.append(abs(mean - published[policy]["alloc130"]))
        lines.append(f"alloc130_max_abs_diff_pp={max(diffs, default=math.nan):.3f}")
    return lines


# ---------------------------------------------------------------------------------------------- trace reading
def read_nodes(path: str) -> list[Any]:
    """Trace nodes from a ``openb_node_list_*.csv`` file (columns sn, cpu_milli, memory_mib, gpu, model)."""
    from domain.simulation.workload import TraceNode

    with open(path, newline="") as handle:
        return [
            TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


def read_pods(path: str) -> list[Any]:
    """Trace pods from a ``openb_pod_list_*.csv`` file; ``gpu_spec`` split on ``|`` with empty tokens dropped."""
    from domain.simulation.workload import TracePod

    with open(path, newline="") as handle:
        return [
            TracePod(
                row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["num_gpu"]),
                int(row["gpu_milli"]), tuple(t for t in (row.get("gpu_spec") or "").split("|") if t),
            )
            for row in csv.DictReader(handle)
        ]


# ---------------------------------------------------------------------------------------------- one run (child)
def run_one(nodes_path: str, pods_path: str, policy: str, seed: int, tune: float, tie_break: str) -> dict[str, Any]:
    """One replay in the current (fresh) process; returns its figures and the process's peak RSS (MiB)."""
    from domain.simulation.replay import ReplayConfig, replay

    started = time.perf_counter()
    result = replay(read_nodes(nodes_path), read_pods(pods_path), ReplayConfig(policy, seed, tune, tie_break))
    alloc = result.allocation_curve()
    frag = result.fragmentation_curve()
    return {
        "policy": policy,
        "seed": seed,
        "alloc100": alloc[100],
        "alloc130": alloc[130],
        "frag80": frag[80],
        "frag100": frag[100],
        "curve": {str(x): alloc[x] for x in CURVE_XS},
        "failed": result.failed_pods,
        "arrivals": result.arrivals,
        "replay_seconds": result.wall_seconds,
        "wall_seconds": time.perf_counter() - started,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


# ---------------------------------------------------------------------------------------------- driver
def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run every (policy, seed) in a fresh child process, print the tables."""
    from domain.scheduling.registry import POLICIES
    from domain.scheduling.tiebreak import TIE_BREAKS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", default=DEFAULT_NODES, help="node list CSV (default: %(default)s)")
    parser.add_argument("--pods", default=DEFAULT_PODS, help="pod list CSV (default: %(default)s)")
    parser.add_argument("--policies", default="published", help="published (default), all, or a,b,...")
    parser.add_argument("--seeds", default="42-51", help="seeds: N, N,M or A-B (default: %(default)s)")
    parser.add_argument("--tune", type=float, default=1.3, help="arrived GPU target / capacity (default: %(default)s)")
    parser.add_argument(
        "--tie-break", default="fixed-order", choices=TIE_BREAKS, help="tie rule (default: fixed-order)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel, one process each (default: 1)")
    args = parser.parse_args(argv)
    try:
        policies = parse_policies(args.policies, list(POLICIES))
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        parser.error(str(error))
    for path in (args.nodes, args.pods):
        if not os.path.isfile(path):
            parser.error(f"no such file: {path}")
    published = published_for(args.pods)
    tasks = [(p, s) for p in policies for s in seeds]
    print(f"trace replay: nodes={args.nodes} pods={args.pods} tune={args.tune} tie_break={args.tie_break} "
          f"policies={','.join(policies)} seeds={args.seeds} jobs={args.jobs} runs={len(tasks)}", flush=True)
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(args.jobs, 1), mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = {
            pool.submit(run_one, args.nodes, args.pods, p, s, args.tune, args.tie_break): (p, s) for p, s in tasks
        }
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            runs.append(run)
            print(f"  [{len(runs)}/{len(tasks)}] {run['policy']:<14} seed={run['seed']} "
                  f"alloc@100={fmt(run['alloc100'])} alloc@130={fmt(run['alloc130'])} "
                  f"frag@80={fmt(run['frag80'])} failed={run['failed']} "
                  f"wall={run['wall_seconds']:.1f}s rss={run['rss_mib']:.0f}MiB", flush=True)
    runs.sort(key=lambda r: (policies.index(r["policy"]), r["seed"]))
    print()
    print(f"Per-policy summary over seeds {args.seeds} (published: "
          f"{'trace-replay-method.md §5, default' if published else 'n/a for this pod file'})")
    print(render_table(SUMMARY_HEADER, summary_rows(runs, policies, published)))
    print()
    print("Curve shape: mean alloc% ours / published")
    print(render_table(("policy", *(f"x={x}" for x in CURVE_XS)), curve_rows(runs, policies, published is not None)))
    print()
    print(f"total_wall_seconds={time.perf_counter() - started:.1f}")
    for line in closing_lines(runs, published):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
