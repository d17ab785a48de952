"""Victim selection on one node (domain.scheduling.preemption.victims): fractions per GPU, whole GPUs, multi-GPU
pods, node resources, ties, PodDisruptionBudgets, ``preemptionPolicy: Never``, nothing to gain, the reprieve
fallback and the choice across nodes."""

from __future__ import annotations

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid, NodeInventory
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, PodRequest, single_container_pod
from domain.scheduling.preemption.victims import (
    PreemptionPolicy,
    Preemptor,
    RunningPod,
    best_node,
    pdb_violations,
    select_victims,
)
from domain.topology import Tier
from domain.topology.machines import machine_topology
from domain.units import GiB

MEM = 16 * GiB


def node(name: str = "n1", gpus: int = 2, *, cpu: int = 64_000, pods: int = 110) -> NodeInventory:
    return NodeInventory(name, tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", MEM) for i in range(gpus)),
                         cpu_milli=cpu, memory_bytes=256 * GiB, max_pods=pods)


def book(ledger: ClusterLedger, uid: str, where: str, *grants: tuple[int, int], whole: bool = False,
         cpu: int = 0) -> None:
    """Books pod ``uid`` on node ``where`` with ``(gpu, percent)`` grants (memory proportional)."""
    gpu_grants = tuple(GpuGrant(g, pct * 10, MEM * pct // 100) for g, pct in grants)
    containers = (ContainerGrant("main", gpu_grants, whole=whole),) if gpu_grants else ()
    ledger.reserve(PodAllocation(uid, where, containers, cpu_milli=cpu))


def share(percent: int, *, priority: int = 1000, uid: str = "hi", cpu: int = 0,
          policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER) -> Preemptor:
    return Preemptor(single_container_pod(uid, core_milli=percent * 10, cpu_milli=cpu), priority, policy)


def pods(**priorities: int) -> list[RunningPod]:
    return [RunningPod(uid, priority, key=f"default/{uid}") for uid, priority in priorities.items()]


def test_freed_capacity_must_be_on_one_gpu_for_a_share() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "a", "n1", (0, 70))
    book(ledger, "b", "n1", (1, 60))
    # evicting nothing frees 30 % + 40 %: a 60 % share still needs one GPU with 60 % free
    outcome = select_victims(ledger, "n1", share(60), pods(a=1, b=2))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("a",)  # the lower of the two single victims that fit
    assert [g.gpu_index for c in outcome.victims.allocation.containers for g in c.grants] == [0]
    assert ledger.pods_on("n1") == ["a", "b"]  # the ledger is only read


def test_the_gpu_with_enough_freed_wins_over_a_lower_priority_victim_that_does_not_help() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "low", "n1", (0, 40))   # lowest priority, but GPU 0 keeps 30 % of "mid" → 70 % free
    book(ledger, "mid", "n1", (0, 30))
    book(ledger, "b", "n1", (1, 60))
    outcome = select_victims(ledger, "n1", share(80), pods(low=1, mid=30, b=10))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("b",)  # one victim of priority 10 beats {low, mid} (highest priority 30)


def test_highest_victim_priority_is_minimised_before_the_count() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "x", "n1", (0, 40))
    book(ledger, "y", "n1", (0, 40))
    book(ledger, "big", "n1", (1, 90))
    outcome = select_victims(ledger, "n1", share(70), pods(x=1, y=2, big=5))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("x", "y")  # two victims of priority ≤ 2 before one of priority 5


def test_fewer_victims_before_a_lower_sum_at_equal_highest_priority() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "p", "n1", (0, 45))
    book(ledger, "q", "n1", (0, 45))
    book(ledger, "r", "n1", (1, 60))
    # {p, q} (5 + 0) and {r} (5) both have highest priority 5; kube-scheduler's offset sum prefers one victim
    outcome = select_victims(ledger, "n1", share(60), pods(p=5, q=0, r=5))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("r",)


def test_equal_costs_are_broken_by_victim_uids() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "m", "n1", (0, 50))
    book(ledger, "k", "n1", (1, 50))
    outcome = select_victims(ledger, "n1", share(100), pods(m=3, k=3))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("k",)


def test_only_strictly_lower_priority_pods_are_victims() -> None:
    ledger = ClusterLedger([node(gpus=1)])
    book(ledger, "peer", "n1", (0, 60))
    outcome = select_victims(ledger, "n1", share(60, priority=100), pods(peer=100))
    assert outcome.victims is None
    assert outcome.reason == "no pod of lower priority on the node"


