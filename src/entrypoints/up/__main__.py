"""``ljrk up`` (also ``python -m entrypoints.up``): the whole stack on one machine, a workload, a report.

``ljrk up [--nodes N] [--gpus-per-node 2x16Gi:A100] [--workload synthetic|PODS.csv] [--kubeconfig FILE]
[--pods N] [--duration SECONDS | --speedup X] [--seed N] [--policy NAME] [--topology MACHINE] [--dra] [--output-dir DIR]
[--no-progress] [--hold]`` (hidden: ``--ready-timeout``, ``--settle-timeout``, ``--work-dir``, ``--log-level``).

Starts ``N`` simulated nodes — each with the reference Runtime over simulated GPUs, the device plugin, the exporter
and a kubelet emulator — plus the scheduler (standalone loop), the controller and its toggle Jobs, all talking over
their real protocols (gRPC on unix sockets, HTTP), on the in-memory cluster or the API server of ``--kubeconfig``;
submits the workload on its (compressed) timeline; stops arrivals and freezes departures; checks that the
scheduler's ledger, the Runtimes' records and the exporters' ``/metrics`` agree; prints the report and writes
``DIR/report.json`` (logs: ``DIR/ljrk-up.log``); stops everything (``entrypoints.up.app``).

Exit codes: 0 the components agree; 1 the stack could not run (a component did not start, the cluster is
unreachable, the report cannot be written… — one line on stderr); 2 bad command line, workload file or GPU spec;
3 the report lists disagreements; 130 stopped by SIGINT/SIGTERM before the report.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from domain.errors import DomainError
from domain.scheduling.registry import POLICIES
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.command import EXIT_FAILED, EXIT_USAGE, failing, serve, shutting_down, start
from entrypoints._shared.flags import HIDDEN, KUBECONFIG, LOG_LEVEL, NO_PROGRESS, cli, flag
from ports.trace import TraceError
from services.scheduler.policies import DEFAULT_POLICY

from .app import UpError, UpSettings
from .containers import UpContainer
from .simnode import StackError
from .workload import SYNTHETIC, WorkloadError


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type: a number of ``kind`` that must be > 0."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value

    return parse


CLI = cli(
    "ljrk up",
    "Run the whole GPU-sharing stack on this machine: simulated nodes (Runtime, device plugin, exporter, "
    "kubelet emulator), the scheduler, the controller and its Jobs; submit a workload; report placements and "
    "whether ledger, Runtimes and exporters agree.",
    UpSettings,
    flag("--nodes", type=_positive(int), default=4, metavar="N", help="simulated nodes (default: 4)"),
    flag("--gpus-per-node", default="2x16Gi:A100", metavar="SPEC",
         help="simulated GPUs of every node, [COUNTx]MEMORY[:MODEL],… (default: 2x16Gi:A100)"),
    flag("--workload", default=SYNTHETIC, metavar="synthetic|PODS.csv",
         help="the embedded synthetic pods (default) or a pod list in the openb trace format "
         "(name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec][,creation_time,deletion_time])"),
    KUBECONFIG.but(help="use this API server instead of the in-memory cluster (nodes and pods are created there and "
                   "deleted at the end)"),
    flag("--pods", type=_positive(int), metavar="N",
         help="pods to submit (default: 30 per node; a file gives its first N by creation time)"),
    flag("--duration", setting="duration_s", group="timing", type=_positive(float), default=10.0, metavar="SECONDS",
         help="wall seconds over which the pods arrive (default: 10); durations shrink alike"),
    flag("--speedup", group="timing", type=_positive(float), metavar="X",
         help="trace seconds per wall second, instead of --duration"),
    flag("--seed", type=int, default=42, help="seed of the synthetic workload (default: 42)"),
    flag("--policy", default=DEFAULT_POLICY, metavar="NAME",
         help=f"the scheduler's default policy (default: {DEFAULT_POLICY}; known: {', '.join(POLICIES)})"),
    flag("--topology", choices=list(MACHINE_NAMES), default="none",
         help="the simulated machine every node's Runtime reports (NVLink, PCIe, NUMA; an even GPU count); the "
         "scheduler gives multi-GPU pods the best-connected GPUs (default: none)"),
    flag("--dra", action="store_true",
         help="the nodes run the DRA driver instead of the device plugin, and each GPU pod asks for its GPUs "
         "through a ResourceClaim that the scheduler allocates (in-memory cluster only)"),
    flag("--output-dir", type=Path, default=Path("out/up"), metavar="DIR",
         help="where report.json and ljrk-up.log go (default: out/up)"),
    NO_PROGRESS,
    flag("--hold", action="store_true",
         help="keep the stack running after the report (metrics endpoints stay up) until Ctrl-C"),
    flag("--ready-timeout", setting="ready_timeout_s", type=_positive(float), default=60.0, help=HIDDEN),
    flag("--settle-timeout", setting="settle_timeout_s", type=_positive(float), default=20.0, help=HIDDEN),
    flag("--work-dir", type=Path, default=Path("/tmp"), help=HIDDEN),
    LOG_LEVEL.but(help=HIDDEN),
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk up", stop: threading.Event | None = None) -> int:
    """Run once; returns the exit code (module docstring). ``stop`` replaces the signal handlers (tests)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop), errors=(DomainError,))


def _run(settings: UpSettings, stop: threading.Event | None) -> int:
    container = UpContainer(settings=settings)
    with shutting_down(container):
        with failing(TraceError, WorkloadError, StackError, DomainError, code=EXIT_USAGE):
            container.workload()
        app = start(container, container.app)  # log folder, kubeconfig, temp folder: one line, not a traceback
        with failing(UpError, StackError, code=EXIT_FAILED):
            return serve(app, stop)


if __name__ == "__main__":
    sys.exit(main())
