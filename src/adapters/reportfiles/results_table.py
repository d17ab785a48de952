"""Benchmark results as Markdown tables the documentation includes: one row per workload, rewritten in place.

A table file holds a two-line header (column names, separator) and one row per workload, its first cell the
workload's name in backticks; rows are kept sorted by that name. Recording a workload replaces its row and keeps
every other, so the benches can fill a table one pod file at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


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
