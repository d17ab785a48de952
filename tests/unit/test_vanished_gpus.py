"""Pods holding GPUs their node no longer lists (domain.scheduling.sync.vanished).

Behaviours covered:

* a GPU gone from a node's inventory while a bound pod's plan names it: the pod stays counted on the node and is
  recorded with its node and the vanished UUID; pods on GPUs still listed are not; the GPU listed again, or the
  pod ending or deleted, or the node deleted clears the record;
* a rebuild from the same objects (and the resync) gives the same records;
* a node without a decoded inventory yet (a restart) judges nothing; another pod object's plan names nothing;
* a MIG pod whose plan names a MIG GPU gone from the inventory is recorded too.
"""

from __future__ import annotations

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import plan_gpu_uuids
from domain.kube.objects import PodObject, PodPhase
from domain.kube.translate import pod_request
from domain.ledger import ClusterLedger
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.scheduling.sync import LedgerSync, Tombstone
from domain.scheduling.sync.vanished import VanishedHold
from domain.units import GiB
from support.kube_builders import KEYS, PROTOCOL, make_gpus, make_node, make_pod, make_sync, with_plan
from support.mig_builders import mig_gpus, mig_node, mig_pod, with_mig_plan


def planned(sync: LedgerSync, uid: str, node: str, index: int, *, scheduler: str = "other") -> PodObject:
    pod = make_pod(uid, core="30", mem="4", scheduler=scheduler)
    plan = PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, 300, 4 * GiB),)),))
    bound = with_plan(pod, plan, sync.ledger.inventory(node).gpus)
    sync.on_pod(bound)
    return bound


def test_a_pod_on_a_vanished_gpu_stays_counted_and_is_recorded_until_the_gpu_is_back() -> None:
    sync = make_sync(make_node("n1", 2))
    x = planned(sync, "x", "n1", 1)
    planned(sync, "a", "n1", 0)
    assert sync.vanished.holds == {}
    sync.on_node(make_node("n1", 1))  # GPU 1 (GPU-n1-1) is gone
    assert sync.vanished.holds == {"x": VanishedHold("x", "default", "x", "n1", ("GPU-n1-1",))}
    assert "x" in sync.ledger  # still counted
    assert sync.ledger.pods_on("n1") == ["a", "x"]
    fresh = sync.rebuild([make_node("n1", 1)], [x, sync._pods["a"]])
    assert fresh.vanished.holds == sync.vanished.holds
    sync.resync([make_node("n1", 1)], [x, sync._pods["a"]])
    assert set(sync.vanished.holds) == {"x"}
    sync.on_node(make_node("n1", 2))
    assert sync.vanished.holds == {}


def test_ending_deleting_or_losing_the_node_clears_the_record() -> None:
    sync = make_sync(make_node("n1", 2))
    x, _, z = (planned(sync, u, "n1", 1) for u in ("x", "y", "z"))
    sync.on_node(make_node("n1", 1))
    assert set(sync.vanished.holds) == {"x", "y", "z"}
    sync.on_pod(attrs.evolve(x, phase=PodPhase.SUCCEEDED))
    sync.on_pod_deleted(Tombstone("default/y"))
    assert set(sync.vanished.holds) == {"z"}
    assert z.uid in sync.ledger
    sync.on_node_deleted("n1")
    assert sync.vanished.holds == {}


def test_a_node_without_a_decoded_inventory_judges_nothing() -> None:
    plan = PodAllocation("x", "n1", (ContainerGrant("main", (GpuGrant(0, 300, 4 * GiB),)),))
    pod = with_plan(make_pod("x", core="30", mem="4"), plan, make_gpus("n1", 1))
    fresh = LedgerSync(ClusterLedger(), PROTOCOL, clock=lambda: 0.0)
    fresh.on_node(make_node("n1", annotation=None))  # restarted: no inventory annotation, no last good list
    fresh.on_pod(pod)
    assert "x" in fresh.ledger
    assert fresh.vanished.holds == {}


def test_another_pod_objects_plan_names_nothing() -> None:
    sync = make_sync(make_node("n1", 2))
    old = planned(sync, "x", "n1", 1)
    sync.on_node(make_node("n1", 1))
    assert set(sync.vanished.holds) == {"x"}
    text = old.annotations[KEYS.pod_plan]
    assert plan_gpu_uuids(text, key=KEYS.pod_plan, pod_uid="x", node="n1") == ("GPU-n1-1",)
    reborn = attrs.evolve(old, uid="x2")  # same name, new object: the plan is the old pod's
    sync.on_pod(reborn)
    assert sync.vanished.holds == {}


def test_a_mig_pod_on_a_vanished_mig_gpu_is_recorded() -> None:
    gpus = mig_gpus("n1", 2)
    sync = make_sync(mig_node("n1", {1: [("3g.40gb", 0)]}, gpus=gpus))
    allocation = MigPodAllocation("m", "n1", (MigBooking(1, "3g.40gb", 0, "main"),))
    pod = with_mig_plan(mig_pod("m"), allocation, gpus)
    assert pod_request(pod, PROTOCOL).wants_mig
    sync.on_pod(pod)
    assert sync.vanished.holds == {}
    sync.on_node(mig_node("n1", gpus=gpus[:1]))
    assert sync.vanished.holds["m"].gpu_uuids == ("GPU-n1-1",)
