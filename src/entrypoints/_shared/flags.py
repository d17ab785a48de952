"""Command-line flags as data: each component writes its command line once, as a :class:`Cli` (:func:`cli`) — its
program name, ``--help`` description, settings class and table of :class:`Flag` — which builds the parser
(:func:`build_parser`), the settings of the parsed arguments (:func:`settings_kwargs`) and runs ``main``.

A :class:`Flag` holds what ``argparse.ArgumentParser.add_argument`` takes (``options``), the settings field it
fills (``setting``; by default the flag's ``dest``, ``None`` for flags the component reads itself), an optional
conversion from the parsed value to the setting (``convert``), an environment variable whose value, read when
the parser is built, replaces the default (``env``), and the mutually exclusive ``group`` it belongs to. The table's
order is the order of ``--help``. Flags several components share with the same meaning are defined here once.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from .cli import Parser
from .command import command

S = TypeVar("S")

HIDDEN = argparse.SUPPRESS
"""``help`` of a development flag: accepted, left out of ``--help``."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@attrs.frozen
class Flag:
    """One command-line flag (module docstring). ``names``: ``("--node-name",)``, ``("-o", "--output")`` or a
    positional ``("node",)``. Build it with :func:`flag`."""

    names: tuple[str, ...]
    options: Mapping[str, Any]
    setting: str | None
    convert: Callable[[Any], Any] | None = None
    env: str | None = None
    group: str | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse stores the value under."""
        return _dest(self.names, self.options)

    def but(self, **options: Any) -> Flag:
        """This flag with some ``add_argument`` options replaced (say, another ``help``)."""
        return attrs.evolve(self, options={**self.options, **options})


def _dest(names: Sequence[str], options: Mapping[str, Any]) -> str:
    """argparse's ``dest``: the given one, else the first long name's (``--node-name``: ``node_name``), else the
    positional's name."""
    if "dest" in options:
        return str(options["dest"])
    long = next((n for n in names if n.startswith("--")), names[0])
    return long.lstrip("-").replace("-", "_")


_UNSET: Any = object()


def flag(*names: str, setting: str | None = _UNSET, convert: Callable[[Any], Any] | None = None,
         env: str | None = None, group: str | None = None, **options: Any) -> Flag:
    """A :class:`Flag`: ``names`` and ``options`` as ``add_argument`` takes them; ``setting`` (default: the
    flag's dest; ``None``: no setting), ``convert``, ``env`` and ``group`` as the module docstring says."""
    return Flag(names=names, options=options, setting=_dest(names, options) if setting is _UNSET else setting,
                convert=convert, env=env, group=group)


class Repeatable(argparse.Action):
    """``action=Repeatable``: a flag given several times, each value one or a comma-separated list of items; the
    parsed value is the tuple of every item in order. The first occurrence replaces the default (say, an ``env``
    flag's variable: the command line wins over the environment, as NVIDIA's device plugin flags do), later ones
    add to it. Without the flag the value is the default as it was given (None or the variable's text)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest, None)
        given = current if isinstance(current, tuple) else ()
        setattr(namespace, self.dest, (*given, *(item.strip() for item in str(values).split(","))))


def items(value: str | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A :class:`Repeatable` flag's value as its items: the default's text split at commas, or the parsed tuple
    (None stays None)."""
    if value is None or isinstance(value, tuple):
        return value
    return tuple(item.strip() for item in value.split(","))


def hidden_floats(**defaults: float) -> tuple[Flag, ...]:
    """Hidden float flags, one per keyword (``lease_duration=15.0`` is ``--lease-duration``, default 15)."""
    return tuple(flag(f"--{name.replace('_', '-')}", type=float, default=default, help=HIDDEN)
                 for name, default in defaults.items())


def build_parser(prog: str, description: str, flags: Iterable[Flag]) -> argparse.ArgumentParser:
    """A :class:`~.cli.Parser` (errors raise :class:`~.cli.UsageError`) with ``flags`` in table order; an
    ``env`` flag's default is the variable's value when it is set, read now."""
    parser = Parser(prog=prog, description=description)
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for each in flags:
        options = dict(each.options)
        if each.env is not None:
            options["default"] = os.environ.get(each.env, options.get("default"))
        target: argparse._ActionsContainer = parser
        if each.group is not None:
            if each.group not in groups:
                groups[each.group] = parser.add_mutually_exclusive_group()
            target = groups[each.group]
        target.add_argument(*each.names, **options)
    return parser


def settings_kwargs(flags: Iterable[Flag], args: argparse.Namespace) -> dict[str, Any]:
    """Settings field → value of every flag with a ``setting``, through its ``convert``."""
    kwargs: dict[str, Any] = {}
    for each in flags:
        if each.setting is not None:
            value = getattr(args, each.dest)
            kwargs[each.setting] = value if each.convert is None else each.convert(value)
    return kwargs


