"""Contract of the ResourceSlice port (``ports.resource_slices.ResourceSlicesApi``), against InMemoryResourceSlices
and KubernetesResourceSlices (a real kube-apiserver of the live version, marker ``k8s``, the contract suite's shared
control plane).

Behaviours covered:
- create then list: the content reads back equal (whole-GPU devices with typed attributes, capacity with request
  policies, allowMultipleAllocations; MIG devices consuming counters; a counter-set slice; a tainted device),
  with a resourceVersion and the Node owner;
- list selects by driver and node: another driver's or another node's slices are not listed;
- create of an existing name conflicts; update of a missing slice is NotFound; an update with a stale
  resourceVersion conflicts; update replaces the content and the generation;
- delete is idempotent (a missing slice is no error).
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
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import DeviceInfo
from ports.resource_slices import ConflictError, NotFoundError, ResourceSlicesApi

DRIVER = "gpu.lj-runtimekit.io"
GIB = 2**30


@attrs.frozen
class SlicesUnderTest:
    api: ResourceSlicesApi
    node: str
    owner: NodeOwner


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def slices(request: pytest.FixtureRequest) -> Iterator[SlicesUnderTest]:
    node = f"dra-{uuid.uuid4().hex[:8]}"
    if request.param == "memory":
        yield SlicesUnderTest(InMemoryResourceSlices(), node, NodeOwner(node, f"uid-{node}"))
        return
    from kubernetes import client

    from adapters.kubernetes.resourceslices import KubernetesResourceSlices

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    core = client.CoreV1Api(api_client)
    created = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    api = KubernetesResourceSlices(api_client)
    try:
        yield SlicesUnderTest(api, node, NodeOwner(node, created.metadata.uid))
    finally:
        for stored in api.list_resource_slices(driver=DRIVER, node=node):
            api.delete_resource_slice(stored.name)
        core.delete_node(node)
        api_client.close()


def _pool(cut: SlicesUnderTest, *, sick: bool = False) -> tuple[ResourceSlice, ...]:
    devices = [DeviceInfo(Gpu(0, GpuUuid("GPU-0"), "NVIDIA A100-SXM4-40GB", 40 * GIB + 7)),
               DeviceInfo(Gpu(1, GpuUuid("GPU-1"), "NVIDIA A100-SXM4-40GB", 40 * GIB,
                              Health.UNHEALTHY if sick else Health.HEALTHY)),
               DeviceInfo(Gpu(2, GpuUuid("GPU-2"), "NVIDIA A100-SXM4-40GB", 40 * GIB, mig_mode=MigMode.ENABLED))]
    pool = PoolState(cut.node, DRIVER, owner=cut.owner)
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
