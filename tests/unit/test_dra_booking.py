"""A DRA claim's allocation as a ledger record (``domain.dra.booking``): whole GPUs, shares, the safe side."""

from __future__ import annotations

import attrs

from domain.dra.booking import (
    SHARES,
    WHOLE,
    ClaimBooking,
    MigClaimBooking,
    book_mig_on_node,
    book_on_node,
    claim_record_uid,
    node_results,
)
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.gpu import MigMode
from domain.kube.annotations import MigInstanceRecord
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.units import GiB
from support.kube_builders import GPU16, PROTOCOL, make_gpus
from support.mig_builders import mig_gpus

DRIVER = PROTOCOL.dra.driver
GPUS = make_gpus("n1", 2)
MIG_GPUS = mig_gpus("n1")


def result(device: str, consumed: dict[str, str] | None = None, *, pool: str = "n1", driver: str = DRIVER,
           request: str = "gpu") -> AllocationResult:
    return AllocationResult(request=request, driver=driver, pool=pool, device=device, consumed=consumed or {})


def claim(*results: AllocationResult, uid: str = "c1") -> ClaimAllocation:
    return ClaimAllocation(namespace="ns", name="claim", uid=uid, results=results)


def book(*results: AllocationResult) -> ClaimBooking:
    c = claim(*results)
    return book_on_node(c, "n1", node_results(c, DRIVER)["n1"], GPUS)


def test_a_whole_gpu_takes_all_of_it_with_no_pod_slot() -> None:
    booking = book(result("gpu-1"))
    assert booking.record is not None
    assert booking.record.pod_uid == claim_record_uid("c1") == "claim:c1"
    assert booking.record.per_gpu_usage() == {1: (1000, GPU16)}
    assert booking.record.whole_gpu_indexes == {1}
    assert not booking.record.pod_slot
    assert booking.record.cpu_milli == 0
    assert booking.problems == ()
    assert booking.unknown == ""


