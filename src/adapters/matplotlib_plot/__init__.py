"""matplotlib adapter for the curve-plot port (optional dependency ``lj-runtimekit[plot]``)."""

from .plot import INSTALL_HINT, MatplotlibCurvePlot, mean_curves

__all__ = ["INSTALL_HINT", "MatplotlibCurvePlot", "mean_curves"]
