"""MIG replay: requests placed under static pre-partitioned layouts versus dynamic placement by the MIG plugin.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/mig_replay.py [--nodes 4] [--gpus 8] [--requests 2000] [--load 1.0] [--seeds 1-5]
        [--layouts all-balanced,mixed,all-1g] [--models A100-80GB,H100-80GB]

Workload, cluster and modes: :mod:`domain.scheduling.mig.replay` (seeded synthetic single-instance pods, Poisson
arrivals, exponential stays, offered load as a fraction of compute slices; a pod that does not fit is rejected).
Printed: one row per seed and mode (placed, rejected, placed %, placed compute slices as % of the requested ones, and
dynamic's placed count over the mode's), the per-profile rejections of the first seed, then ``key=value`` lines with the
means over seeds.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping

from domain.mig.profiles import resolve_profile
from domain.scheduling.mig.replay import STATIC_LAYOUTS, MigReplayConfig, MigReplayResult, run_replay


def parse_seeds(spec: str) -> list[int]:
    """``"1-5"`` → ``[1..5]``; ``"1,3-4"`` → ``[1, 3, 4]``; duplicates dropped. Raises ValueError."""
    seeds: list[int] = []
    for part in spec.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"seeds={spec!r}: expected N, N-M or a comma list of them")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"seeds={spec!r}: range {part!r} is empty")
        seeds.extend(s for s in range(first, last + 1) if s not in seeds)
    return seeds


def slice_share(result: MigReplayResult, slices: Mapping[str, int]) -> float:
    """Placed compute slices over requested compute slices (0..1); ``slices``: profile name → compute slices."""
    placed = sum(slices[name] * p for name, p, _ in result.per_profile)
    asked = sum(slices[name] * (p + r) for name, p, r in result.per_profile)
    return placed / asked if asked else 0.0


def table(results: list[MigReplayResult], slices: Mapping[str, int]) -> list[str]:
    """Rows ``seed  mode  placed  rejected  placed%  slices%  dyn/mode`` (``slices%``: :func:`slice_share`; the
    ratio is dynamic's placed count over this mode's, for the same seed)."""
    dynamic = {r.seed: r.placed for r in results if r.mode == "dynamic"}
    lines = [f"{'seed':>5}  {'mode':<20} {'placed':>7} {'rejected':>8} {'placed%':>8} {'slices%':>8} {'dyn/mode':>8}"]
    for r in results:
        ratio = f"{dynamic[r.seed] / r.placed:.3f}" if r.seed in dynamic and r.placed else "n/a"
        share = 100 * slice_share(r, slices)
        lines.append(
            f"{r.seed:>5}  {r.mode:<20} {r.placed:>7} {r.rejected:>8} {100 * r.placed_ratio:>7.1f}% {share:>7.1f}%"
            f" {ratio:>8}"
        )
    return lines


def summary(results: list[MigReplayResult]) -> list[str]:
    """``mig_<mode>_placed_mean=…`` and ``mig_<mode>_placed_ratio_mean=…`` per mode, plus
    ``mig_dynamic_over_<layout>_mean=…`` (mean over seeds of dynamic placed / static placed)."""
    modes = list(dict.fromkeys(r.mode for r in results))
    dynamic = {r.seed: r.placed for r in results if r.mode == "dynamic"}
    lines = []
    for mode in modes:
        rows = [r for r in results if r.mode == mode]
        key = mode.replace("static:", "static_").replace("-", "_")
        lines.append(f"mig_{key}_placed_mean={statistics.fmean(r.placed for r in rows):.1f}")
        lines.append(f"mig_{key}_placed_ratio_mean={statistics.fmean(r.placed_ratio for r in rows):.4f}")
        if mode != "dynamic" and dynamic:
            gains = [dynamic[r.seed] / r.placed for r in rows if r.seed in dynamic and r.placed]
            if gains:
                lines.append(f"mig_dynamic_over_{key.removeprefix('static_')}_mean={statistics.fmean(gains):.3f}")
    return lines


def main() -> None:
    """Run every seed in every mode and print the figures (module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--layouts", default=",".join(STATIC_LAYOUTS))
    parser.add_argument("--models", default="A100-80GB,H100-80GB")
    args = parser.parse_args()
    config = MigReplayConfig(
        nodes=args.nodes,
        gpus_per_node=args.gpus,
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        requests=args.requests,
        load=args.load,
    )
    modes = ["dynamic", *(f"static:{name.strip()}" for name in args.layouts.split(",") if name.strip())]
    results = [run_replay(config, seed=seed, mode=mode) for seed in parse_seeds(args.seeds) for mode in modes]
    print(
        f"MIG replay: {config.nodes} nodes x {config.gpus_per_node} GPUs ({', '.join(config.models)}), "
        f"{config.requests} requests, load {config.load:g}, mix "
        + ", ".join(f"{name} {weight:g}" for name, weight in config.mix)
    )
    slices = {name: resolve_profile(config.models[0], name).compute_slices for name, _ in config.mix}
    for line in table(results, slices):
        print(line)
    first = results[0].seed
    print(f"rejected per profile, seed {first}:")
    for r in results:
        if r.seed == first:
            print(f"  {r.mode:<20} " + "  ".join(f"{name}={rej}" for name, _, rej in r.per_profile))
    for line in summary(results):
        print(line)


if __name__ == "__main__":
    main()
