"""adapters.reportfiles.results_table: workload names, seed labels and rewriting one row of a results table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adapters.reportfiles.results_table import (
    PERFORMANCE_HEADER,
    RunStart,
    bench_run_name,
    record_bench_run,
    record_row,
    seeds_label,
    workload_name,
)
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


def test_bench_run_name_leaves_the_record_file_out() -> None:
    assert bench_run_name("/r/bench/x.py", ["--policy", "fgd", "--record", "t.md", "--pods", "9"]) == (
        "x.py --policy fgd --pods 9")
    assert bench_run_name("bench/x.py", ["--record=t.md"]) == "x.py"
    with pytest.raises(ValueError, match="table cell"):
        bench_run_name("bench/x.py", ["--name", "a|b"])


def test_record_bench_run_writes_the_figures_and_the_conditions(tmp_path: Path) -> None:
    table = tmp_path / "performance.md"
    start = RunStart(load=0.25, day="2026-12-05")
    record_bench_run(table, "bench/b.py", ["--n", "2"], "9 pods/s", start)
    record_bench_run(table, "bench/a.py", [], "1 pod/s", start)
    lines = table.read_text().splitlines()
    assert lines[:2] == PERFORMANCE_HEADER.splitlines()
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| `a.py`", "1 pod/s"], ["| `b.py --n 2`", "9 pods/s"]]
    assert re.fullmatch(r"\| `a.py` \| 1 pod/s \| \d+ cores, load 0\.25-\d+\.\d\d, 2026-12-05 \|", lines[2])
    with pytest.raises(ValueError, match="measured"):
        record_bench_run(table, "bench/a.py", [], "1 | 2", start)


def test_scheduler_throughput_records_its_row(tmp_path: Path) -> None:
    table = tmp_path / "performance.md"
    load_bench("scheduler_throughput").main(
        ["--nodes", "20", "--gpus-per-node", "2", "--pods", "20", "--round", "10", "--policy", "fgd",
         "--compare", "binpack", "--record", str(table)])
    row = table.read_text().splitlines()[2]
    assert row.startswith("| `scheduler_throughput.py --nodes 20 --gpus-per-node 2 --pods 20 --round 10 --policy fgd "
                          "--compare binpack` | `fgd` ")
    assert re.search(r"; `binpack` [\d,]+ pods/s, p99 \d+\.\d\d ms; ratio \d+\.\d{3}; peak RSS \d+ MiB \|", row)


def test_scheduler_throughput_fills_to_the_late_regime_and_measures_one_gpu_pods(
        capsys: pytest.CaptureFixture[str]) -> None:
    load_bench("scheduler_throughput").main(
        ["--nodes", "60", "--gpus-per-node", "8", "--pods", "10", "--policy", "fgd-staged",
         "--whole-gpus-left", "0.05"])
    out = capsys.readouterr().out
    late = re.search(r"late regime: (\d+) fully free GPUs after the prefill \((\d+\.\d) %\)", out)
    assert late is not None, out
    assert 10 <= int(late.group(1)) <= 24  # at most 5 % of 480 GPUs, and more than the 10 measured pods
    assert "measured: 10 pods, 10 placed" in out


def test_record_bench_run_without_argv_names_this_process_arguments(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["bench/c.py", "--pods", "3", "--record", "t.md"])
    table = tmp_path / "performance.md"
    record_bench_run(table, "bench/c.py", None, "3 pods/s", RunStart(load=0.5, day="2026-12-05"))
    assert table.read_text().splitlines()[2].startswith("| `c.py --pods 3` | 3 pods/s | ")
