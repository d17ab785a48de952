"""The DRA slice publisher (``services.dra.publisher``) over the in-process Runtime, an in-memory cluster and
in-memory ResourceSlices.

Behaviours covered:
- first publish writes the node's pool (generation 1, the Node as owner); a repeat writes nothing;
- a GPU turning unhealthy: the next publish updates the slice, generation 2, the device tainted; healthy again: 3;
- a restarted publisher with the same GPUs resumes: no write, the same generation;
- withdraw deletes every slice of the node and says how many; the node's slices only;
- a Runtime without the health-watch feature is refused at construction;
- follow() publishes, then ends when stopped (the stream closed), without raising;
- a recreated Node (new UID) gets its slices again under the new owner;
- a generation stored by another instance above this one's is resumed, never overwritten with a lower one;
- resync() puts back slices deleted by someone else (the kubelet when it starts), same generation.
"""

from __future__ import annotations

import threading

import pytest

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.runtime.errors import UnsupportedFeatureError
from entrypoints.runtime.inprocess import InProcessRuntime
from services.dra.publisher import SlicePublisher
from support.polling import eventually

DRIVER = "gpu.lj-runtimekit.io"


def world() -> tuple[InProcessRuntime, InMemoryCluster, InMemoryResourceSlices]:
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 16 * 2**30),
                                Gpu(1, GpuUuid("GPU-b"), "A100", 16 * 2**30)])
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject("node-a"))
    return runtime, cluster, InMemoryResourceSlices()


def publisher(runtime: InProcessRuntime, cluster: InMemoryCluster, slices: InMemoryResourceSlices) -> SlicePublisher:
    return SlicePublisher(node="node-a", runtime=runtime, slices=slices, nodes=cluster, protocol=ProtocolConstants())


def test_publish_writes_the_pool_once_with_the_node_as_owner() -> None:
    runtime, cluster, slices = world()
    it = publisher(runtime, cluster, slices)
    assert it.publish()
    (stored,) = slices.list_resource_slices(driver=DRIVER, node="node-a")
    assert (stored.generation, stored.slice_count) == (1, 1)
    assert [d.name for d in stored.content.devices] == ["gpu-0", "gpu-1"]
    assert stored.owner is not None
    assert stored.owner.name == "node-a"
    assert stored.owner.uid == cluster.get_node("node-a").uid
    writes = slices.writes
    assert not it.publish()
    assert slices.writes == writes


def test_a_health_change_bumps_the_generation_and_taints_the_device() -> None:
    runtime, cluster, slices = world()
    it = publisher(runtime, cluster, slices)
    it.publish()
    runtime.set_health("GPU-b", Health.UNHEALTHY, "XID 79")
    assert it.publish()
    (stored,) = slices.list_resource_slices(driver=DRIVER, node="node-a")
    assert stored.generation == 2
    assert [t.key for t in stored.content.devices[1].taints] == ["gpu.lj-runtimekit.io/unhealthy"]
    assert stored.content.devices[0].taints == ()
    runtime.set_health("GPU-b", Health.HEALTHY)
    assert it.publish()
    assert it.generation == 3


def test_a_restarted_publisher_resumes_without_writing() -> None:
    runtime, cluster, slices = world()
    publisher(runtime, cluster, slices).publish()
    runtime.set_health("GPU-a", Health.UNHEALTHY)
    publisher(runtime, cluster, slices).publish()
    writes = slices.writes
    again = publisher(runtime, cluster, slices)
    assert not again.publish()
    assert (slices.writes, again.generation) == (writes, 2)


def test_withdraw_deletes_the_nodes_slices_only() -> None:
    runtime, cluster, slices = world()
    cluster.create_node(NodeObject("node-b"))
    publisher(runtime, cluster, slices).publish()
    SlicePublisher(node="node-b", runtime=runtime, slices=slices, nodes=cluster,
                   protocol=ProtocolConstants()).publish()
    assert publisher(runtime, cluster, slices).withdraw() == 1
    assert slices.list_resource_slices(driver=DRIVER, node="node-a") == ()
    assert len(slices.list_resource_slices(driver=DRIVER, node="node-b")) == 1


def test_a_runtime_without_health_watch_is_refused() -> None:
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 2**34)], capabilities={"inventory"})
    cluster = InMemoryCluster()
    with pytest.raises(UnsupportedFeatureError, match="health-watch"):
        publisher(runtime, cluster, InMemoryResourceSlices())


def test_follow_publishes_and_ends_when_stopped() -> None:
    runtime, cluster, slices = world()
    it = publisher(runtime, cluster, slices)
    stop = threading.Event()
    done = threading.Event()

    def run() -> None:
        it.follow(stop)
        done.set()

    original = slices.create_resource_slice

    def create_then_stop(resource_slice):  # type: ignore[no-untyped-def]
        stored = original(resource_slice)
        stop.set()
        it.close()  # ends the stream's iteration: follow returns after its first publication
        return stored

    slices.create_resource_slice = create_then_stop  # type: ignore[method-assign]
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    assert done.wait(30)
    assert it.generation == 1
    assert len(slices.list_resource_slices(driver=DRIVER, node="node-a")) == 1


def test_a_recreated_node_gets_its_slices_under_the_new_owner() -> None:
    runtime, cluster, slices = world()
    it = publisher(runtime, cluster, slices)
    it.publish()
    old = cluster.get_node("node-a").uid
    cluster.delete_node("node-a")
    for stored in slices.list_resource_slices(driver=DRIVER, node="node-a"):  # what the garbage collector does
        slices.delete_resource_slice(stored.name)
    cluster.create_node(NodeObject("node-a"))
    assert it.publish()
    (stored,) = slices.list_resource_slices(driver=DRIVER, node="node-a")
    assert stored.owner is not None
    assert stored.owner.uid == cluster.get_node("node-a").uid != old


def test_a_higher_stored_generation_is_resumed_never_overwritten_with_a_lower_one() -> None:
    runtime, cluster, slices = world()
    first, second = publisher(runtime, cluster, slices), publisher(runtime, cluster, slices)
    first.publish()
    second.publish()  # resumes: generation 1
    for _ in range(3):  # the other instance moves on: generation 4 stored
        runtime.set_health("GPU-b", Health.UNHEALTHY)
        first.publish()
        runtime.set_health("GPU-b", Health.HEALTHY)
        first.publish()
    assert first.generation == 7
    runtime.set_health("GPU-a", Health.UNHEALTHY)
    assert second.publish()  # it reads generation 7 stored and goes past it
    (stored,) = slices.list_resource_slices(driver=DRIVER, node="node-a")
    assert stored.generation == 8 == second.generation


def test_resync_puts_back_slices_the_kubelet_deleted() -> None:
    runtime, cluster, slices = world()
    it = publisher(runtime, cluster, slices)
    assert it.publish()
    for stored in slices.list_resource_slices(driver=DRIVER, node="node-a"):  # the kubelet's wipe when it starts
        slices.delete_resource_slice(stored.name)
    stop = threading.Event()
    worker = threading.Thread(target=it.resync, args=(stop, 0.01), daemon=True)
    worker.start()
    try:
        (back,) = eventually(lambda: slices.list_resource_slices(driver=DRIVER, node="node-a"), 10, "slices back")
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    assert back.generation == 1  # same GPUs: the pool's generation does not move
    assert [d.name for d in back.content.devices] == ["gpu-0", "gpu-1"]