def test_a_share_counts_its_consumed_capacity_and_a_missing_memory_by_the_ledger_rule() -> None:
    assert book(result("gpu-0", {"cores": "30", "memory": "4Gi"})).record.per_gpu_usage() == {0: (300, 4 * GiB)}
    assert book(result("gpu-0", {"cores": "25"})).record.per_gpu_usage() == {0: (250, GPU16 // 4)}
    record = book(result("gpu-0", {"cores": "25", "memory": "2Gi"}),
                  result("gpu-0", {"cores": "10", "memory": "1Gi"}, request="b")).record
    assert record is not None
    assert record.per_gpu_usage() == {0: (350, 3 * GiB)}
    assert [c.container for c in record.containers] == [SHARES]


def test_other_drivers_and_pools_are_not_ours() -> None:
    c = claim(result("gpu-0", driver="other.example.com"), result("gpu-1", pool="n2"))
    assert set(node_results(c, DRIVER)) == {"n2"}
    assert node_results(claim(), DRIVER) == {}


def test_unmappable_amounts_and_mig_devices_count_as_the_whole_gpu_and_are_named() -> None:
    bad = book(result("gpu-0", {"cores": "abc"}))
    assert bad.record is not None
    assert bad.record.per_gpu_usage() == {0: (1000, GPU16)}
    assert "cores" in bad.problems[0]
    assert "whole GPU 0" in bad.problems[0]
    over = book(result("gpu-1", {"cores": "80"}), result("gpu-1", {"cores": "50"}, request="b"))
    assert over.record is not None
    assert over.record.per_gpu_usage() == {1: (1000, GPU16)}
    assert "beyond one GPU" in over.problems[0]
    mig = book(result("gpu-1-mig-1g.10gb-0"))  # GPU 1 is not in MIG mode: the safe side, the whole GPU
    assert mig.record is not None
    assert mig.record.per_gpu_usage() == {1: (1000, GPU16)}
    assert "MIG device" in mig.problems[0]
    assert "counted as the whole GPU 1" in mig.problems[0]
    assert [c.container for c in mig.record.containers] == [WHOLE]


def test_a_mig_device_on_a_gpu_in_mig_mode_is_left_to_the_mig_books() -> None:
    gpus = (GPUS[0], attrs.evolve(GPUS[1], mig_mode=MigMode.ENABLED))
    c = claim(result("gpu-1-mig-1g-10gb-0"), result("gpu-0", {"cores": "20", "memory": "2Gi"}, request="b"))
    booking = book_on_node(c, "n1", node_results(c, DRIVER)["n1"], gpus)
    assert booking.record is not None
    assert booking.record.per_gpu_usage() == {0: (200, 2 * GiB)}  # the share counts here; GPU 1 not at all
    assert booking.unknown == ""
    assert booking.problems == ()
    only_mig = claim(result("gpu-1-mig-1g-10gb-0"))
    alone = book_on_node(only_mig, "n1", node_results(only_mig, DRIVER)["n1"], gpus)
    assert (alone.record, alone.unknown, alone.problems) == (None, "", ())


def book_mig(*results: AllocationResult, layout: dict[int, tuple[MigInstanceRecord, ...]] | None = None,
             dynamic: bool = False) -> MigClaimBooking:
    c = claim(*results)
    return book_mig_on_node(c, "n1", node_results(c, DRIVER)["n1"], MIG_GPUS, layout=layout or {}, dynamic=dynamic)


def listed(profile: str, start: int) -> MigInstanceRecord:
    return MigInstanceRecord(1, 0, profile, start, f"MIG-{start}", free=True)


def test_mig_devices_become_one_mig_record_under_the_claims_key() -> None:
    booking = book_mig(result("gpu-0-mig-3g-40gb-4", request="a"), result("gpu-1-mig-1g-10gb-6", request="b"),
                       result("gpu-0", {"cores": "20"}))  # not a MIG device: the ledger's
    assert booking.problems == ()
    assert booking.record == MigPodAllocation(claim_record_uid("c1"), "n1", (
        MigBooking(0, "3g.40gb", 4, "a"), MigBooking(1, "1g.10gb", 6, "b")))


def test_a_mig_device_on_a_gpu_not_in_mig_mode_is_not_the_mig_books() -> None:
    c = claim(result("gpu-0-mig-3g-40gb-0"))
    assert book_mig_on_node(c, "n1", c.results, GPUS, layout={}, dynamic=False) == MigClaimBooking(None)


def test_in_dynamic_mode_a_mig_device_creates_unless_the_node_lists_that_instance() -> None:
    booking = book_mig(result("gpu-0-mig-3g-40gb-4", request="a"), result("gpu-0-mig-3g-40gb-0", request="b"),
                       layout={0: (listed("3g.40gb", 0), listed("1g.10gb", 4))}, dynamic=True)
    assert booking.record is not None
    assert [(b.start, b.create) for b in booking.record.bookings] == [(4, True), (0, False)]
    static = book_mig(result("gpu-0-mig-3g-40gb-4"))
    assert static.record is not None
    assert not static.record.bookings[0].create


def test_a_mig_device_no_table_entry_names_or_two_on_one_instance_are_named_and_not_booked() -> None:
    unknown = book_mig(result("gpu-0-mig-3g.40gb-0"), result("gpu-0-mig-3g-40gb-1"), result("gpu-1-mig-1g-10gb-0"))
    assert len(unknown.problems) == 2
    assert all("not booked" in p for p in unknown.problems)
    assert unknown.record is not None
    assert [b.gpu_index for b in unknown.record.bookings] == [1]
    twice = book_mig(result("gpu-0-mig-3g-40gb-0", request="a"), result("gpu-0-mig-3g-40gb-0", request="b"))
    assert twice.record is None
    (problem,) = twice.problems
    assert "two bookings share one instance" in problem


def test_a_device_whose_gpu_cannot_be_told_leaves_the_usage_unknown() -> None:
    odd = book(result("tpu-0"), result("gpu-0", {"cores": "10"}))
    assert "tpu-0" in odd.unknown
    assert odd.record is not None
    assert odd.record.per_gpu_usage() == {0: (100, GPU16 // 10)}
    gone = book(result("gpu-7"))
    assert gone.record is None
    assert "no GPU 7" in gone.unknown
