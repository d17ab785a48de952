"""Report files: ``summary.json``, ``curves.csv`` and ``failures.csv`` for one simulation (``docs/trace-replay.md``
§2.3; size classes and AUC: :mod:`domain.simulation.breakdown`).

Layouts: ``docs/simulation-reports.md``. Invariants: a NaN curve point is written as JSON ``null`` / an empty CSV
cell; floats use Python's shortest round-trip form, so equal results give byte-identical files; each file is written
under a temporary name in the output folder and renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from domain.simulation.curves import X_MAX
from domain.simulation.replay import ReplayResult
from domain.simulation.topology_tally import TopologyFigures
from ports.report import ReportError

_Filler = Callable[[TextIO], object]

SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.csv"
FAILURES_FILE = "failures.csv"

SUMMARY_KEYS = ("policy", "seed", "typical", "alloc_at_100", "alloc_at_130", "frag_ratio_at_80", "arrivals",
                "failed_pods", "wall_seconds", "alloc_auc", "failed_by_size", "high_share", "high_arrivals",
                "preemptions", "evicted_pods", "evicted_milli", "topology")
"""Keys of each ``summary.json`` object, in written order."""


def _finite(value: float, digits: int) -> float | None:
    return round(value, digits) if math.isfinite(value) else None


def topology_row(figures: TopologyFigures | None) -> dict[str, object] | None:
    """The ``topology`` object of a run on a simulated machine (None without one): ``machine``, ``known`` (the
    scheduler was told the topology), ``placed`` pod size ("2", "4", "8" GPUs) → tier (``nvlink``, ``pcie-root``,
    ``numa``, ``system``) → placed pods, ``islands`` (NVLink islands of more than one GPU) and
    ``islands_free_at_80`` (of those, the ones with every GPU free when arrivals reached 80 % of capacity),
    ``first`` (multi-GPU pods were placed topology first, ``--gpu-topology-first``)."""
    if figures is None:
        return None
    return {"machine": figures.machine, "known": figures.known,
            "placed": {str(size): dict(tiers) for size, tiers in figures.tiers.items()},
            "islands": figures.islands, "islands_free_at_80": figures.islands_free_at_80, "first": figures.first}


def summary_row(result: ReplayResult) -> dict[str, object]:
    """The ``summary.json`` object of one run (keys :data:`SUMMARY_KEYS`; module docstring for units):
    ``alloc_auc`` the mean allocation % over x = 0..130 (3 decimals, None when the run stopped short of 130),
    ``failed_by_size`` size class → pods of that class that failed in the whole run (every class of
    :data:`~domain.simulation.breakdown.SIZE_CLASSES`, in that order; the counts sum to ``failed_pods``);
    ``high_share`` the run's share of high-priority arrivals, ``high_arrivals`` their count, ``preemptions`` those
    placed by evicting pods, ``evicted_pods`` and ``evicted_milli`` (milli-GPU) what they evicted (all 0 without
    priorities); ``topology`` :func:`topology_row`."""
    headline = result.headline()
    return {
        "policy": result.config.policy,
        "seed": result.config.seed,
        "typical": result.config.typical,
        "alloc_at_100": _finite(headline.alloc_at_100, 2),
        "alloc_at_130": _finite(headline.alloc_at_130, 2),
        "frag_ratio_at_80": _finite(headline.frag_ratio_at_80, 2),
        "arrivals": result.arrivals,
        "failed_pods": result.failed_pods,
        "wall_seconds": round(result.wall_seconds, 3),
        "alloc_auc": _finite(result.allocation_auc(), 3),
        "failed_by_size": result.failed_by_size(),
        "high_share": result.config.high_share,
        "high_arrivals": result.high_arrivals,
        "preemptions": result.preemptions,
        "evicted_pods": result.evicted_pods,
        "evicted_milli": result.evicted_milli,
        "topology": topology_row(result.topology),
    }


def curves_header() -> list[str]:
    """``workload,sc_policy,tune,seed,total_gpus,0,…,130``."""
    return ["workload", "sc_policy", "tune", "seed", "total_gpus", *(str(x) for x in range(X_MAX + 1))]


def failures_header() -> list[str]:
    """``workload,sc_policy,tune,seed,size_class,0,…,130``."""
    return ["workload", "sc_policy", "tune", "seed", "size_class", *(str(x) for x in range(X_MAX + 1))]


def _cell(value: float) -> str:
    return repr(value) if math.isfinite(value) else ""


class ReportFiles:
    """Writes ``summary.json``, ``curves.csv`` and ``failures.csv`` into ``output_dir``; implements
    :class:`ports.report.SimulationReport`."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir

    def prepare(self) -> None:
        """Create ``output_dir`` (and parents) and check it is a writable folder. Raises :class:`ReportError`."""
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ReportError(self.output_dir, "exists and is not a folder") from None
        except OSError as exc:
            raise ReportError(self.output_dir, f"cannot create the output folder: {exc.strerror or exc}") from exc
        if not os.access(self.output_dir, os.W_OK | os.X_OK):
            raise ReportError(self.output_dir, "the output folder is not writable")

    def write(self, results: Sequence[ReplayResult], *, workload: str) -> list[Path]:
        """Write the three files (module docstring); returns their paths. ``failures.csv`` has one row per run and
        size class (:data:`~domain.simulation.breakdown.SIZE_CLASSES` order): cumulative failed pods of that class
        at x = 0..130 (below ``failed_by_size`` at 130 only for pods arrived past x = 130). Raises
        :class:`ReportError`."""
        self.prepare()
        summary = json.dumps([summary_row(r) for r in results], indent=2, allow_nan=False) + "\n"
        buffer: list[list[str]] = [curves_header()]
        for result in results:
            config = result.config
            buffer.append([
                workload, config.policy, repr(config.tune), str(config.seed), str(result.total_gpus),
                *(_cell(v) for v in result.allocation_curve()),
            ])
        failures: list[list[str]] = [failures_header()]
        for result in results:
            config = result.config
            for cls, counts in result.failure_curves().items():
                failures.append([workload, config.policy, repr(config.tune), str(config.seed), cls, *map(str, counts)])
        summary_path = self._replace(SUMMARY_FILE, lambda f: f.write(summary))
        curves_path = self._replace(CURVES_FILE, lambda f: csv.writer(f, lineterminator="\n").writerows(buffer))
        failures_path = self._replace(FAILURES_FILE, lambda f: csv.writer(f, lineterminator="\n").writerows(failures))
        return [summary_path, curves_path, failures_path]

    def _replace(self, name: str, fill: _Filler) -> Path:
        target = self.output_dir / name
        temporary = self.output_dir / f".{name}.tmp"
        try:
            with temporary.open("w", encoding="utf-8", newline="") as handle:
                fill(handle)
            os.replace(temporary, target)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise ReportError(target, f"cannot write: {exc.strerror or exc}") from exc
        return target
