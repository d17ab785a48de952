"""Waiting on a condition another thread or process makes true, without fixed sleeps.

:func:`eventually` returns the condition's first truthy value or fails the test; :func:`wait_for` answers whether
the condition held in time, for ``assert wait_for(...)``. Both poll every ``interval`` seconds and give up after
``timeout`` seconds; the default :data:`TIMEOUT` is generous enough for a loaded two-core machine, since a passing
test returns as soon as the condition holds and only a failing one waits it out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 30.0
"""Seconds a condition gets by default."""

INTERVAL = 0.02
"""Seconds between two checks by default."""


def eventually(check: Callable[[], T | None], timeout: float = TIMEOUT, what: str = "condition",
               interval: float = INTERVAL, ignoring: tuple[type[BaseException], ...] = ()) -> T:
    """Call ``check`` until it returns something truthy and return that; after ``timeout`` seconds raise
    :class:`AssertionError` naming ``what``. Exceptions of the ``ignoring`` types count as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ignoring:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def wait_for(condition: Callable[[], object], timeout: float = TIMEOUT, interval: float = INTERVAL) -> bool:
    """Whether ``condition`` turned truthy within ``timeout`` seconds (checked once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())
