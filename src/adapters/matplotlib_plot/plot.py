"""Allocation-curve chart with matplotlib (Agg, headless): one line per policy, the mean over its seeds.

x = arrived GPU request as % of cluster GPU capacity (0..130), y = milli-GPU allocation % (``docs/trace-replay.md``
§2.3; the FGD paper's Fig. 9(a) shape). The dashed line ``y = min(x, 100)`` is the ideal: every arrived request
placed. A point where no seed has a value (NaN in every run) is left as a gap.

matplotlib is an optional dependency (``lj-runtimekit[plot]``); it is imported only when a chart is requested,
so the rest of the CLI works without it. The figure is drawn through the object API with an explicit
``FigureCanvasAgg`` — no ``pyplot`` global state, no display needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from domain.simulation.curves import X_MAX
from domain.simulation.replay import ReplayResult
from ports.report import PlotUnavailableError, ReportError

INSTALL_HINT = "install it with: pip install 'lj-runtimekit[plot]'"


def mean_curves(results: Sequence[ReplayResult]) -> dict[str, list[float]]:
    """Per policy (first-run order), the pointwise mean allocation curve over its runs (131 floats), ignoring
    NaN points; NaN where every run is NaN."""
    grouped: dict[str, list[list[float]]] = {}
    for result in results:
        grouped.setdefault(result.config.policy, []).append(result.allocation_curve())
    means: dict[str, list[float]] = {}
    for policy, curves in grouped.items():
        column: list[float] = []
        for x in range(X_MAX + 1):
            values = [c[x] for c in curves if math.isfinite(c[x])]
            column.append(sum(values) / len(values) if values else math.nan)
        means[policy] = column
    return means


def _matplotlib() -> tuple[ModuleType, ModuleType]:
    try:
        from matplotlib import figure
        from matplotlib.backends import backend_agg
    except ImportError as exc:
        raise PlotUnavailableError(Path("matplotlib"), f"--plot needs matplotlib, which is not installed; "
                                   f"{INSTALL_HINT}") from exc
    return figure, backend_agg


class MatplotlibCurvePlot:
    """Draws the allocation curves to a PNG (or any format matplotlib infers from the suffix); implements
    :class:`ports.report.CurvePlotter`."""

    def check_available(self) -> None:
        """Raise :class:`PlotUnavailableError` (with the install command) if matplotlib cannot be imported."""
        _matplotlib()

    def plot(self, results: Sequence[ReplayResult], path: Path, *, title: str) -> Path:
        """Draw the mean allocation curve of each policy in ``results`` into ``path`` (parents created).
        Raises :class:`PlotUnavailableError` or :class:`ReportError` (cannot write ``path``)."""
        figure, backend_agg = _matplotlib()
        fig: Any = figure.Figure(figsize=(8, 5), dpi=120)
        backend_agg.FigureCanvasAgg(fig)
        axes: Any = fig.add_subplot()
        xs = list(range(X_MAX + 1))
        axes.plot(xs, [min(x, 100) for x in xs], linestyle="--", color="grey", linewidth=1, label="ideal")
        seeds = {r.config.seed for r in results}
        for policy, curve in mean_curves(results).items():
            axes.plot(xs, curve, linewidth=1.5, label=policy)
        axes.set_xlim(0, X_MAX)
        axes.set_ylim(0, 105)
        axes.set_xlabel("arrived GPU request (% of cluster GPU capacity)")
        axes.set_ylabel("GPU allocation (milli-GPU, %)")
        axes.set_title(f"{title} — mean over {len(seeds)} seed{'s' if len(seeds) != 1 else ''}")
        axes.grid(visible=True, alpha=0.3)
        axes.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path)
        except OSError as exc:
            raise ReportError(path, f"cannot write the plot: {exc.strerror or exc}") from exc
        return path
