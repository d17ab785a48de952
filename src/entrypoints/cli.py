"""``ljrk``: one console script, one subcommand per entrypoint component.

``ljrk COMMAND [ARGS…]`` hands ``ARGS`` untouched to that component's own ``main(argv, prog=…)``, so each
entrypoint keeps its own parser, container and exit codes, and is imported only when its command runs (a
scheduler's gRPC stack need not load for ``ljrk simulate``). To add a component (``scheduler``,
``device-plugin``, ``exporter``, ``controller``, ``job-agent``, ``runtime``), register it in
:data:`COMMANDS` with :func:`_component`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

import attrs

from domain.runtime.features import CONTRACT_VERSION, OLDEST_RUNTIME

RUNTIME_GRPC_PACKAGE = "ljrk.runtime.v1"
"""The protobuf package of the Runtime contract (``proto/ljrk/runtime/v1/runtime.proto``)."""

CommandMain = Callable[[Sequence[str], str], int]
"""``(argv, prog) -> exit code``."""


@attrs.frozen
class Command:
    """A subcommand: one-line ``summary`` for ``ljrk --help`` and the loader-runner ``run``."""

    summary: str
    run: CommandMain


def _component(name: str) -> CommandMain:
    """The runner of ``entrypoints.<name>``: imports its ``__main__`` only when the command runs, then calls
    its ``main(argv, prog=prog)``."""

    def run(argv: Sequence[str], prog: str) -> int:
        main: Callable[..., int] = importlib.import_module(f"entrypoints.{name}.__main__").main
        return main(argv, prog=prog)

    return run


COMMANDS: dict[str, Command] = {
    "up": Command("run the whole stack on this machine (simulated nodes), submit a workload, check agreement",
                  _component("up")),
    "inspect": Command("per node and GPU: allocation, holders, MIG instances and problems, from the API (and "
                       "the scheduler)", _component("inspect")),
    "simulate": Command("replay a GPU cluster trace through the scheduling policies (FGD paper experiment)",
                        _component("simulate")),
    "scheduler": Command("GPU-sharing scheduler: kube-scheduler extender or standalone loop", _component("scheduler")),
    "runtime": Command("reference node Runtime: the Runtime gRPC contract over NVML or simulated GPUs",
                       _component("runtime")),
    "device-plugin": Command("kubelet device plugin: GPU, core and memory resources allocated from the plan",
                             _component("device_plugin")),
    "dra-driver": Command("DRA driver (node): the node's GPUs as resource.k8s.io/v1 ResourceSlices from the Runtime",
                          _component("dra_driver")),
    "claim-quota": Command("validating webhook: per-namespace quotas on the cores and memory DRA claims consume",
                           _component("claim_quota")),
    "claim-migrate": Command("mutating webhook: pods asking the classic GPU resources get DRA claims instead",
                             _component("claim_migrate")),
    "exporter": Command("Prometheus exporter: per-GPU, per-container and per-node metrics from the node Runtime",
                        _component("exporter")),
    "job-agent": Command("enable or disable the node Runtime from a Job's pod, verified by GetStatus",
                         _component("job_agent")),
    "protocol": Command("check that protocol ConfigMaps (or rendered manifests) agree; show a protocol",
                        _component("protocol")),
    "controller": Command("node controller: enable/disable the node Runtime through Jobs from a Node label",
                          _component("controller")),
}
"""Subcommand name → :class:`Command`, in ``--help`` order."""


def _package_version() -> str:
    try:
        return importlib.metadata.version("lj-runtimekit")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def version_text(package_version: str | None = None) -> str:
    """``ljrk --version``: the component version (``package_version``, default the installed distribution's),
    then the Runtime contract version it speaks and follows (:data:`CONTRACT_VERSION`), with the gRPC package and
    the oldest node Runtime it works with. Two lines, no trailing newline."""
    release = _package_version() if package_version is None else package_version
    return (f"ljrk {release}\n"
            f"Runtime contract {CONTRACT_VERSION} (gRPC {RUNTIME_GRPC_PACKAGE}): this release follows Runtime "
            f"{CONTRACT_VERSION} and works with a node Runtime >= {OLDEST_RUNTIME}")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: ``--version`` and ``COMMAND ARGS…``."""
    width = max(len(name) for name in COMMANDS)
    epilog = "commands:\n" + "\n".join(f"  {name.ljust(width)}  {c.summary}" for name, c in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="ljrk", description="LJ RuntimeKit: GPU sharing for Kubernetes.", epilog=epilog + "\n\n"
        "Run 'ljrk COMMAND --help' for a command's options.", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("command", choices=COMMANDS, metavar="COMMAND", help=f"one of: {', '.join(COMMANDS)}")
    rest = parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    rest.required = False  # Python 3.11 marks a REMAINDER positional required; "ljrk" alone should name COMMAND only
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to a subcommand; returns its exit code. argparse exits
    with 2 for an unknown command and 0 for ``--help``/``--version``."""
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command].run(args.args, f"ljrk {args.command}")


if __name__ == "__main__":
    sys.exit(main())
