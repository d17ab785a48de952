"""ClusterLedger: per-node, per-GPU books kept by reserve / observe / release and node updates.

Behaviours covered:

* inventory validation: a GPU reporting 0 memory, non-dense indexes, duplicate UUIDs, negative capacity;
* ``reserve`` is all-or-nothing (a multi-grant allocation whose second grant does not fit leaves ``books()``
  identical), idempotent for an identical record, and refuses a different plan for a booked UID; it refuses
  CPU, host memory and pod-slot overflow, unknown nodes and GPU indexes the node lacks;
* ``observe`` twice counts once (B04), replaces a changed plan (also across nodes), never refuses for fit;
* ``release`` of an unknown pod is a no-op and releasing twice gives back once;
* whole-GPU grants take 100 % core and all memory and need the GPU completely free (B11, both orders);
* a GPU at 100 % core admits no memory-only share (B09); boundaries: exactly filling a GPU fits, one more
  milli or byte does not;
* free values never go negative even when observed foreign pods over-commit a GPU; ``overcommitted`` names
  the GPU; over-commit is not corruption;
* corruption detection: tampering with ``core_used`` makes ``reserve`` raise ``LedgerCorruptedError`` and
  quarantine the node; ``repair`` restores the books and lifts the quarantine;
* ``upsert_node`` keeps usage when health changes; unhealthy and MIG GPUs receive no reservation (B14);
* ``remove_node`` returns the released pods and frees the slot for reuse;
* arrays grow for more nodes, more GPUs than ``max_gpus`` and more workload tags, keeping every total;
* ``rebuild`` from inventories plus records gives the same books (B03, domain part);
* read views: ``gpus()``, ``records()``, ``pods_on()``, ``__contains__``/``__len__``, unknown node errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import (
    InsufficientResourcesError,
    InvalidRequestError,
    LedgerCorruptedError,
    UnknownNodeError,
)
from domain.gpu import Gpu, GpuUuid, Health, MigMode, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.units import GiB
from support.ledger_poke import corrupt_core_used

GPU16 = 16 * GiB


def make_node(
    name: str,
    count: int = 2,
    *,
    memory: int = GPU16,
    unhealthy: tuple[int, ...] = (),
    mig: tuple[int, ...] = (),
    cpu_milli: int = 64_000,
    host_memory: int = 256 * GiB,
    max_pods: int = 110,
) -> NodeInventory:
    gpus = tuple(
        Gpu(
            i,
            GpuUuid(f"GPU-{name}-{i}"),
            "A100",
            memory,
            health=Health.UNHEALTHY if i in unhealthy else Health.HEALTHY,
            mig_mode=MigMode.ENABLED if i in mig else MigMode.DISABLED,
        )
        for i in range(count)
    )
    return NodeInventory(NodeName(name), gpus, cpu_milli=cpu_milli, memory_bytes=host_memory, max_pods=max_pods)


def share(uid: str, node: str, *grants: tuple[int, int, int], cpu: int = 0, memory: int = 0) -> PodAllocation:
    """One app container holding a share on each ``(gpu_index, core_milli, memory_bytes)``."""
    container = ContainerGrant("main", tuple(GpuGrant(i, c, m) for i, c, m in grants))
    return PodAllocation(uid, node, (container,), cpu_milli=cpu, memory_bytes=memory)


def whole(uid: str, node: str, *indexes: int, memory: int = GPU16) -> PodAllocation:
    container = ContainerGrant("main", tuple(GpuGrant(i, 1000, memory) for i in indexes), whole=True)
    return PodAllocation(uid, node, (container,))


def gpu_used(ledger: ClusterLedger, node: str, index: int) -> tuple[int, int]:
    usage = ledger.gpus(node)[index]
    return usage.core_used, usage.memory_used


# ---------------------------------------------------------------------------------------------- inventory
def test_gpu_with_zero_memory_is_rejected() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        Gpu(1, GpuUuid("GPU-x"), "A100", 0)
    assert caught.value.field == "gpu[1].memory_bytes"
    assert caught.value.value == 0


@pytest.mark.parametrize(("field", "value"), [("memory_bytes", -1), ("memory_bytes", 1.0), ("index", -1)])
def test_gpu_rejects_negative_or_non_integer(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"index": 0, "uuid": GpuUuid("GPU-x"), "model": "A100", "memory_bytes": GPU16}
    kwargs[field] = value
    with pytest.raises(InvalidRequestError) as caught:
        Gpu(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == f"gpu.{field}"
    assert caught.value.value == value


def test_node_inventory_requires_dense_indexes_and_unique_uuids() -> None:
    gpu0 = Gpu(0, GpuUuid("GPU-a"), "A100", GPU16)
    with pytest.raises(InvalidRequestError) as caught:
        NodeInventory(NodeName("n"), (gpu0, Gpu(2, GpuUuid("GPU-b"), "A100", GPU16)))
    assert caught.value.field == "node[n].gpus.index"
    assert caught.value.value == [0, 2]
    with pytest.raises(InvalidRequestError) as caught:
        NodeInventory(NodeName("n"), (gpu0, Gpu(1, GpuUuid("GPU-a"), "A100", GPU16)))
    assert caught.value.field == "node[n].gpus.uuid"
    with pytest.raises(InvalidRequestError) as caught:
        NodeInventory(NodeName("n"), cpu_milli=-1)
    assert caught.value.field == "node[n].cpu_milli"


def test_schedulable_means_healthy_and_not_mig() -> None:
    node = make_node("n", 3, unhealthy=(1,), mig=(2,))
    assert [g.schedulable for g in node.gpus] == [True, False, False]


# ---------------------------------------------------------------------------------------------- reserve
def test_reserve_books_core_memory_cpu_and_pod() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("a", "n", (1, 400, 4 * GiB), cpu=500, memory=GiB))
    assert gpu_used(ledger, "n", 0) == (0, 0)
    assert gpu_used(ledger, "n", 1) == (400, 4 * GiB)
    assert ledger.books()["n"] == {
        "core_used": [0, 400],
        "mem_used": [0, 4 * GiB],
        "cpu_used": 500,
        "hostmem_used": GiB,
        "pods": ["a"],
    }
    assert ledger.gpus("n")[1].core_free == 600
    assert ledger.gpus("n")[1].memory_free == 12 * GiB
    assert "a" in ledger
    assert len(ledger) == 1
    assert ledger.pods_on("n") == ["a"]


def test_reserve_is_all_or_nothing_when_second_grant_does_not_fit() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("x", "n", (1, 900, GiB)))
    before = ledger.books()
    versions = ledger.version.copy()
    two_gpus = share("a", "n", (0, 500, 4 * GiB), (1, 500, 4 * GiB), cpu=100)  # GPU1 has only 100 free
    with pytest.raises(InsufficientResourcesError, match="gpu 1"):
        ledger.reserve(two_gpus)
    assert ledger.books() == before
    assert "a" not in ledger
    assert np.array_equal(ledger.version, versions)


def test_reserve_is_all_or_nothing_for_memory_of_second_grant() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("x", "n", (1, 100, 15 * GiB)))
    before = ledger.books()
    with pytest.raises(InsufficientResourcesError, match="memory_bytes=2Gi exceeds free 1Gi"):
        ledger.reserve(share("a", "n", (0, 100, 2 * GiB), (1, 100, 2 * GiB)))
    assert ledger.books() == before


def test_reserve_identical_record_is_idempotent() -> None:
    ledger = ClusterLedger([make_node("n")])
    allocation = share("a", "n", (0, 400, 4 * GiB))
    ledger.reserve(allocation)
    ledger.reserve(share("a", "n", (0, 400, 4 * GiB)))  # an equal, separately built record
    assert gpu_used(ledger, "n", 0) == (400, 4 * GiB)
    assert ledger.books()["n"]["pods"] == ["a"]


@pytest.mark.parametrize(
    "other",
    [share("a", "n", (1, 400, 4 * GiB)), share("a", "n", (0, 500, 4 * GiB)), share("a", "m", (0, 400, 4 * GiB))],
)
def test_reserve_different_plan_for_booked_uid_raises(other: PodAllocation) -> None:
    ledger = ClusterLedger([make_node("n"), make_node("m")])
    ledger.reserve(share("a", "n", (0, 400, 4 * GiB)))
    before = ledger.books()
    with pytest.raises(InvalidRequestError) as caught:
        ledger.reserve(other)
    assert caught.value.field == "pod[a]"
    assert ledger.books() == before


def test_reserve_unknown_node_raises() -> None:
    ledger = ClusterLedger([make_node("n")])
    with pytest.raises(UnknownNodeError, match="'ghost'"):
        ledger.reserve(share("a", "ghost", (0, 100, GiB)))
    assert len(ledger) == 0


def test_reserve_gpu_index_the_node_lacks_raises() -> None:
    ledger = ClusterLedger([make_node("n", 2)], max_gpus=8)
    with pytest.raises(InvalidRequestError) as caught:
        ledger.reserve(share("a", "n", (2, 100, GiB)))
    assert caught.value.field == "pod[a].grant.gpu_index"
    assert caught.value.value == 2
    assert ledger.books()["n"]["core_used"] == [0, 0]


@pytest.mark.parametrize(
    ("allocation", "message"),
    [
        (share("a", "n", (0, 100, GiB), cpu=1001), "cpu_milli=1001 exceeds free 1000"),
        (share("a", "n", (0, 100, GiB), memory=2 * GiB + 1), "memory_bytes="),
    ],
)
def test_reserve_refuses_node_cpu_and_host_memory_overflow(allocation: PodAllocation, message: str) -> None:
    ledger = ClusterLedger([make_node("n", cpu_milli=1000, host_memory=2 * GiB)])
    with pytest.raises(InsufficientResourcesError, match=message):
        ledger.reserve(allocation)
    assert len(ledger) == 0


def test_reserve_refuses_beyond_pod_slots() -> None:
    ledger = ClusterLedger([make_node("n", max_pods=1)])
    ledger.reserve(PodAllocation("a", "n"))
    with pytest.raises(InsufficientResourcesError, match="no free pod slot"):
        ledger.reserve(PodAllocation("b", "n"))


def test_exactly_filling_a_gpu_fits_and_one_more_does_not() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(share("a", "n", (0, 700, 10 * GiB)))
    with pytest.raises(InsufficientResourcesError, match="core_milli=301 exceeds free 300"):
        ledger.reserve(share("b", "n", (0, 301, GiB)))
    with pytest.raises(InsufficientResourcesError, match="memory_bytes"):
        ledger.reserve(share("b", "n", (0, 300, 6 * GiB + 1)))
    ledger.reserve(share("b", "n", (0, 300, 6 * GiB)))
    assert gpu_used(ledger, "n", 0) == (1000, GPU16)
    assert ledger.core_free()[ledger.slot("n"), 0] == 0
    assert ledger.mem_free()[ledger.slot("n"), 0] == 0


# ---------------------------------------------------------------------------------------------- observe / release
def test_observe_twice_counts_once() -> None:
    """B04: a repeated informer Add/Update of an already-counted pod never changes the books."""
    ledger = ClusterLedger([make_node("n")])
    allocation = share("a", "n", (0, 400, 4 * GiB))
    ledger.reserve(allocation)
    before = ledger.books()
    assert ledger.observe(allocation) is False
    assert ledger.observe(share("a", "n", (0, 400, 4 * GiB))) is False
    assert ledger.books() == before
    assert gpu_used(ledger, "n", 0) == (400, 4 * GiB)


def test_observe_new_pod_returns_true_once() -> None:
    ledger = ClusterLedger([make_node("n")])
    allocation = share("a", "n", (1, 300, 2 * GiB))
    assert ledger.observe(allocation) is True
    assert ledger.observe(allocation) is False
    assert gpu_used(ledger, "n", 1) == (300, 2 * GiB)


def test_observe_changed_plan_replaces_the_old_one() -> None:
    ledger = ClusterLedger([make_node("n"), make_node("m")])
    ledger.observe(share("a", "n", (0, 400, 4 * GiB), cpu=100))
    assert ledger.observe(share("a", "n", (1, 200, GiB), cpu=100)) is True
    assert ledger.books()["n"]["core_used"] == [0, 200]
    assert ledger.books()["n"]["cpu_used"] == 100
    assert ledger.observe(share("a", "m", (0, 100, GiB))) is True
    assert ledger.books()["n"]["core_used"] == [0, 0]
    assert ledger.books()["n"]["cpu_used"] == 0
    assert ledger.books()["n"]["pods"] == []
    assert ledger.books()["m"]["core_used"] == [100, 0]
    assert ledger.pods_on("m") == ["a"]


def test_observe_to_unknown_node_keeps_the_old_record() -> None:
    ledger = ClusterLedger([make_node("n")])
    old = share("a", "n", (0, 400, 4 * GiB))
    ledger.observe(old)
    before = ledger.books()
    with pytest.raises(UnknownNodeError):
        ledger.observe(share("a", "ghost", (0, 400, 4 * GiB)))
    assert ledger.books() == before
    assert ledger.record("a") == old


def test_observed_grant_on_a_vanished_gpu_counts_against_zero_capacity() -> None:
    """A running pod on a GPU the node no longer reports stays counted: over-commit, never lost or refused."""
    ledger = ClusterLedger([make_node("n")])
    ghost = share("a", "n", (11, 400, 4 * GiB))
    assert ledger.observe(ghost)
    assert ledger.max_gpus >= 12
    assert ledger.overcommitted("n") == [11]
    assert ledger.books()["n"]["core_used"][11] == 400
    assert ClusterLedger.rebuild([make_node("n")], [ghost]).books() == ledger.books()
    with pytest.raises(InvalidRequestError):
        ledger.reserve(share("b", "n", (11, 100, GiB)))


def test_release_unknown_pod_is_a_no_op() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("a", "n", (0, 400, 4 * GiB)))
    before = ledger.books()
    assert ledger.release("nobody") is None
    assert ledger.books() == before


def test_release_gives_back_once() -> None:
    ledger = ClusterLedger([make_node("n")])
    allocation = share("a", "n", (0, 400, 4 * GiB), cpu=100)
    ledger.reserve(share("b", "n", (0, 100, GiB)))
    ledger.reserve(allocation)
    assert ledger.release("a") == allocation
    assert ledger.release("a") is None
    assert gpu_used(ledger, "n", 0) == (100, GiB)
    assert ledger.books()["n"]["cpu_used"] == 0
    assert ledger.verify_node("n") == []


# ---------------------------------------------------------------------------------------------- whole GPU (B11)
def test_whole_gpu_needs_a_completely_free_gpu() -> None:
    """B11: shares ``mem=1`` and ``mem=6`` on GPU0, then a whole GPU does not fit GPU0."""
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(share("a", "n", (0, 63, GiB)))
    ledger.reserve(share("b", "n", (0, 375, 6 * GiB)))
    before = ledger.books()
    with pytest.raises(InsufficientResourcesError, match="whole-GPU grant needs the GPU completely free"):
        ledger.reserve(whole("c", "n", 0))
    assert ledger.books() == before


def test_whole_gpu_held_admits_no_share() -> None:
    """B11 reverse order: a whole GPU first, then a share does not fit it."""
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(whole("c", "n", 0))
    assert gpu_used(ledger, "n", 0) == (1000, GPU16)
    with pytest.raises(InsufficientResourcesError):
        ledger.reserve(share("a", "n", (0, 1, 1)))
    with pytest.raises(InsufficientResourcesError):
        ledger.reserve(whole("d", "n", 0))


@pytest.mark.parametrize(("core", "memory"), [(1000, GPU16 - 1), (1000, 1)])
def test_whole_gpu_grant_must_take_all_memory(core: int, memory: int) -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    container = ContainerGrant("main", (GpuGrant(0, core, memory),), whole=True)
    with pytest.raises(InsufficientResourcesError, match="takes all of it"):
        ledger.reserve(PodAllocation("c", "n", (container,)))
    assert len(ledger) == 0


def test_whole_gpu_grant_on_mixed_memory_node_takes_that_gpus_memory() -> None:
    gpus = (Gpu(0, GpuUuid("GPU-s"), "A100", GPU16), Gpu(1, GpuUuid("GPU-l"), "A100", 40 * GiB))
    ledger = ClusterLedger([NodeInventory(NodeName("n"), gpus, cpu_milli=1000, memory_bytes=GiB)])
    with pytest.raises(InsufficientResourcesError):
        ledger.reserve(whole("c", "n", 1, memory=GPU16))
    ledger.reserve(whole("c", "n", 1, memory=40 * GiB))
    assert gpu_used(ledger, "n", 1) == (1000, 40 * GiB)


# ---------------------------------------------------------------------------------------------- B09
def test_gpu_at_full_core_admits_no_memory_only_share() -> None:
    """B09: a 100 %-core holder is exclusive, whatever the next request omits."""
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(share("a", "n", (0, 1000, 4 * GiB)))
    with pytest.raises(InsufficientResourcesError, match="core_milli=1 exceeds free 0"):
        ledger.reserve(share("b", "n", (0, 1, 2 * GiB)))  # the least core a memory-only share resolves to
    assert ledger.books()["n"]["pods"] == ["a"]


# ---------------------------------------------------------------------------------------------- over-commit
def test_free_never_negative_after_observing_over_committing_pods() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.observe(share("x", "n", (0, 700, 12 * GiB)))
    ledger.observe(share("y", "n", (0, 700, 12 * GiB)))
    slot = ledger.slot("n")
    assert int(ledger.core_used[slot, 0]) == 1400
    assert int(ledger.mem_used[slot, 0]) == 24 * GiB
    assert (ledger.core_free() >= 0).all()
    assert (ledger.mem_free() >= 0).all()
    assert ledger.core_free()[slot, 0] == 0
    assert ledger.gpus("n")[0].core_free == 0
    assert ledger.gpus("n")[0].memory_free == 0
    assert ledger.overcommitted("n") == [0]
    assert ledger.verify_node("n") == []  # reality wins: over-commit is not corruption
    assert "n" not in ledger.quarantine
    with pytest.raises(InsufficientResourcesError):
        ledger.reserve(share("z", "n", (0, 1, 1)))
    ledger.reserve(share("z", "n", (1, 500, GiB)))  # the other GPU still admits
    ledger.release("y")
    assert ledger.overcommitted("n") == []
    assert gpu_used(ledger, "n", 0) == (700, 12 * GiB)


# ---------------------------------------------------------------------------------------------- corruption
def test_tampered_totals_quarantine_the_node_and_repair_restores_them() -> None:
    ledger = ClusterLedger([make_node("n"), make_node("m")])
    ledger.reserve(share("a", "n", (0, 400, 4 * GiB), cpu=100))
    good = ledger.books()
    slot = ledger.slot("n")
    corrupt_core_used(ledger, "n", 0, delta=-300)  # a bug elsewhere corrupts the running total
    with pytest.raises(LedgerCorruptedError, match="'n'"):
        ledger.reserve(share("b", "n", (0, 100, GiB)))
    assert "n" in ledger.quarantine
    assert "per-GPU totals" in ledger.quarantine["n"]
    assert not ledger.admitting[slot]
    assert "b" not in ledger
    with pytest.raises(LedgerCorruptedError):  # still refuses while quarantined
        ledger.reserve(share("b", "n", (1, 100, GiB)))
    ledger.reserve(share("c", "m", (0, 100, GiB)))  # other nodes are unaffected
    problems = ledger.repair("n")
    assert problems == ["per-GPU totals differ from the allocation records"]
    assert "n" not in ledger.quarantine
    assert ledger.admitting[slot]
    assert ledger.books()["n"] == good["n"]
    assert ledger.verify_node("n") == []
    ledger.reserve(share("b", "n", (0, 100, GiB)))
    assert gpu_used(ledger, "n", 0) == (500, 5 * GiB)


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        ("cpu_used", "node totals differ from the allocation records"),
        ("pods_used", "node totals differ from the allocation records"),
        ("mem_used", "per-GPU totals differ from the allocation records"),
    ],
)
def test_verify_node_detects_each_kind_of_drift(array: str, expected: str) -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("a", "n", (0, 400, 4 * GiB), cpu=100))
    column = getattr(ledger, array)
    slot = ledger.slot("n")
    if column.ndim == 2:
        column[slot, 1] += 1
    else:
        column[slot] += 1
    assert expected in ledger.verify_node("n")
    assert "n" in ledger.quarantine
    ledger.repair("n")
    assert ledger.verify_node("n") == []
    assert ledger.books()["n"]["cpu_used"] == 100


def test_negative_usage_is_corruption() -> None:
    ledger = ClusterLedger([make_node("n")])
    corrupt_core_used(ledger, "n", 1, value=-5)
    problems = ledger.verify_node("n")
    assert "negative usage" in problems
    assert (ledger.core_free() >= 0).all()


def test_repair_rebuilds_tag_counts() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(whole("a", "n", 0))
    ledger.reserve(share("b", "n", (1, 100, GiB)))
    slot = ledger.slot("n")
    expected = ledger.tag_counts[slot].copy()
    ledger.tag_counts[slot] = 7
    ledger.repair("n")
    assert np.array_equal(ledger.tag_counts[slot], expected)
    assert ledger.tag_counts[slot, ledger.tag_id("1-gpu")] == 1
    assert ledger.tag_counts[slot, ledger.tag_id("share-gpu")] == 1


# ---------------------------------------------------------------------------------------------- node updates
def test_upsert_node_with_unhealthy_gpu_keeps_usage() -> None:
    """B14: a node update (health change, relabel) never resets per-GPU usage."""
    ledger = ClusterLedger([make_node("n", 4)])
    ledger.reserve(whole("a", "n", 0, 1, 2, 3))
    ledger.reserve(PodAllocation("cpu", "n", cpu_milli=1000))
    before = ledger.books()
    ledger.upsert_node(make_node("n", 4, unhealthy=(3,)))
    assert ledger.books() == before
    ledger.upsert_node(make_node("n", 4, unhealthy=(3,)))  # an unrelated update: same inventory again
    assert ledger.books() == before
    assert [g.schedulable for g in ledger.gpus("n")] == [True, True, True, False]
    assert ledger.verify_node("n") == []
    ledger.release("a")
    with pytest.raises(InsufficientResourcesError, match="gpu 3 is not schedulable"):
        ledger.reserve(share("c", "n", (3, 500, 8 * GiB)))
    with pytest.raises(InsufficientResourcesError, match="gpu 3 is not schedulable"):
        ledger.reserve(whole("b", "n", 3))
    ledger.reserve(share("c", "n", (0, 500, 8 * GiB)))


def test_unhealthy_gpu_in_use_keeps_usage_until_release() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    ledger.reserve(share("a", "n", (1, 500, 8 * GiB)))
    ledger.upsert_node(make_node("n", 2, unhealthy=(1,)))
    assert gpu_used(ledger, "n", 1) == (500, 8 * GiB)
    ledger.upsert_node(make_node("n", 2))
    assert gpu_used(ledger, "n", 1) == (500, 8 * GiB)
    ledger.reserve(share("b", "n", (1, 500, 8 * GiB)))  # healthy again: the rest of GPU1 is usable
    assert gpu_used(ledger, "n", 1) == (1000, GPU16)


def test_mig_gpu_receives_no_time_sharing_grant() -> None:
    ledger = ClusterLedger([make_node("n", 2, mig=(0,))])
    with pytest.raises(InsufficientResourcesError, match="not schedulable"):
        ledger.reserve(share("a", "n", (0, 100, GiB)))
    ledger.reserve(share("a", "n", (1, 100, GiB)))


def test_upsert_node_capacity_change_is_reflected_and_can_over_commit() -> None:
    ledger = ClusterLedger([make_node("n", 1, memory=40 * GiB)])
    ledger.reserve(share("a", "n", (0, 500, 30 * GiB)))
    ledger.upsert_node(make_node("n", 1, memory=GPU16))  # the GPU is now reported smaller
    assert gpu_used(ledger, "n", 0) == (500, 30 * GiB)
    assert ledger.gpus("n")[0].memory_free == 0
    assert ledger.overcommitted("n") == [0]
    assert ledger.verify_node("n") == []


def test_remove_node_returns_released_pods_and_frees_the_slot() -> None:
    ledger = ClusterLedger([make_node("n"), make_node("m")])
    ledger.reserve(share("b", "n", (0, 100, GiB)))
    ledger.reserve(share("a", "n", (1, 100, GiB)))
    ledger.reserve(share("c", "m", (0, 100, GiB)))
    slot = ledger.slot("n")
    assert ledger.remove_node("n") == ["a", "b"]
    assert "a" not in ledger
    assert "b" not in ledger
    assert ledger.release("a") is None
    assert ledger.node_names() == ["m"]
    assert not ledger.active[slot]
    with pytest.raises(UnknownNodeError):
        ledger.slot("n")
    with pytest.raises(UnknownNodeError):
        ledger.name(slot)
    assert ledger.books() == {"m": ledger.books()["m"]}
    assert ledger.books()["m"]["core_used"] == [100, 0]
    assert ledger.upsert_node(make_node("k", 3)) == slot  # the freed slot is reused, clean
    assert ledger.books()["k"] == {
        "core_used": [0, 0, 0],
        "mem_used": [0, 0, 0],
        "cpu_used": 0,
        "hostmem_used": 0,
        "pods": [],
    }
    ledger.reserve(share("d", "k", (2, 1000, GPU16)))
    assert ledger.verify_node("k") == []


def test_removing_a_quarantined_node_lifts_its_quarantine() -> None:
    ledger = ClusterLedger([make_node("n")])
    corrupt_core_used(ledger, "n", 0, value=3)
    ledger.verify_node("n")
    assert "n" in ledger.quarantine
    ledger.remove_node("n")
    assert ledger.quarantine == {}
    ledger.upsert_node(make_node("n"))
    ledger.reserve(share("a", "n", (0, 1000, GPU16)))


# ---------------------------------------------------------------------------------------------- growth
def test_node_with_more_gpus_than_max_gpus_grows_the_arrays() -> None:
    ledger = ClusterLedger([make_node("small", 2)], max_gpus=2)
    assert ledger.max_gpus == 2
    ledger.reserve(share("a", "small", (1, 300, 3 * GiB), cpu=10))
    ledger.upsert_node(make_node("big", 10))
    assert ledger.max_gpus >= 10
    assert ledger.core_used.shape[1] == ledger.max_gpus
    assert ledger.books()["small"]["core_used"] == [0, 300]
    ledger.reserve(share("b", "big", (9, 700, 7 * GiB)))
    assert gpu_used(ledger, "big", 9) == (700, 7 * GiB)
    assert ledger.core_free()[ledger.slot("small"), 2:].sum() == 0  # padding columns hold nothing
    assert ledger.verify_node("small") == []
    assert ledger.verify_node("big") == []


def test_many_nodes_grow_the_rows_and_keep_totals() -> None:
    ledger = ClusterLedger()
    for i in range(9):
        ledger.upsert_node(make_node(f"n{i}", 1))
        ledger.reserve(share(f"p{i}", f"n{i}", (0, 100 + i, GiB)))
    assert ledger.rows >= 9
    assert [ledger.books()[f"n{i}"]["core_used"] for i in range(9)] == [[100 + i] for i in range(9)]
    assert all(ledger.verify_node(f"n{i}") == [] for i in range(9))


def test_many_workload_tags_grow_the_tag_columns() -> None:
    ledger = ClusterLedger([make_node("n", 12)])
    assert ledger.tag_counts.shape[1] == 4
    start = 0
    for count in range(1, 5):
        ledger.reserve(whole(f"w{count}", "n", *range(start, start + count)))
        start += count
    ledger.reserve(share("s", "n", (10, 100, GiB)))  # a fifth tag: grows the columns inside the booking
    slot = ledger.slot("n")
    assert ledger.tag_counts.shape[1] >= 5
    for tag in ("1-gpu", "2-gpu", "3-gpu", "4-gpu", "share-gpu"):
        assert ledger.tag_counts[slot, ledger.tag_id(tag)] == 1
    assert ledger.books()["n"]["core_used"] == [1000] * 10 + [100, 0]
    assert ledger.verify_node("n") == []
    ledger.release("w4")
    assert ledger.tag_counts[slot, ledger.tag_id("4-gpu")] == 0
    assert ledger.tag_counts[slot].sum() == 4


# ---------------------------------------------------------------------------------------------- rebuild
def test_rebuild_equals_live() -> None:
    """B03 (domain part): the ledger rebuilt from inventories and pod records equals the live one."""
    nodes = [make_node("n", 2), make_node("m", 1, memory=40 * GiB)]
    live = ClusterLedger(nodes)
    live.reserve(share("a", "n", (0, 800, 12 * GiB), cpu=100))
    live.observe(share("b", "m", (0, 300, 10 * GiB)))
    live.reserve(whole("c", "n", 1))
    live.release("b")
    live.observe(share("d", "m", (0, 999, 39 * GiB), memory=GiB))
    rebuilt = ClusterLedger.rebuild(nodes, list(live.records().values()))
    assert rebuilt.books() == live.books()
    assert rebuilt.records() == live.records()


def test_records_is_a_copy() -> None:
    ledger = ClusterLedger([make_node("n")])
    ledger.reserve(share("a", "n", (0, 100, GiB)))
    records = ledger.records()
    records.clear()
    assert "a" in ledger
    assert ledger.record("a") is not None
    assert ledger.record("zzz") is None


def test_inventory_and_gpus_views() -> None:
    node = make_node("n", 2, unhealthy=(1,))
    ledger = ClusterLedger([node])
    assert ledger.inventory("n") == node
    views = ledger.gpus("n")
    assert [v.uuid for v in views] == ["GPU-n-0", "GPU-n-1"]
    assert [v.schedulable for v in views] == [True, False]
    assert views[0].core_capacity == 1000
    assert views[0].memory_capacity == GPU16
    with pytest.raises(UnknownNodeError, match="not in the ledger"):
        ledger.gpus("ghost")
