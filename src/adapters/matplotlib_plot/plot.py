"""Allocation and fragmentation charts with matplotlib (Agg, headless): one line per policy, the mean over its seeds.

Both panels share x = arrived GPU request as % of cluster GPU capacity (0..130). Left: y = milli-GPU allocation %
(``docs/trace-replay.md`` §2.3; the FGD paper's Fig. 9(a) shape), with the dashed ideal ``y = min(x, 100)`` (every
arrived request placed). Right: y = frag ratio % (100 × idle GPU milli the typical pods cannot use / idle milli;
the paper's Fig. 7). A point where no seed has a value (NaN in every run) is left as a gap.

When ``fgd-plus`` and ``fgd`` both ran on a common seed (:data:`~domain.simulation.compare.CANDIDATE_POLICY`,
:data:`~domain.simulation.compare.BASELINE_POLICY`) a third panel shows their allocation difference, fgd-plus − fgd
in percentage points over x: the mean over the seeds both ran, paired by seed, with the band from the least to the
greatest per-seed difference (:func:`domain.simulation.compare.allocation_difference`) and a zero line, so a
regression below zero is visible at a glance.

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

from domain.simulation.compare import BASELINE_POLICY, CANDIDATE_POLICY, allocation_difference, paired_seeds
from domain.simulation.curves import X_MAX
from domain.simulation.replay import ReplayResult
from ports.report import PlotUnavailableError, ReportError

INSTALL_HINT = "install it with: pip install 'lj-runtimekit[plot]'"


def mean_curves(results: Sequence[ReplayResult], *, kind: str = "allocation") -> dict[str, list[float]]:
    """Per policy (first-run order), the pointwise mean ``kind`` curve (``allocation`` or ``fragmentation``, %)
    over its runs (131 floats), ignoring NaN points; NaN where every run is NaN. Raises ValueError for another
    ``kind``."""
    if kind not in ("allocation", "fragmentation"):
        raise ValueError(f"kind: {kind!r} is neither 'allocation' nor 'fragmentation'")
    grouped: dict[str, list[list[float]]] = {}
    for result in results:
        curve = result.allocation_curve() if kind == "allocation" else result.fragmentation_curve()
        grouped.setdefault(result.config.policy, []).append(curve)
    means: dict[str, list[float]] = {}
    for policy, curves in grouped.items():
        column: list[float] = []
        for x in range(X_MAX + 1):
            values = [c[x] for c in curves if math.isfinite(c[x])]
            column.append(sum(values) / len(values) if values else math.nan)
        means[policy] = column
    return means


def _difference_panel(axes: Any, results: Sequence[ReplayResult], xs: list[int]) -> None:
    """fgd-plus − fgd allocation (pp): the paired mean over seeds, the least-to-greatest band, a zero line."""
    spread = allocation_difference(results, candidate=CANDIDATE_POLICY, baseline=BASELINE_POLICY)
    count = len(spread.seeds)
    axes.axhline(0, color="grey", linewidth=1, linestyle="--")
    axes.fill_between(xs, spread.low, spread.high, alpha=0.3, color="tab:red",
                      label=f"least–greatest of {count} seed{'s' if count != 1 else ''}")
    axes.plot(xs, spread.mean, color="tab:red", linewidth=1.5, label="mean over seeds")
    axes.set_xlim(0, X_MAX)
    axes.set_xlabel("arrived GPU request (% of cluster GPU capacity)")
    axes.set_ylabel(f"{CANDIDATE_POLICY} − {BASELINE_POLICY} allocation (percentage points)")
    axes.grid(visible=True, alpha=0.3)
    axes.legend(loc="lower left", fontsize="small")


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
        """Draw the mean allocation and fragmentation curves of each policy in ``results`` into ``path`` (parents
        created), and the fgd-plus − fgd panel when both ran (module docstring). Raises :class:`PlotUnavailableError`
        or :class:`ReportError` (cannot write ``path``)."""
        figure, backend_agg = _matplotlib()
        compared = bool(paired_seeds(results, candidate=CANDIDATE_POLICY, baseline=BASELINE_POLICY))
        panels = 3 if compared else 2
        fig: Any = figure.Figure(figsize=(6.5 * panels, 5), dpi=120)
        backend_agg.FigureCanvasAgg(fig)
        alloc: Any = fig.add_subplot(1, panels, 1)
        frag: Any = fig.add_subplot(1, panels, 2)
        xs = list(range(X_MAX + 1))
        if compared:
            _difference_panel(fig.add_subplot(1, panels, 3), results, xs)
        alloc.plot(xs, [min(x, 100) for x in xs], linestyle="--", color="grey", linewidth=1, label="ideal")
        seeds = {r.config.seed for r in results}
        for policy, curve in mean_curves(results).items():
            alloc.plot(xs, curve, linewidth=1.5, label=policy)
        for policy, curve in mean_curves(results, kind="fragmentation").items():
            frag.plot(xs, curve, linewidth=1.5, label=policy)
        for axes, ylabel, where in ((alloc, "GPU allocation (milli-GPU, %)", "lower right"),
                                    (frag, "frag ratio (% of idle GPU milli)", "upper left")):
            axes.set_xlim(0, X_MAX)
            axes.set_ylim(0, 105)
            axes.set_xlabel("arrived GPU request (% of cluster GPU capacity)")
            axes.set_ylabel(ylabel)
            axes.grid(visible=True, alpha=0.3)
            axes.legend(loc=where, fontsize="small")
        fig.suptitle(f"{title} — mean over {len(seeds)} seed{'s' if len(seeds) != 1 else ''}")
        fig.tight_layout()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path)
        except OSError as exc:
            raise ReportError(path, f"cannot write the plot: {exc.strerror or exc}") from exc
        return path
