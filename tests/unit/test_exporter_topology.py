"""The exporter's topology series (domain.exporter.topology): link info per ordered GPU pair, NVLink counts and
per-GPU topology info, on the simulated machines, through the gRPC wire form and the Prometheus page."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from adapters.grpc.translate import exporter_from_pb, exporter_to_pb
from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.exporter.metrics import PREFIX
from domain.gpu import Gpu, GpuUuid
from domain.topology.machines import machine_topology
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from services.exporter.collector import SnapshotCollector

NODE = "n1"
Rows = dict[str, list[tuple[dict[str, str], float]]]


def page(machine: str, count: int = 4) -> Rows:
    gpus = [Gpu(i, GpuUuid(f"GPU-{i}"), "H100", 80 * GiB) for i in range(count)]
    runtime = InProcessRuntime(gpus, topology=machine_topology(machine, count))
    collector = SnapshotCollector(runtime, None, deadline_s=2)
    try:
        assert collector.refresh()
        text = PrometheusExporterMetrics(collector.snapshot, node=NODE).exposition()
    finally:
        collector.close()
    out: Rows = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def links(rows: Rows) -> dict[tuple[str, str], str]:
    found = {}
    for labels, value in rows.get(PREFIX + "gpu_link_info", []):
        assert value == 1.0
        assert labels["node"] == NODE
        assert labels["gpu_uuid"] == f"GPU-{labels['gpu_index']}"
        assert labels["peer_uuid"] == f"GPU-{labels['peer_index']}"
        found[(labels["gpu_index"], labels["peer_index"])] = labels["type"]
    return found


def test_islands_machine_links_and_counts() -> None:
    rows = page("nvlink-islands-2x4", 8)
    found = links(rows)
    assert len(found) == 56
    assert found[("0", "3")] == found[("3", "0")] == "nvlink"
    assert found[("3", "4")] == "system"
    counts = {(labels["gpu_index"], labels["peer_index"]): value for labels, value in rows[PREFIX + "gpu_nvlink_links"]}
    assert len(counts) == 24  # 2 islands x 4 x 3 ordered pairs
    assert counts[("0", "1")] == 4.0
    info = {labels["gpu_index"]: (labels["numa_node"], labels["pcie_root"], labels["nvlink_island"])
            for labels, _ in rows[PREFIX + "gpu_topology_info"]}
    assert info["0"] == ("0", "pci0000:10", "0")
    assert info["7"] == ("1", "pci0000:40", "1")


def test_pcie_pairs_machine_link_types() -> None:
    found = links(page("pcie-pairs-2numa", 8))
    assert len(found) == 56
    assert found[("0", "1")] == found[("7", "6")] == "pcie-root"
    assert found[("0", "2")] == found[("5", "7")] == "numa"
    assert found[("3", "4")] == "system"
    assert sorted(found.values()).count("pcie-root") == 8


def test_no_topology_no_series() -> None:
    rows = page("none")
    assert not rows.get(PREFIX + "gpu_link_info")
    assert not rows.get(PREFIX + "gpu_topology_info")
    assert rows[PREFIX + "node_gpus"][0][1] == 4.0


def test_exporter_data_carries_the_topology_over_the_wire() -> None:
    gpus = [Gpu(i, GpuUuid(f"GPU-{i}"), "H100", 80 * GiB) for i in range(2)]
    data = InProcessRuntime(gpus, topology=machine_topology("nvswitch8", 2)).exporter_data()
    assert exporter_from_pb(exporter_to_pb(data)) == data
    assert data.gpus[0].device.topology is not None
