"""Smoke test of ``bench/trace_replay.py``'s pure helpers (the benchmark itself is not part of the test run).

Behaviours covered:

* seed specs: ``42-51`` → ten seeds, comma lists and single seeds, duplicates dropped, malformed specs refused;
* policy specs: ``published`` → the six published policies in the paper's order, ``all`` adds the others,
  explicit lists are validated;
* the published table is used only for the ``default`` pod file and holds the §5 means;
* mean/min/max ignoring NaN, number formatting with ``n/a``, the plain-text table layout, the per-policy summary
  rows (mean, min–max, published value, difference in pp), the curve-shape rows and the closing ``key=value``
  lines (``fgd_wall_seconds_max``, ``peak_rss_mib_max``);
* ``run_one`` on a two-node CSV trace written to a temporary folder returns the figures the summary needs.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trace_replay.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_trace_replay", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_parse_seeds(bench: ModuleType) -> None:
    assert bench.parse_seeds("42-51") == list(range(42, 52))
    assert bench.parse_seeds("7") == [7]
    assert bench.parse_seeds("1,3-4,3") == [1, 3, 4]
    for bad in ("", "5-3", "a", "1,,2"):
        with pytest.raises(ValueError, match=r"."):
            bench.parse_seeds(bad)


def test_parse_policies(bench: ModuleType) -> None:
    known = ["binpack", "spread", "random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd"]
    published = ["random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd"]
    assert bench.parse_policies("published", known) == published
    assert bench.parse_policies("all", known) == [*published, "binpack", "spread"]
    assert bench.parse_policies("fgd, best-fit", known) == ["fgd", "best-fit"]
    with pytest.raises(ValueError, match="unknown policy"):
        bench.parse_policies("fgd,tetris", known)


def test_published_numbers_only_for_the_default_pod_file(bench: ModuleType) -> None:
    table = bench.published_for("../shared/traces/openb/openb_pod_list_default.csv")
    assert table is not None
    assert table["fgd"] == {"alloc100": 95.23, "alloc130": 95.39, "frag80": 29.9}
    assert table["random"]["frag80"] == 74.6
    assert set(table) == set(bench.PUBLISHED_ORDER)
    assert bench.published_for("../shared/traces/openb/openb_pod_list_gpushare40.csv") is None


def test_spread_and_fmt(bench: ModuleType) -> None:
    assert bench.spread([1.0, math.nan, 3.0]) == (2.0, 1.0, 3.0)
    assert all(math.isnan(v) for v in bench.spread([math.nan]))
    assert bench.fmt(95.234) == "95.23"
    assert bench.fmt(0.1, signed=True) == "+0.10"
    assert bench.fmt(None) == bench.fmt(math.nan) == "n/a"


def test_render_table_pads_columns(bench: ModuleType) -> None:
    text = bench.render_table(("policy", "value"), [["fgd", "1.00"], ["best-fit", "10.00"]])
    assert text.splitlines() == [
        "policy    value",
        "--------  -----",
        "fgd        1.00",
        "best-fit  10.00",
    ]


def fake_run(policy: str, seed: int, alloc130: float, wall: float, rss: float) -> dict[str, object]:
    return {
        "policy": policy, "seed": seed, "alloc100": alloc130 - 0.2, "alloc130": alloc130, "frag80": 30.0,
        "frag100": 99.0, "curve": {"50": 50.0, "80": 80.0, "90": 90.0, "95": 94.9, "98": 95.2},
        "failed": 2400, "arrivals": 10800, "replay_seconds": wall, "wall_seconds": wall, "rss_mib": rss,
    }


def test_summary_curve_and_closing_lines(bench: ModuleType) -> None:
    runs = [fake_run("fgd", 42, 95.3, 30.0, 80.0), fake_run("fgd", 43, 95.5, 40.0, 90.0),
            fake_run("best-fit", 42, 93.0, 2.0, 60.0)]
    published = bench.PUBLISHED_DEFAULT
    rows = bench.summary_rows(runs, ["best-fit", "fgd"], published)
    fgd = rows[1]
    assert fgd[:2] == ["fgd", "2"]
    assert fgd[5:8] == ["95.40 (95.30–95.50)", "95.39", "+0.01"]
    assert fgd[8:11] == ["30.00 (30.00–30.00)", "29.90", "+0.10"]
    assert fgd[11:13] == ["35.0/40.0", "90"]
    assert len(fgd) == len(bench.SUMMARY_HEADER)
    assert bench.summary_rows(runs, ["fgd"], None)[0][6:8] == ["n/a", "n/a"]
    curve = bench.curve_rows(runs, ["fgd"], True)
    assert curve == [["fgd", "50.00 / 50.01", "80.00 / 80.02", "90.00 / 89.98", "94.90 / 94.91", "95.20 / 95.21"]]
    lines = bench.closing_lines(runs, published)
    assert "fgd_wall_seconds_max=40.000" in lines
    assert "peak_rss_mib_max=90.0" in lines
    assert "alloc130_max_abs_diff_pp=0.080" in lines


def test_run_one_on_a_tiny_csv_trace(bench: ModuleType, tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn-0,16000,65536,2,G2\nn-1,16000,65536,2,T4\n")
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "p0,1000,1024,1,500,\np1,1000,1024,1,1000,T4\np2,1000,1024,0,0,\np3,2000,1024,2,1000,G2|T4\n"
        "p4,1000,1024,1,500,\n"
    )  # 4000 milli requested = the 4 GPUs: tune 1.0 leaves the 5 pods as they are
    run = bench.run_one(str(nodes), str(pods), "fgd", 42, 1.0, "fixed-order")
    assert run["policy"] == "fgd"
    assert run["arrivals"] == 5
    assert run["alloc100"] in (50.0, 75.0, 100.0)  # 4000 milli less what failed (a 1000- or 2000-milli pod)
    assert (run["failed"] == 0) == (run["alloc100"] == 100.0)
    assert math.isnan(run["alloc130"])
    assert run["rss_mib"] > 0
    assert set(run["curve"]) == {"50", "80", "90", "95", "98"}
