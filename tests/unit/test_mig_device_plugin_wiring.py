"""MIG in the device plugin (domain.device_plugin, services.device_plugin.service) without sockets.

Behaviours covered:

* B30 / one table: for every GPU model with a MIG table, the device plugin serving a node of that model (dynamic
  strategy) registers exactly ``mig_resource_names(protocol, [model])``, and every one of those names is a pod
  request the scheduler's MIG plugin plans on that very node (built from the inventory the plugin published);
  static strategy: the profiles of the listed instances, each schedulable too;
* the Runtime's feature check: a 1.0 Runtime keeps serving a node without MIG GPUs; on a MIG node the plugin
  refuses it, naming ``mig-inventory``;
* device IDs: no gpu/core/memory IDs on GPUs in MIG mode; static MIG IDs ``<uuid>::mig-<profile>::<gi id>`` (one per
  usable instance), dynamic ``max_instances`` per GPU and profile; MIG IDs parse back (``.me`` spelling included);
  GetPreferredAllocation puts the planned instance's own ID first;
* the published inventory carries the layout, the strategy and "free" flags that follow the Runtime's owners;
* Allocate of a MIG resource sends the plan's instances as ``PlannedMig`` (kubelet's IDs are ignored, B17), refuses
  a plan on an unhealthy GPU (B14) and a MIG pod without trusted plan.
"""

from __future__ import annotations

import json

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.device_plugin.devices import DeviceId, MigResource, ResourceKind, parse_device_id, preferred_ids
from domain.device_plugin.matching import UnhealthyPlanError, UntrustedPlanError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.migresources import mig_resource_names
from domain.kube.objects import ContainerSpec, NodeObject, PodObject
from domain.kube.translate import pod_request
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.mig.profiles import MIG_MODELS
from domain.runtime.errors import UnsupportedFeatureError
from domain.runtime.features import SemVer
from domain.runtime.types import ContainerAllocationRequest, PlannedMig
from domain.scheduling.sync import LedgerSync
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from services.device_plugin.service import DevicePluginService
from support.kube_builders import KEYS, PROTOCOL, Clock, make_scheduler
from support.mig_builders import ALLOCATABLE, mig_pod, with_mig_plan

NODE = "n1"
MIG = GpuUuid("GPU-mig-0")
SHARED = GpuUuid("GPU-shared-1")


def inventory(model: str = "NVIDIA A100-SXM4-80GB", memory: int = 80 * GiB) -> list[Gpu]:
    return [Gpu(0, MIG, model, memory, mig_mode=MigMode.ENABLED), Gpu(1, SHARED, "A100", 16 * GiB)]


def plugin(runtime: InProcessRuntime) -> tuple[DevicePluginService, InMemoryCluster]:
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE, allocatable=dict(ALLOCATABLE)))
    return DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL, clock=Clock()), cluster


def scheduler_books(cluster: InMemoryCluster, mode: PlacementMode) -> LedgerSync:
    sync = LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock(), mig_mode=mode)
    sync.on_node(cluster.get_node(NODE))
    return sync


def schedulable(sync: LedgerSync, name: str, uid: str) -> bool:
    """A pod asking for one instance of resource ``name`` is planned on the node (then rolled back)."""
    pod = PodObject(uid, "default", uid, (ContainerSpec("main", limits={name: "1"}),),
                    scheduler_name=PROTOCOL.scheduler_name)
    request = pod_request(pod, PROTOCOL)
    assert request.mig_containers[0].mig_profile is not None
    result = sync.schedule(make_scheduler(sync), pod)
    sync.forget(uid)
    return result.allocation is not None


# ---------------------------------------------------------------------------------------------- one table
@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_plugin_registers_exactly_the_names_the_mig_plugin_schedules(model: str) -> None:
    table = MIG_MODELS[model]
    runtime = InProcessRuntime(inventory(model, table.memory_bytes), mig_mode=PlacementMode.DYNAMIC)
    service, cluster = plugin(runtime)
    names = set(service.mig_resources().values())
    assert names == set(mig_resource_names(PROTOCOL, [model]))
    service.publish_inventory()
    sync = scheduler_books(cluster, PlacementMode.DYNAMIC)
    assert all(schedulable(sync, name, f"u{n}") for n, name in enumerate(sorted(names)))


def test_static_plugin_serves_the_listed_profiles_and_each_is_schedulable() -> None:
    layout = {0: [("3g.40gb", 0), ("1g.10gb+me", 4), ("1g.10gb", 5)]}
    service, cluster = plugin(InProcessRuntime(inventory(), mig_layouts=layout))
    names = service.mig_resources()
    assert names == {MigResource("3g.40gb"): "alibabacloud.com/mig-3g.40gb",
                     MigResource("1g.10gb+me"): "alibabacloud.com/mig-1g.10gb.me",
                     MigResource("1g.10gb"): "alibabacloud.com/mig-1g.10gb"}
    assert set(names.values()) <= set(mig_resource_names(PROTOCOL))
    service.publish_inventory()
    sync = scheduler_books(cluster, PlacementMode.STATIC)
    assert all(schedulable(sync, name, f"u{n}") for n, name in enumerate(sorted(names.values())))
    assert not schedulable(sync, "alibabacloud.com/mig-7g.80gb", "big")  # a profile no instance offers


