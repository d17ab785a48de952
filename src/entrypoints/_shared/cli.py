"""The command-line plumbing every ``ljrk`` subcommand shares: a parser whose errors raise instead of exiting.

Each entrypoint's ``main(argv)`` catches :class:`UsageError` and turns it into one ``<prog>: error: …`` line and
exit code 2, so tests call ``main`` and get a code back, never ``SystemExit`` (``--help`` still raises
``SystemExit(0)``, which ``main`` turns into its return value).
"""

from __future__ import annotations

import argparse
from typing import NoReturn


def one_line(message: object) -> str:
    """``message`` as the one line an ``error:`` report must be: line breaks (say, in a value quoted in it) are
    written ``\\n`` and ``\\r``."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


class UsageError(Exception):
    """A command-line error; the message is the whole explanation."""


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting, so every error is one
    line and ``main`` returns a code instead of raising ``SystemExit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)
