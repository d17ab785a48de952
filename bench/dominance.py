"""Dominance check: a candidate policy against FGD at every point of the allocation curve (issue 31).

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/dominance.py --candidate fgd-plus [--baseline fgd]
        [--traces ../shared/traces/openb] [--pods default,cpu100,...|all] [--typical trace,online]
        [--seeds 42-44] [--tune 1.3] [--limit-arrivals N] [--tolerance 0.1] [--gain 0.5]
        [--cache DIR] [--jobs 1]

For each pod file ``<traces>/openb_pod_list_<name>.csv`` (nodes: ``openb_node_list_gpu_node.csv``) and each
typical-pod mode, both policies replay the same seeds in process (:func:`domain.simulation.replay.replay`, one
fresh child process per run). Per x in 1..130 (arrived GPU request, % of capacity) the allocation % of each run
is :func:`~domain.simulation.curves.allocation_curve`'s point; the seeds' mean is taken per policy (NaN points
ignored) and the **gap** is candidate − baseline, in percentage points.

Printed per (pod file, mode): the worst gap and the x where it occurs, the gap at x = 130 (the gain), the baseline
and candidate means at x = 80 / 90 / 95 / 100 / 130, the GPU pods that failed by x = 100 per size class
(shares, 1, 2, 4, 8 GPUs: :func:`domain.simulation.breakdown.failure_curves`; summed over seeds, candidate /
baseline), the wall time per run and a verdict: ``ok``
when every gap ≥ −tolerance and (full runs only) the gain ≥ ``--gain``. The last lines are ``key=value`` pairs:
``<pods>_<mode>_worst_gap_pp``, ``_worst_x``, ``_gain130_pp``, and ``dominance_ok=true|false``. Exit status 0
when every row is ``ok``, 1 otherwise.

``--limit-arrivals N`` replays each run's first N arrivals only (the x range they reach is checked; no gain
verdict). ``--cache DIR`` keeps the baseline's curves in ``DIR/<key>.json`` (key: pod file name, size and mtime,
policy, seed, mode, tune, limit), so a candidate can be iterated on without replaying FGD again; the candidate is
always replayed. Trace data is read from ``--traces``, never copied.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "openb"
POD_FILES = ("default", "cpu100", "gpushare40", "gpushare80", "gpuspec20", "multigpu30")
"""The public openb pod files the issue's dominance check covers."""
NODES_FILE = "openb_node_list_gpu_node.csv"
SHOW_XS = (80, 90, 95, 100, 130)
GPU_CLASSES = ("share", "1", "2", "4", "8")
"""The size classes (:data:`domain.simulation.breakdown.SIZE_CLASSES`) of the GPU pods the table counts."""


# ---------------------------------------------------------------------------------------------- pure helpers
def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Per x, the mean of the curves' points that are not NaN (NaN where all are). All curves have one length."""
    result: list[float] = []
    for points in zip(*curves, strict=True):
        clean = [p for p in points if not math.isnan(p)]
        result.append(statistics.fmean(clean) if clean else math.nan)
    return result


def worst_gap(baseline: Sequence[float], candidate: Sequence[float], xs: Sequence[int]) -> tuple[float, int]:
    """``(min over xs of candidate[x] − baseline[x], the first x reaching it)`` in pp; points where either is NaN
    are skipped; ``(nan, -1)`` when none is left."""
    best = (math.nan, -1)
    for x in xs:
        gap = candidate[x] - baseline[x]
        if not math.isnan(gap) and (math.isnan(best[0]) or gap < best[0]):
            best = (gap, x)
    return best


def failed_gpu_pods(result: Any, x: int) -> dict[str, int]:
    """GPU pods of ``result`` (a :class:`~domain.simulation.replay.ReplayResult`) that failed by arrived point
    ``x`` (%), per class of :data:`GPU_CLASSES`: its failure curves' cumulative count at ``x``."""
    curves = result.failure_curves()
    return {c: curves[c][x] for c in GPU_CLASSES}


def verdict(worst: float, gain: float, *, tolerance: float, required_gain: float, full: bool) -> bool:
    """Whether a (pod file, mode) row passes: worst gap ≥ −tolerance and, for full runs, gain ≥ required."""
    if math.isnan(worst) or worst < -tolerance - 1e-9:
        return False
    return not full or (not math.isnan(gain) and gain >= required_gain - 1e-9)


# ---------------------------------------------------------------------------------------------- one run (child)
def _importable() -> None:
    """Put this checkout's ``src`` and ``bench`` first on ``sys.path`` (a spawned child starts without them)."""
    for path in (str(REPO / "bench"), str(REPO / "src")):
        if path not in sys.path:
            sys.path.insert(0, path)


def run_one(nodes_path: str, pods_path: str, policy: str, seed: int, tune: float, typical: str,
            limit: int | None) -> dict[str, Any]:
    """One replay in this process: its allocation curve (x = 0..130), GPU pods failed by x = 100 per size class
    and wall time."""
    _importable()
    from domain.simulation.replay import ReplayConfig, replay
    from trace_replay import read_nodes, read_pods

    result = replay(read_nodes(nodes_path), read_pods(pods_path), ReplayConfig(policy, seed, tune, typical=typical),
                    limit=limit)
    return {"curve": result.allocation_curve(), "wall": result.wall_seconds,
            "failed": failed_gpu_pods(result, 100)}


def cache_key(pods_path: str, policy: str, seed: int, typical: str, tune: float, limit: int | None) -> str:
    """File name (no directory) of a cached baseline run: the pod file's name, size and mtime in a short hash."""
    info = os.stat(pods_path)
    raw = f"{os.path.basename(pods_path)}|{info.st_size}|{info.st_mtime_ns}|{policy}|{seed}|{typical}|{tune}|{limit}"
    return f"{policy}-{seed}-{typical}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.json"


