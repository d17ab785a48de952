"""MIG claims in standalone mode: the MIG layout read from our driver's ResourceSlices, a claim of a MIG class placed
by the MIG books and written as the instance's device, claims' instances held in the MIG books (also after a
restart), rollback when the binding fails, and MIG claims left to kube-scheduler in extender mode."""

from __future__ import annotations

import attrs
import pytest
from test_scheduler_claim_allocation import ClaimWorld

from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.dra.build import desired_content
from domain.dra.claims import AllocationResult, DeviceAsk
from domain.dra.inventory import UNPUBLISHED_ID, slice_inventory
from domain.dra.slices import ResourceSlice
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations import MigInstanceRecord
from domain.kube.objects import PodClaim
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.runtime.types import DeviceInfo, MigInstanceInfo
from domain.units import GiB
from ports.cluster import UnavailableError
from services.scheduler.commit import CommitError
from services.scheduler.extender import Extender
from services.scheduler.service import SchedulerService, ServiceConfig
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import NOW, PROTOCOL, Clock, make_node
from support.scheduler_world import FlakyCluster

DRA = PROTOCOL.dra
MIG_3G = "mig-3g-40gb.lj-runtimekit.io"
A100_80 = "NVIDIA A100-SXM4-80GB"


def mig_info(index: int, starts: tuple[int, ...] = (0, 4), *, node: str = "n1", model: str = A100_80) -> DeviceInfo:
    """A GPU in MIG mode (80 GiB) listing a 3g.40gb instance at each of ``starts`` (static: usable, with MIG
    UUIDs)."""
    parent = GpuUuid(f"GPU-{node}-{index}")
    instances = tuple(MigInstanceInfo(index, parent, 1 + n, 0, "3g.40gb", start, 4, 3, 40 * GiB,
                                      f"MIG-{node}-{index}-{start}") for n, start in enumerate(starts))
    return DeviceInfo(Gpu(index, parent, model, 80 * GiB, mig_mode=MigMode.ENABLED), mig_instances=instances)


def slices(*devices: DeviceInfo, node: str = "n1", dynamic: bool = False) -> list[ResourceSlice]:
    contents = desired_content(devices, protocol=PROTOCOL, mig_dynamic=dynamic)
    return [ResourceSlice(f"{node}-{i}", DRA.driver, node, 1, len(contents), content)
            for i, content in enumerate(contents)]


def world(*devices: DeviceInfo, strategy: str = "static", dynamic: bool = False,
          restart_of: ClaimWorld | None = None) -> ClaimWorld:
    """A standalone world whose one node ``n1`` runs the DRA driver only, publishing ``devices``, read by a resync;
    ``restart_of``: a world whose cluster, claims and slices a restarted scheduler reads instead."""
    if restart_of is None:
        claims, cluster, api = InMemoryResourceClaims(), FlakyCluster(), InMemoryResourceSlices()
        cluster.create_node(make_node("n1", annotation=None))
        for resource_slice in slices(*devices, dynamic=dynamic):
            api.create_resource_slice(resource_slice)
    else:
        claims, cluster = restart_of.claims, restart_of.cluster
        api = restart_of.service.slices  # type: ignore[assignment]
    metrics, clock = PrometheusSchedulerMetrics(), Clock(NOW)
    service = SchedulerService(cluster, PROTOCOL, metrics, clock=clock, claims=claims, claim_writes=claims,
                               slices=api, config=ServiceConfig(policy="binpack", admission_hold_seconds=None,
                                                                mig_strategy=strategy))
    service.resync()
    return ClaimWorld(cluster, service, metrics, clock, [True], claims=claims, loop=StandaloneLoop(service))


def devices_of(w: ClaimWorld, name: str) -> list[str]:
    stored = w.claims.get("default", name)
    assert stored is not None
    return [r.device for r in stored.results]


def held(w: ClaimWorld) -> dict[str, list[tuple[int, int]]]:
    with w.service.books() as books:
        return {uid: [(b.gpu_index, b.start) for b in r.bookings]
                for uid, r in books.books.plugin.node("n1").records().items()}