def _none(args: argparse.Namespace) -> Mapping[str, Any]:
    return {}


@attrs.frozen
class Cli(Generic[S]):
    """A component's command line: ``prog`` (the default program name), the ``description`` its ``--help``
    opens with, the ``settings`` class its ``flags`` fill, and ``derived``, the settings no single flag holds
    (say, host and port from ``--listen``; it may raise :class:`~.cli.UsageError`)."""

    prog: str
    description: str
    settings: Callable[..., S]
    flags: tuple[Flag, ...]
    derived: Callable[[argparse.Namespace], Mapping[str, Any]] = _none

    def parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        """The argument parser (its errors raise :class:`~.cli.UsageError`)."""
        return build_parser(self.prog if prog is None else prog, self.description, self.flags)

    def settings_from(self, args: argparse.Namespace) -> S:
        """The settings of parsed ``args``; the settings class validates them (it raises ``SettingsError``)."""
        return self.settings(**settings_kwargs(self.flags, args), **self.derived(args))

    def main(self, argv: Sequence[str] | None, prog: str | None, run: Callable[[S], int],
             errors: tuple[type[BaseException], ...] = ()) -> int:
        """Parse ``argv`` into settings and ``run`` them: :func:`~.command.command` (``errors``: its bad-input
        exceptions); returns the exit code."""
        name = self.prog if prog is None else prog
        return command(name, argv, parser=self.parser(name), settings=self.settings_from, run=run, errors=errors)


def cli(prog: str, description: str, settings: Callable[..., S], *flags: Flag,
        derived: Callable[[argparse.Namespace], Mapping[str, Any]] = _none) -> Cli[S]:
    """A :class:`Cli` whose table is ``flags``, in ``--help`` order."""
    return Cli(prog, description, settings, flags, derived)


def progress(no_progress: bool) -> bool | None:
    """``--no-progress`` as a ``progress`` setting: off when given, else ``None`` (decided by the terminal)."""
    return False if no_progress else None


NODE_NAME = flag("--node-name", required=True, metavar="NAME", help="this node's Kubernetes name")
RUNTIME_SOCKET = flag("--runtime-socket", type=Path, required=True, metavar="PATH", help="node Runtime socket")
RUNTIME_WAIT = flag("--runtime-wait", setting="runtime_wait_s", type=float, default=30.0, metavar="SECONDS",
                    help="how long to wait for the node Runtime at start (default: 30)")
LOG_LEVEL = flag("--log-level", default="INFO", choices=list(LOG_LEVELS))
KUBECONFIG = flag("--kubeconfig", type=Path, metavar="FILE", help="kubeconfig (default: in-cluster config)")
PROTOCOL = flag("--protocol", setting="protocol_file", type=Path, metavar="FILE",
                help="protocol.yaml (default: embedded defaults)")
IN_MEMORY = flag("--in-memory", action="store_true", help=HIDDEN)
NO_PROGRESS = flag("--no-progress", setting="progress", convert=progress, action="store_true",
                   help="no progress bar on stderr")
POD_IDENTITY: Sequence[Flag] = (
    flag("--pod-name", env="POD_NAME", default="", metavar="NAME",
         help="this replica's Pod, annotated with its protocol fingerprint (default: $POD_NAME)"),
    flag("--pod-namespace", setting=None, env="POD_NAMESPACE", default="", metavar="NS",
         help="namespace of --pod-name (default: $POD_NAMESPACE)"),
)
"""``--pod-name`` and ``--pod-namespace``; the namespace is a setting only with a name (:func:`replica`)."""
REPLICA_HIDDEN: Sequence[Flag] = (
    IN_MEMORY,
    *hidden_floats(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0),
    LOG_LEVEL.but(help=HIDDEN, choices=None),  # any value: the replica's settings check it (SettingsError)
)
"""The hidden flags of a replicated component (controller, scheduler): in-memory cluster, Lease timing, log level."""


def default_identity() -> str:
    """A replica's Lease identity when ``--identity`` is not given: ``hostname-pid``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def identity(given: str | None) -> str:
    """The ``identity`` setting: ``--identity`` when given, else :func:`default_identity`."""
    return given or default_identity()


def replica(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of a replica (controller, scheduler) no single flag holds: ``host`` and ``port`` of the parsed
    ``--listen``, and ``pod_namespace``, which is ``--pod-namespace`` when ``--pod-name`` is given, else empty."""
    host, port = args.listen
    return {"host": host, "port": port, "pod_namespace": args.pod_namespace if args.pod_name else ""}
