"""The outline every ``ljrk`` subcommand's ``main`` follows: parse → settings → container → run.

Invariants: ``main`` returns an exit code and never raises for bad input; every failure is ONE line
``<prog>: error: <message>`` on stderr (:func:`fail`) and one of the shared codes (:data:`EXIT_OK`,
:data:`EXIT_FAILED`, :data:`EXIT_USAGE`) or a component's own; ``--help`` returns argparse's code (0). A step
ends the command by raising :class:`CommandError`, usually through :func:`failing`, which maps expected errors
to a code.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, TypeVar

from .cli import UsageError, one_line
from .signals import stop_on_signals

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
"""Exit codes every component shares: done; cannot run (a dependency or an address failed); bad input."""

S = TypeVar("S")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class SettingsError(ValueError):
    """A component setting is invalid; the message names the setting (field or flag), its value and the fix.
    Every component's ``app.SettingsError`` is this class; :func:`command` turns it into :data:`EXIT_USAGE`."""


class CommandError(Exception):
    """Ends a command with exit ``code``; ``message`` (None: nothing is printed) becomes the ``error:`` line."""

    def __init__(self, code: int, message: object | None = None) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message


class Resources(Protocol):
    """What :func:`start` and :func:`shutting_down` need of a dependency-injector container."""

    def init_resources(self) -> object:
        """Initialise the container's resources (logging, clients, …)."""

    def shutdown_resources(self) -> object:
        """Release the container's resources; idempotent."""


class Runnable(Protocol[T_co]):
    """An app served until a stop event: ``run(stop)`` returns when ``stop`` is set (``RunUntilStopped``)."""

    def run(self, stop: threading.Event) -> T_co:
        """Serve until ``stop`` is set; returns the app's result (None, or an exit code)."""


def fail(prog: str, message: object, code: int) -> int:
    """Print ``<prog>: error: <message>`` as one line (:func:`.cli.one_line`) on stderr; returns ``code``."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return code


@contextmanager
def failing(*errors: type[BaseException], code: int, prefix: str = "", suffix: str = "") -> Iterator[None]:
    """Turn any of ``errors`` raised in the block into :class:`CommandError` (``code``, ``prefix`` + the error's
    text + ``suffix``), chained to the error. A :class:`CommandError` from an inner block passes through unchanged,
    so blocks nest: the innermost mapping wins."""
    try:
        yield
    except CommandError:
        raise
    except errors as error:
        raise CommandError(code, f"{prefix}{error}{suffix}") from error


def parse_settings(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                   to_settings: Callable[[argparse.Namespace], S],
                   *, errors: tuple[type[BaseException], ...] = ()) -> S:
    """``to_settings(parser.parse_args(argv))``. Raises :class:`CommandError`: argparse's code for ``--help`` (no
    message), :data:`EXIT_USAGE` with the error's text for :class:`.cli.UsageError`, :class:`SettingsError` or any
    of ``errors`` (say ``domain.errors.DomainError`` for an unknown policy)."""
    with failing(UsageError, SettingsError, *errors, code=EXIT_USAGE):
        try:
            return to_settings(parser.parse_args(argv))
        except SystemExit as done:  # --help
            raise CommandError(done.code if isinstance(done.code, int) else EXIT_OK) from None


def command(prog: str, argv: Sequence[str] | None, *, parser: argparse.ArgumentParser,
            settings: Callable[[argparse.Namespace], S], run: Callable[[S], int],
            errors: tuple[type[BaseException], ...] = ()) -> int:
    """The whole ``main``: parse ``argv`` with ``parser`` into settings (:func:`parse_settings`, ``errors`` also
    meaning bad input), then ``run(settings)`` (it builds the container and serves); returns the exit code —
    ``run``'s, or a :class:`CommandError`'s, whose message is printed by :func:`fail`. Other exceptions propagate."""
    try:
        return run(parse_settings(parser, argv, settings, errors=errors))
    except CommandError as done:
        if done.message is not None:
            fail(prog, done.message, done.code)
        return done.code


@contextmanager
def shutting_down(container: Resources) -> Iterator[None]:
    """Call ``container.shutdown_resources()`` when the block ends, however it ends."""
    try:
        yield
    finally:
        container.shutdown_resources()


def start(container: Resources, build: Callable[[], T]) -> T:
    """``container.init_resources()`` then ``build()`` (the app); any exception is :class:`CommandError`
    (:data:`EXIT_FAILED`, ``cannot start: …``) — kubeconfig or in-cluster config errors, an address in use, …"""
    with failing(Exception, code=EXIT_FAILED, prefix="cannot start: "):
        container.init_resources()
        return build()


def serve(app: Runnable[T], stop: threading.Event | None) -> T:
    """Run ``app`` until SIGTERM/SIGINT, or until ``stop`` is set when given (tests); returns what it returns."""
    with stop_on_signals(stop) as event:
        return app.run(event)