def test_the_slices_give_the_static_layout_or_the_dynamic_strategy() -> None:
    static = slice_inventory(slices(mig_info(0), mig_info(1, (4,))), driver=DRA.driver, node="n1")
    assert static is not None
    assert static.problem == ""
    assert static.mig_strategy == "static"
    assert static.mig == {
        0: (MigInstanceRecord(UNPUBLISHED_ID, UNPUBLISHED_ID, "3g.40gb", 0, "MIG-n1-0-0", free=True),
            MigInstanceRecord(UNPUBLISHED_ID, UNPUBLISHED_ID, "3g.40gb", 4, "MIG-n1-0-4", free=True)),
        1: (MigInstanceRecord(UNPUBLISHED_ID, UNPUBLISHED_ID, "3g.40gb", 4, "MIG-n1-1-4", free=True),)}
    dynamic = slice_inventory(slices(mig_info(0, ()), dynamic=True), driver=DRA.driver, node="n1")
    assert dynamic is not None
    assert (dynamic.mig, dynamic.mig_strategy, dynamic.problem) == ({}, "dynamic", "")
    whole = slice_inventory(slices(DeviceInfo(Gpu(0, GpuUuid("G0"), "A100", 16 * GiB))), driver=DRA.driver,
                            node="n1")
    assert whole is not None
    assert (whole.mig, whole.mig_strategy) == ({}, "")


def test_slices_mixing_listed_instances_and_placements_are_malformed() -> None:
    mixed = slices(mig_info(0)) + [attrs.evolve(s, name=f"dyn-{s.name}") for s in slices(mig_info(1, ()),
                                                                                        dynamic=True)]
    mixed = [attrs.evolve(s, slice_count=len(mixed)) for s in mixed]
    found = slice_inventory(mixed, driver=DRA.driver, node="n1")
    assert found is not None
    assert found.gpus == ()
    assert "device[gpu-1-mig-1g-10gb-0].attributes.uuid=None" in found.problem
    assert "missing while device gpu-0-mig-3g-40gb-0 has one" in found.problem


def test_a_mig_claim_takes_a_listed_instance_and_the_next_takes_the_other() -> None:
    w = world(mig_info(0))
    w.claim("c1", DeviceAsk("m", MIG_3G))
    w.claim("c2", DeviceAsk("m", MIG_3G))
    w.claim("c3", DeviceAsk("m", MIG_3G))
    first = w.pod("p1", PodClaim("g", claim_name="c1"))
    assert w.loop.attempt(first)
    stored = w.claims.get("default", "c1")
    assert stored is not None
    assert stored.allocated
    assert stored.reserved_for == (first.uid,)
    assert stored.results == (AllocationResult("m", DRA.driver, "n1", "gpu-0-mig-3g-40gb-0"),)
    assert held(w) == {"claim:uid-c1": [(0, 0)]}  # the claim holds it; the pod's own reservation holds nothing
    assert w.deliver("p1").node_name == "n1"
    assert w.loop.attempt(w.pod("p2", PodClaim("g", claim_name="c2")))
    assert devices_of(w, "c2") == ["gpu-0-mig-3g-40gb-4"]
    assert not w.loop.attempt(w.pod("p3", PodClaim("g", claim_name="c3")))
    assert "MIG" in w.reasons("p3")[-1]
    assert not w.claims.get("default", "c3").allocated  # type: ignore[union-attr]
    w.service.on_claim_deleted(stored)  # the first pod's claim goes: its instance is free again
    assert held(w) == {"claim:uid-c2": [(0, 4)]}
    assert w.loop.attempt(w.cluster.get_pod("default", "p3"))
    assert devices_of(w, "c3") == ["gpu-0-mig-3g-40gb-0"]


