"""Smoke test of ``bench/trace_replay.py``'s pure helpers (the benchmark itself is not part of the test run).

Behaviours covered:

* seed specs: ``42-51`` → ten seeds, comma lists and single seeds, duplicates dropped, malformed specs refused;
* policy specs: ``published`` → the six published policies in the paper's order, ``all`` adds the others,
  explicit lists are validated;
* the published table is used only for the ``default`` pod file and holds the §5 means;
* mean/min/max ignoring NaN, number formatting with ``n/a``, the plain-text table layout, the per-policy summary
  rows (mean, min–max, published value, difference in pp), the curve-shape rows and the closing ``key=value``
  lines (``fgd_wall_seconds_max``, ``peak_rss_mib_max``);
* ``run_one`` on a two-node CSV trace written to a temporary folder returns the figures the summary needs;
* the extender driver (``--driver extender``): the emulated kube-scheduler's NodeResourcesFit (cpu, memory, pod
  slots, summed extended resources), its LeastAllocated (or MostAllocated) + BalancedAllocation scores on
  hand-computed values and its uniform tie-break; on a tiny CSV trace (3 nodes, 10 pods: shares, whole GPUs, a
  model allow-list, CPU-only pods) the replay through the real extender HTTP verbs gives exactly the in-process
  replay's series, with CPU-only pods ranked by the extender or placed by the emulated kube-scheduler; the naive
  extender runs through prioritize; the comparison table and closing lines.
* ``bench/exporter_scrape.py`` end to end in a tiny configuration (2 GPUs × 3 pods, 20 churn cycles; the Runtime
  and the exporter as ``ljrk`` processes): exit 0, every closing ``key=value`` figure printed, the series set and
  count the same before and after the churn, and the readable summary lines;
* ``bench/exporter_api_requests.py`` in a tiny configuration (3 nodes, 5 simulated minutes, fast pace): exit 0,
  every closing figure, the per-pull LIST rule at 60/interval requests per node per minute, the watch at one LIST
  per node plus the WATCHes, fewer; the watch rule never ended a pod the per-pull listing shows running;
* ``bench/share_packing.py``'s ``pack`` on a hand-built stream under both rules (closing fits, dropped pods,
  CPU-only arrivals) and its refusal of an unknown rule; ``record`` writes its pod file's table row and keeps the
  other rows.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from support.bench_modules import load_bench

BENCH = Path(__file__).resolve().parents[2] / "bench" / "trace_replay.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("trace_replay")


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


TINY_NODES = "sn,cpu_milli,memory_mib,gpu,model\nn-0,16000,65536,2,G2\nn-1,16000,65536,4,T4\nn-2,32000,131072,1,G2\n"
TINY_PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p0,1000,1024,1,500,\np1,1000,1024,1,1000,T4\np2,100,512,0,0,\np3,2000,1024,2,1000,G2|T4\n"
    "p4,1000,1024,1,250,\np5,1000,2048,1,470,\np6,100,256,0,0,\np7,4000,4096,1,810,G2\n"
    "p8,1000,1024,4,1000,\np9,1000,1024,1,320,\n"
)
"""3 nodes (7 GPUs) and 10 pods: shares, whole GPUs (1, 2 and 4), model allow-lists and two small CPU-only pods
(the CPU-only pods are too small to change any node's fit or FGD score, so kube-scheduler's placement of them cannot
change the GPU outcome on this input)."""


def tiny_trace(tmp_path: Path) -> tuple[str, str]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(TINY_NODES)
    pods.write_text(TINY_PODS)
    return str(nodes), str(pods)


def test_kube_scheduler_emulator_fit_scores_and_ties(bench: ModuleType) -> None:
    import numpy as np

    from domain.simulation.workload import TraceNode, TracePod

    nodes = [TraceNode("n-b", 8000, 8192, 0, "G2"), TraceNode("n-a", 4000, 8192, 1, "G2")]
    kube = bench.KubeSchedulerEmulator(nodes, np.random.default_rng(0))
    assert kube.names == ["n-a", "n-b"]
    small = kube.request(TracePod("s", 1000, 2048, 0, 0))
    assert small == (1000, 2048 * 1024 * 1024, 0, 0)
    idx = kube.feasible(small)
    assert idx.tolist() == [0, 1]
    # n-a: LeastAllocated (75 + 75) / 2 = 75, Balanced (1 − |0.25 − 0.25|)·100 = 100 → 175;
    # n-b: LeastAllocated (87 + 75) / 2 = 81, Balanced (1 − |0.125 − 0.25|)·100 = 87 → 168.
    assert kube.plugin_scores(small, idx).tolist() == [175, 168]
    # MostAllocated instead: n-a (25 + 25) / 2 = 25 → 125; n-b (12 + 25) / 2 = 18 → 105.
    packing = bench.KubeSchedulerEmulator(nodes, np.random.default_rng(0), most_allocated=True)
    assert packing.plugin_scores(small, idx).tolist() == [125, 105]
    assert kube.feasible(kube.request(TracePod("big", 5000, 1024, 0, 0))).tolist() == [1]
    assert kube.feasible(kube.request(TracePod("gpu", 100, 1024, 1, 1000))).tolist() == [0]
    assert kube.feasible(kube.request(TracePod("two", 100, 1024, 2, 1000))).tolist() == []
    share = kube.request(TracePod("share", 100, 1024, 1, 470))
    assert share[3] == 47
    kube.assume("n-a", share)
    kube.assume("n-a", share)
    assert kube.feasible(share).tolist() == []  # 94 % of the one GPU's 100 % summed: no room for 47 more
    assert (kube.pods.tolist(), kube.core_req.tolist()) == ([2, 0], [94, 0])
    picks = {kube.select(np.array([0, 1]), np.array([5, 5])) for _ in range(64)}
    assert picks == {0, 1}
    assert kube.select(np.array([0, 1]), np.array([5, 6])) == 1


@pytest.mark.parametrize("cpu_pods", ["extender", "kube"])
def test_extender_driver_matches_the_in_process_replay_on_a_tiny_trace(
    bench: ModuleType, tmp_path: Path, cpu_pods: str
) -> None:
    nodes, pods = tiny_trace(tmp_path)
    for policy in ("fgd", "best-fit"):
        run = bench.run_one_both(nodes, pods, policy, 42, 2.0, "fixed-order", cpu_pods, False, True, None)
        ref, ext = run["inprocess"], run["extender"]
        assert run["arrivals"] > 10  # tune 2.0: the 10 pods, then samples up to twice the 7000 milli of GPUs
        assert run["first_divergence"] is None, (policy, cpu_pods)
        assert ext["alloc_end"] == ref["alloc_end"]
        assert ext["failed"] == ref["failed"] > 0
        assert (ext["counts"]["cpu_only"] > 0) == (cpu_pods == "kube")
        assert ext["counts"]["prioritize_calls"] == 0  # our filter leaves one node: kube-scheduler takes it
        assert ext["assumed_left"] == 0
        assert set(ext["latency_ms"]) == {"filter", "bind"}


def test_naive_extender_goes_through_prioritize(bench: ModuleType, tmp_path: Path) -> None:
    nodes, pods = tiny_trace(tmp_path)
    run = bench.run_one_both(nodes, pods, "fgd", 42, 2.0, "fixed-order", "extender", True, False, 6)
    ext = run["extender"]
    assert run["arrivals"] == 6
    assert ext["counts"]["prioritize_calls"] >= 1
    assert "prioritize" in ext["latency_ms"]
    assert 0 < ext["alloc_end"] <= 100


def test_comparison_rows_and_closing_lines(bench: ModuleType) -> None:
    def both(policy: str, seed: int, ref: float, ext: float) -> dict[str, object]:
        side = {"alloc100": ref - 0.1, "alloc130": ref, "frag80": 30.0, "alloc_end": ref, "wall_seconds": 5.0}
        return {"policy": policy, "seed": seed, "arrivals": 1000, "first_divergence": None if ref == ext else 7,
                "inprocess": side, "extender": {**side, "alloc100": ext - 0.1, "alloc130": ext, "alloc_end": ext,
                                                "wall_seconds": 50.0, "loop_seconds": 10.0}}

    runs = [both("fgd", 42, 95.0, 95.0), both("fgd", 43, 95.5, 95.3), both("best-fit", 42, 93.0, 92.5)]
    rows = bench.comparison_rows(runs, ["fgd", "best-fit"])
    assert rows[0][:8] == ["fgd", "42,43", "95.15", "95.05", "-0.10", "95.25", "95.15", "-0.10"]
    assert rows[0][11:] == ["-0.10", "1/2", "5.0", "50.0", "100"]
    assert len(rows[0]) == len(bench.COMPARISON_HEADER)
    lines = bench.comparison_closing_lines(runs, ["fgd", "best-fit"])
    assert "fgd_extender_alloc130_diff_pp=-0.100" in lines
    assert "best-fit_extender_alloc130_diff_pp=-0.500" in lines
    assert "extender_alloc130_max_abs_diff_pp=0.500" in lines


EXPORTER_BENCH = BENCH.parent / "exporter_scrape.py"
EXPORTER_FIGURES = {
    "scrape_p50_ms", "scrape_p95_ms", "scrape_p99_ms", "scrape_max_ms", "churn_scrape_p99_ms", "body_bytes", "series",
    "series_before_churn", "series_after_churn", "series_flat", "rss_start_mib", "rss_warm_mib", "rss_end_mib",
    "rss_growth_after_warmup_mib", "cycles", "total_wall_seconds",
}


def test_exporter_scrape_bench_in_a_tiny_configuration() -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    run = subprocess.run(
        [sys.executable, str(EXPORTER_BENCH), "--gpus", "2", "--containers-per-gpu", "3", "--scrapes", "10",
         "--interval", "0.05", "--cycles", "20", "--warmup-cycles", "5", "--churn-interval", "0.05"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    figures = dict(line.split("=", 1) for line in run.stdout.splitlines() if re.fullmatch(r"[a-z0-9_]+=\S+", line))
    assert set(figures) == EXPORTER_FIGURES
    assert figures["series_flat"] == "yes"
    assert int(figures["series_before_churn"]) == int(figures["series_after_churn"]) == int(figures["series"]) > 0
    assert figures["cycles"] == "20"
    assert int(figures["body_bytes"]) > 0
    for key in ("scrape_p50_ms", "scrape_p99_ms", "churn_scrape_p99_ms", "rss_start_mib", "rss_end_mib"):
        assert float(figures[key]) > 0, key
    assert float(figures["scrape_p50_ms"]) <= float(figures["scrape_p99_ms"]) <= float(figures["scrape_max_ms"])
    for text in ("scrape, steady back-to-back", "scrape, during churn", "identical set", "exporter RSS: start"):
        assert text in run.stdout, text


API_BENCH = BENCH.parent / "exporter_api_requests.py"
API_FIGURES = {"old_requests_per_node_minute", "new_requests_per_node_minute", "new_lists_per_node_minute",
               "new_watches_per_node_minute", "dropped_early", "ended_later"}


def test_exporter_api_requests_bench_in_a_tiny_configuration() -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1] / "src")}
    run = subprocess.run(
        [sys.executable, str(API_BENCH), "--nodes", "3", "--minutes", "5", "--pods", "3", "--churn", "6",
         "--watch-timeout", "60", "--scale", "0.005"],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    figures = dict(line.split("=", 1) for line in run.stdout.splitlines() if re.fullmatch(r"[a-z0-9_]+=\S+", line))
    assert set(figures) == API_FIGURES
    assert float(figures["old_requests_per_node_minute"]) == 6.0  # one LIST per 10 s pull
    assert float(figures["new_lists_per_node_minute"]) == pytest.approx(1 / 5)  # the start-up LIST only
    assert 0 < float(figures["new_watches_per_node_minute"]) < 6.0
    assert float(figures["new_requests_per_node_minute"]) < float(figures["old_requests_per_node_minute"])
    assert figures["dropped_early"] == "0"
    for text in ("per-pull LIST (old)", "watch (new)", "at 5,000 nodes"):
        assert text in run.stdout, text


def test_versus_published_fgd_lines_per_pod_file(bench: ModuleType) -> None:
    assert bench.published_fgd("x/openb_pod_list_multigpu30.csv") == (96.36, 96.46)
    assert bench.published_fgd("x/openb_pod_list_mine.csv") is None
    runs = [fake_run("fgd-plus", 42, 95.9, 10.0, 60.0), fake_run("fgd-plus", 43, 96.1, 10.0, 60.0)]
    lines = bench.versus_fgd_lines(runs, "openb_pod_list_default.csv")
    assert "published_fgd_alloc130=95.39" in lines
    assert "fgd-plus_vs_published_fgd_alloc130_pp=+0.610" in lines  # mean 96.0 − 95.39
    assert "fgd-plus_vs_published_fgd_alloc100_pp=+0.570" in lines  # mean 95.8 − 95.23
    assert bench.versus_fgd_lines(runs, "openb_pod_list_mine.csv") == []


# ---------------------------------------------------------------------------------------------- share packing
def test_share_packing_rules_on_a_hand_built_stream() -> None:
    # Two GPUs. Arrivals: 300, 700 (best fit and gap balance both close GPU 0: 300 + 700 = 1000), then 600 on the
    # fresh GPU 1 (free 400), 500 (fits nowhere: dropped), a whole GPU (none free: dropped), 400 (closes GPU 1), and
    # a CPU-only pod (skipped, its arrival counted as 0 milli).
    module = load_bench("share_packing")
    from domain.simulation.workload import TracePod

    def pod(name: str, gpus: int, milli: int) -> TracePod:
        return TracePod(name, 1000, 1024, gpus, milli)

    stream = [pod("a", 1, 300), pod("b", 1, 700), pod("c", 1, 600), pod("d", 1, 500), pod("e", 1, 1000),
              pod("f", 1, 400), pod("g", 0, 0)]
    for rule in ("best-fit", "gap-balance"):
        arrived, used = module.pack(rule, 2, stream)
        assert arrived == [300, 1000, 1600, 2100, 3100, 3500, 3500]
        assert used == [300, 1000, 1600, 1600, 1600, 2000, 2000]
    with pytest.raises(ValueError, match="rule 'first-fit'"):
        module.pack("first-fit", 2, stream)


def test_share_packing_record_replaces_its_row_and_keeps_the_others(tmp_path: Path) -> None:
    module = load_bench("share_packing")
    table = tmp_path / "results" / "share_packing.md"
    module.record(table, "x/openb_pod_list_gpushare80.csv", "42-51",
                  {"best-fit": (89.4, 89.7), "gap-balance": (90.1, 90.4)})
    module.record(table, "openb_pod_list_default.csv", "42", {"best-fit": (95.0, 96.0), "gap-balance": (95.5, 96.25)})
    module.record(table, "openb_pod_list_gpushare80.csv", "42-51", {"best-fit": (1.0, 2.0), "gap-balance": (3.0, 4.0)})
    assert table.read_text().splitlines() == [
        *module.RECORD_HEADER.splitlines(),
        "| `default` | 42 | 95.00 / 96.00 | 95.50 / 96.25 |",
        "| `gpushare80` | 42-51 | 1.00 / 2.00 | 3.00 / 4.00 |",
    ]