# ---------------------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, replay every (pod file, mode, policy, seed), print the dominance table."""
    _importable()
    from trace_replay import parse_seeds

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--candidate", default="fgd-plus")
    parser.add_argument("--baseline", default="fgd")
    parser.add_argument("--traces", default=os.environ.get("LJRK_TRACES", str(TRACES)))
    parser.add_argument("--pods", default="all", help="all (the six public files) or names, e.g. default,cpu100")
    parser.add_argument("--typical", default="trace,online")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--limit-arrivals", type=int, default=None)
    parser.add_argument("--tolerance", type=float, default=0.1, help="allowed deficit per x, pp (default 0.1)")
    parser.add_argument("--gain", type=float, default=0.5, help="required gain at x = 130, pp (default 0.5)")
    parser.add_argument("--cache", default=None, help="directory for the baseline's cached curves")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    names = list(POD_FILES) if args.pods == "all" else [n.strip() for n in args.pods.split(",") if n.strip()]
    modes = [m.strip() for m in args.typical.split(",") if m.strip()]
    seeds = parse_seeds(args.seeds)
    nodes = os.path.join(args.traces, NODES_FILE)
    for path in (nodes, *(os.path.join(args.traces, f"openb_pod_list_{n}.csv") for n in names)):
        if not os.path.isfile(path):
            parser.error(f"no such file: {path}")
    cache = Path(args.cache) if args.cache else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    full = args.limit_arrivals is None
    print(f"dominance: candidate={args.candidate} baseline={args.baseline} pods={','.join(names)} "
          f"typical={','.join(modes)} seeds={args.seeds} tune={args.tune} limit={args.limit_arrivals or 'none'} "
          f"tolerance={args.tolerance} gain={args.gain}", flush=True)
    runs: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    tasks: list[tuple[str, str, str, int]] = []
    for name in names:
        for mode in modes:
            for policy in (args.baseline, args.candidate):
                for seed in seeds:
                    key = (name, mode, policy, seed)
                    pods = os.path.join(args.traces, f"openb_pod_list_{name}.csv")
                    cached = (cache / cache_key(pods, policy, seed, mode, args.tune, args.limit_arrivals)
                              if cache is not None and policy == args.baseline else None)
                    if cached is not None and cached.is_file():
                        runs[key] = json.loads(cached.read_text())
                    else:
                        tasks.append(key)
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(args.jobs, 1), mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = {pool.submit(run_one, nodes, os.path.join(args.traces, f"openb_pod_list_{k[0]}.csv"), k[2], k[3],
                               args.tune, k[1], args.limit_arrivals): k for k in tasks}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            key = futures[future]
            runs[key] = run = future.result()
            curve = run["curve"]
            print(f"  [{done}/{len(tasks)}] {key[0]:<11} {key[1]:<6} {key[2]:<14} seed={key[3]} "
                  f"alloc@100={curve[100]:.2f} alloc@130={curve[130]:.2f} wall={run['wall']:.1f}s", flush=True)
            if cache is not None and key[2] == args.baseline:
                pods = os.path.join(args.traces, f"openb_pod_list_{key[0]}.csv")
                path = cache / cache_key(pods, key[2], key[3], key[1], args.tune, args.limit_arrivals)
                path.write_text(json.dumps(run))
    print()
    header = (f"{'pods':<11} {'mode':<6} {'worst gap':>9} {'at x':>4} {'gain130':>7}  "
              + "  ".join(f"{'x=' + str(x):>13}" for x in SHOW_XS) + "  failed@100 cand/base (s,1,2,4,8)  wall c/b  ok")
    print(header)
    print("-" * len(header))
    closing: list[str] = []
    every_ok = True
    for name in names:
        for mode in modes:
            base = mean_curve([runs[(name, mode, args.baseline, s)]["curve"] for s in seeds])
            cand = mean_curve([runs[(name, mode, args.candidate, s)]["curve"] for s in seeds])
            worst, at = worst_gap(base, cand, range(1, 131))
            gain = cand[130] - base[130]
            ok = verdict(worst, gain, tolerance=args.tolerance, required_gain=args.gain, full=full)
            every_ok &= ok
            failed = {p: [sum(runs[(name, mode, p, s)]["failed"][c] for s in seeds) for c in GPU_CLASSES]
                      for p in (args.candidate, args.baseline)}
            walls = [statistics.fmean(runs[(name, mode, p, s)]["wall"] for s in seeds)
                     for p in (args.candidate, args.baseline)]
            shown = "  ".join(f"{cand[x]:6.2f}/{base[x]:6.2f}" for x in SHOW_XS)
            fails = ",".join(map(str, failed[args.candidate])) + " / " + ",".join(map(str, failed[args.baseline]))
            print(f"{name:<11} {mode:<6} {worst:+9.3f} {at:>4} {gain:+7.3f}  {shown}  {fails:<30}  "
                  f"{walls[0]:.1f}/{walls[1]:.1f}  {'ok' if ok else 'NO'}")
            closing += [f"{name}_{mode}_worst_gap_pp={worst:+.3f}", f"{name}_{mode}_worst_x={at}",
                        f"{name}_{mode}_gain130_pp={gain:+.3f}"]
    print()
    print(f"total_wall_seconds={time.perf_counter() - started:.1f}")
    for line in closing:
        print(line)
    print(f"dominance_ok={'true' if every_ok else 'false'}")
    return 0 if every_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
