"""FGD-deficit-scarce (:mod:`domain.scheduling.policies.fgd.scarce`) on hand-built clusters; expected values worked out
here.

Behaviours covered:

* the restricted claim ``r_m``: restricted typical demand spread over its allowed models by GPU count, scaled so
  that typical demand equals the cluster's GPUs, capped at 1; 0 for models nobody restricts to;
* the first key is FGD-deficit's minus ``Σ_g r_m(g) Δ_g``: an unrestricted whole-GPU pod loses score on a T4
  node that restricted pods need, and keeps FGD-deficit's score on the G2 node;
* without restricted typical pods the policy scores exactly as FGD-deficit;
* registry: registered, needs typical pods, replays deterministically within capacity.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.deficit import FgdDeficitScore
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.scarce import FgdScarceScore, restricted_claim
from domain.scheduling.registry import POLICIES, build_profile
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from domain.units import GiB, MiB

POLICY = "fgd-deficit-scarce"


def node(name: str, gpus: int, model: str, *, cpu: int = 96000) -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=1001)


def test_claim_spreads_restricted_demand_over_allowed_gpus_at_demand_equal_to_capacity() -> None:
    # GPUs: T4 2 ("t"), G2 6 ("g"): C = 8. Typical GPU demand (p · u · k): any model 0.5·1000 = 500, "T4" 0.1·1000
    # = 100, "G2|T4" 0.1·1000 = 100; CPU-only p 0.3 asks none: Σ = 700. T4: 8/700 · (100/2 + 100/8) = 5/7;
    # G2: 8/700 · 100/8 = 1/7; the no-GPU entry 0.
    typical = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 1000, 1, "T4"), PodClass(4000, 1000, 1, "G2|T4"),
                           PodClass(4000, 0, 0)), (0.5, 0.1, 0.1, 0.3))
    ledger = ClusterLedger([node("t", 2, "T4"), node("g", 6, "G2")])
    claim = restricted_claim(FragmentationModel(typical, ledger), ledger)
    assert claim[ledger.model_id("T4")] == pytest.approx(5 / 7)
    assert claim[ledger.model_id("G2")] == pytest.approx(1 / 7)
    assert claim[-1] == 0.0
    # Restricted demand above the model's GPUs is capped: "T4" p 0.75 of demand 1000 on a 4-GPU cluster with 2 T4
    # GPUs → 4/1000 · 750/2 = 1.5 → 1 (ids: T4 0, G2 1, no GPU 2).
    heavy = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 1000, 1, "T4")), (0.25, 0.75))
    ledger = ClusterLedger([node("t", 2, "T4"), node("g", 2, "G2")])
    claim = restricted_claim(FragmentationModel(heavy, ledger), ledger)
    assert claim.tolist() == [1.0, 0.0, 0.0]


def test_unrestricted_pod_loses_score_on_gpus_restricted_pods_need() -> None:
    # Nodes "t" (T4, 2 GPUs) and "g" (G2, 2 GPUs), 96000 CPU each. Typical: any model p 0.75, "T4" p 0.25, both
    # (4000 CPU, 1 GPU): demand 1000, r_T4 = 4/1000 · 250/2 = 0.5, r_G2 = 0. Pod: 1 whole GPU, 4000 CPU.
    # FGD: the any-model class fits both before and after (f = 0); the T4 class counts every free milli of "g"
    # (2000 → 1000), none of "t": F(n) − F(n') = 0 on "t", 0.25 · 1000 = 250 on "g". ρ = 4 and 4 · 2000 ≤ 96000:
    # no deficit. FGD-deficit: trunc(100·σ(0)) = 50, trunc(100·σ(0.25)) = 56. Scarce: "t" also loses
    # 0.5 · 1000 = 500 milli-GPU → trunc(100·σ(−0.5)) = 37; "g" stays 56.
    typical = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 1000, 1, "T4")), (0.75, 0.25))
    pod = single_container_pod("p", cpu_milli=4000, gpus=1)
    for policy, expected in (("fgd-deficit-blend", [50, 56]), (POLICY, [37, 56])):
        ledger = ClusterLedger([node("t", 2, "T4"), node("g", 2, "G2")])
        profile = build_profile(policy, ledger, rng=np.random.default_rng(0), typical=typical, tie_break="name")
        scheduler = Scheduler(ledger, profile)
        state = CycleState()
        slots, _ = scheduler.feasible(pod, state)
        assert ledger.slot("t") < ledger.slot("g")
        assert profile.scores[0].plugin.score(pod, ledger, state, slots).tolist() == expected
        result = scheduler.schedule(pod)
        assert result.allocation is not None
        assert result.allocation.node == "g"


def test_without_restricted_typical_pods_scores_as_fgd_deficit() -> None:
    # Every r_m is 0, so the extra cost is 0.0 and both plugins give the same first keys and refinements; a 12000-CPU
    # pod on a 16000-CPU 4-GPU node (deficit 4 · 3000 − 4000 = 8000) checks it where the deficit term is active.
    typical = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 0, 0)), (0.5, 0.5))
    ledger = ClusterLedger([node("a", 4, "G2", cpu=16000), node("b", 4, "G2", cpu=40000)])
    slots = np.array([ledger.slot("a"), ledger.slot("b")], np.int64)
    scarce = FgdScarceScore(NodeStateCache(FragmentationModel(typical, ledger)))
    assert scarce.claim().tolist() == [0.0, 0.0]
    deficit = FgdDeficitScore(NodeStateCache(FragmentationModel(typical, ledger)))
    scheduler = Scheduler(ledger, build_profile("fgd-residue", ledger, rng=np.random.default_rng(0), typical=typical))
    pod = single_container_pod("p", cpu_milli=12000, gpus=1)
    state, again = CycleState(), CycleState()
    scheduler.feasible(pod, state)
    scheduler.feasible(pod, again)
    assert scarce.score(pod, ledger, again, slots).tolist() == deficit.score(pod, ledger, state, slots).tolist()
    assert scarce.refine(pod, ledger, again, slots).tolist() == deficit.refine(pod, ledger, state, slots).tolist()


def test_registered_needs_typical_pods_and_replays_deterministically_within_capacity() -> None:
    assert POLICIES[POLICY].needs_typical_pods
    with pytest.raises(InvalidRequestError, match=POLICY):
        build_profile(POLICY, ClusterLedger([node("n", 2, "G2")]), rng=np.random.default_rng(0))
    nodes, pods = synthetic_nodes(0.02), synthetic_pods(0.02)
    first = replay(nodes, pods, ReplayConfig(POLICY, 7))
    again = replay(nodes, pods, ReplayConfig(POLICY, 7))
    assert first.used_milli == again.used_milli
    assert 0 < first.used_milli[-1] <= first.total_gpus * 1000


def test_scores_follow_the_claim_when_nodes_join() -> None:
    # Typical: any model p 0.75, "T4"-restricted p 0.25 (both 1 whole GPU). With 2 T4 + 2 G2 GPUs the T4 claim is
    # 4/1000 · 250/2 = 0.5; after eight more 1-GPU T4 nodes it is 12/1000 · 250/10 = 0.3, so a memoised T4 score
    # from before would be stale: the same plugin must score the T4 node as a fresh one does.
    typical = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 1000, 1, "T4")), (0.75, 0.25))
    ledger = ClusterLedger([node("t", 2, "T4"), node("g", 2, "G2")])
    plugin = FgdScarceScore(NodeStateCache(FragmentationModel(typical, ledger)))
    pod = single_container_pod("p", cpu_milli=4000, gpus=1)

    def scores(score: FgdScarceScore) -> list[int]:
        scheduler = Scheduler(ledger, build_profile(POLICY, ledger, rng=np.random.default_rng(0), typical=typical))
        state = CycleState()
        slots, _ = scheduler.feasible(pod, state)
        return score.score(pod, ledger, state, slots).tolist()

    before = scores(plugin)
    assert plugin.claim()[ledger.model_id("T4")] == pytest.approx(0.5)
    for i in range(8):
        ledger.upsert_node(node(f"t{i}", 1, "T4"))
    assert scores(plugin) == scores(FgdScarceScore(NodeStateCache(FragmentationModel(typical, ledger))))
    assert plugin.claim()[ledger.model_id("T4")] == pytest.approx(0.3)
    assert scores(plugin)[0] != before[0]
