"""A MIG pod end to end over the real device plugin, the fake kubelet and the in-process Runtime behind gRPC.

Covers, for the static and the dynamic strategy: the device plugin publishes the node's MIG layout and strategy in
the inventory annotation and registers one kubelet resource per MIG profile it serves (names from the shared
table); the scheduler service reads the annotation into its MIG books, plans a pending pod asking for
``alibabacloud.com/mig-3g.40gb: 1``, writes the plan (the instance, or the placement to create) and binds it;
kubelet admits the pod: GetPreferredAllocation, Allocate on the MIG resource, one Runtime Allocate with the planned
instance, envs ``NVIDIA_VISIBLE_DEVICES=MIG-…``. Static: the pod gets the pre-created instance the plan names and a
second pod the other one (bound once the device plugin marked the first allocated); dynamic: the Runtime creates
the instance at the planned start and Release destroys it. The time-sharing GPU of the node advertises
gpu/core/memory IDs, the MIG GPU none. A pod asking for an unknown profile is refused by the scheduler with
"unknown profile" (B30). Instances created in static mode after start (a Runtime restart with a new layout) make
the plugin register the new resource.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dp_world import NAMES, NODE, PROTOCOL, World, make_world

from adapters.grpc import GrpcRuntimeServer
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations import decode_inventory, decode_mig_plan
from domain.kube.migresources import mig_resource_names
from domain.kube.objects import ContainerSpec, PodObject
from domain.mig.gpu import PlacementMode
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from services.scheduler.service import SchedulerService, ServiceConfig
from support.polling import wait_for

MIG_UUID = GpuUuid("GPU-00000000-aaaa-bbbb-cccc-000000000000")
SHARED_UUID = GpuUuid("GPU-00000001-aaaa-bbbb-cccc-000000000000")
INVENTORY = [
    Gpu(0, MIG_UUID, "NVIDIA A100-SXM4-80GB", 80 * GiB, mig_mode=MigMode.ENABLED),
    Gpu(1, SHARED_UUID, "A100", 16 * GiB),
]
RESOURCE = "alibabacloud.com/mig-3g.40gb"
ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "pods": "110"}


def scheduler(world: World, mode: PlacementMode) -> SchedulerService:
    service = SchedulerService(world.cluster, PROTOCOL, PrometheusSchedulerMetrics(),
                               config=ServiceConfig(policy="binpack", mig_strategy=mode.value))
    world.service.publish_inventory()
    service.on_node(world.cluster.get_node(NODE))
    return service


def mig_pod(world: World, service: SchedulerService, name: str, resource: str = RESOURCE) -> PodObject:
    pod = world.cluster.create_pod(PodObject("", "default", name, (ContainerSpec("main", limits={resource: "1"}),),
                                             scheduler_name=PROTOCOL.scheduler_name))
    service.on_pod(pod)
    return pod


def place(world: World, service: SchedulerService, pod: PodObject) -> PodObject:
    """Schedule and commit ``pod``; returns the bound pod as the API has it (delivered to the service)."""
    result = service.schedule_pod(pod)
    assert result.allocation is not None, result.reason
    service.commit(pod, result.allocation)
    bound = world.cluster.get_pod("default", pod.name)
    service.on_pod(bound)
    return bound


def marked(world: World, service: SchedulerService, name: str) -> None:
    """Wait for the device plugin's allocated mark on pod ``name`` and deliver the pod to the scheduler."""
    mark = PROTOCOL.annotations.pod_allocated
    assert wait_for(lambda: mark in world.cluster.get_pod("default", name).annotations), f"{name} not marked"
    service.on_pod(world.cluster.get_pod("default", name))


@pytest.fixture(params=[PlacementMode.STATIC, PlacementMode.DYNAMIC], ids=["static", "dynamic"])
def mig_world(request: pytest.FixtureRequest) -> Iterator[tuple[World, PlacementMode]]:
    mode = request.param
    layouts = {0: [("3g.40gb", 0), ("3g.40gb", 4)]} if mode is PlacementMode.STATIC else None
    world = make_world(inventory=INVENTORY, mig_layouts=layouts, mig_mode=mode, allocatable=ALLOCATABLE)
    try:
        assert wait_for(lambda: RESOURCE in world.kubelet.devices and all(
            n in world.kubelet.devices for n in NAMES.values())), world.kubelet.devices.keys()
        yield world, mode
    finally:
        world.close()


