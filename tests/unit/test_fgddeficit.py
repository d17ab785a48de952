"""FGD-deficit (:mod:`domain.scheduling.policies.fgd.deficit`) on hand-built clusters; every expected value is worked
out here.

Behaviours covered:

* ρ (typical CPU per GPU) is the demand-weighted ratio of the GPU-using typical pods (CPU-only pods left out);
  the deficit ``max(0, ρ · free − cpuLeft)``;
* the first key is FGD's change minus the deficit change (milli-GPU) inside one sigmoid: a CPU-heavy whole-GPU
  pod scores lower where its CPU leaves the remaining GPUs without their typical CPU (FGD scores both nodes the
  same and its tie rule picks that one), so the policy places it on the other node;
* a placement that creates no deficit scores exactly as under FGD-residue;
* registry: the policy is registered, needs typical pods, and replays deterministically within capacity.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.deficit import FgdDeficitScore, cpu_deficit, typical_cpu_per_gpu
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.residue import FgdResidueScore
from domain.scheduling.registry import POLICIES, build_profile
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from domain.units import GiB, MiB

POLICY = "fgd-deficit-blend"
# Whole GPU with 4000 CPU (p 0.5), CPU-only with 4000 CPU (p 0.5): ρ = 0.5·4000 / (0.5·1000) = 4.
TYPICAL = TypicalPods((PodClass(4000, 1000, 1), PodClass(4000, 0, 0)), (0.5, 0.5))


def node(name: str, gpus: int, *, cpu: int = 96000, model: str = "G2") -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=1001)


def test_rho_is_the_demand_weighted_cpu_per_gpu_of_gpu_typical_pods() -> None:
    # GPU pods: (8000 CPU, 1 whole GPU) p 0.25 and (3000 CPU, 500 milli) p 0.25; CPU-only p 0.5 is left out.
    # ρ = (0.25·8000 + 0.25·3000) / (0.25·1000 + 0.25·500) = 2750 / 375.
    typical = TypicalPods((PodClass(8000, 1000, 1), PodClass(3000, 500, 1), PodClass(4000, 0, 0)), (0.25, 0.25, 0.5))
    assert typical_cpu_per_gpu(FragmentationModel(typical, ClusterLedger([node("n", 2)]))) == pytest.approx(2750 / 375)
    only_cpu = TypicalPods((PodClass(4000, 0, 0),), (1.0,))
    assert typical_cpu_per_gpu(FragmentationModel(only_cpu, ClusterLedger([node("n", 2)]))) == 0.0


def test_deficit_is_the_cpu_missing_for_the_free_gpus_at_the_typical_ratio() -> None:
    # ρ = 4: 3 free GPUs want 12000 CPU; with 4000 left the deficit is 8000, with 28000 left none.
    free = np.array([[1000, 1000, 1000, 0], [1000, 1000, 1000, 0]], np.int64)
    assert cpu_deficit(4.0, np.array([4000, 28000], np.int64), free).tolist() == [8000.0, 0.0]


def test_cpu_heavy_pod_loses_score_where_it_leaves_the_other_gpus_without_cpu() -> None:
    # Nodes "a" (4 GPUs, 16000 CPU) and "b" (4 GPUs, 40000 CPU). Pod: 1 whole GPU, 12000 CPU.
    # FGD: after placement a has 4000 CPU, b 28000; the typical GPU pod still fits both, so only the CPU-only
    # class's term (every free milli) changes: F(n) − F(n') = 0.5·1000 on both → trunc(100·σ(0.5)) = 62 on both
    # (the name rule: "a"). Deficit: a 0 → 4·3000 − 4000 = 8000, b 0 → 0; the first key subtracts 8000 / 4 =
    # 2000 milli-GPU on "a": trunc(100·σ(−1.5)) = 18 → "b".
    pod = single_container_pod("p", cpu_milli=12000, gpus=1)
    for policy, expected, chosen in (("fgd", [62, 62], "a"), (POLICY, [18, 62], "b")):
        ledger = ClusterLedger([node("a", 4, cpu=16000), node("b", 4, cpu=40000)])
        profile = build_profile(policy, ledger, rng=np.random.default_rng(0), typical=TYPICAL, tie_break="name")
        scheduler = Scheduler(ledger, profile)
        state = CycleState()
        slots, _ = scheduler.feasible(pod, state)
        assert profile.scores[0].plugin.score(pod, ledger, state, slots).tolist() == expected
        result = scheduler.schedule(pod)
        assert result.allocation is not None
        assert result.allocation.node == chosen


def test_placement_without_deficit_scores_as_under_fgd_residue() -> None:
    # A 4000-CPU whole-GPU pod on (4 GPUs, 40000 CPU) leaves 36000 ≥ ρ·3000 = 12000, and on (4 GPUs, 16000 CPU)
    # 12000 ≥ 12000: no deficit before or after on either node, so both plugins give the same scores and keys.
    ledger = ClusterLedger([node("a", 4, cpu=16000), node("b", 4, cpu=40000)])
    slots = np.array([ledger.slot("a"), ledger.slot("b")], np.int64)
    pod = single_container_pod("p", cpu_milli=4000, gpus=1)
    residue = FgdResidueScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    deficit = FgdDeficitScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    scheduler = Scheduler(ledger, build_profile("fgd-residue", ledger, rng=np.random.default_rng(0), typical=TYPICAL))
    state, again = CycleState(), CycleState()
    scheduler.feasible(pod, state)
    scheduler.feasible(pod, again)
    assert deficit.score(pod, ledger, again, slots).tolist() == residue.score(pod, ledger, state, slots).tolist()
    assert deficit.refine(pod, ledger, again, slots).tolist() == residue.refine(pod, ledger, state, slots).tolist()


def test_registered_needs_typical_pods_and_replays_deterministically_within_capacity() -> None:
    assert POLICIES[POLICY].needs_typical_pods
    with pytest.raises(InvalidRequestError, match=POLICY):
        build_profile(POLICY, ClusterLedger([node("n", 2)]), rng=np.random.default_rng(0))
    nodes, pods = synthetic_nodes(0.02), synthetic_pods(0.02)
    first = replay(nodes, pods, ReplayConfig(POLICY, 7))
    again = replay(nodes, pods, ReplayConfig(POLICY, 7))
    assert first.used_milli == again.used_milli
    assert 0 < first.used_milli[-1] <= first.total_gpus * 1000
    assert first.failed_pods > 0  # tuned to 130 %: some pods cannot fit
