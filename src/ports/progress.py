"""Progress port: a bar for long replays.

The unit is one pod arrival; the total is known before the first run (the tuned arrival stream's length does
not depend on the policy), so the bar can show a true percentage and an ETA. Implementations must tolerate
``advance`` beyond ``total`` and ``finish`` without ``start`` (both are no-ops in effect, never errors).
"""

from __future__ import annotations

from typing import Protocol


class ProgressBar(Protocol):
    """A single progress bar over a known number of units."""

    def start(self, total: int, *, unit: str) -> None:
        """Open the bar at 0 of ``total`` units (``total ≥ 0``); ``unit`` names one unit, e.g. ``"pod"``."""
        ...

    def describe(self, text: str) -> None:
        """Show ``text`` (e.g. ``"fgd seed 42"``) as the bar's current label."""
        ...

    def advance(self, count: int) -> None:
        """Add ``count`` finished units (``count ≥ 0``)."""
        ...

    def finish(self) -> None:
        """Close the bar and release its terminal line."""
        ...
