"""Scheduling framework: the cycle runner (filter → score → select → reserve → bind), plans and rollbacks.

Behaviours covered:

* filter reasons reach ``ScheduleResult.reason`` and ``rejected`` with per-filter node counts (CPU, model
  allow-list, whole-GPU count, share fit, multi-container fit, quarantined nodes), and an empty cluster says
  "no nodes available";
* a failing ``BindPlugin`` unreserves: books are back to before and every ``on_unreserve`` callback runs with
  the pod and its allocation (B06); a later pod then fits, and a retry that binds holds one reservation;
* an already-counted pod (reserved or observed) is not booked twice;
* a score plugin returning a value outside ``0..100`` (101, −1) or the wrong shape raises ``DomainError``;
  weights multiply scores; the best total wins and ties go to the profile's tie rule;
* a node whose books were tampered with is skipped (its reservation fails with ``LedgerCorruptedError``) and
  the pod lands elsewhere; a planner returning ``None`` makes the runner try the next node;
* multi-container pods: two share containers on one GPU add up; init + app containers hold
  ``max(app, init)`` per GPU, so a pod fits where the sum would not; containers that cannot all fit are
  rejected with a reason; whole + share containers in one pod take distinct GPUs;
* ``PodAllocation.per_gpu_usage`` rule and ``GpuGrant``/``ContainerGrant``/``PodAllocation`` validation;
* GPU selectors: model allow-list and UUID include/exclude lists steer placement;
* CPU-only pods are placed by node resources alone.
"""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuSelector, PodRequest, single_container_pod
from domain.scheduling.framework.cycle import UNPLANNED, CycleState, Profile, Scheduler, WeightedScore
from domain.scheduling.registry import build_profile
from domain.units import GiB
from support.ledger_poke import corrupt_core_used

GPU16 = 16 * GiB
I64 = npt.NDArray[np.int64]


def make_node(
    name: str,
    count: int = 2,
    *,
    memory: int = GPU16,
    model: str = "A100",
    unhealthy: tuple[int, ...] = (),
    cpu_milli: int = 64_000,
) -> NodeInventory:
    gpus = tuple(
        Gpu(
            i,
            GpuUuid(f"GPU-{name}-{i}"),
            model,
            memory,
            health=Health.UNHEALTHY if i in unhealthy else Health.HEALTHY,
        )
        for i in range(count)
    )
    return NodeInventory(NodeName(name), gpus, cpu_milli=cpu_milli, memory_bytes=256 * GiB)


def scheduler_for(ledger: ClusterLedger, policy: str = "binpack", **kwargs: object) -> Scheduler:
    return Scheduler(ledger, build_profile(policy, ledger, rng=np.random.default_rng(0), **kwargs))  # type: ignore[arg-type]


def shared(uid: str, core: int | None, memory: int | None = None, *, cpu: int = 0) -> PodRequest:
    return single_container_pod(uid, cpu_milli=cpu, core_milli=core, gpu_memory_bytes=memory)


def usage(ledger: ClusterLedger, node: str) -> list[tuple[int, int]]:
    return [(g.core_used, g.memory_used) for g in ledger.gpus(node)]


# ---------------------------------------------------------------------------------------------- reasons
def test_cpu_filter_reason_is_reported() -> None:
    ledger = ClusterLedger([make_node("a", cpu_milli=1000), make_node("b", cpu_milli=1000)])
    result = scheduler_for(ledger).schedule(shared("p", 100, GiB, cpu=2000))
    assert not result.scheduled
    assert result.allocation is None
    assert result.rejected == (("insufficient cpu, memory or pod slots", 2),)
    assert result.reason == "0 nodes available: 2 node(s): insufficient cpu, memory or pod slots"
    assert len(ledger) == 0


