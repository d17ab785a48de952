"""``ljrk protocol``: compare the protocol constants of ConfigMaps, rendered manifests or ``protocol.yaml`` files.

``ljrk protocol check FILE…`` loads every protocol found in the files (``-`` reads standard input, e.g.
``deploy/deploy-all.sh render | ljrk protocol check -``): a bare ``protocol.yaml``, or each ConfigMap whose data
has a ``protocol.yaml`` key (``adapters.protocolfile.find_protocols``). It prints each location with its
fingerprint, then every constant whose value differs between them, as ``KEY: LOCATION=VALUE; …``. Components
that load different protocols disagree on resource names or annotation keys, so a platform engineer runs this
before an upgrade; CI runs it on the rendered manifests.

``ljrk protocol show [--protocol FILE]`` prints the fingerprint and the full YAML of one protocol (the embedded
default without ``--protocol``): the value components publish as ``lj_runtimekit_protocol_info``.

Exit codes: 0 all protocols agree (at least one found); 1 some constant differs; 2 bad command line, unreadable
or invalid file, or no protocol found.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from adapters.protocolfile import ProtocolFileError, dump_protocol, find_protocols, load_protocol, protocol_items
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.cli import Parser as _Parser
from entrypoints._shared.cli import UsageError, one_line

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2


def build_parser(prog: str = "ljrk protocol") -> argparse.ArgumentParser:
    """The ``protocol`` parser with subcommands ``check`` and ``show`` (errors raise :class:`UsageError`)."""
    parser = _Parser(prog=prog, description="Compare or show LJ RuntimeKit protocol constants.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    check = commands.add_parser("check", help="compare the protocols in FILEs; exit 1 when any constant differs")
    check.add_argument("files", nargs="+", metavar="FILE", help="protocol.yaml, ConfigMap or manifests; - = stdin")
    show = commands.add_parser("show", help="print one protocol's fingerprint and YAML")
    show.add_argument("--protocol", type=Path, metavar="FILE", help="protocol.yaml (default: the embedded one)")
    return parser


def differences(found: Sequence[tuple[str, ProtocolConstants]]) -> dict[str, dict[str, object]]:
    """``{key: {location: value}}`` for every constant whose value is not the same at all ``found`` locations
    (keys as in ``protocol.yaml``, dotted)."""
    flat = [(where, protocol_items(protocol)) for where, protocol in found]
    keys = sorted({key for _, items in flat for key in items})
    result: dict[str, dict[str, object]] = {}
    for key in keys:
        values = {where: items.get(key) for where, items in flat}
        if len({repr(v) for v in values.values()}) > 1:
            result[key] = values
    return result


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


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk protocol") -> int:
    """Entry point; returns the exit code (module docstring)."""
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else EXIT_OK
    except UsageError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "check":
            return check(args.files)
        protocol = load_protocol(args.protocol)
    except ProtocolFileError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    print(f"# fingerprint: {protocol.fingerprint()}")
    print(dump_protocol(protocol), end="")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