def test_mig_pod_is_planned_bound_admitted_and_gets_its_instance(mig_world: tuple[World, PlacementMode]) -> None:
    world, mode = mig_world
    service = scheduler(world, mode)
    key = PROTOCOL.annotations.node_inventory
    record = decode_inventory(world.cluster.get_node(NODE).annotations[key], key=key)
    assert record.mig_strategy == mode.value
    assert service.sync.mig.node_names() == [NODE]

    bound = place(world, service, mig_pod(world, service, "a"))
    [plan] = decode_mig_plan(bound.annotations[PROTOCOL.annotations.pod_plan], key="plan", pod_uid=bound.uid,
                             node=NODE, node_gpus=INVENTORY)
    [instance] = plan.instances
    assert (instance.gpu_uuid, instance.profile) == (MIG_UUID, "3g.40gb")
    assert instance.create is (mode is PlacementMode.DYNAMIC)

    before = {i.start for d in world.in_process_runtime.list_devices() for i in d.mig_instances}
    assert before == ({0, 4} if mode is PlacementMode.STATIC else set())  # dynamic: created at Allocate
    result = world.kubelet.admit_pod(bound)
    assert result.admitted, result.message
    assert result.admission is not None
    [container] = result.admission.containers
    assert list(container.devices) == [RESOURCE]
    envs = dict(container.runtime.envs)
    assert envs["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    [request] = world.runtime.requests
    [planned] = request.mig
    assert (planned.uuid, planned.profile, planned.start, planned.create, request.gpus) == (
        MIG_UUID, "3g.40gb", instance.start, mode is PlacementMode.DYNAMIC, ())
    listed = {i.start: i for d in world.in_process_runtime.list_devices() for i in d.mig_instances}
    granted = listed[instance.start]
    assert granted.uuid == envs["NVIDIA_VISIBLE_DEVICES"]
    assert granted.owner is not None
    assert granted.owner.pod_uid == bound.uid
    if mode is PlacementMode.STATIC:  # kubelet was steered to the planned instance's own device ID
        assert container.devices[RESOURCE] == (f"{MIG_UUID}::mig-3g.40gb::{granted.gpu_instance_id}",)

    marked(world, service, "a")  # lets the scheduler bind a second identical request
    # the scheduler sees the instance held on the next inventory; a second pod gets the other 3g.40gb slot
    world.service.publish_inventory()
    service.on_node(world.cluster.get_node(NODE))
    second = place(world, service, mig_pod(world, service, "b"))
    assert world.kubelet.admit_pod(second).admitted
    marked(world, service, "b")
    starts = {r.mig[0].start for r in world.runtime.requests}
    assert starts == {0, 4}
    third = service.schedule_pod(mig_pod(world, service, "c"))
    assert third.allocation is None
    assert "3g.40gb" in third.reason

    # the pod ends: the Runtime releases it (dynamic: destroys the instance), the scheduler frees the slot
    assert world.in_process_runtime.release(bound.uid) == 1
    after = {i.start for d in world.in_process_runtime.list_devices() for i in d.mig_instances}
    assert (instance.start in after) is (mode is PlacementMode.STATIC)
    world.cluster.delete_pod("default", "a", grace_period_seconds=0)
    service.on_pod_deleted(bound)
    assert service.sync.books.record(bound.uid) is None
    world.service.publish_inventory()
    service.on_node(world.cluster.get_node(NODE))
    assert service.schedule_pod(world.cluster.get_pod("default", "c")).allocation is not None


def test_time_sharing_ids_only_on_the_non_mig_gpu(mig_world: tuple[World, PlacementMode]) -> None:
    world, _ = mig_world
    for name in NAMES.values():
        assert world.kubelet.devices[name], name
        assert all(ident.startswith(SHARED_UUID) for ident in world.kubelet.devices[name])
    assert all(ident.startswith(MIG_UUID) for ident in world.kubelet.devices[RESOURCE])


def test_registered_mig_names_come_from_the_shared_table(mig_world: tuple[World, PlacementMode]) -> None:
    world, mode = mig_world
    expected = set(mig_resource_names(PROTOCOL, ["A100-80GB"])) if mode is PlacementMode.DYNAMIC else {RESOURCE}
    assert wait_for(lambda: expected <= set(world.kubelet.devices))
    registered = {n for n in world.kubelet.devices if "/mig-" in n}
    assert registered == set(world.app.registered.values()) - set(NAMES.values())
    if mode is PlacementMode.DYNAMIC:  # every profile of the GPU's model, max_instances IDs per GPU
        assert registered == expected
        assert len(world.kubelet.devices["alibabacloud.com/mig-1g.10gb"]) == 7
    else:  # the profiles of the listed instances, one ID per instance
        assert registered == {RESOURCE}
        assert len(world.kubelet.devices[RESOURCE]) == 2
    assert registered <= set(mig_resource_names(PROTOCOL))


def test_unknown_profile_is_refused_by_the_scheduler(mig_world: tuple[World, PlacementMode]) -> None:
    world, mode = mig_world
    service = scheduler(world, mode)
    result = service.schedule_pod(mig_pod(world, service, "bad", "alibabacloud.com/mig-3g.41gb"))
    assert result.allocation is None
    assert "unknown profile" in result.reason
    assert "invalid request" in result.reason


def test_static_layout_change_registers_the_new_resource() -> None:
    layouts = {0: [("3g.40gb", 0)]}
    world = make_world(inventory=INVENTORY, mig_layouts=layouts, allocatable=ALLOCATABLE)
    try:
        assert wait_for(lambda: RESOURCE in world.kubelet.devices)
        assert "alibabacloud.com/mig-1g.10gb" not in world.kubelet.devices
        # an operator re-partitions the GPU and restarts the Runtime (same socket): the plugin follows
        fresh = InProcessRuntime(INVENTORY, mig_layouts={0: [("3g.40gb", 0), ("1g.10gb", 6)]})
        world.runtime_server.stop()
        world.in_process_runtime = fresh
        world.runtime_server = GrpcRuntimeServer(world.root / "rt.sock", fresh)
        world.runtime_server.start()
        assert wait_for(lambda: "alibabacloud.com/mig-1g.10gb" in world.kubelet.devices, timeout=10)
        assert world.app.resource_changes >= 1
        assert len(world.kubelet.devices["alibabacloud.com/mig-1g.10gb"]) == 1
    finally:
        world.close()
