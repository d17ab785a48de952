"""Whole-stack benchmark: wall time and pods/s of one ``ljrk up`` run (default: 20 nodes, 2,000 pods).

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/up_run.py [--nodes 20] [--pods 2000] [--duration 20] [--gpus-per-node 2x16Gi:A100]
        [--output-dir out/bench-up] [--record FILE]

Runs the real command, ``ljrk up --nodes N --pods P --duration D --no-progress`` (in-memory cluster; every
component in one process, each node's Runtime, device plugin, exporter and kubelet emulator on their own unix
sockets), as a subprocess, and reads its ``report.json``. Measured:

* **command wall time**: the whole process, from start to exit (interpreter start, stack start, arrivals, settle,
  agreement check, report, clean shutdown);
* **placement rate**: pods placed (bound, then admitted or rejected by the kubelet emulator) per second from the
  first arrival to the quiescent point (arrivals + settle) — the stack's throughput when ``--duration`` is short
  enough to saturate it;
* the pods' fate (placed, succeeded, running, failed, pending), the agreement verdict, and the child's peak RSS.

The last lines are ``wall_seconds=<float>``, ``pods_per_second=<float>`` (placement rate), ``placed=<int>``,
``disagreements=<int>`` and ``peak_rss_mib=<float>``; ``--record FILE`` writes them as this invocation's row of the
performance table (:func:`adapters.reportfiles.results_table.record_bench_run`). Exits with the command's exit code.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from adapters.reportfiles.results_table import RunStart, record_bench_run

REPO = Path(__file__).resolve().parents[1]


def ljrk() -> str:
    """The ``ljrk`` console script next to this interpreter (else on PATH). Raises SystemExit when absent."""
    found = shutil.which("ljrk", path=str(Path(sys.executable).parent)) or shutil.which("ljrk")
    if found is None:
        raise SystemExit("bench/up_run.py: the ljrk console script is not installed (make run installs it)")
    return found


def main(argv: list[str] | None = None) -> int:
    """Run once and print the figures (module docstring); returns ``ljrk up``'s exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=20.0, help="arrival window, wall seconds")
    parser.add_argument("--gpus-per-node", default="2x16Gi:A100")
    parser.add_argument("--output-dir", type=Path, default=REPO / "out" / "bench-up")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()
    command = [ljrk(), "up", "--nodes", str(args.nodes), "--pods", str(args.pods), "--duration", str(args.duration),
               "--gpus-per-node", args.gpus_per_node, "--no-progress", "--output-dir", str(args.output_dir)]
    print("$ " + " ".join(command[1:]), flush=True)
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.monotonic() - began
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode not in (0, 3):
        print(done.stdout + done.stderr, file=sys.stderr)
        return done.returncode
    report = json.loads((args.output_dir / "report.json").read_text())
    timing, pods, agreement = report["timing"], report["pods"], report["agreement"]
    print(f"nodes={args.nodes} gpus/node={args.gpus_per_node} pods={pods['submitted']} "
          f"arrival window={args.duration:g} s (speedup {report['settings']['speedup']}x)")
    print(f"startup {timing['startup_s']:.2f} s, arrivals {timing['arrivals_s']:.2f} s, settle "
          f"{timing['settle_s']:.2f} s, report at {timing['total_s']:.2f} s; command wall time {wall:.2f} s")
    print(f"placed {pods['placed']} (succeeded {pods['succeeded']}, running {pods['running']}, failed "
          f"{pods['failed']} {pods['failed_by_reason']}), pending {pods['pending']}")
    print(f"placement rate {timing['pods_per_s']:.1f} pods/s over arrivals + settle; "
          f"{pods['submitted'] / wall:.1f} submitted pods per second of command wall time")
    print(f"agreement: settled={agreement['settled']}, {len(agreement['disagreements'])} disagreement(s), "
          f"{agreement['gpus_compared']} GPUs and {agreement['containers_compared']} container grants compared")
    print(f"wall_seconds={wall:.2f}")
    print(f"pods_per_second={timing['pods_per_s']:.1f}")
    print(f"placed={pods['placed']}")
    print(f"disagreements={len(agreement['disagreements'])}")
    print(f"peak_rss_mib={peak_mib:.0f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"command {wall:.1f} s (startup {timing['startup_s']:.1f} s, arrivals "
                         f"{timing['arrivals_s']:.1f} s, settle {timing['settle_s']:.1f} s); {pods['placed']:,} of "
                         f"{pods['submitted']:,} pods placed, {timing['pods_per_s']:.1f} pods/s; "
                         f"{len(agreement['disagreements'])} disagreements; peak RSS {peak_mib:.0f} MiB", start)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
