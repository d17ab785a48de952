"""The exporter's collector and metric builder on the in-process Runtime and pod-resources (no I/O).

Covers: device-ID UUID parsing; attribution drops containers pod-resources no longer lists (B20) and keeps all
without a pod-resources source; every GPU is reported in every scrape whatever its allocation (B22); a
terminated pod's series are gone at the next scrape and stay gone; the series count is flat across 1000 pod
create/delete cycles (B20); a hung Runtime leaves the scrape fast, the last snapshot served, runtime_up 0 and the
error counter growing, and recovery sets runtime_up back to 1 (B23); a failing Runtime keeps the last data;
pod-resources failures keep the last good list; unknown measurements yield no sample; names follow the
conventions (prefix, base-unit suffixes) and the text output parses with ``prometheus_client.parser``; the
container resolves with in-memory overrides; settings validation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.podresources import InMemoryPodResources
from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.exporter.attribution import PodContainerDevices, attribute, device_uuid
from domain.exporter.metrics import (
    CONTAINER_METRICS,
    CONTAINER_MIG_METRICS,
    GPU_METRICS,
    MIG_METRICS,
    NODE_METRICS,
    NODE_MIG_METRICS,
    PREFIX,
    build_families,
)
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.exporter import build_exporter_data
from domain.runtime.types import (
    ContainerAllocationRequest,
    ExporterData,
    GpuData,
    GpuSample,
    PlannedGpu,
    UsageSample,
)
from entrypoints.exporter.app import ExporterApp, ExporterSettings, SettingsError, parse_listen
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.runtime import RuntimeUnavailableError
from services.exporter.collector import SnapshotCollector
from support.polling import wait_for

GIB = 1 << 30
NODE = "node-a"


def _gpus(count: int = 4) -> list[Gpu]:
    return [Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(count)]


def _request(pod: str, *, gpu: int = 0, container: str = "main") -> ContainerAllocationRequest:
    return ContainerAllocationRequest(f"uid-{pod}", "ns", pod, container,
                                      (PlannedGpu(gpu, GpuUuid(f"GPU-{gpu}"), core_milli=250),))


def _listed(pod: str, *, gpu: int = 0, container: str = "main") -> PodContainerDevices:
    return PodContainerDevices("ns", pod, container, [f"GPU-{gpu}::core::0", f"GPU-{gpu}::memory::3"])


class HangingRuntime(InProcessRuntime):
    """exporter_data blocks while ``hang`` is set (released by ``release``)."""

    def __init__(self) -> None:
        super().__init__(_gpus())
        self.hang = False
        self.release_hang = threading.Event()
        self.fail = False

    def exporter_data(self) -> ExporterData:
        if self.fail:
            raise RuntimeUnavailableError("socket gone")
        if self.hang:
            self.release_hang.wait(30)
        return super().exporter_data()


@pytest.fixture
def hanging() -> Iterator[HangingRuntime]:
    runtime = HangingRuntime()
    yield runtime
    runtime.release_hang.set()


def _parse(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def _series_count(metrics: PrometheusExporterMetrics) -> int:
    return sum(len(v) for v in _parse(metrics.exposition()).values())


def test_device_uuid_parsing() -> None:
    assert device_uuid("GPU-abc::core::7") == "GPU-abc"
    assert device_uuid("GPU-abc") is None
    assert device_uuid("::core::1") is None
    assert _listed("p", gpu=2).gpu_uuids == {"GPU-2"}


def test_attribution_keeps_only_listed_containers() -> None:
    runtime = InProcessRuntime(_gpus())
    runtime.allocate(_request("alive"))
    runtime.allocate(_request("gone", gpu=1))
    data = runtime.exporter_data()
    assert attribute(data, None) is data
    kept = attribute(data, [_listed("alive"), PodContainerDevices("other", "x", "c")])
    assert [c.pod_name for c in kept.containers] == ["alive"]
    assert len(kept.gpus) == 4


def test_every_gpu_in_every_scrape_whatever_allocation() -> None:
    runtime = InProcessRuntime(_gpus())
    pods = InMemoryPodResources()
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE)
    for step in range(3):
        if step == 1:
            runtime.allocate(_request("p1", gpu=2))
            pods.set_containers([_listed("p1", gpu=2)])
        assert collector.refresh()
        parsed = _parse(metrics.exposition())
        for spec in ("gpu_memory_total_bytes", "gpu_healthy", "gpu_core_allocated_ratio"):
            assert sorted(labels["gpu_index"] for labels, _ in parsed[PREFIX + spec]) == ["0", "1", "2", "3"]
    allocated = {labels["gpu_uuid"]: v for labels, v in parsed[PREFIX + "gpu_core_allocated_ratio"]}
    assert allocated == {"GPU-0": 0.0, "GPU-1": 0.0, "GPU-2": 0.25, "GPU-3": 0.0}
    collector.close()


def test_terminated_pod_vanishes_at_next_scrape_even_if_runtime_keeps_it() -> None:
    runtime = InProcessRuntime(_gpus())
    pods = InMemoryPodResources([_listed("p1")])
    runtime.allocate(_request("p1"))
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE)
    collector.refresh()
    limit = PREFIX + "container_gpu_core_limit_ratio"
    [(labels, value)] = _parse(metrics.exposition())[limit]
    assert (labels["namespace"], labels["pod"], labels["container"], labels["model"], value) == (
        "ns", "p1", "main", "A100", 0.25)
    pods.set_containers([])  # terminated; the Runtime has not been told to release yet
    for _ in range(2):
        collector.refresh()
        assert limit not in _parse(metrics.exposition())
    collector.close()


def test_series_count_flat_under_1000_pod_cycles() -> None:
    runtime = InProcessRuntime(_gpus())
    pods = InMemoryPodResources()
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE)
    collector.refresh()
    baseline = _series_count(metrics)
    with_pod = None
    for cycle in range(1000):
        name = f"pod-{cycle}"
        runtime.allocate(_request(name, gpu=cycle % 4))
        pods.set_containers([_listed(name, gpu=cycle % 4)])
        collector.refresh()
        if cycle % 100 == 0:
            count = _series_count(metrics)
            assert with_pod is None or count == with_pod
            with_pod = count
        runtime.release(f"uid-{name}")
        pods.set_containers([])
        collector.refresh()
        if cycle % 100 == 0:
            assert _series_count(metrics) == baseline
    assert _series_count(metrics) == baseline
    assert with_pod is not None
    assert with_pod > baseline
    collector.close()


def test_hung_runtime_scrape_fast_last_snapshot_runtime_down(hanging: HangingRuntime) -> None:
    collector = SnapshotCollector(hanging, None, deadline_s=0.2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE)
    hanging.allocate(_request("p1"))
    assert collector.refresh()
    hanging.hang = True
    started = time.monotonic()
    assert not collector.refresh()
    assert time.monotonic() - started < 2
    started = time.monotonic()
    parsed = _parse(metrics.exposition())
    assert time.monotonic() - started < 0.5
    assert parsed[PREFIX + "exporter_runtime_up"][0][1] == 0.0
    assert parsed[PREFIX + "exporter_data_stale"][0][1] == 1.0
    assert parsed[PREFIX + "exporter_runtime_errors_total"][0][1] == 1.0
    assert len(parsed[PREFIX + "gpu_healthy"]) == 4
    assert len(parsed[PREFIX + "container_gpu_core_limit_ratio"]) == 1
    assert not collector.refresh()  # the hung pull is still running: no second thread, one more error
    assert collector.snapshot().runtime_errors == 2
    hanging.hang = False
    hanging.release_hang.set()
    wait_for(collector.refresh, interval=0.05)
    parsed = _parse(metrics.exposition())
    assert parsed[PREFIX + "exporter_runtime_up"][0][1] == 1.0
    assert parsed[PREFIX + "exporter_data_stale"][0][1] == 0.0
    collector.close()


def test_failing_runtime_keeps_last_data(hanging: HangingRuntime) -> None:
    collector = SnapshotCollector(hanging, None, deadline_s=1)
    assert collector.refresh()
    hanging.fail = True
    first = collector.snapshot()
    assert not collector.refresh()
    snap = collector.snapshot()
    assert snap.data is first.data
    assert snap.stale
    assert "socket gone" in snap.last_error
    collector.close()


def test_pod_resources_failure_keeps_last_list() -> None:
    runtime = InProcessRuntime(_gpus())
    runtime.allocate(_request("p1"))
    runtime.allocate(_request("p2", gpu=1))
    pods = InMemoryPodResources([_listed("p1")])
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    collector.refresh()
    pods.fail("kubelet down")
    assert collector.refresh()
    snap = collector.snapshot()
    assert [c.pod_name for c in snap.data.containers] == ["p1"]
    assert not snap.pod_resources_up
    assert snap.pod_resources_errors == 1
    assert snap.runtime_up
    collector.close()


def test_no_pod_list_yet_shows_no_containers() -> None:
    runtime = InProcessRuntime(_gpus())
    runtime.allocate(_request("p1"))
    pods = InMemoryPodResources()
    pods.fail("not yet")
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    collector.refresh()
    assert collector.snapshot().data.containers == ()
    assert len(collector.snapshot().data.gpus) == 4
    collector.close()


def test_unknown_values_have_no_sample_and_health_is_reported() -> None:
    runtime = InProcessRuntime(_gpus())
    runtime.set_health("GPU-1", Health.UNHEALTHY, "XID 79")
    data = runtime.exporter_data()
    assert [g.sample.utilization_percent for g in data.gpus] == [0.0] * 4  # the simulated usage model, idle
    unknown = build_exporter_data(runtime.list_devices(), (), UsageSample(at=100.0), allocated={})  # no reading
    snap = Snapshot(data=unknown, pulled_at=100.0, runtime_up=True)
    families = {f.name: f for f in build_families(snap, node=NODE, now=103.0)}
    assert families[PREFIX + "gpu_utilization_ratio"].samples == ()
    health = {labels[1]: v for labels, v in families[PREFIX + "gpu_healthy"].samples}
    assert health == {"0": 1.0, "1": 0.0, "2": 1.0, "3": 1.0}
    assert families[PREFIX + "node_gpu_core_allocatable_gpus"].samples == ((("node-a",), 3.0),)
    assert families[PREFIX + "exporter_data_age_seconds"].samples == ((("node-a",), 3.0),)


def test_metric_names_follow_conventions() -> None:
    suffixes = ("_bytes", "_ratio", "_celsius", "_watts", "_healthy", "_enabled", "_gpus", "_containers",
                "_info", "_allocated", "_instances")
    tables = (GPU_METRICS, CONTAINER_METRICS, NODE_METRICS, MIG_METRICS, CONTAINER_MIG_METRICS, NODE_MIG_METRICS)
    names = [spec.name for table in tables for spec in table]
    assert len(set(names)) == len(names)
    for name in names:
        assert name == name.lower(), name
        assert name.endswith(suffixes), name
    snap = Snapshot(data=InProcessRuntime(_gpus()).exporter_data(), runtime_up=True)
    for family in build_families(snap, node=NODE, now=0.0):
        assert family.name.startswith(PREFIX)


def test_container_resolves_with_memory_overrides(tmp_path: Path) -> None:
    settings = ExporterSettings(node_name="n1", runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0",
                                pod_resources_socket=tmp_path / "pr.sock")
    container = ExporterContainer(settings=settings)
    container.check_dependencies()
    runtime = InProcessRuntime(_gpus())
    pods = InMemoryPodResources()
    with container.runtime.override(providers.Object(runtime)), \
            container.pod_resources.override(providers.Object(pods)):
        app = container.app()
        try:
            assert isinstance(app, ExporterApp)
            app.collector.refresh()
            assert b"lj_runtimekit_gpu_healthy" in app.exposition()
        finally:
            app.collector.close()
            container.shutdown_resources()  # removes the logging resource's root handler


def test_settings_validation(tmp_path: Path) -> None:
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    for bad in ({"node_name": ""}, {"listen": "nope"}, {"listen": "h:99999"}, {"interval_s": 0}):
        with pytest.raises(SettingsError):
            ExporterSettings(**{"node_name": "n", "runtime_socket": tmp_path, **bad})  # type: ignore[arg-type]


def test_xid_counts_are_a_counter_by_code() -> None:
    data = InProcessRuntime(_gpus(1)).exporter_data()
    row = data.gpus[0]
    sample = GpuSample(uuid=row.sample.uuid, xid_counts={79: 2, 13: 1})
    data = ExporterData(gpus=(GpuData(row.device, sample),))
    metrics = PrometheusExporterMetrics(lambda: Snapshot(data=data, runtime_up=True), node=NODE)
    parsed = _parse(metrics.exposition())
    assert {labels["xid"]: v for labels, v in parsed[PREFIX + "gpu_xid_errors_total"]} == {"13": 1.0, "79": 2.0}


def test_data_part_is_rendered_once_per_pull_and_the_page_equals_a_full_render() -> None:
    runtime = InProcessRuntime(_gpus())
    runtime.allocate(_request("p1", gpu=1))
    pods = InMemoryPodResources([_listed("p1", gpu=1)])
    collector = SnapshotCollector(runtime, pods, deadline_s=2)
    now = [time.time() + 1.0]
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE, clock=lambda: now[0])
    collector.refresh()
    first = metrics.exposition()
    now[0] += 3.0
    second = metrics.exposition()
    assert metrics.data_renders == 1  # the second scrape reused the cached GPU/container/node text
    assert first != second  # ...but the data age moved on
    collector.refresh()
    metrics.exposition()
    assert metrics.data_renders == 2  # a new pull renders again
    # The cached page is exactly what one uncached render of every family gives.
    import prometheus_client
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Everything(prometheus_client.registry.Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            for family in build_families(collector.snapshot(), node=NODE, now=now[0]):
                cls = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
                metric = cls(family.name, family.help, labels=family.labels)
                for values, value in family.samples:
                    metric.add_metric(list(values), value)
                yield metric

    registry = prometheus_client.CollectorRegistry()
    registry.register(Everything())
    assert metrics.exposition() == prometheus_client.generate_latest(registry)
