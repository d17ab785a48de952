"""Report ports: where replay results go (summary and curve files, an allocation-curve chart).

Both speak :class:`ReplayResult` (domain) plus the workload's display name. Errors are this port's own:
:class:`ReportError` for an output that cannot be written, :class:`PlotUnavailableError` when the plotting
library is not installed. ``prepare``/``check_available`` exist so a caller can fail *before* hours of replay,
not after.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from domain.simulation.replay import ReplayResult


class ReportError(Exception):
    """An output cannot be written. ``path`` is the file or directory at fault; the message names it and the
    operating-system reason."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class PlotUnavailableError(ReportError):
    """The plotting backend is not installed; the message says how to install it."""


class SimulationReport(Protocol):
    """Writes one simulation's results (one :class:`ReplayResult` per policy × seed, in run order)."""

    def prepare(self) -> None:
        """Create the output location and check it is writable. Raises :class:`ReportError`."""
        ...

    def write(self, results: Sequence[ReplayResult], *, workload: str) -> list[Path]:
        """Write the results; returns the files written. Raises :class:`ReportError`."""
        ...


class CurvePlotter(Protocol):
    """Draws allocation-ratio curves (x = arrived GPU request %, y = milli-GPU allocation %, §2.3) per policy,
    averaged over seeds; when fgd and fgd-plus both ran, also their allocation difference over x with its spread
    over the seeds (:func:`domain.simulation.compare.allocation_difference`)."""

    def check_available(self) -> None:
        """Raise :class:`PlotUnavailableError` if the backend cannot be loaded."""
        ...

    def plot(self, results: Sequence[ReplayResult], path: Path, *, title: str) -> Path:
        """Draw ``results`` into the image file ``path`` (parent folders created); returns ``path``.
        Raises :class:`PlotUnavailableError` or :class:`ReportError`."""
        ...
