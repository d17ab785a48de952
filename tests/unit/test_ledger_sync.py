"""The ledger's lifecycle under cluster events (domain.scheduling.sync.LedgerSync), with the failure cases.

Behaviours covered:

* nodes: added, updated without resetting usage, gated when the inventory is missing, stale (also found by
  ``tick`` when heartbeats stop, without decoding annotations again), dated in the future beyond the limit,
  foreign-protocol or malformed, ungated when fresh again; stale nodes keep their pods counted; a missing or
  malformed inventory keeps the last good GPU list (rebuild and resync agree), a node re-added without one has
  no GPUs; deleting a node forgets its books and a re-added node counts its pods again; a pod bound
  to a node not seen yet is counted when the node arrives; a GPU identity change re-derives pods by UUID;
* pods: CPU-only bound pods count node resources; terminal phases release; repeated events are idempotent;
  a new UID under a known ``namespace/name`` releases the old UID;
* B01 — a delete delivered as a tombstone (with the last state, or with the key only) releases the pod before
  the next pod is filtered; resync variant: a listing without the pod releases it and reports it as extra;
* B03 — a rebuild counts a terminating pod; B does not fit until A is deleted, then fits;
* B04 — Reserve(A), informer Add(A) twice: counted once; B lands on GPU0, which ends at 800/8 GiB; an Add of
  the annotated but unbound pod changes nothing either;
* B06 — a bind that fails once unreserves and forgets; B fits; the retry yields exactly one reservation;
* B07 — a pending pod's leftover plan naming a full GPU is not counted and not trusted: A lands on GPU1 and no
  GPU exceeds 1000 milli-GPU;
* B08 — pods of another scheduler are counted: a plan-less whole-GPU pod takes a whole GPU, a foreign pod with
  our plan is counted on its GPU; Z (gpu=1) is unschedulable; live event order and rebuild agree;
* B12 — every bad request goes through translate + Scheduler without an exception, with a reason naming the
  container, resource and value; a GPU reported with 0 memory gates its node; the scheduler keeps serving;
* B14 — 4-GPU node, GPU3 unhealthy, an unrelated label change: nothing resets usage; B and C do not fit while
  A runs; after A is deleted they fit and never land on GPU3;
* assumed pods: bound before the plan comes back keeps the reservation, the plan confirms it; forget is
  idempotent and never drops a pod already seen bound;
* resync: missing, extra and changed pods, missing and extra nodes and per-node totals are reported, the live
  ledger is repaired in place to equal the rebuild, reservations of pending pods survive, reservations whose
  pod vanished expire after the TTL;
* property: random sequences of pod add/update/bind/terminal/terminating/delete/tombstone and node
  update/delete events give live books equal to ``rebuild(final objects)``, and a resync finds no drift.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.kube.annotations import encode_inventory
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.translate import AllocationSource
from domain.request import PodRequest
from domain.scheduling.sync import LedgerSync, Tombstone
from domain.units import GiB
from support.kube_builders import (
    GPU16,
    KEYS,
    NOW,
    PROTOCOL,
    Clock,
    make_gpus,
    make_node,
    make_pod,
    make_scheduler,
    make_sync,
    used,
    with_plan,
)
from support.ledger_poke import corrupt_core_used


def bound(sync: LedgerSync, pod: PodObject, allocation: PodAllocation | None) -> PodObject:
    """``pod`` as the watch returns it after our bind: plan annotation written, node set, running."""
    assert allocation is not None
    return with_plan(pod, allocation, sync.ledger.inventory(allocation.node).gpus)


def share(uid: str, node: str, index: int, core: int, mem_gib: int, *, cpu: int = 0) -> PodAllocation:
    return PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, core, mem_gib * GiB),)),), cpu_milli=cpu)


def whole(uid: str, node: str, *indexes: int) -> PodAllocation:
    grants = tuple(GpuGrant(i, 1000, GPU16) for i in indexes)
    return PodAllocation(uid, node, (ContainerGrant("main", grants, whole=True),))


def max_core(sync: LedgerSync) -> int:
    return max((g.core_used for n in sync.ledger.node_names() for g in sync.ledger.gpus(n)), default=0)


# ---------------------------------------------------------------------------------------------- nodes
def test_node_update_keeps_usage_and_delete_forgets_until_the_node_returns() -> None:
    sync = make_sync(make_node("n1"))
    a = with_plan(make_pod("a", core="40", mem="4", cpu="1"), share("a", "n1", 1, 400, 4, cpu=1000), make_gpus("n1", 2))
    sync.on_pod(a)
    sync.on_node(make_node("n1", labels={"team": "x"}, allocatable={"cpu": "32", "memory": "1Ti", "pods": "50"}))
    assert used(sync, "n1") == [(0, 0), (400, 4 * GiB)]
    assert sync.ledger.books()["n1"]["cpu_used"] == 1000
    sync.on_node_deleted("n1")
    assert "a" not in sync.ledger
    assert sync.ledger.node_names() == []
    sync.on_node(make_node("n1"))
    assert used(sync, "n1") == [(0, 0), (400, 4 * GiB)]


def test_pod_bound_to_an_unknown_node_is_counted_when_the_node_arrives() -> None:
    sync = make_sync()
    sync.on_pod(with_plan(make_pod("a", gpu="1"), whole("a", "n1", 1), make_gpus("n1", 2)))
    assert "a" not in sync.ledger
    assert "not known yet" in sync.problems["a"]
    sync.on_node(make_node("n1"))
    assert used(sync, "n1") == [(0, 0), (1000, GPU16)]
    assert sync.sources["a"] is AllocationSource.PLAN


def test_gates_follow_inventory_health() -> None:
    clock = Clock()
    sync = make_sync(make_node("n1"), clock=clock)
    assert sync.gates == {}
    clock.now = NOW + 61
    sync.tick()
    assert "stale GPU inventory" in sync.gates["n1"]
    sync.on_node(make_node("n1", heartbeat=clock.now))
    assert sync.gates == {}
    sync.on_node(make_node("n1", heartbeat=clock.now, fingerprint="ffffffffffffffff"))
    assert "protocol mismatch" in sync.gates["n1"]
    sync.on_node(make_node("n1", annotation="{"))
    assert "malformed" in sync.gates["n1"]
    sync.on_node(make_node("n1", annotation=None))
    assert "no GPU inventory" in sync.gates["n1"]
    sync.on_node_deleted("n1")
    assert sync.gates == {}


def test_stale_node_keeps_its_pods_counted() -> None:
    sync = make_sync(make_node("n1"))
    sync.on_pod(with_plan(make_pod("a", gpu="1"), whole("a", "n1", 0), make_gpus("n1", 2)))
    sync.on_node(make_node("n1", heartbeat=NOW - 3600))
    assert "n1" in sync.gates
    assert used(sync, "n1")[0] == (1000, GPU16)


def test_missing_inventory_keeps_the_last_good_gpu_list_while_gated() -> None:
    sync = make_sync(make_node("n1"))
    a = with_plan(make_pod("a", core="40", mem="4"), share("a", "n1", 1, 400, 4), make_gpus("n1", 2))
    sync.on_pod(a)
    for broken in (make_node("n1", annotation=None), make_node("n1", annotation="{oops")):
        sync.on_node(broken)
        assert "the 2 GPUs it last published" in sync.gates["n1"]
        assert used(sync, "n1") == [(0, 0), (400, 4 * GiB)]  # still counted where its plan put it
        assert sync.sources["a"] is AllocationSource.PLAN
        assert sync.rebuild([broken], [a]).ledger.books() == sync.ledger.books()
        sync.tick()
        assert "the 2 GPUs it last published" in sync.gates["n1"]
    assert sync.resync([make_node("n1", annotation=None)], [a]).clean
    sync.on_node(make_node("n1"))
    assert sync.gates == {}
    sync.on_node_deleted("n1")
    sync.on_node(make_node("n1", annotation=None))  # no readable inventory since it came back: no GPUs
    assert sync.ledger.inventory("n1").gpus == ()
    assert sync.sources["a"] is AllocationSource.INFERRED


def test_heartbeat_in_the_future_beyond_the_limit_gates_the_node() -> None:
    clock = Clock()
    sync = make_sync(make_node("n1", heartbeat=NOW + 61), clock=clock)
    assert "61 s in the future" in sync.gates["n1"]
    clock.now = NOW + 1
    sync.tick()
    assert sync.gates == {}


def test_tick_reuses_the_last_reading_and_decodes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import domain.kube.annotations as codecs
    import domain.kube.translate.nodes as translate
    import domain.scheduling.sync.events as events

    clock = Clock()
    sync = make_sync(make_node("n1"), make_node("n2", fingerprint="ffffffffffffffff"), clock=clock)

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("tick decoded an annotation")

    monkeypatch.setattr(translate, "decode_inventory", forbidden)
    monkeypatch.setattr(codecs, "decode_inventory", forbidden)
    monkeypatch.setattr(translate, "read_node", forbidden)
    monkeypatch.setattr(events, "read_node", forbidden)  # the name the books call
    clock.now = NOW + 61
    sync.tick()
    assert "stale GPU inventory" in sync.gates["n1"]
    assert "stale GPU inventory" in sync.gates["n2"]
    assert "protocol mismatch" in sync.gates["n2"]


def test_a_new_uid_under_a_known_name_releases_the_old_one() -> None:
    sync = make_sync(make_node("n1", 1))
    old = with_plan(make_pod("old", gpu="1"), whole("old", "n1", 0), make_gpus("n1", 1))
    sync.on_pod(old)
    assert used(sync, "n1") == [(1000, GPU16)]
    new = attrs.evolve(make_pod("new", gpu="1"), name=old.name)  # deleted and re-created; the delete was missed
    assert new.key == old.key
    sync.on_pod(new)
    assert "old" not in sync.ledger
    assert used(sync, "n1") == [(0, 0)]
    sync.on_pod_deleted(Tombstone(new.key))  # a key-only delete now names the new pod
    assert "new" not in sync.assumed


def test_gpu_identity_change_rederives_pods_by_uuid() -> None:
    sync = make_sync(make_node("n1"))
    sync.on_pod(with_plan(make_pod("a", core="40", mem="4"), share("a", "n1", 1, 400, 4), make_gpus("n1", 2)))
    swapped = tuple(reversed([attrs.evolve(g, index=1 - g.index) for g in make_gpus("n1", 2)]))
    text = encode_inventory(swapped, heartbeat=NOW, protocol=PROTOCOL.fingerprint())
    sync.on_node(make_node("n1", annotation=text))
    assert used(sync, "n1") == [(400, 4 * GiB), (0, 0)]  # GPU-n1-1 is index 0 now


def test_cpu_only_pods_and_terminal_phases() -> None:
    sync = make_sync(make_node("n1"))
    pod = make_pod("c", cpu="3", node="n1", phase=PodPhase.RUNNING, scheduler="default-scheduler")
    sync.on_pod(pod)
    sync.on_pod(pod)
    assert sync.ledger.books()["n1"]["cpu_used"] == 3000
    assert sync.ledger.books()["n1"]["pods"] == ["c"]
    sync.on_pod(attrs.evolve(pod, phase=PodPhase.SUCCEEDED))
    assert sync.ledger.books()["n1"]["cpu_used"] == 0
    sync.on_pod(attrs.evolve(pod, phase=PodPhase.SUCCEEDED))
    assert len(sync.ledger) == 0


# ---------------------------------------------------------------------------------------------- B01
@pytest.mark.parametrize("with_state", [True, False])
def test_b01_tombstone_delete_releases_before_the_next_pod(with_state: bool) -> None:
    sync = make_sync(make_node("n1", 1))
    scheduler = make_scheduler(sync)
    a = make_pod("a", core="100", mem="16")
    a_bound = bound(sync, a, sync.schedule(scheduler, a).allocation)
    sync.on_pod(a_bound)
    assert used(sync, "n1") == [(1000, GPU16)]
    assert sync.on_pod_deleted(Tombstone(a.key, a_bound if with_state else None)) is True
    assert used(sync, "n1") == [(0, 0)]
    b = sync.schedule(scheduler, make_pod("b", core="50", mem="8"))
    assert b.allocation is not None
    assert b.allocation.per_gpu_usage() == {0: (500, 8 * GiB)}
    assert sync.ledger.gpus("n1")[0].memory_used == 8 * GiB
    assert sync.on_pod_deleted(Tombstone("default/ghost")) is False


def test_b01_resync_releases_a_pod_whose_delete_never_arrived() -> None:
    node = make_node("n1", 1)
    sync = make_sync(node)
    scheduler = make_scheduler(sync)
    a = make_pod("a", core="100", mem="16")
    sync.on_pod(bound(sync, a, sync.schedule(scheduler, a).allocation))
    report = sync.resync([node], [])
    assert report.extra == ("a",)
    assert report.totals["n1"]["core_used"] == ([1000], [0])
    assert used(sync, "n1") == [(0, 0)]
    assert sync.schedule(scheduler, make_pod("b", core="50", mem="8")).allocation is not None


# ---------------------------------------------------------------------------------------------- B03
def test_b03_rebuild_counts_a_terminating_pod_until_it_is_deleted() -> None:
    node = make_node("n1", 1)
    a = with_plan(make_pod("a", core="80", mem="12"), share("a", "n1", 0, 800, 12), make_gpus("n1", 1))
    a = attrs.evolve(a, deletion_timestamp=NOW + 300)
    sync = make_sync().rebuild([node], [a])  # the scheduler restarted: books from a full listing
    assert sync.ledger.gpus("n1")[0].core_free == 200
    assert sync.ledger.gpus("n1")[0].memory_free == 4 * GiB
    scheduler = make_scheduler(sync)
    b = make_pod("b", core="50", mem="8")
    assert sync.schedule(scheduler, b).allocation is None
    sync.on_pod(a)  # still terminating: still counted
    assert sync.schedule(scheduler, b).allocation is None
    sync.on_pod_deleted(a)
    placed = sync.schedule(scheduler, b)
    assert placed.allocation is not None
    assert placed.allocation.per_gpu_usage() == {0: (500, 8 * GiB)}


# ---------------------------------------------------------------------------------------------- B04
def test_b04_reserve_then_two_informer_adds_count_a_once() -> None:
    sync = make_sync(make_node("n1"))
    scheduler = make_scheduler(sync, "binpack")
    a = make_pod("a", core="40", mem="4")
    allocation = sync.schedule(scheduler, a).allocation
    assert sync.assumed == {"a": allocation}
    sync.on_pod(with_plan(a, allocation, make_gpus("n1", 2), bind=False))  # annotated, not bound yet
    assert sync.ledger.gpus("n1")[0].core_free == 600
    sync.on_pod(bound(sync, a, allocation))
    sync.on_pod(bound(sync, a, allocation))
    assert sync.assumed == {}
    assert sync.ledger.gpus("n1")[0].core_free == 600  # 60 %, not 20 %
    assert sync.ledger.gpus("n1")[0].memory_free == 12 * GiB
    b = sync.schedule(scheduler, make_pod("b", core="40", mem="4"))
    assert b.allocation is not None
    assert b.allocation.per_gpu_usage() == {0: (400, 4 * GiB)}
    assert used(sync, "n1")[0] == (800, 8 * GiB)


# ---------------------------------------------------------------------------------------------- B06
class FailOnce:
    name = "fail-once"

    def __init__(self) -> None:
        self.calls = 0

    def bind(self, pod: PodRequest, allocation: PodAllocation) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("HTTP 500")


def test_b06_failed_bind_is_forgotten_and_b_fits() -> None:
    sync = make_sync(make_node("n1", 1))
    scheduler = make_scheduler(sync, binder=FailOnce())
    a = sync.schedule(scheduler, make_pod("a", core="60", mem="10"))
    assert a.allocation is None
    assert "bind failed: HTTP 500" in a.reason
    assert sync.assumed == {}
    assert used(sync, "n1") == [(0, 0)]
    b = sync.schedule(scheduler, make_pod("b", core="60", mem="10"))
    assert b.allocation is not None


def test_b06_retry_after_failed_bind_yields_exactly_one_reservation() -> None:
    sync = make_sync(make_node("n1", 1))
    scheduler = make_scheduler(sync, binder=FailOnce())
    pod = make_pod("a", core="60", mem="10")
    assert sync.schedule(scheduler, pod).allocation is None
    retry = sync.schedule(scheduler, pod)
    assert retry.allocation is not None
    assert list(sync.ledger.records()) == ["a"]
    assert list(sync.assumed) == ["a"]
    assert used(sync, "n1") == [(600, 10 * GiB)]
    sync.on_pod(bound(sync, pod, retry.allocation))
    assert used(sync, "n1") == [(600, 10 * GiB)]
    assert sync.forget("a") is False  # bound: the object speaks; nothing to roll back
    assert used(sync, "n1") == [(600, 10 * GiB)]


# ---------------------------------------------------------------------------------------------- B07
def test_b07_leftover_plan_on_a_pending_pod_is_never_trusted() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    scheduler = make_scheduler(sync)
    gpus = make_gpus("n1", 2)
    a = with_plan(make_pod("a", core="100", mem="16"), share("a", "n1", 0, 1000, 16), gpus, bind=False)
    sync.on_pod(a)
    assert "a" not in sync.ledger
    c = with_plan(make_pod("c", core="100", mem="16"), share("c", "n1", 0, 1000, 16), gpus)
    sync.on_pod(c)
    placed = sync.schedule(scheduler, a)
    assert placed.allocation is not None
    assert placed.allocation.per_gpu_usage() == {1: (1000, GPU16)}
    assert max_core(sync) == 1000
    assert sync.rebuild([node], [a, c]).ledger.books()["n1"]["pods"] == ["c"]  # the leftover plan counts nothing


# ---------------------------------------------------------------------------------------------- B08
def b08_pods() -> tuple[PodObject, PodObject]:
    x = make_pod("x", gpu="1", node="n1", phase=PodPhase.RUNNING, scheduler="default-scheduler")
    y = with_plan(make_pod("y", core="50", mem="8", scheduler="other-scheduler"), share("y", "n1", 0, 500, 8),
                  make_gpus("n1", 2))
    return x, y


def test_b08_pods_of_other_schedulers_are_counted() -> None:
    node = make_node("n1")
    x, y = b08_pods()
    sync = make_sync().rebuild([node], [x, y])  # our scheduler starts from scratch
    assert used(sync, "n1") == [(500, 8 * GiB), (1000, GPU16)]
    assert sync.sources == {"x": AllocationSource.INFERRED, "y": AllocationSource.PLAN}
    z = sync.schedule(make_scheduler(sync), make_pod("z", gpu="1"))
    assert z.allocation is None
    assert "completely free" in z.reason


def test_b08_live_order_agrees_with_rebuild() -> None:
    node = make_node("n1")
    x, y = b08_pods()
    sync = make_sync(node)
    sync.on_pod(x)  # X first: inferred onto GPU0, the first free GPU...
    assert used(sync, "n1")[0] == (1000, GPU16)
    sync.on_pod(y)  # ...then Y's plan names GPU0: X is re-inferred onto GPU1
    assert used(sync, "n1") == [(500, 8 * GiB), (1000, GPU16)]
    assert sync.ledger.books() == sync.rebuild([node], [y, x]).ledger.books()


def test_b08_plan_less_pods_are_re_inferred_when_a_planned_pod_leaves() -> None:
    node = make_node("n1")
    x, y = b08_pods()
    sync = make_sync(node)
    sync.on_pod(y)
    sync.on_pod(x)
    assert used(sync, "n1")[1] == (1000, GPU16)
    sync.on_pod(attrs.evolve(y, phase=PodPhase.SUCCEEDED))
    assert used(sync, "n1") == [(1000, GPU16), (0, 0)]  # X now sits on the first free GPU, as a rebuild says
    assert sync.ledger.books() == sync.rebuild([node], [x]).ledger.books()


def test_b08_unknown_gpu_of_a_foreign_whole_gpu_pod_still_removes_one_gpu() -> None:
    sync = make_sync(make_node("n1"))
    x, _ = b08_pods()
    sync.on_pod(x)
    free = [g for g in sync.ledger.gpus("n1") if g.core_used == 0]
    assert len(free) == 1
    assert "no plan annotation" in sync.problems["x"]


# ---------------------------------------------------------------------------------------------- B12
@pytest.mark.parametrize(
    ("pod", "words"),
    [
        (make_pod("b", core="0", mem="0"), ("container[main]", "gpu-core.percentage", "=0")),
        (make_pod("d", core="150"), ("container[main]", "gpu-core.percentage", "=150", "1..100")),
        (make_pod("e", core="50.5"), ("container[main]", "gpu-core.percentage", "'50.5'")),
        (make_pod("g", gpu="1", core="50"), ("container[main]", "alibabacloud.com/gpu", "cannot be combined")),
        (make_pod("h", mem="-4"), ("container[main]", "alibabacloud.com/gpu-memory", "'-4'")),
    ],
)
def test_b12_invalid_requests_become_clear_reasons(pod: PodObject, words: tuple[str, ...]) -> None:
    sync = make_sync(make_node("n1", 1))
    scheduler = make_scheduler(sync)
    result = sync.schedule(scheduler, pod)
    assert result.allocation is None
    assert result.reason.startswith("invalid request:")
    for word in words:
        assert word in result.reason
    assert len(sync.ledger) == 0
    assert sync.schedule(scheduler, make_pod("ok", core="30", mem="4")).allocation is not None  # still serving


def test_b12_share_next_to_gpu_zero_and_oversized_memory() -> None:
    sync = make_sync(make_node("n1", 1))
    scheduler = make_scheduler(sync)
    a = sync.schedule(scheduler, make_pod("a", gpu="0", core="30", mem="4"))
    assert a.allocation is not None
    assert a.allocation.per_gpu_usage() == {0: (300, 4 * GiB)}
    c = sync.schedule(scheduler, make_pod("c", mem="20"))
    assert c.allocation is None
    assert "memory_bytes=20Gi exceeds the largest GPU (16Gi)" in c.reason


def test_b12f_gpu_reported_with_zero_memory_gates_the_node() -> None:
    broken = encode_inventory(make_gpus("bad", 1), heartbeat=NOW, protocol=PROTOCOL.fingerprint())
    broken = broken.replace(str(GPU16), "0")
    sync = make_sync(make_node("bad", annotation=broken), make_node("good", 1))
    assert "memory > 0" in sync.gates["bad"]
    assert sync.ledger.inventory("bad").gpu_count == 0
    result = sync.schedule(make_scheduler(sync), make_pod("p", core="30", mem="4"))
    assert result.allocation is not None
    assert result.allocation.node == "good"


# ---------------------------------------------------------------------------------------------- B14
def test_b14_unhealthy_gpu_and_label_change_never_reset_usage() -> None:
    sync = make_sync(make_node("n1", 4))
    scheduler = make_scheduler(sync)
    a = make_pod("a", gpu="4")
    sync.on_pod(bound(sync, a, sync.schedule(scheduler, a).allocation))
    sync.on_node(make_node("n1", 4, unhealthy=(3,)))
    sync.on_node(make_node("n1", 4, unhealthy=(3,), labels={"unrelated": "yes"}))
    assert used(sync, "n1") == [(1000, GPU16)] * 4
    b, c = make_pod("b", gpu="1"), make_pod("c", core="50", mem="8")
    assert sync.schedule(scheduler, b).allocation is None
    assert sync.schedule(scheduler, c).allocation is None
    sync.on_pod_deleted(a)
    placed_b = sync.schedule(scheduler, b).allocation
    placed_c = sync.schedule(scheduler, c).allocation
    assert placed_b is not None
    assert placed_c is not None
    assert 3 not in placed_b.per_gpu_usage()
    assert 3 not in placed_c.per_gpu_usage()
    for i in range(4):
        extra = sync.schedule(scheduler, make_pod(f"w{i}", gpu="1")).allocation
        assert extra is None or 3 not in extra.per_gpu_usage()
    assert sync.ledger.gpus("n1")[3].core_used == 0


# ---------------------------------------------------------------------------------------------- assumed
def test_bound_before_the_plan_keeps_the_reservation_until_the_plan_confirms_it() -> None:
    sync = make_sync(make_node("n1"))
    scheduler = make_scheduler(sync)
    pod = make_pod("a", core="40", mem="4")
    allocation = sync.schedule(scheduler, pod).allocation
    assert allocation is not None
    sync.on_pod(attrs.evolve(pod, node_name="n1", phase=PodPhase.RUNNING))  # bound, plan not seen yet
    assert sync.ledger.record("a") == allocation
    assert sync.sources["a"] is AllocationSource.ASSUMED
    sync.on_pod(bound(sync, pod, allocation))
    assert sync.sources["a"] is AllocationSource.PLAN
    assert sync.assumed == {}
    assert sync.ledger.record("a") == allocation


def test_forget_is_idempotent() -> None:
    sync = make_sync(make_node("n1"))
    scheduler = make_scheduler(sync)
    assert sync.schedule(scheduler, make_pod("a", core="40", mem="4")).allocation is not None
    assert sync.forget("a") is True
    assert sync.forget("a") is False
    assert len(sync.ledger) == 0


def test_assume_refuses_what_does_not_fit() -> None:
    sync = make_sync(make_node("n1", 1))
    sync.assume(share("a", "n1", 0, 800, 8))
    with pytest.raises(Exception, match="exceeds free"):
        sync.assume(share("b", "n1", 0, 800, 8))
    with pytest.raises(InvalidRequestError):
        sync.assume(share("a", "n1", 0, 100, 1))
    assert sync.assumed == {"a": share("a", "n1", 0, 800, 8)}


# ---------------------------------------------------------------------------------------------- resync
def test_resync_reports_and_repairs_drift_in_place() -> None:
    n1, n2, n3 = make_node("n1"), make_node("n2"), make_node("n3")
    sync = make_sync(n1, n2)
    gpus1 = make_gpus("n1", 2)
    old = with_plan(make_pod("old", core="10", mem="1"), share("old", "n1", 0, 100, 1), gpus1)
    moved = with_plan(make_pod("moved", core="20", mem="2"), share("moved", "n1", 0, 200, 2), gpus1)
    sync.on_pod(old)
    sync.on_pod(moved)
    scheduler = make_scheduler(sync)
    pending = make_pod("pending", core="30", mem="3")
    assert sync.schedule(scheduler, pending).allocation is not None
    new = with_plan(make_pod("new", core="40", mem="4"), share("new", "n3", 1, 400, 4), make_gpus("n3", 2))
    moved_now = with_plan(moved, share("moved", "n1", 1, 200, 2), gpus1)
    ledger = sync.ledger
    report = sync.resync([n1, n3], [moved_now, new, pending])
    assert report.missing == ("new",)
    assert report.extra == ("old",)
    assert report.changed == ("moved",)
    assert report.nodes_missing == ("n3",)
    assert report.nodes_extra == ("n2",)
    assert set(report.totals["n1"]) == {"core_used", "mem_used", "pods"}
    assert not report.clean
    assert sync.ledger is ledger
    assert sync.ledger.books() == sync.rebuild([n1, n3], [moved_now, new, pending], keep_assumed=True).ledger.books()
    assert "pending" in sync.assumed
    assert sync.resync([n1, n3], [moved_now, new, pending]).clean
    assert sync.ledger.quarantine == {}


def test_resync_expires_reservations_whose_pod_vanished() -> None:
    clock = Clock()
    node = make_node("n1")
    sync = make_sync(node, clock=clock)
    scheduler = make_scheduler(sync)
    assert sync.schedule(scheduler, make_pod("a", core="30", mem="3")).allocation is not None
    assert sync.resync([node], []).clean  # listed before the pod was created: kept
    assert "a" in sync.assumed
    clock.now += sync.assumed_ttl_seconds + 1
    report = sync.resync([node], [])
    assert report.extra == ("a",)
    assert sync.assumed == {}
    assert len(sync.ledger) == 0


def test_resync_repairs_corrupted_totals() -> None:
    node = make_node("n1")
    sync = make_sync(node)
    pod = with_plan(make_pod("a", core="10", mem="1"), share("a", "n1", 0, 100, 1), make_gpus("n1", 2))
    sync.on_pod(pod)
    corrupt_core_used(sync.ledger, "n1", 1, delta=300)  # a bug elsewhere corrupts the books
    report = sync.resync([node], [pod])
    assert report.totals["n1"]["core_used"] == ([100, 300], [100, 0])
    assert used(sync, "n1")[1] == (0, 0)
    assert sync.ledger.verify_node("n1") == []


# ---------------------------------------------------------------------------------------------- property
NODE_NAMES = ("n0", "n1")
UIDS = tuple(f"p{i}" for i in range(7))
SHAPES = st.one_of(
    st.builds(lambda: {"gpu": "1"}),
    st.builds(lambda c, m: {"core": str(c), "mem": str(m)}, st.integers(1, 10).map(lambda x: x * 10),
              st.integers(1, 16)),
    st.builds(lambda c: {"core": str(c)}, st.integers(1, 100)),
    st.builds(lambda: {"cpu": "1"}),
)

node_events = st.tuples(
    st.just("node"), st.sampled_from(NODE_NAMES),
    st.sampled_from(["update", "unhealthy", "label", "stale", "missing", "bigger", "delete"]), st.integers(0, 1),
)
pod_events = st.tuples(
    st.just("pod"), st.sampled_from(UIDS),
    st.sampled_from(["pending", "leftover", "bind-plan", "bind-plain", "bind-junk", "running", "terminal",
                     "terminating", "delete", "tombstone", "tombstone-key"]),
    st.tuples(st.sampled_from(NODE_NAMES), st.integers(0, 1), SHAPES),
)


def node_object(name: str, kind: str, arg: int) -> NodeObject:
    if kind == "missing":
        return make_node(name, annotation=None)
    return make_node(
        name,
        unhealthy=(arg,) if kind == "unhealthy" else (),
        labels={"v": str(arg)} if kind == "label" else None,
        heartbeat=NOW - 3600 if kind == "stale" else NOW,
        memory=24 * GiB if kind == "bigger" else GPU16,
    )


def plan_for(uid: str, node: str, index: int, shape: dict[str, str], memory: int) -> PodAllocation | None:
    if "gpu" in shape:
        return PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, 1000, memory),), whole=True),))
    if "core" not in shape:
        return None
    core = int(shape["core"]) * 10
    mem = int(shape["mem"]) * GiB if "mem" in shape else max(1, memory * core // 1000)
    return PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, core, mem),)),))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(node_events, pod_events), min_size=1, max_size=40))
def test_property_live_books_equal_rebuild_from_final_objects(events: list[tuple[object, ...]]) -> None:
    sync = make_sync(*(make_node(n) for n in NODE_NAMES))
    nodes: dict[str, NodeObject] = {n: make_node(n) for n in NODE_NAMES}
    pods: dict[str, PodObject] = {}
    shapes: dict[str, dict[str, str]] = {}
    for event in events:
        if event[0] == "node":
            _, name, kind, arg = event
            assert isinstance(name, str)
            assert isinstance(kind, str)
            assert isinstance(arg, int)
            if kind == "delete":
                nodes.pop(name, None)
                sync.on_node_deleted(name)
            else:
                nodes[name] = node_object(name, kind, arg)
                sync.on_node(nodes[name])
            continue
        _, uid, kind, (node, index, shape) = event
        assert isinstance(uid, str)
        assert isinstance(kind, str)
        shape = shapes.setdefault(uid, shape)
        current = pods.get(uid) or make_pod(uid, **shape)
        memory = 24 * GiB if nodes.get(node, make_node(node)).annotations.get(KEYS.node_inventory, "").find(
            str(24 * GiB)) >= 0 else GPU16
        plan = plan_for(uid, node, index, shape, memory)
        if kind in ("delete", "tombstone", "tombstone-key"):
            last = pods.pop(uid, None)
            if kind == "delete":
                sync.on_pod_deleted(last or current)
            else:
                sync.on_pod_deleted(Tombstone(current.key, last if kind == "tombstone" else None))
            continue
        if kind == "pending":
            updated = attrs.evolve(current, node_name="", phase=PodPhase.PENDING) if not current.node_name else current
        elif kind == "leftover" and plan is not None and not current.node_name:
            updated = with_plan(current, plan, make_gpus(node, 2, memory=memory), bind=False)
        elif kind == "bind-plan" and plan is not None:
            updated = with_plan(current, plan, make_gpus(node, 2, memory=memory))
        elif kind in ("bind-plain", "bind-plan", "leftover"):
            updated = attrs.evolve(current, node_name=current.node_name or node, phase=PodPhase.RUNNING)
        elif kind == "bind-junk":
            updated = attrs.evolve(current, node_name=current.node_name or node, phase=PodPhase.RUNNING,
                                   annotations={KEYS.pod_plan: '{"version": 1, "node": 5}'})
        elif kind == "running":
            updated = attrs.evolve(current, phase=PodPhase.RUNNING)
        elif kind == "terminal":
            updated = attrs.evolve(current, phase=PodPhase.SUCCEEDED if index else PodPhase.FAILED)
        else:
            updated = attrs.evolve(current, deletion_timestamp=NOW)
        pods[uid] = updated
        sync.on_pod(updated)
    rebuilt = sync.rebuild(list(nodes.values()), list(pods.values()))
    assert rebuilt.ledger.books() == sync.ledger.books()
    assert rebuilt.gates == sync.gates
    assert sync.resync(list(nodes.values()), list(pods.values())).clean
    for name in sync.ledger.node_names():
        assert sync.ledger.verify_node(name) == []
