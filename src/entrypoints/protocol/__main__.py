"""``ljrk protocol``: compare the protocol constants of ConfigMaps, rendered manifests or ``protocol.yaml`` files,
or of a live cluster's ConfigMaps and running components.

``ljrk protocol check FILE…`` loads every protocol found in the files (``-`` reads standard input, e.g.
``deploy/deploy-all.sh render | ljrk protocol check -``): a bare ``protocol.yaml``, or each ConfigMap whose data
has a ``protocol.yaml`` key (``adapters.protocolfile.find_protocols``). It prints each location with its
fingerprint, then every constant whose value differs between them, as ``KEY: LOCATION=VALUE; …``. Components
that load different protocols disagree on resource names or annotation keys, so a platform engineer runs this
before an upgrade; CI runs it on the rendered manifests.

``ljrk protocol check --kubeconfig FILE [--namespace NS] [--context C]`` (no FILE arguments) reads a live
cluster instead (:mod:`.live`): the protocol ConfigMaps of NS (default ``kube-system``), and the fingerprint each
running component publishes (device plugin and exporter on their Node, scheduler and controller on their Pod),
naming every instance that runs another protocol than its own component's ConfigMap (not yet restarted) with the
command that restarts it.

``ljrk protocol show [--protocol FILE]`` prints the fingerprint and the full YAML of one protocol (the embedded
default without ``--protocol``): the value components publish as ``lj_runtimekit_protocol_info``.

Exit codes: 0 all protocols agree (at least one found; with ``--kubeconfig`` every running instance too); 1 some
constant differs, or an instance runs another protocol, publishes none, or has no ConfigMap; 2 bad command line,
unreadable or invalid file or ConfigMap, no protocol found, or a kubeconfig that does not load or an API server
that cannot be reached or refuses (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from adapters.protocolfile import ProtocolFileError, dump_protocol, find_protocols, load_protocol
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.cli import Parser as _Parser
from entrypoints._shared.cli import UsageError
from entrypoints._shared.command import EXIT_OK, EXIT_USAGE, command, failing
from ports.cluster import ClusterError

from .compare import differences
from .live import KubeconfigError, check_cluster, open_cluster

__all__ = ["EXIT_DIFFERENT", "EXIT_OK", "EXIT_USAGE", "build_parser", "check", "differences", "main"]

EXIT_DIFFERENT = 1
DEFAULT_NAMESPACE = "kube-system"
"""Namespace of the live check when ``--namespace`` is not given (the manifests' namespace)."""


def build_parser(prog: str = "ljrk protocol") -> argparse.ArgumentParser:
    """The ``protocol`` parser with subcommands ``check`` and ``show`` (errors raise :class:`UsageError`)."""
    parser = _Parser(prog=prog, description="Compare or show LJ RuntimeKit protocol constants.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = commands.add_parser("check", help="compare the protocols in FILEs, or of a live cluster (--kubeconfig); "
                                "exit 1 when any differs")
    check.add_argument("files", nargs="*", metavar="FILE", help="protocol.yaml, ConfigMap or manifests; - = stdin")
    check.add_argument("--kubeconfig", metavar="FILE",
                       help="check a live cluster: its ConfigMaps and the fingerprints its components publish")
    check.add_argument("--namespace", metavar="NS", help="with --kubeconfig: the stack's namespace (default: "
                       f"{DEFAULT_NAMESPACE})")
    check.add_argument("--context", metavar="C", help="with --kubeconfig: the kubeconfig context (default: current)")
    show = commands.add_parser("show", help="print one protocol's fingerprint and YAML")
    show.add_argument("--protocol", type=Path, metavar="FILE", help="protocol.yaml (default: the embedded one)")
    return parser


def _read(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8")
    except OSError as error:
        raise ProtocolFileError(f"{name}: cannot read: {error.strerror or error}") from error


def check(files: Sequence[str]) -> int:
    """Run ``check`` (module docstring); prints to stdout, returns the exit code. Raises
    :class:`ProtocolFileError` for unreadable or invalid input and when no protocol is found."""
    found: list[tuple[str, ProtocolConstants]] = []
    for name in files:
        found += find_protocols(_read(name), source="<stdin>" if name == "-" else name)
    if not found:
        raise ProtocolFileError(f"no protocol found in {', '.join(files)} (no protocol.yaml ConfigMap data)")
    for where, protocol in found:
        print(f"{protocol.fingerprint()}  {where}")
    differing = differences(found)
    if not differing:
        print(f"protocol check: {len(found)} protocol(s) agree")
        return EXIT_OK
    for key, values in differing.items():
        print(f"{key}: " + "; ".join(f"{where}={value!r}" for where, value in values.items()))
    print(f"protocol check: {len(differing)} constant(s) differ across {len(found)} protocol(s)")
    return EXIT_DIFFERENT


def _check(args: argparse.Namespace) -> int:
    """``check`` in the mode its arguments choose. Raises UsageError for FILEs with ``--kubeconfig``, neither,
    or ``--namespace``/``--context`` without ``--kubeconfig``; what :func:`check` and
    :func:`~.live.check_cluster` raise."""
    if args.kubeconfig is None:
        if args.namespace is not None or args.context is not None:
            raise UsageError("--namespace and --context need --kubeconfig")
        if not args.files:
            raise UsageError("give FILEs to compare, or --kubeconfig FILE to check a live cluster")
        return check(args.files)
    if args.files:
        raise UsageError(f"give FILEs or --kubeconfig, not both (FILEs: {' '.join(args.files)})")
    namespace = args.namespace or DEFAULT_NAMESPACE
    with open_cluster(args.kubeconfig, args.context) as cluster:
        return check_cluster(cluster, namespace)


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk protocol") -> int:
    """Entry point; returns the exit code (module docstring)."""
    return command(prog, argv, parser=build_parser(prog), settings=lambda args: args, run=_run)


def _run(args: argparse.Namespace) -> int:
    with failing(UsageError, ProtocolFileError, KubeconfigError, ClusterError, code=EXIT_USAGE):
        if args.command == "check":
            return _check(args)
        protocol = load_protocol(args.protocol)
    print(f"# fingerprint: {protocol.fingerprint()}")
    print(dump_protocol(protocol), end="")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