def test_each_filter_reports_the_nodes_it_removed() -> None:
    ledger = ClusterLedger(
        [make_node("small-cpu", cpu_milli=10), make_node("v100", model="V100"), make_node("a100")]
    )
    ledger.reserve(PodAllocation("x", "a100", (ContainerGrant("m", (GpuGrant(0, 1000, GPU16),)),
                                              ContainerGrant("n", (GpuGrant(1, 900, GiB),)))))
    pod = PodRequest("p", (ContainerRequest("m", core_milli=200),), cpu_milli=100, selector=GpuSelector(("A100",)))
    result = scheduler_for(ledger).schedule(pod)
    assert not result.scheduled
    assert dict(result.rejected) == {
        "insufficient cpu, memory or pod slots": 1,
        "no schedulable GPU of an allowed model or UUID": 1,
        "no GPU with enough free core and memory": 1,
    }
    assert "1 node(s): no GPU with enough free core and memory" in result.reason


def test_whole_gpu_reason_names_the_count() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    ledger.reserve(PodAllocation("x", "n", (ContainerGrant("m", (GpuGrant(0, 10, 1),)),)))
    result = scheduler_for(ledger).schedule(single_container_pod("p", gpus=2))
    assert not result.scheduled
    assert result.rejected == (("fewer than gpus=2 completely free GPUs", 1),)


def test_quarantined_node_is_reported_and_skipped() -> None:
    ledger = ClusterLedger([make_node("bad"), make_node("good")])
    corrupt_core_used(ledger, "bad", 0, value=5)
    ledger.verify_node("bad")
    result = scheduler_for(ledger).schedule(shared("p", 100, GiB))
    assert result.scheduled
    assert result.allocation is not None
    assert result.allocation.node == "good"
    assert ("node not admitting pods (quarantined or cordoned)", 1) in result.rejected


def test_tampered_node_is_caught_at_reserve_and_the_pod_lands_elsewhere() -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b")])
    ledger.reserve(PodAllocation("x", "a", (ContainerGrant("m", (GpuGrant(0, 500, GiB),)),)))
    corrupt_core_used(ledger, "a", 0, value=0)  # corrupted: looks empty, but the record says 500
    result = scheduler_for(ledger, "binpack", tie_break="name").schedule(shared("p", 600, GiB))
    assert result.scheduled
    assert result.allocation is not None
    assert result.allocation.node == "b"
    assert "a" in ledger.quarantine
    assert [why for why, _ in result.rejected] == [
        "node='a': quarantined: per-GPU totals differ from the allocation records"
    ]
    ledger.repair("a")
    assert usage(ledger, "a")[0] == (500, GiB)


def test_exact_fits_pass_the_filters_and_one_more_unit_does_not() -> None:
    """Boundaries are inclusive: a pod that exactly fills CPU, pod slots or a GPU is placed (no ``>`` for ``>=``)."""
    ledger = ClusterLedger([make_node("n", 1, cpu_milli=1000)])
    scheduler = scheduler_for(ledger)
    assert not scheduler.schedule(shared("over-cpu", 1000, GPU16, cpu=1001)).scheduled
    assert not scheduler.schedule(shared("over-gpu", 1000, GPU16 + 1)).scheduled
    exact = scheduler.schedule(shared("exact", 1000, GPU16, cpu=1000))
    assert exact.allocation is not None
    assert usage(ledger, "n") == [(1000, GPU16)]
    assert ledger.books()["n"]["cpu_used"] == 1000


def test_pod_slots_are_a_filter() -> None:
    node = NodeInventory(NodeName("n"), (), cpu_milli=1000, memory_bytes=GiB, max_pods=2)
    ledger = ClusterLedger([node])
    scheduler = scheduler_for(ledger)
    assert scheduler.schedule(single_container_pod("a")).scheduled
    assert scheduler.schedule(single_container_pod("b")).scheduled
    third = scheduler.schedule(single_container_pod("c"))
    assert not third.scheduled
    assert third.rejected == (("insufficient cpu, memory or pod slots", 1),)


def test_empty_cluster_reason() -> None:
    result = scheduler_for(ClusterLedger()).schedule(shared("p", 100))
    assert not result.scheduled
    assert result.reason == "0 nodes available: no nodes available"


