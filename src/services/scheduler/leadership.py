"""Leadership terms of one scheduler replica, and the rebuild that must succeed before a term serves.

A term opens when leadership is gained and closes when it is lost; the replica schedules and writes only in an
open term whose ledger rebuild from a full listing succeeded. Invariant: a rebuild that finishes after its term
ended serves nothing (a replica deposed and re-elected meanwhile rebuilds again for the new term).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services._shared.logs import fields

log = logging.getLogger(__name__)

REBUILD_BACKOFF = (0.5, 30.0)
"""First and longest wait (s) between failed rebuilds of a new term (doubling)."""
READY_POLL = 0.1
"""Seconds between checks of the informers' readiness while a new term waits to rebuild."""


class Terms:
    """The current term's number and state (module docstring). Not thread-safe: the service holds its lock."""

    def __init__(self) -> None:
        self.number = 0  # bumped on every leadership change, so a late rebuild of an old term serves nothing
        self.leading = False  # a term is open
        self.rebuilt = False  # the open term's rebuild succeeded

    def open(self) -> int:
        """Leadership gained: a new term, not serving yet; returns its number."""
        self.number += 1
        self.leading, self.rebuilt = True, False
        return self.number

    def close(self) -> None:
        """Leadership lost: no term is open."""
        self.number += 1
        self.leading, self.rebuilt = False, False

    def current(self, term: int) -> bool:
        """True while ``term`` is the open term."""
        return self.leading and self.number == term

    def serve(self, term: int) -> bool:
        """Mark ``term`` rebuilt if it is still the open term; returns whether it was."""
        if not self.current(term):
            return False
        self.rebuilt = True
        return True


def rebuild_until_serving(term: int, *, current: Callable[[int], bool], resync: Callable[[], object],
                          serve: Callable[[int], bool], ready: Callable[[], bool], stop: threading.Event,
                          backoff: tuple[float, float] = REBUILD_BACKOFF) -> bool:
    """Wait until ``ready()`` (both informers have listed), ``resync()``, then ``serve(term)``; a failed resync is
    logged and retried after ``backoff`` (first, longest; seconds, doubling). Returns True once serving; False as
    soon as ``current(term)`` is false or ``stop`` is set."""
    delay, longest = backoff
    while not stop.is_set() and current(term):
        if not ready():
            stop.wait(READY_POLL)
            continue
        try:
            resync()
        except Exception as error:  # listing failed or stayed too old: retry, never serve unrebuilt books
            log.warning("ledger rebuild failed; retrying", extra=fields(term=term, error=str(error), retry_in=delay))
            stop.wait(delay)
            delay = min(delay * 2, longest)
            continue
        if not serve(term):
            break
        log.info("ledger rebuilt; serving", extra=fields(term=term))
        return True
    return False
