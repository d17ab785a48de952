"""Failure cases of ``docs/failure-cases.md``, at the domain level (ledger + scheduler, no Kubernetes).

Behaviours covered (test names carry the case id):

* B04 — Reserve(A), then informer Add(A) twice, then B: A is counted once; B lands on GPU0, which ends at
  800 milli-GPU / 8 GiB used; an Add that arrives before the scheduling cycle also counts once;
* B09 — a memory-only share never lands on a GPU held at 100 % core; a core-only share gets the documented
  proportional memory (never 0 = unlimited), booked exactly as ``resolve_share`` says;
* B11 — whole-GPU and fractional pods never share a GPU, in both orders, through the scheduler and the ledger;
* B12 — (a) ``gpu=0 core=30 mem=4`` is a plain share; (b) ``core=0 mem=0`` and (d) ``core=150`` and
  (e) ``core=50.5`` are rejected at construction; (c) ``mem=20Gi`` on a 16 GiB GPU is unschedulable with a
  reason naming the request and the largest GPU, no exception escapes and the scheduler keeps serving;
  (f) a GPU reported with 0 memory is refused; every policy's scores stay finite and within range;
* B03 (domain part) — a terminating pod still counted: the rebuilt ledger refuses B until A is released;
* B06 (domain part) — a failing bind leaves nothing reserved;
* B14 (domain part) — an unhealthy GPU keeps its usage, a node update never resets usage, and no policy
  ever places anything on the unhealthy GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, PodRequest, resolve_share, single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods
from domain.scheduling.registry import POLICIES, build_profile
from domain.units import GiB

GPU16 = 16 * GiB
TYPICAL = TypicalPods.from_workload(
    [PodClass(1000, 500, 1), PodClass(1000, 500, 1), PodClass(2000, 1000, 1), PodClass(500, 250, 1),
     PodClass(4000, 1000, 2), PodClass(500, 0, 0)]
)


def make_node(name: str, count: int, *, memory: int = GPU16, unhealthy: tuple[int, ...] = ()) -> NodeInventory:
    gpus = tuple(
        Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", memory,
            health=Health.UNHEALTHY if i in unhealthy else Health.HEALTHY)
        for i in range(count)
    )
    return NodeInventory(NodeName(name), gpus, cpu_milli=64_000, memory_bytes=256 * GiB)


def scheduler_for(ledger: ClusterLedger, policy: str = "binpack", seed: int = 0) -> Scheduler:
    typical = TYPICAL if POLICIES[policy].needs_typical_pods else None
    return Scheduler(ledger, build_profile(policy, ledger, rng=np.random.default_rng(seed), typical=typical))


def share_pod(uid: str, core_percent: int | None = None, memory_gib: int | None = None) -> PodRequest:
    container = ContainerRequest.share(
        "main", core_percent=core_percent, memory_bytes=None if memory_gib is None else memory_gib * GiB
    )
    return PodRequest(uid, (container,), name=uid)


def used(ledger: ClusterLedger, node: str) -> list[tuple[int, int]]:
    return [(g.core_used, g.memory_used) for g in ledger.gpus(node)]


# ---------------------------------------------------------------------------------------------- B04
def test_b04_reserve_then_two_informer_adds_count_a_once() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    scheduler = scheduler_for(ledger, "binpack")
    a = scheduler.schedule(share_pod("a", 40, 4))
    assert a.allocation is not None
    assert a.allocation.per_gpu_usage() == {0: (400, 4 * GiB)}
    assert ledger.observe(a.allocation) is False  # informer Add(A with its assignment)
    assert ledger.observe(a.allocation) is False  # ... a second time
    assert ledger.gpus("n")[0].core_free == 600  # 60 % free, not 20 %
    assert ledger.gpus("n")[0].memory_free == 12 * GiB
    b = scheduler.schedule(share_pod("b", 40, 4))
    assert b.allocation is not None
    assert b.allocation.per_gpu_usage() == {0: (400, 4 * GiB)}  # binpack: onto GPU0
    assert used(ledger, "n") == [(800, 8 * GiB), (0, 0)]
    assert ledger.verify_node("n") == []


def test_b04_informer_add_before_the_cycle_counts_once() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    scheduler = scheduler_for(ledger, "binpack")
    planned = scheduler_for(ClusterLedger([make_node("n", 2)])).schedule(share_pod("a", 40, 4)).allocation
    assert planned is not None
    ledger.observe(planned)
    result = scheduler.schedule(share_pod("a", 40, 4))
    assert result.reason == "already counted"
    ledger.observe(planned)
    assert used(ledger, "n") == [(400, 4 * GiB), (0, 0)]


# ---------------------------------------------------------------------------------------------- B09
def test_b09_memory_only_share_never_lands_on_a_full_core_gpu() -> None:
    ledger = ClusterLedger([make_node("n1", 1), make_node("n2", 1)])
    scheduler = scheduler_for(ledger, "binpack")
    a = scheduler.schedule(share_pod("a", 100, 4))
    assert a.allocation is not None
    full = a.allocation.node
    empty = "n2" if full == "n1" else "n1"
    b = scheduler.schedule(share_pod("b", memory_gib=2))
    assert b.allocation is not None
    assert b.allocation.node == empty  # not onto the 100 %-core GPU despite 12 GiB free there
    ledger.release("b")
    ledger.remove_node(empty)
    blocked = scheduler.schedule(share_pod("b", memory_gib=2))
    assert not blocked.scheduled
    assert blocked.rejected == (("no GPU with enough free core and memory", 1),)
    assert used(ledger, full) == [(1000, 4 * GiB)]


def test_b09_core_only_share_books_the_documented_default_memory() -> None:
    """C ``core=30`` with no memory, on an empty node: memory proportional to core, never 0 = unlimited."""
    for memory in (GPU16, 40 * GiB):
        ledger = ClusterLedger([make_node("n", 1, memory=memory)])
        result = scheduler_for(ledger, "binpack").schedule(share_pod("c", 30))
        assert result.allocation is not None
        expected = resolve_share(core_milli=300, memory_bytes=None, gpu_memory_bytes=memory)
        assert expected == (300, memory * 3 // 10)
        assert result.allocation.per_gpu_usage() == {0: expected}
        assert used(ledger, "n") == [expected]


def test_b09_memory_only_share_books_proportional_core() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    result = scheduler_for(ledger).schedule(share_pod("b", memory_gib=2))
    assert result.allocation is not None
    assert used(ledger, "n") == [(125, 2 * GiB)]  # 2/16 of the GPU: 125 milli-GPU, never 0


# ---------------------------------------------------------------------------------------------- B11
def test_b11_whole_gpu_does_not_fit_a_partly_used_gpu() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    scheduler = scheduler_for(ledger)
    assert scheduler.schedule(share_pod("a", memory_gib=1)).scheduled
    assert scheduler.schedule(share_pod("b", memory_gib=6)).scheduled
    before = ledger.books()
    c = scheduler.schedule(single_container_pod("c", gpus=1))
    assert not c.scheduled
    assert c.rejected == (("fewer than gpus=1 completely free GPUs", 1),)
    assert ledger.books() == before


def test_b11_share_does_not_fit_a_gpu_held_whole() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    scheduler = scheduler_for(ledger)
    c = scheduler.schedule(single_container_pod("c", gpus=1))
    assert c.allocation is not None
    assert used(ledger, "n") == [(1000, GPU16)]  # 100 % core and all the memory of GPU0
    a = scheduler.schedule(share_pod("a", memory_gib=1))
    assert not a.scheduled
    assert used(ledger, "n") == [(1000, GPU16)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_b11_whole_and_share_pods_never_share_a_gpu_under_any_policy(policy: str) -> None:
    ledger = ClusterLedger([make_node("n", 2), make_node("m", 2)])
    scheduler = scheduler_for(ledger, policy, seed=3)
    pods = [share_pod("s1", 30, 2), single_container_pod("w1", gpus=1), share_pod("s2", memory_gib=3),
            single_container_pod("w2", gpus=1), share_pod("s3", 50), single_container_pod("w3", gpus=1),
            share_pod("s4", 10, 1)]
    for pod in pods:
        scheduler.schedule(pod)
    for name in ("n", "m"):
        holders: dict[int, list[tuple[str, bool]]] = {}
        for uid in ledger.pods_on(name):
            record = ledger.record(uid)
            assert record is not None
            for index in record.per_gpu_usage():
                holders.setdefault(index, []).append((uid, index in record.whole_gpu_indexes))
        for index, pods_on_gpu in holders.items():
            if any(is_whole for _, is_whole in pods_on_gpu):
                assert len(pods_on_gpu) == 1, (name, index, pods_on_gpu)
        assert ledger.verify_node(name) == []
        assert ledger.overcommitted(name) == []


# ---------------------------------------------------------------------------------------------- B12
def test_b12a_zero_whole_gpus_with_a_share_is_a_plain_share() -> None:
    pod = PodRequest("a", (ContainerRequest("main", gpus=0, core_milli=300, memory_bytes=4 * GiB),))
    ledger = ClusterLedger([make_node("n", 1)])
    result = scheduler_for(ledger).schedule(pod)
    assert result.allocation is not None
    assert result.allocation.whole_gpu_indexes == frozenset()
    assert used(ledger, "n") == [(300, 4 * GiB)]


def test_b12b_zero_core_and_zero_memory_are_rejected() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("main", core_percent=0, memory_bytes=0)
    assert caught.value.value == 0
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("main", core_milli=0, memory_bytes=0)
    assert caught.value.field == "container[main].core_milli"
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("main", memory_bytes=0)
    assert caught.value.field == "container[main].memory_bytes"


def test_b12c_memory_larger_than_any_gpu_is_unschedulable_with_a_clear_reason() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    scheduler = scheduler_for(ledger)
    result = scheduler.schedule(share_pod("c", memory_gib=20))
    assert not result.scheduled
    assert "memory_bytes=20Gi" in result.reason
    assert "largest GPU (16Gi)" in result.reason
    assert result.rejected == (("memory_bytes=20Gi exceeds the largest GPU (16Gi)", 1),)
    assert len(ledger) == 0
    assert scheduler.schedule(share_pod("next", 50, 8)).scheduled  # the scheduler keeps serving


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_b12c_no_exception_escapes_for_unfittable_pods_under_any_policy(policy: str) -> None:
    ledger = ClusterLedger([make_node("n", 1), make_node("m", 2, memory=8 * GiB)])
    scheduler = scheduler_for(ledger, policy)
    unfittable = [
        share_pod("big-mem", memory_gib=20),
        share_pod("big-both", 100, 17),
        single_container_pod("three", gpus=3),
        single_container_pod("cpu", cpu_milli=100_000),
        PodRequest("multi", (ContainerRequest("a", core_milli=1000), ContainerRequest("b", core_milli=1000),
                             ContainerRequest("c", core_milli=1000), ContainerRequest("d", core_milli=1000))),
    ]
    for pod in unfittable:
        result = scheduler.schedule(pod)
        assert not result.scheduled, pod.uid
        assert result.reason.startswith("0 nodes available: ")
    assert len(ledger) == 0
    assert scheduler.schedule(share_pod("ok", 50, 8)).scheduled


@pytest.mark.parametrize(("percent", "memory"), [(150, 4 * GiB), (50.5, 4 * GiB), (-10, None)])
def test_b12d_e_out_of_range_or_fractional_core_is_rejected(percent: object, memory: int | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("main", core_percent=percent, memory_bytes=memory)
    assert caught.value.field == "container[main].core_percent"
    assert caught.value.value == percent


def test_b12d_core_above_one_gpu_in_milli_is_rejected() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("main", core_milli=1500)
    assert caught.value.value == 1500


def test_b12f_gpu_reported_with_zero_memory_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        Gpu(0, GpuUuid("GPU-zero"), "A100", 0)
    assert caught.value.field == "gpu[0].memory_bytes"
    assert caught.value.value == 0
    with pytest.raises(InvalidRequestError):
        resolve_share(core_milli=300, memory_bytes=None, gpu_memory_bytes=0)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_b12_scores_are_finite_and_in_range_for_every_policy(policy: str) -> None:
    nodes = [make_node("a", 2), make_node("b", 4, unhealthy=(1,)), make_node("c", 1, memory=80 * GiB),
             NodeInventory(NodeName("cpu"), (), cpu_milli=8000, memory_bytes=GiB)]
    ledger = ClusterLedger(nodes)
    scheduler = scheduler_for(ledger, policy)
    ledger.observe(PodAllocation("x", "b", (ContainerGrant("m", (GpuGrant(0, 300, GiB),)),)))
    pods = [share_pod("s", 1, 1), share_pod("m", memory_gib=1), share_pod("f", 100), share_pod("t", 100, 16),
            single_container_pod("w", gpus=1), single_container_pod("cpu-only", cpu_milli=10),
            PodRequest("mixed", (ContainerRequest("i", core_milli=700, init=True),
                                 ContainerRequest("a", core_milli=200), ContainerRequest("b", memory_bytes=GiB)))]
    for pod in pods:
        state = CycleState()
        slots, _ = scheduler.feasible(pod, state)
        assert len(slots) >= 1, pod.uid
        scores = scheduler.scores(pod, state, slots)
        assert scores.dtype == np.int64
        assert np.isfinite(scores.astype(np.float64)).all()
        total_weight = sum(w.weight for w in scheduler.profile.scores)
        assert ((scores >= 0) & (scores <= 100 * total_weight)).all(), (pod.uid, scores)
        assert scheduler.schedule(pod).scheduled, pod.uid


# ---------------------------------------------------------------------------------------------- B03 / B06 / B14
def test_b03_rebuilt_ledger_counts_a_terminating_pod_until_it_is_gone() -> None:
    node = make_node("n", 1)
    live = ClusterLedger([node])
    a = scheduler_for(live).schedule(share_pod("a", 80, 12)).allocation
    assert a is not None
    restarted = ClusterLedger.rebuild([node], [a])  # A is terminating but still in the pod list
    assert restarted.books() == live.books()
    assert restarted.gpus("n")[0].core_free == 200
    assert restarted.gpus("n")[0].memory_free == 4 * GiB
    scheduler = scheduler_for(restarted)
    assert not scheduler.schedule(share_pod("b", 50, 8)).scheduled
    restarted.release("a")  # A's deletion finishes
    assert scheduler.schedule(share_pod("b", 50, 8)).scheduled


class _Failing:
    name = "failing"

    def bind(self, pod: PodRequest, allocation: PodAllocation) -> None:
        raise RuntimeError("409 Conflict")


def test_b06_bind_failure_leaves_nothing_reserved() -> None:
    ledger = ClusterLedger([make_node("n", 1)])
    failing = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0), binder=_Failing()))
    result = failing.schedule(share_pod("a", 60, 10))
    assert not result.scheduled
    assert "409 Conflict" in result.reason
    assert used(ledger, "n") == [(0, 0)]
    assert scheduler_for(ledger).schedule(share_pod("b", 60, 10)).scheduled


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_b14_unhealthy_gpu_keeps_usage_and_never_receives_new_pods(policy: str) -> None:
    ledger = ClusterLedger([make_node("n", 4)])
    scheduler = scheduler_for(ledger, policy)
    a = scheduler.schedule(single_container_pod("a", gpus=4))
    assert a.scheduled
    ledger.upsert_node(make_node("n", 4, unhealthy=(3,)))  # GPU3 goes unhealthy
    ledger.upsert_node(make_node("n", 4, unhealthy=(3,)))  # an unrelated Node update
    assert used(ledger, "n") == [(1000, GPU16)] * 4
    assert not scheduler.schedule(single_container_pod("b", gpus=1)).scheduled
    assert not scheduler.schedule(share_pod("c", 50, 8)).scheduled
    ledger.release("a")
    assert used(ledger, "n") == [(0, 0)] * 4
    assert not scheduler.schedule(single_container_pod("four", gpus=4)).scheduled
    assert scheduler.schedule(single_container_pod("b", gpus=1)).scheduled
    assert scheduler.schedule(share_pod("c", 50, 8)).scheduled
    for i in range(12):
        scheduler.schedule(share_pod(f"fill{i}", 20, 2))
    assert ledger.gpus("n")[3].core_used == 0
    assert ledger.gpus("n")[3].memory_used == 0
    assert all(3 not in r.per_gpu_usage() for r in ledger.records().values())
    assert sum(g.core_used for g in ledger.gpus("n")[:3]) > 2000  # the healthy GPUs did fill up


def test_b14_health_flip_back_makes_the_gpu_usable_again_with_usage_intact() -> None:
    ledger = ClusterLedger([make_node("n", 2)])
    scheduler = scheduler_for(ledger, "spread")
    first = scheduler.schedule(share_pod("a", 60, 4))
    assert first.allocation is not None
    held = next(iter(first.allocation.per_gpu_usage()))
    ledger.upsert_node(make_node("n", 2, unhealthy=(held,)))
    ledger.upsert_node(make_node("n", 2))
    assert ledger.gpus("n")[held].core_used == 600
    with pytest.raises(InsufficientResourcesError):
        ledger.reserve(PodAllocation("z", "n", first.allocation.containers))