def test_preemption_policy_never_preempts_nothing() -> None:
    ledger = ClusterLedger([node(gpus=1)])
    book(ledger, "low", "n1", (0, 60))
    outcome = select_victims(ledger, "n1", share(60, policy=PreemptionPolicy.NEVER), pods(low=0))
    assert outcome.victims is None
    assert outcome.reason == "preemptionPolicy is Never"


def test_nothing_to_gain_when_even_every_lower_pod_gone_is_not_enough() -> None:
    ledger = ClusterLedger([node(gpus=1)])
    book(ledger, "low", "n1", (0, 50))
    book(ledger, "high", "n1", (0, 50))  # same priority as the preemptor: stays
    outcome = select_victims(ledger, "n1", share(60, priority=10), pods(low=1, high=10))
    assert outcome.victims is None
    assert outcome.reason == "does not fit even with every lower-priority pod evicted"


def test_a_pod_that_fits_already_needs_no_victims() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "low", "n1", (0, 50))
    outcome = select_victims(ledger, "n1", share(60), pods(low=0))
    assert outcome.victims is not None
    assert outcome.victims.pods == ()
    assert outcome.victims.allocation.containers[0].grants[0].gpu_index == 1


def test_whole_gpus_need_completely_free_gpus() -> None:
    ledger = ClusterLedger([node(gpus=4)])
    book(ledger, "a", "n1", (0, 10))
    book(ledger, "b", "n1", (1, 10))
    book(ledger, "c", "n1", (2, 90))
    book(ledger, "d", "n1", (3, 90))
    preemptor = Preemptor(single_container_pod("hi", gpus=2), 100)
    outcome = select_victims(ledger, "n1", preemptor, pods(a=5, b=5, c=1, d=1))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("c", "d")
    grants = outcome.victims.allocation.containers[0].grants
    assert [g.gpu_index for g in grants] == [2, 3]
    assert all(g.core_milli == 1000 and g.memory_bytes == MEM for g in grants)


def test_a_multi_gpu_victim_frees_every_gpu_it_held() -> None:
    ledger = ClusterLedger([node(gpus=2)])
    book(ledger, "wide", "n1", (0, 100), (1, 100), whole=True)
    preemptor = Preemptor(PodRequest("hi", (ContainerRequest("a", core_milli=600),
                                            ContainerRequest("b", core_milli=600))), 100)
    outcome = select_victims(ledger, "n1", preemptor, pods(wide=0))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("wide",)
    assert sorted(g.gpu_index for c in outcome.victims.allocation.containers for g in c.grants) == [0, 1]


def test_memory_counts_per_gpu_too() -> None:
    ledger = ClusterLedger([node()])
    ledger.reserve(PodAllocation("memhog", "n1", (ContainerGrant("main", (GpuGrant(0, 100, 15 * GiB),)),)))
    book(ledger, "busy", "n1", (1, 90))
    preemptor = Preemptor(single_container_pod("hi", core_milli=200, gpu_memory_bytes=4 * GiB), 100)
    outcome = select_victims(ledger, "n1", preemptor, pods(memhog=2, busy=1))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("busy",)  # GPU 0 has core but only 1 GiB of memory left


def test_node_cpu_shortage_makes_cpu_holders_useful_victims() -> None:
    ledger = ClusterLedger([node(cpu=4000)])
    book(ledger, "cpu-only", "n1", cpu=3000)
    book(ledger, "gpu-light", "n1", (0, 10), cpu=500)
    outcome = select_victims(ledger, "n1", share(50, cpu=2000), pods(**{"cpu-only": 1, "gpu-light": 0}))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("cpu-only",)


def test_pod_disruption_budgets_are_respected_when_possible() -> None:
    ledger = ClusterLedger([node()])
    book(ledger, "guarded", "n1", (0, 60))
    book(ledger, "free", "n1", (1, 60))
    candidates = [RunningPod("guarded", 0, pdbs=("default/db",)), RunningPod("free", 5)]
    outcome = select_victims(ledger, "n1", share(60), candidates, allowed={"default/db": 0})
    assert outcome.victims is not None
    assert outcome.victims.uids == ("free",)  # a higher-priority victim before a PDB violation
    assert outcome.victims.pdb_violations == 0
    allowed = select_victims(ledger, "n1", share(60), candidates, allowed={"default/db": 1})
    assert allowed.victims is not None
    assert allowed.victims.uids == ("guarded",)