# ---------------------------------------------------------------------------------------------- features
def test_a_1_0_runtime_serves_a_node_without_mig_but_not_a_mig_node() -> None:
    old = SemVer(1, 0, 0)
    service, _ = plugin(InProcessRuntime([Gpu(0, SHARED, "A100", 16 * GiB)], version=old))
    assert service.mig_resources() == {}
    assert len(service.devices(ResourceKind.GPU)[1]) == 1
    with pytest.raises(UnsupportedFeatureError, match="mig-inventory"):
        plugin(InProcessRuntime(inventory(), version=old))


# ---------------------------------------------------------------------------------------------- device IDs
def test_device_ids_of_mig_and_time_sharing_resources() -> None:
    service, _ = plugin(InProcessRuntime(inventory(), mig_layouts={0: [("3g.40gb", 0), ("3g.40gb", 4)]}))
    for kind in ResourceKind:
        assert all(d.id.startswith(SHARED) for d in service.devices(kind)[1])
    _, devices = service.devices(MigResource("3g.40gb"))
    assert [d.id for d in devices] == [f"{MIG}::mig-3g.40gb::1", f"{MIG}::mig-3g.40gb::5"]
    assert parse_device_id(devices[1].id) == DeviceId(MIG, MigResource("3g.40gb"), 5)
    assert parse_device_id(f"{MIG}::mig-1g.10gb.me::0").kind == MigResource("1g.10gb+me")
    dynamic, _ = plugin(InProcessRuntime(inventory(), mig_mode=PlacementMode.DYNAMIC))
    assert len(dynamic.devices(MigResource("1g.10gb"))[1]) == 7
    assert len(dynamic.devices(MigResource("7g.80gb"))[1]) == 1
    assert dynamic.mig_strategy == "dynamic"


def test_preferred_ids_put_the_exact_ids_first() -> None:
    available = [f"{MIG}::mig-3g.40gb::1", f"{MIG}::mig-3g.40gb::5"]
    assert preferred_ids(available, [], 1, [MIG], exact=[available[1]]) == (available[1],)
    assert preferred_ids(available, [], 1, [MIG], exact=["not-offered"]) == (available[0],)


# ---------------------------------------------------------------------------------------------- inventory
def test_published_inventory_follows_the_runtime_owners() -> None:
    runtime = InProcessRuntime(inventory(), mig_layouts={0: [("3g.40gb", 0), ("3g.40gb", 4)]})
    service, cluster = plugin(runtime)
    runtime.allocate(ContainerAllocationRequest("p", "default", "p", "main", (),
                                                mig=(PlannedMig(0, MIG, profile="3g.40gb", start=4),)))
    service.publish_inventory()
    data = json.loads(cluster.get_node(NODE).annotations[KEYS.node_inventory])
    assert data["version"] == 2
    assert data["migStrategy"] == "static"
    assert [(i["start"], i["free"]) for i in data["gpus"][0]["migInstances"]] == [(0, True), (4, False)]
    assert "migInstances" not in data["gpus"][1]
    runtime.release("p")
    service.publish_inventory()
    data = json.loads(cluster.get_node(NODE).annotations[KEYS.node_inventory])
    assert all(i["free"] for i in data["gpus"][0]["migInstances"])


# ---------------------------------------------------------------------------------------------- allocate
def test_allocate_sends_the_planned_instances_and_refuses_bad_plans() -> None:
    runtime = InProcessRuntime(inventory(), mig_layouts={0: [("3g.40gb", 0), ("3g.40gb", 4)]})
    service, cluster = plugin(runtime)
    gpus = tuple(inventory())
    created = cluster.create_pod(attrs.evolve(mig_pod(""), name="a"))
    allocation = MigPodAllocation(created.uid, NODE, (MigBooking(0, "3g.40gb", 4, "main"),))
    planned = with_mig_plan(created, allocation, gpus, bind=False)
    cluster.patch_pod_annotations("default", created.name, {KEYS.pod_plan: planned.annotations[KEYS.pod_plan]})
    cluster.bind_pod("default", created.name, uid=created.uid, node=NODE)
    kind = MigResource("3g.40gb")
    assert service.preferred(kind, [f"{MIG}::mig-3g.40gb::1", f"{MIG}::mig-3g.40gb::5"], [], 1) == (
        f"{MIG}::mig-3g.40gb::5",)
    response = service.allocate(kind, [f"{MIG}::mig-3g.40gb::1"])  # kubelet's ID names the other instance
    listed = {i.start: i for d in runtime.list_devices() for i in d.mig_instances}
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == listed[4].uuid
    assert listed[4].owner is not None
    assert listed[0].owner is None
    # a second MIG pod without plan is refused; one whose GPU turned unhealthy too
    bare = cluster.create_pod(attrs.evolve(mig_pod(""), name="bare"))
    cluster.bind_pod("default", bare.name, uid=bare.uid, node=NODE)
    with pytest.raises(UntrustedPlanError, match="no trusted plan"):
        service.allocate(kind, ["x"])
    cluster.delete_pod("default", bare.name, grace_period_seconds=0)
    other = cluster.create_pod(attrs.evolve(mig_pod(""), name="other"))
    mine = MigPodAllocation(other.uid, NODE, (MigBooking(0, "3g.40gb", 0, "main"),))
    text = with_mig_plan(other, mine, gpus, bind=False).annotations[KEYS.pod_plan]
    cluster.patch_pod_annotations("default", other.name, {KEYS.pod_plan: text})
    cluster.bind_pod("default", other.name, uid=other.uid, node=NODE)
    service.set_health(MIG, Health.UNHEALTHY)
    with pytest.raises(UnhealthyPlanError, match="unhealthy"):
        service.allocate(kind, ["x"])
