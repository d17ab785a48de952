"""The device plugin and topology: the inventory annotation carries the Runtime's topology, the scheduler reads it
back, and GetPreferredAllocation of whole GPUs without a plan prefers the best-connected set
(domain.device_plugin.topology)."""

from __future__ import annotations

from adapters.memory.cluster import InMemoryCluster
from domain.device_plugin.devices import DeviceId, ResourceKind
from domain.device_plugin.topology import connected_gpus
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import NodeObject
from domain.kube.translate import read_node
from domain.topology.machines import machine_topology
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from services.device_plugin.service import DevicePluginService
from support.kube_builders import PROTOCOL, Clock
from support.mig_builders import ALLOCATABLE

NODE = "n1"
GPUS = [Gpu(i, GpuUuid(f"GPU-{i}"), "H100", 80 * GiB) for i in range(8)]


def plugin(machine: str) -> tuple[DevicePluginService, InMemoryCluster]:
    runtime = InProcessRuntime(GPUS, topology=machine_topology(machine, 8))
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE, allocatable=dict(ALLOCATABLE)))
    return DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL, clock=Clock()), cluster


def ids(kind: ResourceKind, *indexes: int) -> list[str]:
    return [str(DeviceId(GpuUuid(f"GPU-{i}"), kind, 0)) for i in indexes]


def test_inventory_annotation_carries_the_topology_to_the_scheduler() -> None:
    service, cluster = plugin("nvlink-islands-2x4")
    service.publish_inventory()
    reading = read_node(cluster.get_node(NODE), PROTOCOL, now=Clock()())
    assert reading.reason == ""
    assert reading.counted.topology == machine_topology("nvlink-islands-2x4", 8)
    bare, bare_cluster = plugin("none")
    bare.publish_inventory()
    assert read_node(bare_cluster.get_node(NODE), PROTOCOL, now=Clock()()).counted.topology is None


def test_preferred_allocation_without_a_plan_prefers_the_connected_set() -> None:
    service, _ = plugin("nvlink-islands-2x4")
    offered = ids(ResourceKind.GPU, 0, 1, 2, 3, 5, 6, 7)  # GPU 4 is taken: island 0-3 stays whole
    assert service.preferred(ResourceKind.GPU, offered, [], 2) == tuple(ids(ResourceKind.GPU, 6, 7))
    assert service.preferred(ResourceKind.GPU, offered, [], 4) == tuple(ids(ResourceKind.GPU, 0, 1, 2, 3))
    # must-include IDs keep kubelet's order after them
    assert service.preferred(ResourceKind.GPU, offered, ids(ResourceKind.GPU, 0), 2) == tuple(
        ids(ResourceKind.GPU, 0, 1))


def test_preferred_allocation_without_topology_keeps_kubelets_order() -> None:
    service, _ = plugin("none")
    offered = ids(ResourceKind.GPU, 0, 1, 2, 3, 5, 6, 7)
    assert service.preferred(ResourceKind.GPU, offered, [], 2) == tuple(ids(ResourceKind.GPU, 0, 1))


def test_connected_gpus_applies_to_whole_gpus_only() -> None:
    topology = machine_topology("pcie-pairs-2numa", 8)
    offered = ids(ResourceKind.GPU, 1, 2, 6, 7)
    assert connected_gpus(ResourceKind.GPU, offered, [], 2, GPUS, topology) == (GpuUuid("GPU-6"), GpuUuid("GPU-7"))
    assert connected_gpus(ResourceKind.CORE, ids(ResourceKind.CORE, 1, 2, 6, 7), [], 2, GPUS, topology) == ()
    assert connected_gpus(ResourceKind.GPU, offered, [], 2, GPUS, None) == ()
    assert connected_gpus(ResourceKind.GPU, offered, [], 5, GPUS, topology) == ()
    assert connected_gpus(ResourceKind.GPU, ["garbage", *offered], [], 2, GPUS, topology) == (
        GpuUuid("GPU-6"), GpuUuid("GPU-7"))


def test_list_and_watch_devices_carry_the_numa_node_as_topology_hint() -> None:
    from adapters.grpc.device_plugin import _device

    service, _ = plugin("pcie-pairs-2numa")
    _, devices = service.devices(ResourceKind.GPU)
    assert [d.numa_node for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    wire = _device(devices[5])
    assert [node.ID for node in wire.topology.nodes] == [1]
    bare, _ = plugin("none")
    _, plain = bare.devices(ResourceKind.GPU)
    assert {d.numa_node for d in plain} == {None}
    assert not _device(plain[0]).HasField("topology")