def test_a_pdb_violation_is_accepted_when_nothing_else_fits() -> None:
    ledger = ClusterLedger([node(gpus=1)])
    book(ledger, "guarded", "n1", (0, 60))
    outcome = select_victims(ledger, "n1", share(60), [RunningPod("guarded", 0, pdbs=("default/db",))],
                             allowed={"default/db": 0})
    assert outcome.victims is not None
    assert outcome.victims.pdb_violations == 1


def test_pdb_violations_are_counted_most_important_first() -> None:
    victims = [RunningPod("a", 1, pdbs=("p",)), RunningPod("b", 9, pdbs=("p",)), RunningPod("c", 5, pdbs=("p",))]
    assert pdb_violations(victims, {"p": 2}) == 1
    assert pdb_violations(victims, {}) == 3


def test_leaving_pods_count_as_freed_and_are_not_chosen_again() -> None:
    ledger = ClusterLedger([node(gpus=1)])
    book(ledger, "going", "n1", (0, 60))
    book(ledger, "other", "n1", (0, 30))
    outcome = select_victims(ledger, "n1", share(60), pods(going=0, other=0), leaving={"going"})
    assert outcome.victims is not None
    assert outcome.victims.pods == ()


def test_reprieve_fallback_beyond_the_exact_limit_still_fits_and_spares_what_it_can() -> None:
    ledger = ClusterLedger([node(gpus=2)])
    for i in range(10):
        book(ledger, f"s{i}", "n1", (0, 10))
    book(ledger, "t", "n1", (1, 50))
    candidates = pods(**{f"s{i}": i for i in range(10)}, t=20)
    exact = select_victims(ledger, "n1", share(60), candidates)
    fallback = select_victims(ledger, "n1", share(60), candidates, exact_limit=3)
    assert exact.victims is not None
    assert fallback.victims is not None
    assert exact.victims.uids == ("s0", "s1", "s2", "s3", "s4", "s5")
    assert fallback.victims.uids == exact.victims.uids  # reprieve keeps the most important pods


def test_unknown_or_quarantined_nodes_get_a_reason() -> None:
    ledger = ClusterLedger([node()])
    assert select_victims(ledger, "nope", share(10), []).reason == "node unknown to the ledger"
    ledger.quarantine_node("n1", "test")
    assert select_victims(ledger, "n1", share(10), []).reason == "node not admitting pods"


def test_best_node_follows_the_same_order_across_nodes() -> None:
    ledger = ClusterLedger([node("n1"), node("n2")])
    book(ledger, "a", "n1", (0, 100), whole=True)
    book(ledger, "a2", "n1", (1, 100), whole=True)
    book(ledger, "b", "n2", (0, 100), whole=True)
    book(ledger, "b2", "n2", (1, 100), whole=True)
    candidates = pods(a=3, a2=3, b=2, b2=4)
    outcomes = [select_victims(ledger, n, share(60), candidates) for n in ("n1", "n2")]
    chosen = best_node(outcomes)
    assert chosen is not None
    assert (chosen.node, chosen.uids) == ("n2", ("b",))
    assert best_node([select_victims(ledger, "n1", share(60, policy=PreemptionPolicy.NEVER), candidates)]) is None


def test_a_preemptor_requiring_nvlink_frees_a_whole_island() -> None:
    ledger = ClusterLedger([attrs.evolve(node(gpus=8), topology=machine_topology("nvlink-islands-2x4", 8))])
    book(ledger, "on-0", "n1", (0, 100), whole=True)
    book(ledger, "on-4", "n1", (4, 100), whole=True)
    four = Preemptor(attrs.evolve(single_container_pod("hi", gpus=4), gpu_topology=Tier.NVLINK), 1000)
    outcome = select_victims(ledger, "n1", four, pods(**{"on-0": 5, "on-4": 1}))
    assert outcome.victims is not None
    assert outcome.victims.uids == ("on-4",)  # the lower priority; 6 free GPUs are not 4 connected ones
    assert [g.gpu_index for c in outcome.victims.allocation.containers for g in c.grants] == [4, 5, 6, 7]
    # unrequired, the same pod fits on the free GPUs: no victim is needed
    free = select_victims(ledger, "n1", Preemptor(single_container_pod("hi", gpus=4), 1000),
                          pods(**{"on-0": 5, "on-4": 1}))
    assert free.victims is not None
    assert free.victims.uids == ()
