"""Contract of the ResourceSlice ports (``ports.resource_slices.ResourceSlicesApi`` and ``ResourceSlicesWatch``),
against InMemoryResourceSlices and KubernetesResourceSlices (a real kube-apiserver of the live version, marker
``k8s``, the contract suite's shared control plane).

Behaviours covered:
- create then list: the content reads back equal (whole-GPU devices with typed attributes, capacity with request
  policies, allowMultipleAllocations; MIG devices consuming counters; a counter-set slice; a tainted device),
  with a resourceVersion and the Node owner;
- list selects by driver and node: another driver's or another node's slices are not listed;
- create of an existing name conflicts; update of a missing slice is NotFound; an update with a stale
  resourceVersion conflicts; update replaces the content and the generation;
- delete is idempotent (a missing slice is no error);
- the driver-wide list (the scheduler's informer): our driver's slices of two nodes read back equal, with their
  resourceVersions (and equal to the per-node list's), another driver's slice is not listed;
- the watch from that list's resourceVersion: a slice created later arrives as ADDED, its update (a device taint,
  the pool generation bumped) as MODIFIED, its delete as DELETED with the last state, in order, each at the
  write's resourceVersion; another driver's slice, written in between, yields no event;
- in memory only (a real server's 410 needs etcd compaction, which ``test_cluster_contract`` covers for the shared
  watch code, :mod:`adapters.kubernetes.rawjson`): a watch from before the bounded history or a compaction raises
  GoneError; the garbage collector's work (``delete_node_slices``) is watched as DELETED events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import attrs
import pytest

from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.dra.build import desired_content
from domain.dra.pool import PoolState
from domain.dra.slices import NodeOwner, ResourceSlice
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.objects import EventType, WatchEvent
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import DeviceInfo
from ports.resource_slices import ConflictError, GoneError, NotFoundError, ResourceSlicesApi, ResourceSlicesWatch

DRIVER = "gpu.lj-runtimekit.io"
GIB = 2**30


@attrs.frozen
class SlicesUnderTest:
    """Both ports of one adapter, and two nodes (``node``, ``other_node``) with their owners."""

    api: ResourceSlicesApi
    watch: ResourceSlicesWatch
    node: str
    owner: NodeOwner
    other_node: str
    other_owner: NodeOwner


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def slices(request: pytest.FixtureRequest) -> Iterator[SlicesUnderTest]:
    node, other = f"dra-{uuid.uuid4().hex[:8]}", f"dra-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        store = InMemoryResourceSlices()
        yield SlicesUnderTest(store, store, node, NodeOwner(node, f"uid-{node}"), other,
                              NodeOwner(other, f"uid-{other}"))
        return
    from kubernetes import client

    from adapters.kubernetes.resourceslices import KubernetesResourceSlices

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    core = client.CoreV1Api(api_client)
    created = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    second = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=other)))
    api = KubernetesResourceSlices(api_client)
    try:
        yield SlicesUnderTest(api, api, node, NodeOwner(node, created.metadata.uid), other,
                              NodeOwner(other, second.metadata.uid))
    finally:
        for name in (node, other):
            for stored in api.list_resource_slices(driver=DRIVER, node=name):
                api.delete_resource_slice(stored.name)
            core.delete_node(name)
        api_client.close()


def _pool(cut: SlicesUnderTest, *, sick: bool = False, other: bool = False) -> tuple[ResourceSlice, ...]:
    """The slices of a node with three GPUs (one MIG-enabled; GPU 1 unhealthy, hence tainted, when ``sick``), on
    ``cut.node`` or, when ``other``, on ``cut.other_node``."""
    devices = [DeviceInfo(Gpu(0, GpuUuid("GPU-0"), "NVIDIA A100-SXM4-40GB", 40 * GIB + 7)),
               DeviceInfo(Gpu(1, GpuUuid("GPU-1"), "NVIDIA A100-SXM4-40GB", 40 * GIB,
                              Health.UNHEALTHY if sick else Health.HEALTHY)),
               DeviceInfo(Gpu(2, GpuUuid("GPU-2"), "NVIDIA A100-SXM4-40GB", 40 * GIB, mig_mode=MigMode.ENABLED))]
    pool = PoolState(cut.other_node, DRIVER, owner=cut.other_owner) if other else PoolState(cut.node, DRIVER,
                                                                                             owner=cut.owner)
    pool.advance(desired_content(devices, protocol=ProtocolConstants(), mig_dynamic=True))
    return pool.slices()


def test_created_slices_list_back_with_equal_content_and_the_node_owner(slices: SlicesUnderTest) -> None:
    wanted = _pool(slices, sick=True)
    assert len(wanted) == 3  # whole GPUs, MIG devices, the counter set
    created = [slices.api.create_resource_slice(s) for s in wanted]
    assert all(c.resource_version for c in created)
    assert created == list(wanted)
    listed = slices.api.list_resource_slices(driver=DRIVER, node=slices.node)
    assert listed == wanted
    assert all(s.owner == slices.owner for s in listed)


def test_list_selects_by_driver_and_node(slices: SlicesUnderTest) -> None:
    (first, *_) = _pool(slices)
    other_driver = attrs.evolve(first, name=f"{first.name}-x", driver="other.example.com")
    slices.api.create_resource_slice(other_driver)
    try:
        assert slices.api.list_resource_slices(driver=DRIVER, node=slices.node) == ()
        assert slices.api.list_resource_slices(driver="other.example.com", node="no-such-node") == ()
        assert [s.name for s in slices.api.list_resource_slices(driver="other.example.com", node=slices.node)] == [
            other_driver.name]
    finally:
        slices.api.delete_resource_slice(other_driver.name)


def test_create_conflicts_update_replaces_and_checks_the_resource_version(slices: SlicesUnderTest) -> None:
    (first, *_) = _pool(slices)
    with pytest.raises(NotFoundError):
        slices.api.update_resource_slice(first)
    stored = slices.api.create_resource_slice(first)
    with pytest.raises(ConflictError):
        slices.api.create_resource_slice(first)
    (sick, *_) = _pool(slices, sick=True)
    newer = attrs.evolve(sick, generation=2, resource_version=stored.resource_version)
    updated = slices.api.update_resource_slice(newer)
    assert updated == newer
    assert updated.resource_version != stored.resource_version
    with pytest.raises(ConflictError):
        slices.api.update_resource_slice(attrs.evolve(newer, resource_version=stored.resource_version))
    assert slices.api.list_resource_slices(driver=DRIVER, node=slices.node) == (newer,)


def test_delete_is_idempotent(slices: SlicesUnderTest) -> None:
    (first, *_) = _pool(slices)
    slices.api.create_resource_slice(first)
    slices.api.delete_resource_slice(first.name)
    slices.api.delete_resource_slice(first.name)
    assert slices.api.list_resource_slices(driver=DRIVER, node=slices.node) == ()


def test_driver_list_holds_our_slices_of_every_node_and_not_another_drivers(slices: SlicesUnderTest) -> None:
    here, there = _pool(slices, sick=True), _pool(slices, other=True)  # sick: a tainted device
    created = {s.name: slices.api.create_resource_slice(s) for s in (*here, there[0])}
    (first, *_) = here
    foreign = slices.api.create_resource_slice(attrs.evolve(first, name=f"{first.name}-x", driver="other.example.com"))
    try:
        listing = slices.watch.list_driver_slices(driver=DRIVER)
        assert listing.resource_version
        assert foreign.name not in {s.name for s in listing.items}
        assert all(s.driver == DRIVER for s in listing.items)
        mine = {s.name: s for s in listing.items if s.node in {slices.node, slices.other_node}}
        assert mine == created
        assert {n: s.resource_version for n, s in mine.items()} == {n: s.resource_version for n, s in created.items()}
        assert {s.node for s in mine.values()} == {slices.node, slices.other_node}
        assert mine[there[0].name].owner == slices.other_owner
        per_node = {s.name: (s, s.resource_version) for node in (slices.node, slices.other_node)
                    for s in slices.api.list_resource_slices(driver=DRIVER, node=node)}
        assert per_node == {n: (s, s.resource_version) for n, s in mine.items()}  # the JSON and the model path agree
    finally:
        slices.api.delete_resource_slice(foreign.name)


def _events(slices: SlicesUnderTest, since: str, names: set[str], last: str) -> list[WatchEvent[ResourceSlice]]:
    """Events of slices named in ``names`` from ``since`` on, up to the deletion of ``last``."""
    seen: list[WatchEvent[ResourceSlice]] = []
    for _ in range(20):  # each watch lasts 2 s at most; the server may end it early
        for event in slices.watch.watch_driver_slices(driver=DRIVER, resource_version=since, timeout_seconds=2):
            since = event.resource_version or since
            if event.object is not None and event.object.name in names:
                seen.append(event)
                if (event.type, event.object.name) == (EventType.DELETED, last):
                    return seen
    return seen


def test_watch_delivers_added_modified_and_deleted_of_our_driver_only(slices: SlicesUnderTest) -> None:
    (whole, mig, *_) = _pool(slices)
    (sick, *_) = _pool(slices, sick=True)
    slices.api.create_resource_slice(mig)
    since = slices.watch.list_driver_slices(driver=DRIVER).resource_version
    foreign = slices.api.create_resource_slice(attrs.evolve(whole, name=f"{whole.name}-x", driver="other.example.com"))
    try:
        added = slices.api.create_resource_slice(whole)
        slices.api.update_resource_slice(attrs.evolve(foreign, generation=2))
        modified = slices.api.update_resource_slice(attrs.evolve(sick, generation=2,
                                                                 resource_version=added.resource_version))
        assert modified != attrs.evolve(added, generation=2)  # a device taint, besides the generation
        slices.api.delete_resource_slice(whole.name)
    finally:
        slices.api.delete_resource_slice(foreign.name)
    events = _events(slices, since, {whole.name, foreign.name}, whole.name)
    assert [(e.type, e.object) for e in events] == [
        (EventType.ADDED, added), (EventType.MODIFIED, modified), (EventType.DELETED, modified)]
    assert [e.object.resource_version for e in events[:2] if e.object] == [added.resource_version,
                                                                          modified.resource_version]
    assert all(e.resource_version for e in events)


def test_memory_watch_from_before_the_history_is_gone() -> None:
    store = InMemoryResourceSlices(history_limit=2)
    cut = SlicesUnderTest(store, store, "node-a", NodeOwner("node-a", "uid-a"), "node-b", NodeOwner("node-b", "uid-b"))
    start = store.list_driver_slices(driver=DRIVER).resource_version
    for stored in _pool(cut):
        store.create_resource_slice(stored)
    with pytest.raises(GoneError):
        list(store.watch_driver_slices(driver=DRIVER, resource_version=start, timeout_seconds=0))
    now = store.list_driver_slices(driver=DRIVER).resource_version
    (gone, *_) = store.list_driver_slices(driver=DRIVER).items
    store.delete_resource_slice(gone.name)  # one change: within the window
    assert [(e.type, e.object) for e in store.watch_driver_slices(driver=DRIVER, resource_version=now,
                                                                   timeout_seconds=0)] == [(EventType.DELETED, gone)]
    store.compact()
    with pytest.raises(GoneError):
        list(store.watch_driver_slices(driver=DRIVER, resource_version=now, timeout_seconds=0))


def test_memory_node_deletion_is_watched_as_deleted_slices() -> None:
    store = InMemoryResourceSlices()
    cut = SlicesUnderTest(store, store, "node-a", NodeOwner("node-a", "uid-a"), "node-b", NodeOwner("node-b", "uid-b"))
    created = [store.create_resource_slice(s) for s in (*_pool(cut), *_pool(cut, other=True))]
    since = store.list_driver_slices(driver=DRIVER).resource_version
    assert store.delete_node_slices("node-a") == 3
    events = list(store.watch_driver_slices(driver=DRIVER, resource_version=since, timeout_seconds=0))
    assert [(e.type, e.object) for e in events] == [(EventType.DELETED, s) for s in created if s.node == "node-a"]
