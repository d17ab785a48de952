"""``ljrk simulate`` (also ``python -m entrypoints.simulate``): argument parsing, then the container.

Exit codes: 0 success; 2 bad input — command-line syntax, unknown policy, malformed or missing trace file,
missing plot backend — reported as ONE line ``ljrk simulate: error: …`` on stderr before any replay starts;
1 an output cannot be written; 130 interrupted.

``--seeds`` grammar: comma-separated items, each a non-negative integer ``N`` or an inclusive range ``A-B``
(``A ≤ B``), e.g. ``42``, ``42,43``, ``42-51``, ``1,5-7``. ``--policy`` is a comma-separated list of registered
names. ``--scale`` (hidden) sizes the embedded synthetic workload (default 0.1 ≈ 815 pods, 126 nodes).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from domain.errors import DomainError
from domain.scheduling.framework.tiebreak import TIE_BREAKS
from domain.scheduling.registry import POLICIES, PUBLISHED_POLICIES
from domain.simulation.replay import TYPICAL_MODES
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.cli import UsageError
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CommandError, SettingsError, failing
from entrypoints._shared.flags import HIDDEN, NO_PROGRESS, cli, flag
from ports.report import PlotUnavailableError, ReportError
from ports.trace import TraceError

from .app import SimulateSettings
from .containers import SimulateContainer

__all__ = [
    "CLI",
    "DEFAULT_OUTPUT_DIR",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "parse_policies",
    "parse_seeds",
    "settings_from_args",
]

DEFAULT_OUTPUT_DIR = Path("out/simulate")
EXIT_INTERRUPTED = 130

_SEED_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"42"`` → (42,), ``"42,43"`` → (42, 43), ``"42-51"`` → (42, …, 51); order kept, duplicates dropped.
    Raises :class:`argparse.ArgumentTypeError` naming the bad item."""
    seeds: list[int] = []
    for item in text.split(","):
        match = _SEED_ITEM.fullmatch(item.strip())
        if match is None:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} in {text!r} is not a seed; use N, N,M or A-B with non-negative integers"
            )
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if high < low:
            raise argparse.ArgumentTypeError(f"range {item.strip()!r} is empty (write it low-high)")
        seeds.extend(s for s in range(low, high + 1) if s not in seeds)
    return tuple(seeds)


def parse_policies(text: str) -> tuple[str, ...]:
    """``"best-fit,fgd"`` → ("best-fit", "fgd"). Names are checked later, against the registry, before any
    run. Raises :class:`argparse.ArgumentTypeError` for an empty item."""
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty policy name")
    return names


def _tune(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _scale(text: str) -> float:
    value = _tune(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _share(text: str) -> float:
    """A fraction 0..1. Raises :class:`argparse.ArgumentTypeError` naming the value."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (0..1, e.g. 0.1)") from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"{text!r} must be within 0..1 (e.g. 0.1 = 10 % of arrivals)")
    return value


def _trace_files(args: argparse.Namespace) -> dict[str, Any]:
    """Nothing more than the flags: checks that ``--nodes`` and ``--pods`` come together (:class:`UsageError`)."""
    if (args.nodes is None) != (args.pods is None):
        given, missing = ("--nodes", "--pods") if args.pods is None else ("--pods", "--nodes")
        raise UsageError(f"{given} needs {missing} too: give both trace files, or neither for the embedded workload")
    return {}


CLI = cli(
    "ljrk simulate",
    "Replay a GPU cluster trace through scheduling policies, as the FGD paper's experiment does (USENIX ATC "
    "'23), and report GPU allocation and fragmentation. Without --nodes/--pods an embedded synthetic workload "
    "is used.",
    SimulateSettings,
    flag("--nodes", type=Path, metavar="NODES.csv", help="node list (sn,cpu_milli,memory_mib,gpu,model)"),
    flag("--pods", type=Path, metavar="PODS.csv",
         help="pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])"),
    flag("--policy", setting="policies", type=parse_policies, default=PUBLISHED_POLICIES, metavar="NAME[,NAME…]",
         help=f"policies to run (default: {','.join(PUBLISHED_POLICIES)}; known: {', '.join(POLICIES)})"),
    flag("--seeds", type=parse_seeds, default=(42,), metavar="SEEDS", help="seeds: 42, 42,43 or 42-51 (default: 42)"),
    flag("--tune", type=_tune, default=1.3,
         help="arrived GPU request target, fraction of cluster GPU capacity (default: 1.3)"),
    flag("--tie-break", choices=TIE_BREAKS, default="fixed-order",
         help="rule between equally scored nodes (default: fixed-order, as published)"),
    flag("--typical", choices=TYPICAL_MODES, default="trace",
         help="typical pods of FGD-family policies: trace = the whole pod file (as published), online = only the "
         "pods arrived so far, as the production scheduler learns them (default: trace)"),
    flag("--high-priority-share", setting="high_share", type=_share, default=0.0, metavar="FRACTION",
         help="share of arrivals that are high priority and may preempt low-priority pods when they fit nowhere, "
         "0..1 (default: 0, no priorities, as published)"),
    flag("--topology", choices=list(MACHINE_NAMES), default="none",
         help="give every node with an even GPU count this simulated machine's topology (NVLink, PCIe, NUMA) and "
         "report how multi-GPU pods were connected and how many NVLink islands stayed whole (default: none, as "
         "published)"),
    flag("--topology-blind", setting="topology_known", action="store_false",
         help="with --topology: do not tell the scheduler the topology (GPUs by index, the published rule); the "
         "figures are still judged against the machine"),
    flag("--gpu-topology-first", setting="topology_first", action="store_true",
         help="with --topology: pods of 2 or more whole GPUs go only to the nodes where their GPUs are best "
         "connected, and the policy chooses among those (as ljrk scheduler --gpu-topology-first)"),
    flag("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR, metavar="DIR",
         help=f"where summary.json, curves.csv and failures.csv go (default: {DEFAULT_OUTPUT_DIR})"),
    flag("--plot", type=Path, metavar="FILE.png",
         help="also draw the mean allocation curve per policy (needs lj-runtimekit[plot])"),
    NO_PROGRESS,
    flag("--scale", type=_scale, default=0.1, help=HIDDEN),
    derived=_trace_files,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""


build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk simulate") -> int:
    """Run ``simulate`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code (module docstring).
    ``--help`` prints help and returns 0."""
    return CLI.main(argv, prog, _run, errors=(DomainError,))


def _run(settings: SimulateSettings) -> int:
    container = SimulateContainer(settings=settings)
    # PlotUnavailableError is a ReportError: the innermost mapping (bad input) must see it first
    with failing(ReportError, code=EXIT_FAILED), \
            failing(TraceError, SettingsError, DomainError, PlotUnavailableError, code=EXIT_USAGE):
        try:
            container.app().run()
        except KeyboardInterrupt:
            raise CommandError(EXIT_INTERRUPTED, "interrupted") from None
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
