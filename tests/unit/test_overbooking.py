"""Impossible books caught when they happen (domain.scheduling.sync.overbooking).

Behaviours covered:

* a bound pod whose plan (another scheduler's) books a GPU beyond 100 % core or beyond its memory quarantines the
  node on that very event, with a reason naming the GPU, booked and real amounts and the pods; the books keep
  counting every pod (nothing is dropped or clamped); no pod is placed on the node, not even on its free GPU, and
  the per-node reason (the extender's) names the quarantine;
* the quarantine lifts as soon as the books are possible again (a pod ends or is deleted) and the node takes pods;
* a GPU reported smaller than what is booked on it quarantines the node at the node update; reported again in full,
  the node is released;
* a resync (repair of quarantined nodes) keeps an over-booked node quarantined; a rebuild from the same objects
  quarantines it too;
* a quarantine for corrupted totals is neither replaced nor lifted by the guard;
* property: after any sequence of foreign bound pods with plans and deletions, a node is quarantined exactly
  when one of its GPUs is booked beyond its core or memory, and the books equal a rebuild.
"""

from __future__ import annotations

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.objects import PodObject, PodPhase
from domain.kube.translate import pod_request
from domain.scheduling.framework.candidates import rejection_reasons
from domain.scheduling.sync import LedgerSync, Tombstone
from domain.units import GiB
from support.kube_builders import GPU16, PROTOCOL, make_node, make_pod, make_scheduler, make_sync, used, with_plan
from support.ledger_poke import corrupt_core_used


def foreign(sync: LedgerSync, uid: str, node: str, index: int, core: int, mem_gib: int) -> PodObject:
    """A pod bound by another scheduler with its plan (``core`` percent, ``mem_gib`` GiB on GPU ``index``)."""
    pod = make_pod(uid, core=str(core), mem=str(mem_gib), scheduler="other")
    plan = PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, core * 10, mem_gib * GiB),)),))
    bound = with_plan(pod, plan, sync.ledger.inventory(node).gpus)
    sync.on_pod(bound)
    return bound


def test_a_foreign_plan_beyond_a_gpu_quarantines_the_node_at_once() -> None:
    sync = make_sync(make_node("n1", 2), make_node("n2", 1))
    foreign(sync, "x", "n1", 0, 60, 10)
    assert "n1" not in sync.ledger.quarantine
    y = foreign(sync, "y", "n1", 0, 60, 10)  # 120 % core and 20 GiB of 16 on GPU 0
    reason = sync.ledger.quarantine["n1"]
    assert "impossible books" in reason
    assert "GPU 0 (GPU-n1-0) is booked 1200 of 1000 milli-GPU core and 20Gi of 16Gi memory" in reason
    assert "default/x, default/y" in reason
    assert sync.overbooked == {"n1": reason}
    assert used(sync, "n1") == [(1200, 20 * GiB), (0, 0)]  # every pod still counted, nothing clamped
    scheduler = make_scheduler(sync)
    result = sync.schedule(scheduler, make_pod("z", core="10", mem="1"))
    assert result.allocation is not None
    assert result.allocation.node == "n2"  # not n1's free GPU 1
    why = rejection_reasons(scheduler, pod_request(make_pod("q", core="10", mem="1"), PROTOCOL), ["n1"], fallback="-")
    assert why == {"n1": f"node not admitting pods (quarantined or cordoned): {reason}"}
    sync.on_pod(attrs.evolve(y, phase=PodPhase.SUCCEEDED))
    assert "n1" not in sync.ledger.quarantine
    assert sync.overbooked == {}
    late = sync.schedule(scheduler, make_pod("w", core="10", mem="1"))
    assert late.allocation is not None
    assert late.allocation.node == "n1"  # binpack: the fuller node takes pods again


def test_memory_alone_beyond_the_gpu_is_impossible_and_a_delete_lifts_it() -> None:
    sync = make_sync(make_node("n1", 1))
    foreign(sync, "x", "n1", 0, 10, 10)
    foreign(sync, "y", "n1", 0, 10, 10)
    assert "20Gi of 16Gi memory" in sync.ledger.quarantine["n1"]
    assert not sync.ledger.admitting[sync.ledger.slot("n1")]
    sync.on_pod_deleted(Tombstone("default/y"))
    assert sync.ledger.quarantine == {}
    assert sync.ledger.admitting[sync.ledger.slot("n1")]


def test_a_gpu_reported_smaller_than_its_bookings_quarantines_at_the_node_update() -> None:
    sync = make_sync(make_node("n1", 1))
    foreign(sync, "x", "n1", 0, 50, 12)
    sync.on_node(make_node("n1", 1, memory=8 * GiB))  # same UUID, now 8 GiB: the plan no longer fits it
    assert "n1" in sync.overbooked
    assert "n1" in sync.ledger.quarantine
    sync.on_node(make_node("n1", 1))
    assert sync.overbooked == {}
    assert sync.ledger.quarantine == {}


def test_resync_and_rebuild_keep_an_overbooked_node_quarantined() -> None:
    sync = make_sync(make_node("n1", 1))
    pods = [foreign(sync, u, "n1", 0, 70, 4) for u in ("x", "y")]
    reason = sync.ledger.quarantine["n1"]
    report = sync.resync([make_node("n1", 1)], pods)
    assert report.clean
    assert sync.ledger.quarantine == {"n1": reason}
    fresh = sync.rebuild([make_node("n1", 1)], pods)
    assert fresh.ledger.quarantine == {"n1": reason}


def test_a_corrupted_node_keeps_its_own_quarantine() -> None:
    sync = make_sync(make_node("n1", 2))
    foreign(sync, "x", "n1", 0, 70, 4)
    corrupt_core_used(sync.ledger, "n1", 1, delta=5)  # a bug corrupts a running total
    sync.ledger.verify_node("n1")
    corrupted = sync.ledger.quarantine["n1"]
    foreign(sync, "y", "n1", 0, 70, 4)
    assert sync.ledger.quarantine["n1"] == corrupted  # still quarantined, for the corruption
    assert "n1" in sync.overbooked
    sync.on_pod_deleted(Tombstone("default/y"))
    assert sync.ledger.quarantine["n1"] == corrupted  # only a repair lifts it


grants = st.tuples(st.integers(0, 1), st.integers(1, 100), st.integers(1, 16))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.tuples(st.just("add"), grants), st.tuples(st.just("delete"), st.integers(0, 9))),
                max_size=20))
def test_property_quarantined_exactly_while_a_gpu_is_booked_beyond_it(events: list[tuple[str, object]]) -> None:
    sync = make_sync(make_node("n1", 2))
    live: dict[str, PodObject] = {}
    for number, (kind, arg) in enumerate(events):
        if kind == "add":
            index, core, mem = arg  # type: ignore[misc]
            live[f"p{number}"] = foreign(sync, f"p{number}", "n1", index, core, mem)
        elif live:
            uid = sorted(live)[int(arg) % len(live)]  # type: ignore[call-overload]
            sync.on_pod_deleted(live.pop(uid))
        books = used(sync, "n1")
        impossible = any(core > 1000 or mem > GPU16 for core, mem in books)
        assert ("n1" in sync.ledger.quarantine) is impossible
        assert bool(sync.ledger.admitting[sync.ledger.slot("n1")]) is not impossible
    assert sync.rebuild([make_node("n1", 2)], list(live.values())).ledger.books() == sync.ledger.books()