# ---------------------------------------------------------------------------------------------- bind (B06)
class FailingBinder:
    name = "failing"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[PodAllocation] = []

    def bind(self, pod: PodRequest, allocation: PodAllocation) -> None:
        self.calls.append(allocation)
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("HTTP 500 from the API server")


def test_bind_failure_unreserves_and_runs_callbacks() -> None:
    """B06: a late bind failure gives the reservation back, so B then fits GPU0."""
    ledger = ClusterLedger([make_node("n", 1)])
    binder = FailingBinder(failures=1)
    scheduler = scheduler_for(ledger, binder=binder)
    rolled_back: list[tuple[str, PodAllocation]] = []
    scheduler.on_unreserve.append(lambda pod, allocation: rolled_back.append((pod.uid, allocation)))
    before = ledger.books()
    a = shared("a", 600, 10 * GiB)
    result = scheduler.schedule(a)
    assert not result.scheduled
    assert result.reason == "bind failed: HTTP 500 from the API server"
    assert ledger.books() == before
    assert "a" not in ledger
    assert len(binder.calls) == 1
    assert rolled_back == [("a", binder.calls[0])]
    assert ledger.verify_node("n") == []
    b = scheduler.schedule(shared("b", 600, 10 * GiB))
    assert b.scheduled
    assert usage(ledger, "n") == [(600, 10 * GiB)]


def test_bind_retry_that_succeeds_holds_one_reservation() -> None:
    """B06 variant (b): A fails to bind once, retries and succeeds: exactly one entry for A."""
    ledger = ClusterLedger([make_node("n", 1)])
    scheduler = scheduler_for(ledger, binder=FailingBinder(failures=1))
    assert not scheduler.schedule(shared("a", 600, 10 * GiB)).scheduled
    assert scheduler.schedule(shared("a", 600, 10 * GiB)).scheduled
    assert ledger.pods_on("n") == ["a"]
    assert usage(ledger, "n") == [(600, 10 * GiB)]
    assert scheduler.schedule(shared("a", 600, 10 * GiB)).reason == "already counted"
    assert usage(ledger, "n") == [(600, 10 * GiB)]


def test_unreserve_is_idempotent_and_always_runs_callbacks() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    scheduler = scheduler_for(ledger)
    calls: list[str] = []
    scheduler.on_unreserve.append(lambda pod, allocation: calls.append(pod.uid))
    pod = shared("a", 300, GiB)
    result = scheduler.schedule(pod)
    assert result.allocation is not None
    scheduler.unreserve(pod, result.allocation)
    scheduler.unreserve(pod, result.allocation)
    assert calls == ["a", "a"]
    assert usage(ledger, "n") == [(0, 0)]


# ---------------------------------------------------------------------------------------------- already counted
def test_already_reserved_pod_is_not_double_booked() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    scheduler = scheduler_for(ledger)
    first = scheduler.schedule(shared("a", 400, 4 * GiB))
    before = ledger.books()
    again = scheduler.schedule(shared("a", 400, 4 * GiB))
    assert again.scheduled
    assert again.allocation == first.allocation
    assert again.reason == "already counted"
    assert ledger.books() == before


def test_observed_pod_is_not_scheduled_again() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    observed = PodAllocation("a", "n", (ContainerGrant("main", (GpuGrant(1, 400, 4 * GiB),)),))
    ledger.observe(observed)
    result = scheduler_for(ledger).schedule(shared("a", 400, 4 * GiB))
    assert result.allocation == observed
    assert usage(ledger, "n") == [(0, 0), (400, 4 * GiB)]


# ---------------------------------------------------------------------------------------------- scores
@attrs.define
class FixedScore:
    values: list[int]
    name: str = "fixed"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        return np.array(self.values[: len(slots)], np.int64)

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        return scores