def test_a_claim_of_two_instances_and_a_pod_with_two_mig_claims() -> None:
    w = world(mig_info(0), mig_info(1))
    w.claim("two", DeviceAsk("m", MIG_3G, count=2))
    w.claim("a", DeviceAsk("m", MIG_3G))
    w.claim("b", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p1", PodClaim("g", claim_name="two")))
    assert devices_of(w, "two") == ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"]  # packed onto one GPU
    assert w.loop.attempt(w.pod("p2", PodClaim("x", claim_name="a"), PodClaim("y", claim_name="b")))
    assert sorted(devices_of(w, "a") + devices_of(w, "b")) == ["gpu-1-mig-3g-40gb-0", "gpu-1-mig-3g-40gb-4"]
    assert sorted(held(w)) == ["claim:uid-a", "claim:uid-b", "claim:uid-two"]


def test_in_dynamic_mode_the_claim_names_a_placement_the_runtime_creates() -> None:
    w = world(mig_info(0, ()), strategy="dynamic", dynamic=True)
    w.claim("c", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    (device,) = devices_of(w, "c")
    assert device in ("gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4")
    with w.service.books() as books:
        (record,) = books.books.plugin.node("n1").records().values()
        assert record.bookings[0].create


def test_a_node_publishing_another_mig_strategy_takes_no_mig_claim() -> None:
    w = world(mig_info(0, ()), strategy="static", dynamic=True)
    w.claim("c", DeviceAsk("m", MIG_3G))
    assert not w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    assert "MIG strategy dynamic" in w.reasons("p")[-1]


def test_a_failed_binding_gives_the_instance_back() -> None:
    w = world(mig_info(0, (0,)))
    w.claim("c", DeviceAsk("m", MIG_3G))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    w.cluster.bind_failures.append(UnavailableError("API server down"))  # type: ignore[attr-defined]
    assert not w.loop.attempt(pod)
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]
    assert held(w) == {}
    assert w.loop.attempt(pod)
    assert devices_of(w, "c") == ["gpu-0-mig-3g-40gb-0"]


def test_a_restarted_scheduler_rebuilds_the_claims_instances_from_their_status() -> None:
    w = world(mig_info(0, (0,)))
    w.claim("c1", DeviceAsk("m", MIG_3G))
    w.claim("c2", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p1", PodClaim("g", claim_name="c1")))
    w.deliver("p1")
    restarted = world(restart_of=w)
    assert held(restarted) == {"claim:uid-c1": [(0, 0)]}
    assert not restarted.loop.attempt(restarted.pod("p2", PodClaim("g", claim_name="c2")))
    assert "MIG" in restarted.reasons("p2")[-1]


def test_extender_mode_leaves_mig_claims_to_kube_scheduler() -> None:
    w = world(mig_info(0))
    w.claim("c", DeviceAsk("m", MIG_3G))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert Extender(w.service, rank_all_pods=True)._claims(pod) is None
    w.claim("s", DeviceAsk("m", DRA.device_class_gpu))
    assert Extender(w.service, rank_all_pods=True)._claims(w.pod("q", PodClaim("g", claim_name="s"))) is not None


@pytest.mark.parametrize("profile_class", ["mig-3g-40gb.lj-runtimekit.io", "mig-1g-10gb.lj-runtimekit.io"])
def test_a_profile_the_node_lists_no_instance_of_waits_with_the_mig_reason(profile_class: str) -> None:
    w = world(mig_info(0, (0,)))
    w.claim("big", DeviceAsk("m", profile_class, count=2))
    assert not w.loop.attempt(w.pod("p", PodClaim("g", claim_name="big")))
    assert "MIG" in w.reasons("p")[-1]
    assert held(w) == {}
    assert not w.claims.get("default", "big").allocated  # type: ignore[union-attr]


def test_a_resync_keeps_the_claims_instances_once_and_the_node_admitting() -> None:
    w = world(mig_info(0))
    w.claim("c1", DeviceAsk("m", MIG_3G))
    w.claim("c2", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p1", PodClaim("g", claim_name="c1")))  # not yet seen bound
    w.service.resync()
    assert held(w) == {"claim:uid-c1": [(0, 0)]}
    with w.service.books() as books:
        assert books.books.plugin.node("n1").conflicts == {}
    assert w.loop.attempt(w.pod("p2", PodClaim("g", claim_name="c2")))
    assert devices_of(w, "c2") == ["gpu-0-mig-3g-40gb-4"]


def test_a_commit_whose_mig_reservation_is_gone_writes_nothing_and_says_so() -> None:
    w = world(mig_info(0))
    w.claim("c", DeviceAsk("m", MIG_3G))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    need = w.service.claim_need(pod)
    assert not isinstance(need, str)
    result = w.service.schedule_pod(pod, claims=need)
    assert result.allocation is not None
    with w.service.books() as books:
        books.books.forget(pod.uid)
    with pytest.raises(CommitError, match="no MIG reservation on node n1"):
        w.service.commit(pod, result.allocation, claims=need)
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]
    assert held(w) == {}


def test_holding_a_claims_new_instances_releases_its_old_ones() -> None:
    w = world(mig_info(0))
    first = MigPodAllocation("claim:x", "n1", (MigBooking(0, "3g.40gb", 0, "m"),))
    with w.service.books() as books:
        assert books.books.hold(first) == ""
        assert books.books.hold(attrs.evolve(first, bookings=(MigBooking(0, "3g.40gb", 4, "m"),))) == ""
    assert held(w) == {"claim:x": [(0, 4)]}
    with w.service.books() as books:
        books.books.unhold("claim:x")
    assert held(w) == {}


def test_a_pod_sharing_a_claim_another_pods_commit_allocates_waits_for_it() -> None:
    w = world(mig_info(0))
    w.claim("c", DeviceAsk("m", MIG_3G))
    first = w.pod("p1", PodClaim("g", claim_name="c"))
    second = w.pod("p2", PodClaim("g", claim_name="c"))
    placed = w.loop._cycle(first)  # with asynchronous binding, its commit is still to come
    assert placed is not None
    assert not w.loop.attempt(second)
    assert "ResourceClaim default/c is being allocated for another pod using it" in w.reasons("p2")[-1]
    assert w.loop._commit(first, *placed)
    assert w.loop.attempt(w.cluster.get_pod("default", "p2"))
    stored = w.claims.get("default", "c")
    assert stored is not None
    assert sorted(stored.reserved_for) == sorted([first.uid, second.uid])
    assert held(w) == {"claim:uid-c": [(0, 0)]}  # one instance, held by the claim alone
    w.claim("d", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p3", PodClaim("g", claim_name="d")))  # the node still takes MIG claims
    assert devices_of(w, "d") == ["gpu-0-mig-3g-40gb-4"]


def test_a_hand_over_beside_a_parked_record_is_not_refused() -> None:
    w = world(mig_info(0), mig_info(1))
    w.claim("a", DeviceAsk("m", MIG_3G))
    w.claim("b", DeviceAsk("m", MIG_3G))
    pod = w.pod("p", PodClaim("x", claim_name="a"), PodClaim("y", claim_name="b"))
    placed = w.loop._cycle(pod)
    assert placed is not None
    with w.service.books() as books:  # two records claiming one instance: one of them is parked
        for uid in ("claim:o1", "claim:o2"):
            books.books.hold(MigPodAllocation(uid, "n1", (MigBooking(1, "3g.40gb", 4, "m"),)))
        assert books.books.plugin.node("n1").conflicts
    assert w.loop._commit(pod, *placed)
    assert sorted(devices_of(w, "a") + devices_of(w, "b")) == ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"]


def test_a_node_deleted_and_added_again_holds_its_claims_instances_with_no_problem_left() -> None:
    w = world(mig_info(0))
    w.claim("c", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    w.deliver("p")
    node = w.cluster.get_node("n1")
    w.service.on_node_deleted("n1")
    w.service.on_node(attrs.evolve(node, resource_version=str(int(node.resource_version) + 1)))  # added again
    assert held(w) == {"claim:uid-c": [(0, 0)]}
    with w.service.books() as books:
        assert books.claim_problems == {}
        assert "claim:uid-c" not in books.problems


def test_a_product_name_without_its_memory_takes_the_profile_table_of_the_gpus_memory() -> None:
    w = world(mig_info(0, (0,), model="A100"))  # as the simulated Runtime names it: 40 and 80 GB tables differ
    with w.service.books() as books:
        assert books.ledger.inventory("n1").gpus[0].memory_bytes == 80 * GiB  # parentMemoryBytes
        assert books.books.problems == {}
    w.claim("c", DeviceAsk("m", MIG_3G))
    assert w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    assert devices_of(w, "c") == ["gpu-0-mig-3g-40gb-0"]
