"""The DRA driver's ResourceSlices and the shipped DeviceClasses against a real kube-apiserver (the live version,
1.37.2) with the garbage collector of kube-controller-manager; no feature gate is set: consumable capacity and
partitionable devices are beta and on, device taints GA, in 1.37.

Behaviours covered:
- the publisher (``services.dra.publisher`` over ``adapters.kubernetes.resourceslices``, the in-process reference
  Runtime with two whole GPUs and one dynamic-MIG A100) creates the node's pool: generation 1, every slice with
  resourceSliceCount, devices with capacity and allowMultipleAllocations, MIG devices consuming counters of the
  counter-set slice, the Node as owner;
- a GPU turning unhealthy: the slices are updated with generation 2 and the device carries the unhealthy taint (the
  server stamps timeAdded); a restarted publisher writes nothing;
- deploy/dra/04-deviceclasses.yaml is accepted by the server (server-side apply), the whole-GPU class with
  extendedResourceName;
- withdraw (the driver leaving for good) deletes the node's slices; deleting the Node makes the garbage collector
  delete slices published again (owner reference).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane

from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.protocol import ProtocolConstants, parse_quantity
from domain.mig.gpu import PlacementMode

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
DEVICE_CLASSES = REPO / "deploy" / "dra" / "04-deviceclasses.yaml"
DRIVER = ProtocolConstants().dra.driver
GIB = 2**30


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir, controller_manager=True, controllers=("garbagecollector",))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def world(plane: ControlPlane) -> Iterator[dict[str, Any]]:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster
    from adapters.kubernetes.resourceslices import KubernetesResourceSlices
    from entrypoints.runtime.inprocess import InProcessRuntime

    api_client = plane.api_client()
    node = f"dra-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api_client).create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "NVIDIA A100-SXM4-40GB", 40 * GIB),
                                Gpu(1, GpuUuid("GPU-b"), "NVIDIA A100-SXM4-40GB", 40 * GIB, mig_mode=MigMode.ENABLED)],
                               mig_layouts={1: ()}, mig_mode=PlacementMode.DYNAMIC)
    try:
        yield {"client": api_client, "node": node, "runtime": runtime, "cluster": KubernetesCluster(api_client),
               "slices": KubernetesResourceSlices(api_client), "raw": client.ResourceV1Api(api_client)}
    finally:
        api_client.close()


def _publisher(world: dict[str, Any]) -> Any:
    from services.dra.publisher import SlicePublisher

    return SlicePublisher(node=world["node"], runtime=world["runtime"], slices=world["slices"],
                          nodes=world["cluster"], protocol=ProtocolConstants())


def _stored(world: dict[str, Any]) -> list[Any]:
    listing = world["raw"].list_resource_slice(field_selector=f"spec.driver={DRIVER},spec.nodeName={world['node']}")
    return sorted(listing.items, key=lambda s: s.metadata.name)


def test_slices_are_published_updated_on_health_and_withdrawn(world: dict[str, Any]) -> None:
    publisher = _publisher(world)
    assert publisher.publish()
    stored = _stored(world)
    assert [s.spec.pool.generation for s in stored] == [1] * len(stored)
    assert {s.spec.pool.resource_slice_count for s in stored} == {len(stored)}
    whole = stored[0].spec.devices
    assert [d.name for d in whole] == ["gpu-0"]
    assert whole[0].allow_multiple_allocations is True
    assert whole[0].capacity["cores"].request_policy.valid_range.step == "1"
    assert parse_quantity("memory", whole[0].capacity["memory"].value) == 40 * GIB
    mig = [d for s in stored for d in s.spec.devices or () if d.consumes_counters]
    assert len(mig) == 25
    counters = [c for s in stored for c in s.spec.shared_counters or ()]
    assert [c.name for c in counters] == ["gpu-1"]
    owner = stored[0].metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("Node", world["node"])

    world["runtime"].set_health("GPU-a", Health.UNHEALTHY, "XID 79")
    assert publisher.publish()
    stored = _stored(world)
    assert {s.spec.pool.generation for s in stored} == {2}
    (taint,) = stored[0].spec.devices[0].taints
    assert (taint.key, taint.effect) == (f"{DRIVER}/unhealthy", "NoSchedule")
    assert taint.time_added is not None
    assert not _publisher(world).publish()  # a restart with the same GPUs writes nothing

    assert publisher.withdraw() == len(stored)
    assert _stored(world) == []


def test_shipped_device_classes_are_accepted(plane: ControlPlane, world: dict[str, Any]) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"
    subprocess.run([str(kubectl), "--kubeconfig", str(plane.kubeconfig), "apply", "--server-side",
                    "--field-manager=lj-runtimekit", "-f", str(DEVICE_CLASSES)], check=True, capture_output=True,
                   text=True, timeout=60)
    classes = {c.metadata.name: c for c in world["raw"].list_device_class().items}
    protocol = ProtocolConstants()
    assert classes[protocol.dra.device_class_gpu].spec.extended_resource_name == protocol.resources.gpu
    assert protocol.dra.device_class_share in classes
    assert "mig-1g-5gb-me.lj-runtimekit.io" in classes


def test_deleting_the_node_removes_its_slices(world: dict[str, Any]) -> None:
    from kubernetes import client, watch

    _publisher(world).publish()
    names = {s.metadata.name for s in _stored(world)}
    listing = world["raw"].list_resource_slice(field_selector=f"spec.nodeName={world['node']}")
    client.CoreV1Api(world["client"]).delete_node(world["node"])
    gone: set[str] = set()
    stream = watch.Watch().stream(world["raw"].list_resource_slice, field_selector=f"spec.nodeName={world['node']}",
                                  resource_version=listing.metadata.resource_version, timeout_seconds=90)
    for event in stream:  # the garbage collector's deletes, as they happen (no polling)
        if event["type"] == "DELETED":
            gone.add(event["object"].metadata.name)
        if gone >= names:
            break
    assert gone >= names
    assert _stored(world) == []
