"""Exporter series for a GPU gone from the Runtime's list while a container still holds it.

Behaviours covered:

* ``lj_runtimekit_gpu_missing`` is 1 for each GPU a container holds that the Runtime no longer lists (its index and
  UUID as the container's grant names them; ``model`` empty: nothing says what it was), and has no sample while
  every held GPU is listed;
* ``lj_runtimekit_container_gpu_missing`` is 1 for each container on such a GPU, with the container's labels;
* ``lj_runtimekit_node_missing_gpus`` counts the missing GPUs of the node (0 when none);
* the container's own series stay (its limits are still granted), the listed GPUs keep theirs; the families render
  through the Prometheus adapter.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.exporter.metrics import PREFIX, build_data_families
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid
from domain.runtime.types import ContainerData, ContainerGpuData, DeviceInfo, ExporterData, GpuData, GpuSample
from domain.units import GiB

NODE = "node-a"


def gpu_row(index: int) -> GpuData:
    uuid = GpuUuid(f"GPU-{index}")
    return GpuData(DeviceInfo(Gpu(index, uuid, "A100", 16 * GiB)), GpuSample(uuid), allocated_core_milli=250)


def container(pod: str, index: int) -> ContainerData:
    grant = ContainerGpuData(index, GpuUuid(f"GPU-{index}"), core_milli=250, memory_limit_bytes=GiB)
    return ContainerData(f"uid-{pod}", "ns", pod, "main", False, (grant,))


def samples(data: ExporterData, name: str) -> list[tuple[dict[str, str], float]]:
    [family] = [f for f in build_data_families(data, node=NODE) if f.name == PREFIX + name]
    return [(dict(zip(family.labels, values, strict=True)), value) for values, value in family.samples]


def test_a_held_gpu_the_runtime_no_longer_lists_is_named_missing() -> None:
    data = ExporterData(gpus=(gpu_row(0),), containers=(container("here", 0), container("stranded", 1)))
    assert samples(data, "gpu_missing") == [({"node": NODE, "gpu_index": "1", "gpu_uuid": "GPU-1", "model": ""}, 1.0)]
    [(labels, value)] = samples(data, "container_gpu_missing")
    assert (labels["pod"], labels["container"], labels["gpu_uuid"], value) == ("stranded", "main", "GPU-1", 1.0)
    assert samples(data, "node_missing_gpus") == [({"node": NODE}, 1.0)]
    limits = {labels["pod"]: labels["gpu_uuid"] for labels, _ in samples(data, "container_gpu_core_limit_ratio")}
    assert limits == {"here": "GPU-0", "stranded": "GPU-1"}


def test_nothing_is_missing_while_every_held_gpu_is_listed() -> None:
    data = ExporterData(gpus=(gpu_row(0), gpu_row(1)), containers=(container("a", 0), container("b", 1)))
    assert samples(data, "gpu_missing") == []
    assert samples(data, "container_gpu_missing") == []
    assert samples(data, "node_missing_gpus") == [({"node": NODE}, 0.0)]


def test_the_missing_gpu_families_render_through_prometheus() -> None:
    data = ExporterData(gpus=(gpu_row(0),), containers=(container("stranded", 1),))
    metrics = PrometheusExporterMetrics(lambda: Snapshot(data), node=NODE)
    rendered = {s.name: s for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples}
    assert rendered[PREFIX + "gpu_missing"].labels["gpu_uuid"] == "GPU-1"
    assert rendered[PREFIX + "node_missing_gpus"].value == 1.0
