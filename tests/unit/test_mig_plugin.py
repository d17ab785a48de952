"""The MIG plugin: admission, planning, fragmentation-aware scoring, reserve/unreserve/observe, separation.

Behaviours covered:

* B30: ``admit`` canonicalises aliases and refuses an unknown profile with ``UnknownMigProfileError`` naming it
  and the valid names; ``schedule`` reports the same message instead of leaving the pod pending;
* requests: counts and names are validated; the effective-request rule (``max(Σ app, max init)``) per profile;
* the fragmentation measure: ``placeable`` on empty, partial, static and unhealthy GPUs; ``SIZES`` order;
* dynamic placement on an empty A100 follows the guide's packing: 1g at 6, then 4, then 5; 2g at 4; 3g at 4;
  4g at 0; a broken-up GPU is preferred to an empty one so 7g stays placeable; free listed instances are
  reused before creating;
* scores: the node whose plan keeps 7g/4g/3g placeable scores 100 and is selected; equal losses tie at 100;
* static mode: pods take only free instances, packing onto GPUs already in use; no instance → reason;
* dynamic beats or equals static on a crafted sequence, and a first-fit placement would refuse a 4g that ours
  places;
* multi-instance pods are all-or-nothing across a node's GPUs; unhealthy GPUs and parked nodes take nothing;
  nodes whose models lack the profile say so;
* unreserve is idempotent and restores the books; observe restores a record (and moves it between nodes);
  an already counted pod is not booked twice;
* MIG versus time-sharing, both directions: the time-sharing ledger and scheduler never use a MIG GPU, and the
  MIG side never sees a GPU that is not in MIG mode.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.mig.errors import UnknownMigProfileError
from domain.mig.fragmentation import SIZES, capacity, loss, placeable
from domain.mig.ledger import MigBooking, MigGpu, MigNodeLedger, MigOwner, MigPodAllocation, PlacementMode
from domain.mig.profiles import resolve_profile
from domain.mig.requests import MigContainerRequest, MigPodRequest
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.mig.plugin import MigPlugin, mig_node_from_inventory, plan_pod
from domain.scheduling.registry import build_profile
from domain.units import GiB

STATIC, DYNAMIC = PlacementMode.STATIC, PlacementMode.DYNAMIC


def pod(uid: str, *profiles: str, counts: tuple[int, ...] = ()) -> MigPodRequest:
    containers = tuple(
        MigContainerRequest(f"c{n}", profile, counts[n] if counts else 1) for n, profile in enumerate(profiles)
    )
    return MigPodRequest(uid, containers)


def dynamic_node(name: str = "node-a", gpus: int = 1, model: str = "A100-40GB") -> MigNodeLedger:
    return MigNodeLedger(
        name, [MigGpu.from_layout(i, f"GPU-{name}-{i}", model, mode=DYNAMIC) for i in range(gpus)]
    )


def placements(result_plugin: MigPlugin, node: str) -> list[list[tuple[str, int]]]:
    return [[(i.profile.name, i.start) for i in g.instances] for g in result_plugin.node(node).gpus()]


# ---------------------------------------------------------------------------------------------- admission
def test_admit_canonicalises_and_refuses_unknown_profiles() -> None:
    admitted = MigPlugin.admit(pod("p", "MIG 3g.70gb", "mig-1g.5gb.me"))
    assert [c.profile for c in admitted.containers] == ["3g.71gb", "1g.5gb+me"]
    with pytest.raises(UnknownMigProfileError) as caught:
        MigPlugin.admit(pod("p", "5g.50gb"))
    message = str(caught.value)
    assert "mig profile='5g.50gb': unknown profile for any GPU model" in message
    assert "pod p container c0" in message
    assert "valid profiles: 1g.10gb, 1g.10gb+me, 1g.18gb" in message
    plugin = MigPlugin([dynamic_node()])
    result = plugin.schedule(pod("p", "5g.50gb"))
    assert not result.scheduled
    assert "unknown profile" in result.reason


def test_request_validation_and_effective_demand() -> None:
    with pytest.raises(InvalidRequestError, match=r"container\[c\]\.count"):
        MigContainerRequest("c", "1g.5gb", 0)
    with pytest.raises(InvalidRequestError, match="names unique"):
        MigPodRequest("p", (MigContainerRequest("c", "1g.5gb"), MigContainerRequest("c", "2g.10gb")))
    with pytest.raises(InvalidRequestError, match="names unique"):
        MigPodRequest("p", ())
    with pytest.raises(InvalidRequestError, match=r"pod\.uid"):
        MigPodRequest("", (MigContainerRequest("c", "1g.5gb"),))
    request = MigPodRequest(
        "p",
        (
            MigContainerRequest("init", "1g.5gb", 3, init=True),
            MigContainerRequest("a", "1g.5gb", 1),
            MigContainerRequest("b", "1g.5gb", 1),
            MigContainerRequest("setup", "2g.10gb", 1, init=True),
            MigContainerRequest("c", "2g.10gb", 2),
        ),
    )
    assert request.demand() == {"1g.5gb": ("a", "b", "init"), "2g.10gb": ("c", "c")}


# ---------------------------------------------------------------------------------------------- measure
def test_placeable_vectors() -> None:
    assert SIZES == ((7, 8), (4, 4), (3, 4), (2, 2), (1, 2), (1, 1))
    empty = MigGpu.from_layout(0, "GPU-0", "A100-40GB", mode=DYNAMIC)
    assert placeable(empty) == (1, 1, 2, 3, 4, 7)
    one = empty.create(resolve_profile("A100-40GB", "1g.5gb"), 6, MigOwner("p", "c"))
    assert placeable(one) == (0, 1, 1, 3, 3, 6)
    assert loss(placeable(empty), placeable(one)) == (1, 0, 1, 0, 1, 1)
    static = MigGpu.from_layout(1, "GPU-1", "A100-40GB", mode=STATIC, layout=[("3g.20gb", 0), ("3g.20gb", 4)])
    assert placeable(static) == (0, 0, 2, 0, 0, 0)
    assert capacity([empty, static]) == (1, 1, 4, 3, 4, 7)
    sick = MigGpu.from_layout(2, "GPU-2", "A100-40GB", mode=DYNAMIC, healthy=False)
    assert placeable(sick) == (0,) * 6
    a30 = MigGpu.from_layout(3, "GPU-3", "A30-24GB", mode=DYNAMIC)
    assert placeable(a30) == (0, 1, 0, 2, 0, 4)


# ---------------------------------------------------------------------------------------------- placement
def test_dynamic_placement_follows_the_guide_packing() -> None:
    plugin = MigPlugin([dynamic_node()])
    for n in range(3):
        assert plugin.schedule(pod(f"one-{n}", "1g.5gb")).scheduled
    assert placements(plugin, "node-a") == [[("1g.5gb", 4), ("1g.5gb", 5), ("1g.5gb", 6)]]
    assert plugin.schedule(pod("four", "4g.20gb")).scheduled
    assert placements(plugin, "node-a") == [[("4g.20gb", 0), ("1g.5gb", 4), ("1g.5gb", 5), ("1g.5gb", 6)]]
    for profile, start in (("2g.10gb", 4), ("3g.20gb", 4), ("4g.20gb", 0), ("7g.40gb", 0), ("1g.10gb", 6)):
        fresh = MigPlugin([dynamic_node()])
        result = fresh.schedule(pod("p", profile))
        assert result.allocation is not None
        assert result.allocation.bookings == (MigBooking(0, profile, start, "c0", create=True),)


def test_broken_up_gpu_preferred_and_listed_instances_reused() -> None:
    node = MigNodeLedger(
        "node-a",
        [
            MigGpu.from_layout(0, "GPU-0", "A100-40GB", mode=DYNAMIC),
            MigGpu.from_layout(1, "GPU-1", "A100-40GB", mode=DYNAMIC, layout=[("2g.10gb", 0)]),
        ],
    )
    node.reserve(MigPodAllocation("busy", "node-a", (MigBooking(1, "3g.20gb", 4, "c", create=True),)))
    plugin = MigPlugin([node])
    one = plugin.schedule(pod("one", "1g.5gb"))
    assert one.allocation is not None
    assert one.allocation.bookings[0].gpu_index == 1  # GPU 0 keeps its 7g
    reuse = plugin.schedule(pod("reuse", "2g.10gb"))
    assert reuse.allocation is not None
    assert reuse.allocation.bookings == (MigBooking(1, "2g.10gb", 0, "c0", create=False),)


def test_score_prefers_keeping_large_profiles_placeable() -> None:
    broken = dynamic_node("broken")
    broken.reserve(MigPodAllocation("busy", "broken", (MigBooking(0, "3g.20gb", 4, "c", create=True),)))
    plugin = MigPlugin([dynamic_node("empty"), broken, dynamic_node("empty-2")])
    result = plugin.filter(MigPlugin.admit(pod("p", "1g.5gb")))
    assert plugin.score(result) == {"broken": 100, "empty": 0, "empty-2": 0}
    assert result.plans["empty"].loss == (1, 0, 1, 0, 1, 1)
    assert result.plans["broken"].loss == (0, 1, 1, 1, 1, 1)
    chosen = plugin.select(result)
    assert chosen is not None
    assert chosen.allocation.node == "broken"
    tied = plugin.filter(MigPlugin.admit(pod("q", "7g.40gb")), ["empty", "empty-2", "nowhere"])
    assert plugin.score(tied) == {"empty": 100, "empty-2": 100}
    assert tied.reasons == {"nowhere": "not a MIG node"}
    assert plugin.select(tied).allocation.node == "empty"  # type: ignore[union-attr]
    assert plugin.select(plugin.filter(MigPlugin.admit(pod("r", "7g.40gb")), [])) is None


def test_static_mode_uses_free_instances_and_packs() -> None:
    layout = [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]
    node = MigNodeLedger(
        "node-s", [MigGpu.from_layout(i, f"GPU-{i}", "A100-40GB", mode=STATIC, layout=layout) for i in range(2)]
    )
    plugin = MigPlugin([node])
    first = plugin.schedule(pod("a", "1g.5gb"))
    second = plugin.schedule(pod("b", "2g.10gb"))
    assert first.allocation is not None
    assert second.allocation is not None
    assert first.allocation.bookings == (MigBooking(0, "1g.5gb", 6, "c0"),)
    assert second.allocation.bookings == (MigBooking(0, "2g.10gb", 4, "c0"),)  # packs onto the GPU in use
    refused = plugin.schedule(pod("c", "4g.20gb"))
    assert not refused.scheduled
    assert "node-s: no free instance or placement for 4g.20gb" in refused.reason


def test_dynamic_beats_or_equals_static_on_a_crafted_sequence() -> None:
    sequence = ["1g.5gb", "4g.20gb", "3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    balanced = [("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)]
    gpus = [MigGpu.from_layout(i, f"G{i}", "A100-40GB", mode=STATIC, layout=balanced) for i in range(2)]
    static = MigPlugin([MigNodeLedger("n", gpus)])
    dynamic = MigPlugin([dynamic_node("n", gpus=2)])
    placed = {"static": 0, "dynamic": 0}
    for n, profile in enumerate(sequence):
        placed["static"] += static.schedule(pod(f"p{n}", profile)).scheduled
        placed["dynamic"] += dynamic.schedule(pod(f"p{n}", profile)).scheduled
    assert placed == {"static": 5, "dynamic": 6}
    assert placements(dynamic, "n") == [
        [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
        [("1g.5gb", 0), ("1g.5gb", 1), ("3g.20gb", 4)],
    ]
    # First fit (lowest start) would put the 1g at slice 0 and lose the 4g; the loss rule keeps it.
    single = MigPlugin([dynamic_node()])
    assert single.schedule(pod("small", "1g.5gb")).scheduled
    assert single.schedule(pod("big", "4g.20gb")).scheduled


def test_multi_instance_pods_are_all_or_nothing() -> None:
    node = dynamic_node(gpus=2)
    node.reserve(MigPodAllocation("busy", "node-a", (MigBooking(1, "1g.5gb", 6, "c", create=True),)))
    plugin = MigPlugin([node])
    before = node.gpus()
    refused = plugin.schedule(pod("two-sevens", "7g.40gb", counts=(2,)))
    assert not refused.scheduled
    assert node.gpus() == before
    assert "two-sevens" not in node
    both = plugin.schedule(pod("pair", "4g.20gb", "3g.20gb", counts=(2, 1)))
    assert both.allocation is not None
    assert sorted((b.gpu_index, b.profile, b.start) for b in both.allocation.bookings) == [
        (0, "3g.20gb", 4),
        (0, "4g.20gb", 0),
        (1, "4g.20gb", 0),
    ]


def test_unhealthy_gpus_parked_nodes_and_model_mismatch() -> None:
    sick = MigNodeLedger("sick", [MigGpu.from_layout(0, "GPU-0", "A100-40GB", mode=DYNAMIC, healthy=False)])
    parked = dynamic_node("parked")
    parked.observe(MigPodAllocation("x", "parked", (MigBooking(0, "7g.40gb", 0, "c", create=True),)))
    parked.observe(MigPodAllocation("y", "parked", (MigBooking(0, "1g.5gb", 0, "c", create=True),)))
    a30 = dynamic_node("a30", model="A30-24GB")
    plugin = MigPlugin([sick, parked, a30])
    result = plugin.filter(MigPlugin.admit(pod("p", "7g.40gb")))
    assert result.plans == {}
    assert result.reasons["sick"] == "no healthy MIG GPU whose model has profile 7g.40gb"
    assert result.reasons["a30"] == "no healthy MIG GPU whose model has profile 7g.40gb"
    assert "parked records ['y']" in result.reasons["parked"]


def test_unreserve_observe_and_already_counted() -> None:
    plugin = MigPlugin([dynamic_node("node-a"), dynamic_node("node-b")])
    empty = {name: plugin.node(name).gpus() for name in plugin.node_names()}
    result = plugin.schedule(pod("p", "3g.20gb"))
    assert result.allocation is not None
    assert plugin.schedule(pod("p", "3g.20gb")).reason == "already counted"
    assert plugin.unreserve("p") == result.allocation
    assert plugin.unreserve("p") is None
    assert plugin.node(result.allocation.node).gpus() == empty[result.allocation.node]
    restored = MigPodAllocation("p", "node-b", (MigBooking(0, "7g.40gb", 0, "c0", create=True),))
    assert plugin.observe(restored)
    assert not plugin.observe(restored)
    assert plugin.record("p") == restored
    moved = MigPodAllocation("p", "node-a", (MigBooking(0, "4g.20gb", 0, "c0", create=True),))
    assert plugin.observe(moved)
    assert plugin.node("node-b").gpus() == empty["node-b"]
    assert "p" not in plugin.node("node-b")
    plugin.remove_node("node-a")
    assert plugin.record("p") is None
    assert plugin.node_names() == ["node-b"]


# ---------------------------------------------------------------------------------------------- separation
def mixed_inventory() -> NodeInventory:
    gpus = (
        Gpu(0, GpuUuid("GPU-mig"), "NVIDIA A100-SXM4-40GB", 40 * GiB, mig_mode=MigMode.ENABLED),
        Gpu(1, GpuUuid("GPU-ts"), "NVIDIA A100-SXM4-40GB", 40 * GiB),
        Gpu(2, GpuUuid("GPU-mig-sick"), "NVIDIA A100-SXM4-40GB", 40 * GiB, Health.UNHEALTHY, MigMode.ENABLED),
    )
    return NodeInventory(NodeName("mixed"), gpus, cpu_milli=64_000, memory_bytes=256 * GiB)


def test_time_sharing_never_uses_mig_gpus() -> None:
    inventory = mixed_inventory()
    ledger = ClusterLedger([inventory])
    share = PodAllocation("ts", "mixed", (ContainerGrant("c", (GpuGrant(0, 300, GiB),)),))
    with pytest.raises(InsufficientResourcesError, match="gpu 0 is not schedulable"):
        ledger.reserve(share)
    scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0)))
    for n in range(3):
        placed = scheduler.schedule(single_container_pod(f"ts-{n}", core_milli=300, gpu_memory_bytes=GiB))
        assert placed.allocation is not None
        assert set(placed.allocation.per_gpu_usage()) == {1}
    whole = scheduler.schedule(single_container_pod("whole", gpus=1))
    assert not whole.scheduled  # GPU 1 is shared, GPUs 0 and 2 are MIG: no completely free time-sharing GPU


def test_mig_never_uses_time_sharing_gpus() -> None:
    inventory = mixed_inventory()
    node = mig_node_from_inventory(inventory, mode=DYNAMIC)
    assert [g.uuid for g in node.gpus()] == ["GPU-mig", "GPU-mig-sick"]
    assert not node.gpu(2).healthy
    with pytest.raises(InvalidRequestError, match=r"node\[mixed\]\.layouts=1: GPU is not in MIG mode"):
        mig_node_from_inventory(inventory, mode=STATIC, layouts={1: [("7g.40gb", 0)]})
    with pytest.raises(InvalidRequestError, match="mig_mode"):
        MigGpu.from_gpu(inventory.gpus[1], mode=DYNAMIC)
    plugin = MigPlugin([node])
    first = plugin.schedule(pod("a", "7g.40gb"))
    assert first.allocation is not None
    assert first.allocation.bookings[0].gpu_index == 0
    assert not plugin.schedule(pod("b", "7g.40gb")).scheduled
    static = mig_node_from_inventory(inventory, mode=STATIC, layouts={0: [("4g.20gb", 0), ("3g.20gb", 4)]})
    assert plan_pod(MigPlugin.admit(pod("c", "3g.20gb")), static).allocation.bookings[0].gpu_index == 0
