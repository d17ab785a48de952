"""Benchmark results as Markdown tables the documentation includes: one row per workload, rewritten in place.

A table file holds a two-line header (column names, separator) and one row per workload, its first cell the
workload's name in backticks; rows are kept sorted by that name. Recording a workload replaces its row and keeps
every other, so the benches can fill a table one pod file at a time.
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs

PERFORMANCE_HEADER = "| bench run | measured | conditions |\n|---|---|---|"
"""Header of ``bench/results/performance.md``: one row per bench invocation (:func:`record_bench_run`)."""


def workload_name(pods_file: str) -> str:
    """The workload of an Alibaba pod list: ``…/openb_pod_list_gpushare80.csv`` → ``gpushare80``."""
    return Path(pods_file).stem.removeprefix("openb_pod_list_")


def seeds_label(seeds: Sequence[int]) -> str:
    """``42-51`` for a contiguous ascending run of two or more seeds, else the seeds joined by commas."""
    first, last = seeds[0], seeds[-1]
    if len(seeds) > 1 and tuple(seeds) == tuple(range(first, last + 1)):
        return f"{first}-{last}"
    return ",".join(map(str, seeds))


def record_row(path: Path, header: str, workload: str, cells: Sequence[str]) -> None:
    """Write ``| `workload` | cells… |`` as ``workload``'s row of the table at ``path`` (created with ``header``,
    its two header lines, when absent), keeping the other workloads' rows. Raises OSError from the file system."""
    rows: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines()[2:]:
            rows[line.split("|")[1].strip().strip("`")] = line
    rows[workload] = f"| `{workload}` | {' | '.join(cells)} |"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header.rstrip("\n"), *(rows[k] for k in sorted(rows))]) + "\n", encoding="utf-8")


@attrs.frozen
class RunStart:
    """What the machine was doing when a bench run began: ``load`` (1-minute load average, runnable processes),
    ``day`` (local date, ISO 8601). Taken with :meth:`now` before the run, so a row states the load it began and
    ended under."""

    load: float
    day: str

    @classmethod
    def now(cls) -> RunStart:
        """The load average and date at this moment (``os.getloadavg``; Unix only)."""
        return cls(os.getloadavg()[0], datetime.date.today().isoformat())

    def conditions(self) -> str:
        """``2 cores, load 0.43-1.87, 2026-12-05``: the cores, the load average at start and now, the start date."""
        return f"{os.cpu_count()} cores, load {self.load:.2f}-{os.getloadavg()[0]:.2f}, {self.day}"


def bench_run_name(script: str, argv: Sequence[str]) -> str:
    """The row name of a bench invocation: the script's file name and its arguments, ``--record FILE`` (or
    ``--record=FILE``) left out — ``bench/scheduler_throughput.py`` with ``--policy fgd --record f.md`` →
    ``scheduler_throughput.py --policy fgd``. Raises ValueError for a ``|`` or a backtick, which would break the
    table's cells."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--record":
            skip = True
        elif not arg.startswith("--record="):
            kept.append(arg)
    name = " ".join([Path(script).name, *kept])
    if "|" in name or "`" in name:
        raise ValueError(f"bench run {name!r}: a '|' or '`' cannot stand in a table cell")
    return name


def record_bench_run(path: Path, script: str, argv: Sequence[str] | None, measured: str, start: RunStart) -> None:
    """Write the row of the invocation ``script argv`` (:func:`bench_run_name`; ``argv`` None: this process's
    arguments, ``sys.argv[1:]``, as ``argparse`` reads them) in the performance table at
    ``path`` (:data:`PERFORMANCE_HEADER`): ``measured`` (the bench's figures in words) and the conditions of
    ``start``. Raises OSError from the file system, ValueError as :func:`bench_run_name`."""
    if "|" in measured:
        raise ValueError(f"measured {measured!r}: a '|' cannot stand in a table cell")
    name = bench_run_name(script, sys.argv[1:] if argv is None else argv)
    record_row(path, PERFORMANCE_HEADER, name, [measured, start.conditions()])
