"""Composition smoke test of ``ljrk device-plugin``: the container's dependencies are declared and every provider
resolves with in-memory overrides (no sockets, no cluster); ``--memory-unit`` overrides the protocol's unit and
settings reject bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from dependency_injector import providers

from adapters.memory.cluster import InMemoryCluster
from domain.device_plugin.devices import ResourceKind
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import NodeObject
from entrypoints.device_plugin.app import DevicePluginApp, DevicePluginSettings, SettingsError
from entrypoints.device_plugin.containers import DevicePluginContainer
from entrypoints.runtime.inprocess import InProcessRuntime


def test_container_resolves_with_memory_overrides(tmp_path: Path) -> None:
    settings = DevicePluginSettings(node_name="n1", runtime_socket=tmp_path / "rt.sock",
                                    device_plugin_dir=tmp_path, memory_unit="4Gi")
    container = DevicePluginContainer(settings=settings)
    container.check_dependencies()
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject("n1"))
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 16 * 2**30)])
    with container.cluster.override(providers.Object(cluster)), container.runtime.override(providers.Object(runtime)):
        app = container.app()
        assert isinstance(app, DevicePluginApp)
        assert len(container.service().devices(ResourceKind.MEMORY)[1]) == 4
        assert container.protocol().memory_unit == "4Gi"


def test_settings_validation(tmp_path: Path) -> None:
    with pytest.raises(SettingsError):
        DevicePluginSettings(node_name="", runtime_socket=tmp_path)
    with pytest.raises(SettingsError):
        DevicePluginSettings(node_name="n", runtime_socket=tmp_path, heartbeat_s=0)


def test_a_runtime_lacking_a_required_feature_is_refused_at_start() -> None:
    """Components check GetVersion at start and refuse a feature the Runtime lacks, clearly."""
    from adapters.memory.cluster import InMemoryCluster
    from domain.gpu import Gpu, GpuUuid
    from domain.kube.protocol import ProtocolConstants
    from domain.runtime.errors import UnsupportedFeatureError
    from domain.units import GiB
    from entrypoints.runtime.inprocess import InProcessRuntime
    from services.device_plugin.service import REQUIRED_FEATURES, DevicePluginService

    gpus = [Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GiB)]
    old = InProcessRuntime(gpus, capabilities={"inventory", "allocate"})
    with pytest.raises(UnsupportedFeatureError, match="health-watch"):
        DevicePluginService(node="n1", runtime=old, cluster=InMemoryCluster(), protocol=ProtocolConstants())
    full = InProcessRuntime(gpus)
    service = DevicePluginService(node="n1", runtime=full, cluster=InMemoryCluster(), protocol=ProtocolConstants())
    assert [g.uuid for g in service.gpus()] == ["GPU-0"]
    assert set(REQUIRED_FEATURES) <= set(full.get_version().capabilities)