def with_scores(ledger: ClusterLedger, *scores: WeightedScore) -> Scheduler:
    base = build_profile("binpack", ledger, rng=np.random.default_rng(0), tie_break="name")
    profile: Profile = attrs.evolve(base, scores=scores)
    return Scheduler(ledger, profile)


@pytest.mark.parametrize("values", [[101, 0], [0, -1], [0]])
def test_score_outside_range_or_wrong_shape_raises(values: list[int]) -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b")])
    scheduler = with_scores(ledger, WeightedScore(FixedScore(values)))
    with pytest.raises(DomainError, match=r"'fixed' returned scores outside 0\.\.100"):
        scheduler.schedule(shared("p", 100, GiB))
    assert len(ledger) == 0


@attrs.define
class TriplingScore(FixedScore):
    """Normalizes by tripling its scores, in place or into a new array."""

    in_place: bool = False

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        if self.in_place:
            scores *= 3
            return scores
        return scores * 3


@pytest.mark.parametrize("in_place", [False, True])
def test_normalized_score_outside_range_raises(in_place: bool) -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b")])
    scheduler = with_scores(ledger, WeightedScore(TriplingScore([50, 10], in_place=in_place)))
    with pytest.raises(DomainError, match=r"'fixed' normalized scores outside 0\.\.100"):
        scheduler.schedule(shared("p", 100, GiB))
    assert len(ledger) == 0


def test_highest_weighted_score_wins_and_ties_use_the_tie_rule() -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b"), make_node("c")])
    scheduler = with_scores(ledger, WeightedScore(FixedScore([10, 60, 30])), WeightedScore(FixedScore([50, 0, 20]), 2))
    state = CycleState()
    slots, _ = scheduler.feasible(shared("p", 100, GiB), state)
    assert scheduler.scores(shared("p", 100, GiB), state, slots).tolist() == [110, 60, 70]
    result = scheduler.schedule(shared("p", 100, GiB))
    assert result.allocation is not None
    assert result.allocation.node == "a"
    tie = with_scores(ledger, WeightedScore(FixedScore([5, 5, 5])))
    result = tie.schedule(shared("q", 100, GiB))
    assert result.allocation is not None
    assert result.allocation.node == "a"  # "name" tie rule: the smallest name


class RefusingPlanner:
    """Plans nothing on the first node it is asked about, then defers to the real planner."""

    name = "refusing"

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.refused: list[int] = []

    def plan(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int) -> PodAllocation | None:
        if not self.refused:
            self.refused.append(slot)
            return None
        return self.inner.plan(pod, ledger, state, slot)  # type: ignore[attr-defined, no-any-return]


def test_planner_returning_none_moves_to_the_next_node() -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b")])
    base = build_profile("binpack", ledger, rng=np.random.default_rng(0), tie_break="name")
    planner = RefusingPlanner(base.planner)
    scheduler = Scheduler(ledger, attrs.evolve(base, planner=planner))
    result = scheduler.schedule(shared("p", 100, GiB))
    assert result.allocation is not None
    assert planner.refused == [ledger.slot("a")]
    assert result.allocation.node == "b"


class NoPlanner:
    """Plans nothing anywhere."""

    name = "none"

    def plan(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int) -> PodAllocation | None:
        return None


def test_nodes_the_planner_refuses_are_counted_with_a_reason_after_the_filters() -> None:
    ledger = ClusterLedger([make_node("a"), make_node("b"), make_node("small", cpu_milli=100)])
    base = build_profile("binpack", ledger, rng=np.random.default_rng(0), tie_break="name")
    refused = Scheduler(ledger, attrs.evolve(base, planner=NoPlanner())).schedule(shared("q", 100, GiB, cpu=1000))
    assert refused.allocation is None
    assert refused.rejected == (("insufficient cpu, memory or pod slots", 1), (UNPLANNED, 2))
    assert refused.reason == ("0 nodes available: 1 node(s): insufficient cpu, memory or pod slots; "
                              f"2 node(s): {UNPLANNED}")


