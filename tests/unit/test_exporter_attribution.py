"""GPU UUID cross-check of the exporter's attribution (``domain.exporter.attribution``), on domain rows and through
the collector with the in-process Runtime and pod-resources (no I/O).

Covers: a container whose listed device IDs name the Runtime row's GPU is kept; one whose IDs name another GPU is
dropped and reported (both GPU sets); a container listing only foreign device IDs, or none, is kept by name; a
multi-GPU row needs every GPU confirmed; a container listed twice counts the GPUs of both entries; no
pod-resources source keeps everything; through the collector the mismatch is a gauge on /metrics, logged once
per container while it lasts, logged again when it comes back, and the gauge returns to 0 once it is resolved.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.podresources import InMemoryPodResources
from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.exporter.attribution import AttributionMismatch, PodContainerDevices, attribute, attribute_checked
from domain.exporter.metrics import PREFIX
from domain.gpu import Gpu, GpuUuid
from domain.runtime.types import ContainerAllocationRequest, ExporterData, PlannedGpu
from entrypoints.runtime.inprocess import InProcessRuntime
from services.exporter.collector import SnapshotCollector

GIB = 1 << 30
MISMATCH_GAUGE = PREFIX + "exporter_attribution_mismatched_containers"


def _runtime(*pods: tuple[str, tuple[int, ...]]) -> InProcessRuntime:
    runtime = InProcessRuntime([Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(4)])
    for pod, gpus in pods:
        planned = tuple(PlannedGpu(g, GpuUuid(f"GPU-{g}"), core_milli=250) for g in gpus)
        runtime.allocate(ContainerAllocationRequest(f"uid-{pod}", "ns", pod, "main", planned))
    return runtime


def _data(*pods: tuple[str, tuple[int, ...]]) -> ExporterData:
    return _runtime(*pods).exporter_data()


def _ours(pod: str, *gpus: int) -> PodContainerDevices:
    return PodContainerDevices("ns", pod, "main", [f"GPU-{g}::core::{n}" for n, g in enumerate(gpus)])


def _pods(data: ExporterData) -> list[str]:
    return [c.pod_name for c in data.containers]


def test_matching_gpu_is_kept() -> None:
    result = attribute_checked(_data(("p1", (1,))), [_ours("p1", 1)])
    assert _pods(result.data) == ["p1"]
    assert result.mismatches == ()


def test_mismatching_gpu_is_dropped_and_reported() -> None:
    data = _data(("p1", (1,)), ("p2", (2,)))
    result = attribute_checked(data, [_ours("p1", 3), _ours("p2", 2)])
    assert _pods(result.data) == ["p2"]
    assert result.mismatches == (AttributionMismatch("ns", "p1", "main", (GpuUuid("GPU-1"),), (GpuUuid("GPU-3"),)),)
    assert "GPU-1" in result.mismatches[0].describe()
    assert "GPU-3" in result.mismatches[0].describe()
    assert len(result.data.gpus) == 4  # GPU rows are never filtered
    assert _pods(attribute(data, [_ours("p1", 3), _ours("p2", 2)])) == ["p2"]


def test_foreign_device_ids_only_keep_by_name() -> None:
    listed = [PodContainerDevices("ns", "p1", "main", ["nic0", "GPU-9f00-nvidia"])]
    result = attribute_checked(_data(("p1", (1,))), listed)
    assert _pods(result.data) == ["p1"]
    assert result.mismatches == ()


def test_no_device_ids_keep_by_name() -> None:
    result = attribute_checked(_data(("p1", (1,))), [PodContainerDevices("ns", "p1", "main")])
    assert _pods(result.data) == ["p1"]
    assert result.mismatches == ()


def test_foreign_ids_beside_ours_are_ignored() -> None:
    listed = [PodContainerDevices("ns", "p1", "main", ["nic0", "GPU-1::memory::4"])]
    assert _pods(attribute_checked(_data(("p1", (1,))), listed).data) == ["p1"]


def test_multi_gpu_row_needs_every_gpu_confirmed() -> None:
    data = _data(("p1", (0, 1)))
    assert _pods(attribute_checked(data, [_ours("p1", 0, 1, 2)]).data) == ["p1"]
    partial = attribute_checked(data, [_ours("p1", 0)])
    assert _pods(partial.data) == []
    assert partial.mismatches[0].runtime_uuids == ("GPU-0", "GPU-1")


def test_container_listed_twice_counts_both_entries() -> None:
    result = attribute_checked(_data(("p1", (0, 1))), [_ours("p1", 0), _ours("p1", 1)])
    assert _pods(result.data) == ["p1"]


def test_no_pod_resources_keeps_every_row() -> None:
    data = _data(("p1", (1,)))
    result = attribute_checked(data, None)
    assert result.data is data
    assert result.mismatches == ()


def _gauge(metrics: PrometheusExporterMetrics) -> float:
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == MISMATCH_GAUGE:
                return float(sample.value)
    raise AssertionError(f"{MISMATCH_GAUGE} missing")


def test_collector_counts_and_logs_each_mismatch_once(caplog: pytest.LogCaptureFixture) -> None:
    runtime = _runtime(("p1", (1,)), ("p2", (2,)))
    pods = InMemoryPodResources([_ours("p1", 3), _ours("p2", 2)])
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node="n1")
    caplog.set_level(logging.WARNING, logger="services.exporter.collector")
    try:
        for _ in range(3):
            assert collector.refresh()
        assert _gauge(metrics) == 1.0
        assert [c.pod_name for c in collector.snapshot().data.containers] == ["p2"]
        logged = [r.getMessage() for r in caplog.records if "GPU mismatch" in r.getMessage()]
        assert len(logged) == 1
        assert "ns/p1/main" in logged[0]
        pods.set_containers([_ours("p1", 1), _ours("p2", 2)])  # kubelet and the Runtime agree again
        assert collector.refresh()
        assert _gauge(metrics) == 0.0
        assert sorted(c.pod_name for c in collector.snapshot().data.containers) == ["p1", "p2"]
        pods.set_containers([_ours("p1", 0), _ours("p2", 2)])  # a new mismatch is logged again
        assert collector.refresh()
        assert len([r for r in caplog.records if "GPU mismatch" in r.getMessage()]) == 2
    finally:
        collector.close()
