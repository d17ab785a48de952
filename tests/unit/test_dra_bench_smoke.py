"""Smoke test of ``bench/dra_side_by_side.py``'s pure parts (the benchmark itself needs a control plane and is not
part of the test run).

Behaviours covered:

* a trace share pod becomes a ``gpu-share`` claim asking ``cores`` = ceil(gpu_milli / 10) and the given memory, a
  k-GPU pod a ``gpu`` claim of count k; the pod asks its trace CPU and memory and names the claim;
* a claim's allocation counts ``consumedCapacity`` cores × 10 milli-GPU per result, a result without it a whole GPU,
  an unallocated claim nothing;
* ``--uniform`` nodes are the trace's commonest (8 × G2, 96 cores, 384 GiB); the claim stream leaves out pods
  without GPUs and is cut at ``max_pods``; the replay model runs on a tiny trace;
* a phase row's allocation, pods/s and latency, and the printed table.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from domain.kube.protocol import ProtocolConstants
from support.bench_modules import BENCH_DIR, load_bench

PROTOCOL = ProtocolConstants()


@pytest.fixture(scope="module")
def world() -> ModuleType:
    return load_bench("dra_bench_world")


def write_trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,2,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                    "a,1000,1024,1,455,T4\nb,2000,2048,2,1000,\nc,500,512,0,0,\nd,1000,1024,1,1000,\n")
    return nodes, pods


def test_claims_and_pods_of_trace_pods(world: ModuleType) -> None:
    share = world.ClaimPod("p-00000", 1000, 1024, 0, 46)
    whole = world.ClaimPod("p-00001", 2000, 2048, 2, 0)
    assert (share.gpu_milli, whole.gpu_milli) == (460, 2000)
    ask = world.claim_body(share, PROTOCOL, "1Gi")["spec"]["devices"]["requests"][0]
    assert ask == {"name": "gpu", "exactly": {"deviceClassName": PROTOCOL.dra.device_class_share,
                                              "capacity": {"requests": {"cores": "46", "memory": "1Gi"}}}}
    ask = world.claim_body(whole, PROTOCOL, "1Gi")["spec"]["devices"]["requests"][0]
    assert ask["exactly"] == {"deviceClassName": PROTOCOL.dra.device_class_gpu, "count": 2}
    pod = world.pod_body(share, "default-scheduler", {"k": "v"})
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "p-00000"}]
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1000m", "memory": "1024Mi"},
                                                         "claims": [{"name": "gpu"}]}


def test_claim_milli_counts_consumed_cores_or_whole_devices(world: ModuleType) -> None:
    def claim(*results: dict[str, str] | None) -> SimpleNamespace:
        devices = SimpleNamespace(results=[SimpleNamespace(consumed_capacity=r) for r in results])
        return SimpleNamespace(status=SimpleNamespace(allocation=SimpleNamespace(devices=devices)))

    assert world.claim_milli(claim({"cores": "46", "memory": "1Gi"})) == 460
    assert world.claim_milli(claim(None, None)) == 2000
    assert world.claim_milli(SimpleNamespace(status=SimpleNamespace(allocation=None))) == 0
    assert world.claim_milli(SimpleNamespace(status=None)) == 0


def test_nodes_stream_and_model_on_a_tiny_trace(world: ModuleType, tmp_path: Path) -> None:
    nodes_file, pods_file = write_trace(tmp_path)
    uniform = world.cluster_nodes(nodes_file, 3, 8, 42)
    first = uniform[0]
    assert (first.name, first.gpus, first.model, first.cpu_milli, first.memory_mib) == ("node-0000", 8, "G2", 96000,
                                                                                         393216)
    nodes = world.cluster_nodes(nodes_file, 5, None, 42)
    assert sorted(n.name for n in nodes) == ["node-0000", "node-0001"]
    stream = world.claim_stream(pods_file, nodes, 1.0, 42, None)
    assert stream
    assert all(p.gpus or p.cores for p in stream)
    assert {(p.gpus, p.cores) for p in stream} <= {(0, 46), (2, 0), (1, 0)}
    assert len(world.claim_stream(pods_file, nodes, 1.0, 42, 2)) == 2
    model = world.replay_allocation(pods_file, nodes, 1.0, 42, "dra-first-fit", None)
    assert 0 < model <= 100


def test_rows_and_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    bench = load_bench("dra_side_by_side")
    row = bench.Row("default-scheduler", 3, {"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 2.0}, 1500, 2000)
    assert (row.allocation, row.pods_per_second, row.latency_ms(99)) == (75.0, 1.0, 1000.0)
    assert "| default-scheduler | 2 / 3 | 75.00 % | 1.0 | 1,000 / 1,000 ms |" in bench.table([row])
