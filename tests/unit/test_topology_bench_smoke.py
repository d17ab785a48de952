"""Smoke test of ``bench/topology_replay.py`` on a tiny CSV trace (the benchmark itself is not part of the test run):
the topology-aware run keeps the 4-GPU pod on one NVLink island where the first-by-index rule splits it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from adapters.csvtrace import CsvTraceReader

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("topology_replay", REPO / "bench" / "topology_replay.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["topology_replay"] = module
    spec.loader.exec_module(module)
    return module


def test_topology_replay_on_a_tiny_trace(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,8,V100M32\n")
    pods = tmp_path / "pods.csv"
    # seed 43 sends the share first (it lands on GPU 0), then the 4-GPU pod
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,1000,1024,1,500\npod-b,1000,1024,4,1000\n")
    reader = CsvTraceReader()
    trace_nodes, trace_pods = reader.read_nodes(nodes), reader.read_pods(pods)
    bench = _bench()
    figures = {aware: bench.run(trace_nodes, trace_pods, "best-fit", 43, 0.57, "nvlink-islands-2x4", aware)
               for aware in (False, True)}
    for aware in (False, True):
        assert figures[aware]["4-GPU placed"] == 1
    assert figures[True]["4-GPU nvlink%"] == 100.0
    assert figures[False]["4-GPU nvlink%"] == 0.0  # GPUs 1-4: across the two islands
    assert figures[True]["alloc%"] == figures[False]["alloc%"]


def test_churn_replay_releases_pods_and_reports_its_figures(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,8,V100M32\nnode-1,64000,262144,8,V100M32\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\npod-a,1000,1024,1,500\npod-b,1000,1024,4,1000\n"
                    "pod-c,1000,1024,2,1000\n")
    reader = CsvTraceReader()
    bench = _bench()
    figures = {aware: bench.churn(reader.read_nodes(nodes), reader.read_pods(pods), "best-fit", 43,
                                  "nvlink-islands-2x4", aware, 0.5, 400) for aware in (False, True)}
    assert set(figures[True]) == {"alloc%", "2-GPU placed%", "2-GPU nvlink%", "4-GPU placed%", "4-GPU nvlink%",
                                  "8-GPU placed%", "islands free (mean)"}
    assert 0 < figures[True]["alloc%"] < 100  # pods leave: the 16 GPUs are never all held
    assert figures[True]["4-GPU nvlink%"] > figures[False]["4-GPU nvlink%"]  # 98.6 against 71.4 %
