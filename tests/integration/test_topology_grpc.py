"""GPU topology end to end over the Runtime's real unix socket: ``ljrk runtime --simulated-topology`` (the entrypoint's
own container) → ListDevices / ExporterGetDataList over gRPC → the device plugin's inventory annotation → the
scheduler's books → a pod requiring an NVLink set planned on one island, and refused with the reason when none is
left; the DRA slices and the exporter read the same topology from the wire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.grpc import GrpcNodeRuntime
from adapters.memory.cluster import InMemoryCluster
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.dra.build import desired_content
from domain.exporter.topology import topology_samples
from domain.kube.objects import ContainerSpec, NodeObject, PodObject
from domain.ledger import ClusterLedger
from domain.runtime.features import GPU_TOPOLOGY
from domain.scheduling.sync import LedgerSync
from domain.topology.machines import machine_topology
from entrypoints.runtime.app import RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from services.device_plugin.service import DevicePluginService
from support.kube_builders import PROTOCOL, Clock, make_scheduler
from support.mig_builders import ALLOCATABLE

NODE = "node-1"


@pytest.fixture
def runtime(sock_dir: Path) -> Iterator[GrpcNodeRuntime]:
    settings = RuntimeSettings(socket=sock_dir / "runtime.sock", backend="simulated", simulated_gpus="8x80Gi:H100",
                               simulated_topology="nvlink-islands-2x4", state_dir=sock_dir / "state", seed=NODE)
    container = RuntimeContainer(settings=settings)
    app = container.app()
    app.start()
    client = GrpcNodeRuntime.connect(settings.socket, timeout_s=5)
    client.wait_ready(5)
    yield client
    client.close()
    app.stop(0.5)


def _pod(uid: str, gpus: int) -> PodObject:
    return PodObject(uid, "default", uid, (ContainerSpec("main", limits={PROTOCOL.resources.gpu: str(gpus)}),),
                     annotations={PROTOCOL.annotations.pod_gpu_topology: "nvlink"},
                     scheduler_name=PROTOCOL.scheduler_name)


def test_topology_flows_from_the_runtime_socket_to_the_plan(runtime: GrpcNodeRuntime) -> None:
    assert runtime.get_version().supports(GPU_TOPOLOGY)
    expected = machine_topology("nvlink-islands-2x4", 8)
    assert expected is not None
    listed = runtime.list_devices()
    assert {d.gpu.index: d.topology for d in listed} == dict(expected.gpus)

    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE, allocatable=dict(ALLOCATABLE)))
    plugin = DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL, clock=Clock())
    plugin.publish_inventory()
    sync = LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock())
    sync.on_node(cluster.get_node(NODE))
    scheduler = make_scheduler(sync)
    first = sync.schedule(scheduler, _pod("u1", 4))
    assert first.allocation is not None
    assert [g.gpu_index for g in first.allocation.containers[0].grants] == [0, 1, 2, 3]
    second = sync.schedule(scheduler, _pod("u2", 2))
    assert second.allocation is not None
    assert [g.gpu_index for g in second.allocation.containers[0].grants] == [4, 5]
    fresh = LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock())
    fresh.on_node(cluster.get_node(NODE))
    held = tuple(GpuGrant(i, 1000, listed[i].gpu.memory_bytes) for i in (0, 4))
    fresh.ledger.reserve(PodAllocation("held", NODE, (ContainerGrant("m", held, whole=True),)))
    third = fresh.schedule(make_scheduler(fresh), _pod("u3", 4))  # 6 GPUs free, 3 on each island
    assert third.allocation is None
    assert "no 4 free GPUs connected by nvlink or better" in third.reason

    (content,) = desired_content(listed, protocol=PROTOCOL)
    assert [d.attributes["nvlinkIsland"] for d in content.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    links, counts, places = topology_samples(runtime.exporter_data(), node=NODE)
    assert (len(links), len(counts), len(places)) == (56, 24, 8)
