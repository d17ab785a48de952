"""The exporter publishes the protocol it loaded: ``lj_runtimekit_protocol_info{component="exporter"}`` on its
page and the node annotation ``node_exporter_protocol`` (retried until the API server takes it)."""

from __future__ import annotations

import threading
from pathlib import Path

from dependency_injector import providers

from adapters.memory.cluster import InMemoryCluster
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.exporter.app import ExporterSettings
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.cluster import UnavailableError
from services.exporter.publish import ProtocolPublisher

NODE = "n1"


class RefusingCluster(InMemoryCluster):
    """Refuses the first ``refusals`` node patches (API server down)."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def patch_node_metadata(self, name: str, **kwargs: object) -> NodeObject:  # type: ignore[override]
        if self.refusals > 0:
            self.refusals -= 1
            raise UnavailableError("API server unavailable")
        return super().patch_node_metadata(name, **kwargs)  # type: ignore[arg-type]


def test_publisher_retries_until_the_annotation_is_written() -> None:
    cluster = RefusingCluster(refusals=2)
    cluster.create_node(NodeObject(NODE))
    publisher = ProtocolPublisher(cluster, node=NODE, key="k", fingerprint="abc", first_retry_s=0.01)
    publisher(threading.Event())
    assert publisher.published.is_set()
    assert cluster.refusals == 0
    assert cluster.get_node(NODE).annotations["k"] == "abc"


def test_publisher_stops_when_asked_without_writing() -> None:
    cluster = RefusingCluster(refusals=10**6)
    stop = threading.Event()
    stop.set()
    publisher = ProtocolPublisher(cluster, node=NODE, key="k", fingerprint="abc")
    publisher(stop)
    assert not publisher.published.is_set()


def test_exporter_publishes_its_protocol_on_the_node_and_on_its_page(tmp_path: Path) -> None:
    protocol_file = tmp_path / "protocol.yaml"
    protocol_file.write_text("memory-unit: 2Gi\n")
    expected = ProtocolConstants(memory_unit="2Gi").fingerprint()
    settings = ExporterSettings(node_name=NODE, runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0",
                                protocol_file=protocol_file)
    container = ExporterContainer(settings=settings)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE))
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GiB)])
    with container.runtime.override(providers.Object(runtime)), \
            container.cluster.override(providers.Object(cluster)):
        app = container.app()
        publisher = container.publisher()
        assert publisher is not None
        app.start()
        try:
            assert publisher.published.wait(5)
            page = app.exposition().decode()
        finally:
            app.stop()
    key = ProtocolConstants().annotations.node_exporter_protocol
    assert cluster.get_node(NODE).annotations[key] == expected
    assert f'lj_runtimekit_protocol_info{{component="exporter",fingerprint="{expected}"}} 1.0' in page
    assert page.count("# TYPE lj_runtimekit_protocol_info gauge") == 1


def test_without_a_cluster_nothing_is_published(tmp_path: Path) -> None:
    settings = ExporterSettings(node_name=NODE, runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0")
    container = ExporterContainer(settings=settings)
    with container.cluster.override(providers.Object(None)):
        assert container.publisher() is None
