"""Progress bar with tqdm, on stderr so stdout stays a clean table.

``enabled=None`` (the default) lets tqdm decide: the bar shows only when the stream is a terminal, so piped or
captured output never fills with carriage-return frames. ``enabled=False`` (``--no-progress``) never shows it;
``enabled=True`` always does.
"""

from __future__ import annotations

import sys
from typing import Never, TextIO

import tqdm


class TqdmProgress:
    """One tqdm bar; implements :class:`ports.progress.ProgressBar`. ``stream`` defaults to ``sys.stderr`` as
    it is when :meth:`start` runs."""

    def __init__(self, *, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream
        self._bar: tqdm.tqdm[Never] | None = None

    def start(self, total: int, *, unit: str) -> None:
        """Open a bar over ``total`` units (closing any open one)."""
        self.finish()
        disable = None if self.enabled is None else not self.enabled
        self._bar = tqdm.tqdm(
            total=total, unit=unit, file=self.stream or sys.stderr, disable=disable,
            dynamic_ncols=True, leave=False,
        )

    def describe(self, text: str) -> None:
        """Set the bar's label."""
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)

    def advance(self, count: int) -> None:
        """Add ``count`` units."""
        if self._bar is not None:
            self._bar.update(count)

    def finish(self) -> None:
        """Close the bar (no-op when none is open)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
