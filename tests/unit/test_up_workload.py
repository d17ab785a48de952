"""``ljrk up``'s workload (entrypoints.up.workload) and the trace timeline columns (adapters.csvtrace).

Covers: the synthetic workload has the requested size, is deterministic per seed, arrives within its span in order
and sizes durations for the target load; a trace pod list is taken in creation order with durations from its
deletion times (missing deletion = until the end), and falls back to the synthetic timeline without times; the speedup
makes the arrivals last the requested wall time; Pod objects carry our resources as limits (whole GPUs, core
percent), cpu and memory, the duration and GPU-model annotations, our scheduler name and label; a share that is not
a whole percent is refused; ``read_pod_times`` reads, defaults and validates the optional columns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.csvtrace import CsvTraceReader
from domain.kube.protocol import ProtocolConstants
from domain.simulation.workload import TracePod
from entrypoints.up.workload import (
    MANAGED_BY,
    SYNTHETIC_SPAN_S,
    TARGET_LOAD,
    Arrival,
    WorkloadError,
    pod_object,
    synthetic_workload,
    trace_workload,
)
from ports.trace import TraceFormatError

PROTOCOL = ProtocolConstants()
KEY = "lj-runtimekit.io/emulated-duration-seconds"


def test_synthetic_workload_size_order_and_determinism() -> None:
    first = synthetic_workload(120, cluster_gpus=8, seed=7)
    again = synthetic_workload(120, cluster_gpus=8, seed=7)
    other = synthetic_workload(120, cluster_gpus=8, seed=8)
    assert len(first.arrivals) == 120
    assert first == again
    assert first != other
    times = [a.at_s for a in first.arrivals]
    assert times == sorted(times)
    assert times[0] == 0.0
    assert times[-1] <= SYNTHETIC_SPAN_S
    assert all(a.duration_s is not None and a.duration_s >= 1.0 for a in first.arrivals)
    assert len({a.pod.name for a in first.arrivals}) == 120


def test_synthetic_durations_target_the_load() -> None:
    workload = synthetic_workload(3000, cluster_gpus=40, seed=1)
    demand = sum(a.pod.total_gpu_milli / 1000 * (a.duration_s or 0) for a in workload.arrivals)
    load = demand / SYNTHETIC_SPAN_S / 40  # mean GPUs asked for at once, as a share of the cluster
    assert load == pytest.approx(TARGET_LOAD, rel=0.15)


def test_speedup_makes_arrivals_last_the_window() -> None:
    workload = synthetic_workload(50, cluster_gpus=4, seed=3)
    assert workload.span_s / workload.speedup_for(5.0) == pytest.approx(5.0)


def test_trace_workload_follows_creation_and_deletion_times() -> None:
    pods = [TracePod("b", 1000, 1024, 1, 500), TracePod("a", 1000, 1024, 0, 0), TracePod("c", 1000, 1024, 1, 1000)]
    times = {"a": (100, 160), "b": (40, None), "c": (400, 1000)}
    workload = trace_workload("f.csv", pods, times, count=2, cluster_gpus=4, seed=0)
    assert [(a.pod.name, a.at_s, a.duration_s) for a in workload.arrivals] == [("b", 0.0, None), ("a", 60.0, 60.0)]


def test_trace_without_times_gets_the_synthetic_timeline() -> None:
    pods = [TracePod(f"p{i}", 1000, 1024, 1, 1000) for i in range(5)]
    workload = trace_workload("m.csv", pods, dict.fromkeys([p.name for p in pods], (None, None)), count=None,
                              cluster_gpus=2, seed=0)
    assert [a.pod.name for a in workload.arrivals] == [p.name for p in pods]
    assert all(a.duration_s is not None for a in workload.arrivals)


def test_empty_selections_are_refused() -> None:
    with pytest.raises(WorkloadError):
        synthetic_workload(0, cluster_gpus=2, seed=0)
    with pytest.raises(WorkloadError):
        trace_workload("f.csv", [], {}, count=None, cluster_gpus=2, seed=0)


def test_pod_objects_carry_our_resources_as_limits() -> None:
    whole = pod_object(Arrival(TracePod("Whole_1", 12000, 16384, 2, 1000), 0.0, 90.5), PROTOCOL,
                       duration_annotation=KEY)
    assert whole.name == "whole-1"
    assert whole.scheduler_name == PROTOCOL.scheduler_name
    (main,) = whole.containers
    assert main.limits == main.requests == {"cpu": "12000m", "memory": "16384Mi", PROTOCOL.resources.gpu: "2"}
    assert whole.annotations == {KEY: "90.500"}
    assert whole.labels == dict([MANAGED_BY])
    share = pod_object(Arrival(TracePod("s", 4000, 2048, 1, 460, ("V100M16", "T4")), 0.0, None), PROTOCOL,
                       duration_annotation=KEY)
    assert share.containers[0].limits[PROTOCOL.resources.core] == "46"
    assert PROTOCOL.resources.memory not in share.containers[0].limits  # memory follows the proportional rule
    assert share.annotations == {PROTOCOL.annotations.pod_gpu_models: "V100M16,T4"}
    cpu = pod_object(Arrival(TracePod("c", 1000, 1024, 0, 0), 0.0, 1.0), PROTOCOL, duration_annotation=KEY)
    assert set(cpu.containers[0].limits) == {"cpu", "memory"}
    with pytest.raises(WorkloadError, match="whole percent"):
        pod_object(Arrival(TracePod("odd", 1000, 1024, 1, 455), 0.0, 1.0), PROTOCOL, duration_annotation=KEY)


def test_read_pod_times(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
                    "p1,1000,1024,1,500,10,70\np2,1000,1024,0,0,5,\n")
    assert CsvTraceReader().read_pod_times(path) == {"p1": (10, 70), "p2": (5, None)}
    bare = tmp_path / "bare.csv"
    bare.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,500\n")
    assert CsvTraceReader().read_pod_times(bare) == {"p1": (None, None)}
    bad = tmp_path / "bad.csv"
    bad.write_text("name,creation_time,deletion_time\np1,50,20\n")
    with pytest.raises(TraceFormatError, match=r"bad.csv:2:3: column 'deletion_time': 20 is before"):
        CsvTraceReader().read_pod_times(bad)
    bad.write_text("name,creation_time\np1,soon\n")
    with pytest.raises(TraceFormatError, match="not a whole number"):
        CsvTraceReader().read_pod_times(bad)