# ---------------------------------------------------------------------------------------------- multi-container
def test_two_share_containers_on_one_gpu_add_up() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    pod = PodRequest(
        "p",
        (
            ContainerRequest("a", core_milli=300, memory_bytes=4 * GiB),
            ContainerRequest("b", core_milli=200, memory_bytes=GiB),
        ),
    )
    result = scheduler_for(ledger).schedule(pod)
    assert result.allocation is not None
    assert [c.container for c in result.allocation.containers] == ["a", "b"]
    assert result.allocation.per_gpu_usage() == {0: (500, 5 * GiB)}
    assert usage(ledger, "n") == [(500, 5 * GiB), (0, 0)]
    assert ledger.verify_node("n") == []


def test_two_share_containers_that_only_fit_on_separate_gpus() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    pod = PodRequest("p", (ContainerRequest("a", core_milli=600), ContainerRequest("b", core_milli=600)))
    result = scheduler_for(ledger).schedule(pod)
    assert result.allocation is not None
    assert sorted(result.allocation.per_gpu_usage()) == [0, 1]
    assert [u[0] for u in usage(ledger, "n")] == [600, 600]
    assert [u[1] for u in usage(ledger, "n")] == [GPU16 * 600 // 1000] * 2  # default memory: proportional


def test_containers_that_cannot_all_fit_are_rejected_with_a_reason() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    pod = PodRequest("p", (ContainerRequest("a", core_milli=600), ContainerRequest("b", core_milli=600)))
    result = scheduler_for(ledger).schedule(pod)
    assert not result.scheduled
    assert result.rejected == (("the pod's containers do not all fit the node's GPUs", 1),)
    assert len(ledger) == 0


def test_init_and_app_containers_hold_the_per_gpu_max() -> None:
    """An init container runs before the app: GPU0 holds max(init, app), not their sum."""
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(PodAllocation("x", "n", (ContainerGrant("m", (GpuGrant(0, 100, GiB),)),)))  # 900 free
    pod = PodRequest(
        "p",
        (
            ContainerRequest("init", core_milli=800, memory_bytes=10 * GiB, init=True),
            ContainerRequest("app", core_milli=300, memory_bytes=4 * GiB),
        ),
    )
    assert pod.effective_gpu_milli == 800
    result = scheduler_for(ledger).schedule(pod)
    assert result.allocation is not None  # the sum, 1100 milli, would not fit
    assert result.allocation.per_gpu_usage() == {0: (800, 10 * GiB)}
    assert usage(ledger, "n") == [(900, 11 * GiB)]
    assert ledger.verify_node("n") == []
    ledger.release("p")
    assert usage(ledger, "n") == [(100, GiB)]


def test_init_container_larger_than_free_gpu_is_rejected() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    ledger.reserve(PodAllocation("x", "n", (ContainerGrant("m", (GpuGrant(0, 300, GiB),)),)))
    pod = PodRequest(
        "p",
        (ContainerRequest("init", core_milli=800, init=True), ContainerRequest("app", core_milli=100)),
    )
    assert not scheduler_for(ledger).schedule(pod).scheduled
    assert usage(ledger, "n") == [(300, GiB)]


def test_whole_and_share_containers_take_distinct_gpus() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    pod = PodRequest("p", (ContainerRequest("share", core_milli=200), ContainerRequest("whole", gpus=1)))
    result = scheduler_for(ledger).schedule(pod)
    assert result.allocation is not None
    assert result.allocation.whole_gpu_indexes == frozenset({1})
    assert usage(ledger, "n") == [(200, GPU16 // 5), (1000, GPU16)]
    assert ledger.verify_node("n") == []


def test_per_gpu_usage_rule() -> None:
    allocation = PodAllocation(
        "p",
        "n",
        (
            ContainerGrant("i1", (GpuGrant(0, 700, GiB), GpuGrant(1, 100, 9 * GiB)), init=True),
            ContainerGrant("i2", (GpuGrant(0, 200, 3 * GiB),), init=True),
            ContainerGrant("a1", (GpuGrant(0, 300, GiB),)),
            ContainerGrant("a2", (GpuGrant(0, 200, GiB), GpuGrant(2, 50, GiB))),
        ),
    )
    assert allocation.per_gpu_usage() == {0: (700, 3 * GiB), 1: (100, 9 * GiB), 2: (50, GiB)}
    assert allocation.gpu_milli == 850
    assert allocation.gpu_tag == "share-gpu"


def test_allocation_tags() -> None:
    whole = ContainerGrant("w", (GpuGrant(0, 1000, GPU16), GpuGrant(1, 1000, GPU16)), whole=True)
    assert PodAllocation("p", "n", (whole,)).gpu_tag == "2-gpu"
    assert PodAllocation("p", "n", (whole,)).whole_gpu_indexes == frozenset({0, 1})
    assert PodAllocation("p", "n").gpu_tag is None
    init_only = ContainerGrant("i", (GpuGrant(0, 10, 1),), init=True)
    assert PodAllocation("p", "n", (init_only,)).gpu_tag is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpu_index": -1, "core_milli": 1, "memory_bytes": 1}, "grant.gpu_index"),
        ({"gpu_index": 0, "core_milli": 0, "memory_bytes": 1}, "grant.core_milli"),
        ({"gpu_index": 0, "core_milli": 1001, "memory_bytes": 1}, "grant.core_milli"),
        ({"gpu_index": 0, "core_milli": 1, "memory_bytes": 0}, "grant.memory_bytes"),
    ],
)
def test_grant_validation(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        GpuGrant(**kwargs)
    assert caught.value.field == field


def test_allocation_validation() -> None:
    with pytest.raises(InvalidRequestError, match="GPUs must be distinct"):
        ContainerGrant("c", (GpuGrant(0, 1, 1), GpuGrant(0, 2, 2)))
    grant = ContainerGrant("c", (GpuGrant(0, 1, 1),))
    with pytest.raises(InvalidRequestError, match="container names must be unique"):
        PodAllocation("p", "n", (grant, grant))
    with pytest.raises(InvalidRequestError) as caught:
        PodAllocation("p", "n", cpu_milli=-1)
    assert caught.value.field == "pod[p].cpu_milli"


# ---------------------------------------------------------------------------------------------- selectors
def test_model_allow_list_steers_placement() -> None:
    ledger = ClusterLedger([make_node("v", model="V100"), make_node("a", model="A100")])
    pod = PodRequest("p", (ContainerRequest("m", core_milli=100),), selector=GpuSelector(models=("A100",)))
    result = scheduler_for(ledger, "spread").schedule(pod)
    assert result.allocation is not None
    assert result.allocation.node == "a"


def test_uuid_include_and_exclude_lists() -> None:
    ledger = ClusterLedger([make_node("n", 3)])
    include = PodRequest(
        "p", (ContainerRequest("m", core_milli=100),), selector=GpuSelector(include_uuids=frozenset({"GPU-n-2"}))
    )
    result = scheduler_for(ledger).schedule(include)
    assert result.allocation is not None
    assert result.allocation.per_gpu_usage() == {2: (100, GPU16 // 10)}
    exclude = PodRequest(
        "q",
        (ContainerRequest("m", gpus=1),),
        selector=GpuSelector(exclude_uuids=frozenset({"GPU-n-0", "GPU-n-1"})),
    )
    assert not scheduler_for(ledger).schedule(exclude).scheduled  # GPU2 is partly used, 0 and 1 excluded


def test_cpu_only_pod_is_placed_by_node_resources() -> None:
    ledger = ClusterLedger([make_node("a", cpu_milli=1000), make_node("b", cpu_milli=4000)])
    result = scheduler_for(ledger, "spread").schedule(single_container_pod("p", cpu_milli=2000))
    assert result.allocation is not None
    assert result.allocation.node == "b"
    assert result.allocation.containers == ()
    assert ledger.books()["b"]["cpu_used"] == 2000
    assert usage(ledger, "b") == [(0, 0), (0, 0)]
