"""DRA claims in the scheduler's ledger (``domain.scheduling.sync.claims``): one book with classic pods."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.gpu import MigMode
from domain.kube.objects import PodPhase
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.scheduling.sync import LedgerSync
from domain.units import GiB
from support.kube_builders import (
    GPU16,
    PROTOCOL,
    Clock,
    make_node,
    make_pod,
    make_scheduler,
    make_sync,
    used,
    with_plan,
)
from support.mig_builders import mig_gpus, mig_node, mig_pod

DRIVER = PROTOCOL.dra.driver


def claim(*devices: tuple[str, dict[str, str]], uid: str = "c1", node: str = "n1", name: str = "claim"
          ) -> ClaimAllocation:
    return ClaimAllocation("ns", name, uid, tuple(
        AllocationResult(request=f"r{i}", driver=DRIVER, pool=node, device=d, consumed=c)
        for i, (d, c) in enumerate(devices)))


def schedule_whole(sync: LedgerSync, uid: str = "p") -> str | None:
    result = sync.schedule(make_scheduler(sync), make_pod(uid, gpu="1"))
    if result.allocation is None:
        return None
    sync.forget(uid)
    return result.allocation.node


def test_claims_hold_gpus_so_a_classic_pod_is_placed_around_them_and_released_after() -> None:
    sync = make_sync(make_node("n1"))
    sync.on_claim(claim(("gpu-0", {})))
    sync.on_claim(claim(("gpu-1", {"cores": "30", "memory": "4Gi"}), uid="c2", name="share"))
    assert used(sync, "n1") == [(1000, GPU16), (300, 4 * GiB)]
    assert sync.ledger.books()["n1"]["pods"] == ["claim:c1", "claim:c2"]
    assert int(sync.ledger.pods_used[sync.ledger.slot("n1")]) == 0  # no pod slot
    assert schedule_whole(sync) is None  # GPU 0 held whole, GPU 1 partly: no whole GPU left
    sync.on_claim_deleted(claim(uid="c2", name="share"))
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    sync.on_claim(attrs.evolve(claim(), results=()))  # deallocated
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    assert schedule_whole(sync) == "n1"


def test_a_claim_on_a_node_not_seen_yet_is_booked_when_the_node_arrives_and_survives_identity_changes() -> None:
    sync = make_sync()
    sync.on_claim(claim(("gpu-1", {})))
    sync.on_node(make_node("n1"))
    assert used(sync, "n1") == [(0, 0), (1000, GPU16)]
    sync.on_node(make_node("n1", count=3))  # GPU identity changed: re-derived from the stored claim
    assert used(sync, "n1") == [(0, 0), (1000, GPU16), (0, 0)]
    sync.on_node_deleted("n1")
    sync.on_node(make_node("n1"))
    assert used(sync, "n1") == [(0, 0), (1000, GPU16)]


def test_events_are_idempotent_and_a_new_uid_under_the_name_releases_the_old() -> None:
    sync = make_sync(make_node("n1"))
    first = claim(("gpu-0", {}))
    sync.on_claim(first)
    sync.on_claim(first)
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    sync.on_claim(claim(("gpu-1", {}), uid="c9"))
    assert used(sync, "n1") == [(0, 0), (1000, GPU16)]
    assert not sync.on_claim_deleted(first)
    assert sync.on_claim_deleted(claim(uid="c9"))
    assert used(sync, "n1") == [(0, 0), (0, 0)]


def test_an_inferred_pod_is_placed_on_top_of_a_claim() -> None:
    sync = make_sync(make_node("n1"))
    sync.on_pod(make_pod("a", gpu="1", node="n1", phase=PodPhase.RUNNING))  # plan-less: inferred
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    sync.on_claim(claim(("gpu-0", {})))
    assert sorted(used(sync, "n1")) == [(1000, GPU16), (1000, GPU16)]


def test_unknown_devices_gate_the_node_and_the_gate_lifts_with_the_claim() -> None:
    sync = make_sync(make_node("n1"))
    sync.on_claim(claim(("gpu-9", {})))
    assert "n1" in sync.gates
    assert "no GPU 9" in sync.claim_problems["ns/claim"]
    assert schedule_whole(sync) is None
    sync.on_claim_deleted(claim())
    assert "n1" not in sync.gates
    assert sync.claim_problems == {}


def test_a_rebuild_books_listed_claims_like_the_events_and_adopt_keeps_them() -> None:
    node = make_node("n1")
    live = make_sync(node)
    share = PodAllocation("a", "n1", (ContainerGrant("main", (GpuGrant(1, 200, 2 * GiB),)),))
    pod = with_plan(make_pod("a", core="20", mem="2"), share, live.ledger.inventory("n1").gpus)
    claims = [claim(("gpu-0", {})), claim(("gpu-1", {"cores": "30"}), uid="c2", name="b")]
    live.on_pod(pod)
    for c in claims:
        live.on_claim(c)
    fresh = live.rebuild([node], [pod], claims=claims)
    assert fresh.ledger.books() == live.ledger.books()
    stale = make_sync(node)
    report = stale.adopt(live.rebuild([node], [pod], claims=claims))
    assert set(report.missing) == {"a", "claim:c1", "claim:c2"}
    assert stale.ledger.books() == live.ledger.books()
    stale.on_claim_deleted(claims[0])
    assert used(stale, "n1")[0] == (0, 0)


def test_a_dra_only_node_without_inventory_is_gated_and_its_claims_are_no_problem() -> None:
    sync = make_sync(make_node("d1", annotation=None))
    sync.on_claim(claim(("gpu-0", {}), node="d1"))
    assert "d1" in sync.gates
    assert sync.claim_problems == {}
    sync.on_claim_deleted(claim(node="d1"))
    assert "d1" in sync.gates  # still no inventory


def test_claims_of_mig_instances_are_held_in_the_mig_books_not_the_time_sharing_ledger() -> None:
    sync = make_sync(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}))
    sync.on_claim(claim(("gpu-0-mig-3g-40gb-0", {})))
    sync.on_claim(claim(("gpu-0-mig-3g-40gb-4", {}), uid="c2", name="other"))
    assert sync.ledger.quarantine == {}
    assert "n1" not in sync.gates
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    assert sync.claim_problems == {}
    books = sync.books.plugin.node("n1")
    assert sorted(books.records()) == ["claim:c1", "claim:c2"]
    assert [(b.gpu_index, b.profile, b.start, b.container, b.create) for b in books.records()["claim:c1"].bookings
            ] == [(0, "3g.40gb", 0, "r0", False)]
    assert sync.schedule(make_scheduler(sync), mig_pod("p")
                         ).allocation is None  # both instances held by the claims
    sync.on_claim_deleted(claim(uid="c2", name="other"))
    assert sorted(sync.books.plugin.node("n1").records()) == ["claim:c1"]
    mig = sync.schedule(make_scheduler(sync), mig_pod("p"))
    assert mig.allocation is not None
    assert sync.books.record("p").bookings[0].start == 4


def test_a_claims_mig_instances_survive_a_rebuild_of_the_nodes_mig_books() -> None:
    sync = make_sync(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}))
    sync.on_claim(claim(("gpu-0-mig-3g-40gb-4", {})))
    sync.on_node(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("1g.10gb", 0)]}))  # new layout
    assert sorted(sync.books.plugin.node("n1").records()) == ["claim:c1"]
    sync.on_claim(attrs.evolve(claim(), results=()))  # deallocated
    assert sync.books.plugin.node("n1").records() == {}


def test_a_mig_device_the_gpus_table_does_not_know_is_named_and_not_booked() -> None:
    sync = make_sync(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}))
    sync.on_claim(claim(("gpu-0-mig-3g.40gb-0", {})))  # the profile not in DNS form
    sync.on_claim(claim(("gpu-0-mig-7g-80gb-4", {}), uid="c2", name="other"))  # no such placement
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    assert "not booked" in sync.claim_problems["ns/claim"]
    assert "not booked" in sync.claim_problems["ns/other"]
    assert sync.books.plugin.node("n1").records() == {}


DEVICES = st.sampled_from(["gpu-0", "gpu-1", "gpu-1-mig-1g.10gb-0", "gpu-5", "bogus"])
CONSUMED = st.sampled_from([{}, {"cores": "30"}, {"cores": "20", "memory": "2Gi"}, {"cores": "x"}, {"memory": "1Gi"}])
EVENTS = st.lists(st.tuples(st.integers(0, 3), st.lists(st.tuples(DEVICES, CONSUMED), max_size=2),
                            st.booleans()), max_size=12)


@settings(max_examples=60, deadline=None)
@given(EVENTS)
def test_live_claim_events_give_the_books_of_a_rebuild_from_the_last_objects(events: list[
        tuple[int, list[tuple[str, dict[str, str]]], bool]]) -> None:
    node = make_node("n1")
    live = make_sync(node)
    plan_less = make_pod("inferred", core="30", mem="2", node="n1", phase=PodPhase.RUNNING)
    live.on_pod(plan_less)  # re-inferred on top of the claims after every change
    last: dict[int, ClaimAllocation] = {}
    deletions: dict[int, int] = {}  # a claim made again after a delete has a new UID, as in Kubernetes
    for number, devices, delete in events:
        current = claim(*devices, uid=f"u{number}-{deletions.get(number, 0)}", name=f"c{number}")
        if delete:
            live.on_claim_deleted(current)
            last.pop(number, None)
            deletions[number] = deletions.get(number, 0) + 1
        else:
            live.on_claim(current)
            last[number] = current
    fresh = live.rebuild([node], [plan_less], claims=list(last.values()))
    assert fresh.ledger.books() == live.ledger.books()
    assert fresh.gates == live.gates
    assert fresh.claim_problems == live.claim_problems


def test_a_gpu_leaving_mig_mode_moves_the_claims_device_from_the_mig_books_to_the_whole_gpu() -> None:
    both = mig_gpus("n1")
    sync = make_sync(mig_node("n1", {0: [("3g.40gb", 0)], 1: [("3g.40gb", 0)]}, gpus=both))
    sync.on_claim(claim(("gpu-0-mig-3g-40gb-0", {})))
    assert sync.books.record("claim:c1") is not None
    plain = (attrs.evolve(both[0], mig_mode=MigMode.DISABLED), both[1])
    sync.on_node(mig_node("n1", {1: [("3g.40gb", 0)]}, gpus=plain))
    assert sync.books.record("claim:c1") is None
    assert "claim:c1" not in sync.problems  # not left held for a GPU the MIG books no longer have
    assert "counted as the whole GPU 0" in sync.claim_problems["ns/claim"]
    assert used(sync, "n1")[0] == (1000, 80 * GiB)


def test_a_node_added_again_books_its_claims_against_its_new_mig_layout() -> None:
    sync = LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock(), mig_mode=PlacementMode.DYNAMIC)
    node = mig_node("n1", {0: [("3g.40gb", 0)]}, strategy="dynamic")
    sync.on_node(node)
    sync.on_claim(claim(("gpu-0-mig-3g-40gb-0", {}), ("gpu-0-mig-3g-40gb-4", {})))
    created = {b.start: b.create for b in sync.books.record("claim:c1").bookings}  # type: ignore[union-attr]
    assert created == {0: False, 4: True}  # the listed instance is taken, the other created
    sync.on_node_deleted("n1")
    sync.on_node(node)
    assert {b.start: b.create for b in sync.books.record("claim:c1").bookings  # type: ignore[union-attr]
            } == created
    assert sync.claim_problems == {}


def test_a_bound_pod_without_mig_resources_leaves_no_mig_reservation_behind() -> None:
    sync = make_sync(mig_node("n1", {0: [("3g.40gb", 0)]}))
    mig = MigPodAllocation("p", "n1", (MigBooking(0, "3g.40gb", 0, "dra-claim/g/m"),))
    sync.assume(PodAllocation("p", "n1", ()), mig=mig)  # a claim pod's reservation whose claim never took it over
    assert sync.books.record("p") == mig
    sync.on_pod(make_pod("p", node="n1", phase=PodPhase.RUNNING))
    assert sync.books.record("p") is None
    assert sync.books.reservation("p") is None


def test_an_event_older_than_the_claim_last_seen_changes_nothing() -> None:
    sync = make_sync(make_node("n1"))
    written = attrs.evolve(claim(("gpu-0", {})), resource_version="12")  # our write's answer, booked first
    sync.on_claim(written)
    sync.on_claim(attrs.evolve(written, results=(), resource_version="11"))  # the informer: before the write
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    assert schedule_whole(sync) == "n1"  # GPU 1 only: GPU 0 stays the claim's
    sync.on_claim(attrs.evolve(written, results=(), resource_version="13"))  # deallocated since
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    opaque = attrs.evolve(written, uid="c2", name="other", resource_version="b")
    sync.on_claim(opaque)
    sync.on_claim(attrs.evolve(opaque, results=(), resource_version="a"))  # not numbers: never older, applied
    assert used(sync, "n1") == [(0, 0), (0, 0)]


def test_a_write_answer_arriving_after_the_informers_delete_books_nothing() -> None:
    sync = make_sync(make_node("n1"))
    written = attrs.evolve(claim(("gpu-0", {})), resource_version="12")
    sync.on_claim_deleted(attrs.evolve(written, results=(), resource_version="13"))  # the informer's delete first
    sync.on_claim(written)  # then our write's answer
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    assert not sync.holds_claim("c1")
    fresh = sync.rebuild([make_node("n1")], [], claims=[written])  # a listing taken before the delete
    sync.adopt(fresh)
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    sync.on_claim(written)  # the tombstone survives the adoption
    assert used(sync, "n1") == [(0, 0), (0, 0)]
    sync.on_claim(attrs.evolve(written, uid="c9", resource_version="14"))  # a new claim under the name is booked
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]


def test_adopting_a_listing_older_than_a_write_answer_keeps_the_answer() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    before = attrs.evolve(claim(), resource_version="11")  # listed: not allocated yet
    sync.on_claim(before)
    written = attrs.evolve(claim(("gpu-0", {})), resource_version="12")  # our write's answer
    sync.on_claim(written)
    report = sync.adopt(sync.rebuild([node], [], claims=[before]))
    assert report.missing == report.extra == report.changed == ()  # nothing drifted: the answer is newer
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    assert schedule_whole(sync) == "n1"  # GPU 1 only
    newer = attrs.evolve(claim(), resource_version="13")  # deallocated since: the listing wins
    report = sync.adopt(sync.rebuild([node], [], claims=[newer]))
    assert used(sync, "n1") == [(0, 0), (0, 0)]


def test_a_claim_made_after_the_listing_and_written_by_us_survives_the_adoption() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    listing = sync.rebuild([node], [], claims=[])  # claims listed at 10: the claim did not exist yet
    written = attrs.evolve(claim(("gpu-0", {})), resource_version="12")  # made at 11, read with a GET, written at 12
    sync.on_claim(written)
    sync.adopt(listing, claims_listed_at="10")
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    gone = attrs.evolve(claim(("gpu-1", {}), uid="c7", name="gone"), resource_version="9")
    sync.on_claim(gone)  # deleted before the listing at 10; the informer's delete is late
    sync.adopt(sync.rebuild([node], [], claims=[written]), claims_listed_at="10")
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]  # the listing stands for it


def test_a_claim_made_again_under_its_name_after_the_listing_keeps_our_write() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    old = attrs.evolve(claim(), resource_version="5")
    sync.on_claim(old)
    listing = sync.rebuild([node], [], claims=[old])  # listed at 10
    sync.on_claim(attrs.evolve(claim(("gpu-0", {}), uid="c2"), resource_version="13"))
    sync.adopt(listing, claims_listed_at="10")
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]
    assert sync.holds_claim("c2")


def test_with_unnumbered_versions_the_listing_repairs_the_claim_books() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    sync.on_claim(attrs.evolve(claim(("gpu-0", {})), resource_version="a"))  # live: allocated
    listed = attrs.evolve(claim(), resource_version="b")  # the listing: deallocated (an event the informer missed)
    sync.adopt(sync.rebuild([node], [], claims=[listed]), claims_listed_at="c")
    assert used(sync, "n1") == [(0, 0), (0, 0)]
