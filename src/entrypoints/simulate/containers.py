"""Composition root of ``ljrk simulate``: which adapter implements each port.

Every provider is annotated with its port type, so mypy checks that the adapter conforms. The settings enter
as a plain, already validated object (a ``Dependency``), never through the stringly ``Configuration``
provider. ``stdout`` is looked up when the app is built, not at import, so a caller (or a test) that swaps
``sys.stdout`` gets the table.
"""

from __future__ import annotations

import sys
from typing import TextIO

from dependency_injector import containers, providers

from adapters.csvtrace import CsvTraceReader
from adapters.matplotlib_plot import MatplotlibCurvePlot
from adapters.reportfiles import ReportFiles
from adapters.tqdm_progress import TqdmProgress
from ports.progress import ProgressBar
from ports.report import CurvePlotter, SimulationReport
from ports.trace import TraceReader

from .app import SimulateSettings, Simulation


def _stdout() -> TextIO:
    return sys.stdout


class SimulateContainer(containers.DeclarativeContainer):
    """``settings`` (required) → CSV trace reader, report files in ``settings.output_dir``, matplotlib plot,
    tqdm progress on stderr, and the :class:`Simulation` app."""

    settings: providers.Dependency[SimulateSettings] = providers.Dependency(instance_of=SimulateSettings)
    trace: providers.Provider[TraceReader] = providers.Singleton(CsvTraceReader)
    report: providers.Provider[SimulationReport] = providers.Singleton(
        ReportFiles, output_dir=settings.provided.output_dir
    )
    plotter: providers.Provider[CurvePlotter] = providers.Singleton(MatplotlibCurvePlot)
    progress: providers.Provider[ProgressBar] = providers.Singleton(TqdmProgress, enabled=settings.provided.progress)
    stdout: providers.Provider[TextIO] = providers.Callable(_stdout)
    app: providers.Provider[Simulation] = providers.Factory(
        Simulation, settings=settings, trace=trace, report=report, plotter=plotter, progress=progress, stdout=stdout
    )
