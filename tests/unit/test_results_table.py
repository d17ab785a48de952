"""adapters.reportfiles.results_table: workload names, seed labels and rewriting one row of a results table."""

from __future__ import annotations

from pathlib import Path

from adapters.reportfiles.results_table import record_row, seeds_label, workload_name
from support.bench_modules import load_bench

HEADER = "| pod file | seeds | x |\n|---|---|---|"


def test_workload_name_and_seeds_label() -> None:
    assert workload_name("../shared/traces/openb/openb_pod_list_gpushare80.csv") == "gpushare80"
    assert workload_name("mine.csv") == "mine"
    assert seeds_label((42, 43, 44)) == "42-44"
    assert seeds_label([42]) == "42"
    assert seeds_label((42, 44)) == "42,44"
    assert seeds_label((44, 43)) == "44,43"


def test_record_row_creates_replaces_and_sorts(tmp_path: Path) -> None:
    table = tmp_path / "results" / "t.md"
    record_row(table, HEADER, "multigpu30", ["42-51", "1"])
    record_row(table, HEADER, "default", ["42", "2"])
    record_row(table, HEADER, "multigpu30", ["42-51", "3"])
    assert table.read_text().splitlines() == [
        "| pod file | seeds | x |", "|---|---|---|", "| `default` | 42 | 2 |", "| `multigpu30` | 42-51 | 3 |",
    ]


def test_trace_replay_record_cells_against_published_fgd() -> None:
    bench = load_bench("trace_replay")
    runs = [{"policy": "fgd", "alloc100": 95.0, "alloc130": 95.5},
            {"policy": "fgd", "alloc100": 95.2, "alloc130": 95.7},
            {"policy": "fgd-plus", "alloc100": 96.0, "alloc130": 96.2}]
    cells = bench.record_cells(runs, "x/openb_pod_list_default.csv", [42, 43])
    assert cells == ["42-43", "95.23 / 95.39", "95.89", "95.10 / 95.60", "96.00 / 96.20", "+0.810"]
    assert bench.record_cells(runs, "mine.csv", [7])[1:3] == ["n/a", "n/a"]
