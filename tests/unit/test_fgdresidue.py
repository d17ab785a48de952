"""FGD-residue (:mod:`domain.scheduling.policies.fgd.residue`) on hand-built clusters; every expected value is worked
out in the test.

Behaviours covered:

* saturation residue ``r_t``: CPU-bound and GPU-bound copies of a share, whole-GPU classes with ``k`` GPUs,
  CPU-only classes (all free milli), model allow-lists (GPUs of other models never host a copy), a class
  asking for no CPU;
* FGD-residue returns FGD's score unchanged (its first key) and settles FGD's ties by the residue change scored like
  FGD's (``trunc(100·σ(ΔR/1000))``): a CPU-only pod goes to the node where its CPU strands no GPU, although the
  tie rule alone would pick the other; residue differences that score the same stay ties for the tie rule;
* the GPU chosen for a share follows the same two keys (FGD's pick when FGD's scores differ);
* registry: ``fgd-residue`` is registered, needs typical pods and refuses to build without them;
* a replay with ``fgd-residue`` is deterministic per seed and never books more than the capacity.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.residue import FgdResidueScore, residue_vectors
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.registry import POLICIES, build_profile
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from domain.units import GiB, MiB


def node(name: str, gpus: int, *, cpu: int = 96000, model: str = "G2") -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=1001)


def residue(typical: TypicalPods, cpu_left: int, free: list[int], model: str = "G2") -> list[int]:
    ledger = ClusterLedger([node("x", len(free), model=model)])
    fm = FragmentationModel(typical, ledger)
    models = np.full((1, len(free)), ledger.model_id(model), np.int64)
    return [int(v) for v in residue_vectors(fm, np.array([cpu_left]), np.array([free], np.int64), models)[0]]


def test_residue_counts_copies_limited_by_cpu_or_by_gpus() -> None:
    # 810-share with 3152 CPU on (1000, 1000, 500): GPU copies 1 + 1 + 0 = 2; CPU 20000 // 3152 = 6 → 2 copies,
    # residue 2500 − 1620 = 880. With 5000 CPU left only 1 copy: 2500 − 810 = 1690.
    # Whole GPU with 11300 CPU: 2 fully free GPUs, CPU 20000 // 11300 = 1 → 1 copy: 2500 − 1000 = 1500.
    # CPU-only class: every free milli, 2500.
    typical = TypicalPods((PodClass(3152, 810, 1), PodClass(11300, 1000, 1), PodClass(4000, 0, 0)), (0.4, 0.4, 0.2))
    assert residue(typical, 20000, [1000, 1000, 500]) == [880, 1500, 2500]
    assert residue(typical, 5000, [1000, 1000, 500]) == [1690, 2500, 2500]


def test_residue_of_multi_gpu_classes_uses_whole_groups_of_free_gpus() -> None:
    # 2-GPU class on (1000, 1000, 1000, 500): 3 fully free GPUs → 1 copy → 3500 − 2000 = 1500.
    # A 470-share fits twice on each free GPU and once on the 500: 7 copies (CPU 0 asked: no CPU bound) →
    # 3500 − 7·470 = 210.
    typical = TypicalPods((PodClass(8000, 1000, 2), PodClass(0, 470, 1)), (0.5, 0.5))
    assert residue(typical, 100000, [1000, 1000, 1000, 500]) == [1500, 210]
    # With no CPU left the 2-GPU class gets no copy (3500 residue); the share asking no CPU still gets its 7.
    assert residue(typical, 0, [1000, 1000, 1000, 500]) == [3500, 210]


def test_residue_ignores_gpus_of_models_the_class_does_not_allow() -> None:
    # The class runs on T4 only: on a G2 node it gets no copy, so all 2000 free milli are residue; on T4, none.
    typical = TypicalPods((PodClass(1000, 1000, 1, "T4"),), (1.0,))
    assert residue(typical, 50000, [1000, 1000], model="G2") == [2000]
    assert residue(typical, 50000, [1000, 1000], model="T4") == [0]


def plugins(ledger: ClusterLedger, typical: TypicalPods) -> tuple[FgdScore, FgdResidueScore]:
    return (FgdScore(NodeStateCache(FragmentationModel(typical, ledger))),
            FgdResidueScore(NodeStateCache(FragmentationModel(typical, ledger))))


def place(ledger: ClusterLedger, policy: str, pod: PodRequest, typical: TypicalPods) -> str:
    profile = build_profile(policy, ledger, rng=np.random.default_rng(0), typical=typical, tie_break="name")
    result = Scheduler(ledger, profile).schedule(pod)
    assert result.allocation is not None, result.reason
    return result.allocation.node


def test_cpu_only_pod_goes_where_its_cpu_strands_no_gpu() -> None:
    # Typical: whole GPU with 11000 CPU (p 0.5), CPU-only (p 0.5). "a": 8 GPUs, 96000 CPU; "b": 2 GPUs, 104000 CPU.
    # A 20000-CPU pod changes no fit on either node → FGD scores both 50 and the name rule picks "a".
    # Residue for the whole-GPU class: a 8 copies → 96000−20000 = 76000 // 11000 = 6 copies: 0 → 2000;
    # b stays 2 copies (84000 CPU): 0 → 0. ΔR = 0.5·(0 − 2000) = −1000 on a, 0 on b; residue scores
    # trunc(100·σ(−1)) = 26 and trunc(100·σ(0)) = 50 → FGD-residue picks "b".
    typical = TypicalPods((PodClass(11000, 1000, 1), PodClass(4000, 0, 0)), (0.5, 0.5))
    pod = single_container_pod("c", cpu_milli=20000)
    ledger = ClusterLedger([node("a", 8), node("b", 2, cpu=104000, model="T4")])
    fgd, plus = plugins(ledger, typical)
    slots = np.array([ledger.slot("a"), ledger.slot("b")], np.int64)
    assert fgd.score(pod, ledger, CycleState(), slots).tolist() == [50, 50]
    state = CycleState()
    assert plus.score(pod, ledger, state, slots).tolist() == [50, 50]
    keys = plus.refine(pod, ledger, state, slots)
    assert keys.tolist() == [26, 50]
    assert place(ledger, "fgd", pod, typical) == "a"
    two = ClusterLedger([node("a", 8), node("b", 2, cpu=104000, model="T4")])
    assert place(two, "fgd-residue", pod, typical) == "b"


def test_residue_differences_below_fgd_resolution_stay_ties_for_the_node_order() -> None:
    # Typical: whole GPU with 11000 CPU (p 0.01), CPU-only (p 0.99). A 20000-CPU pod: FGD scores 50 on both
    # nodes (no fit changes). Residue of the whole-GPU class: "a" (8 GPUs, 96000 CPU) 8 → 6 copies, +2000;
    # "b" (2 GPUs, 35000 CPU) 2 → 1 copy, +1000. ΔR = −20 on a, −10 on b: an exact residue key would pick "b",
    # but both score trunc(100·σ(−0.02)) = trunc(100·σ(−0.01)) = 49, so the tie goes to the name rule: "a".
    typical = TypicalPods((PodClass(11000, 1000, 1), PodClass(4000, 0, 0)), (0.01, 0.99))
    pod = single_container_pod("c", cpu_milli=20000)
    assert residue(typical, 96000, [1000] * 8)[0] == 0
    assert residue(typical, 76000, [1000] * 8)[0] == 2000
    assert residue(typical, 35000, [1000] * 2)[0] == 0
    assert residue(typical, 15000, [1000] * 2)[0] == 1000
    ledger = ClusterLedger([node("a", 8), node("b", 2, cpu=35000)])
    _, plus = plugins(ledger, typical)
    slots = np.array([ledger.slot("a"), ledger.slot("b")], np.int64)
    state = CycleState()
    assert plus.score(pod, ledger, state, slots).tolist() == [50, 50]
    assert plus.refine(pod, ledger, state, slots).tolist() == [49, 49]
    assert place(ledger, "fgd-residue", pod, typical) == "a"


def test_fgd_residue_keeps_fgd_scores_and_fgd_gpu_choice_when_they_differ() -> None:
    # From test_policies: typical t1 = (1000, 500, 1) p 0.5, CPU-only p 0.5; GPUs free (600, 1000); a 500-share
    # scores 54 on GPU0 and 56 on GPU1 under FGD. FGD-residue returns 56 and chooses GPU1 like FGD.
    typical = TypicalPods((PodClass(1000, 500, 1), PodClass(1000, 0, 0)), (0.5, 0.5))
    ledger = ClusterLedger([node("n", 2)])
    other = single_container_pod("s", cpu_milli=0, core_milli=400)
    assert Scheduler(ledger, build_profile("best-fit", ledger, rng=np.random.default_rng(0))).schedule(other).scheduled
    _, plus = plugins(ledger, typical)
    pod = single_container_pod("p", cpu_milli=1000, core_milli=500)
    state = CycleState()
    slot = ledger.slot("n")
    assert plus.score(pod, ledger, state, np.array([slot], np.int64)).tolist() == [56]
    assert plus.choose(pod, ledger, state, slot, np.array([0, 1], np.int64)) == 1


def test_registry_has_fgd_residue_and_it_needs_typical_pods() -> None:
    assert POLICIES["fgd-residue"].needs_typical_pods
    with pytest.raises(InvalidRequestError, match="fgd-residue"):
        build_profile("fgd-residue", ClusterLedger([node("n", 2)]), rng=np.random.default_rng(0))


def test_replay_with_fgd_residue_is_deterministic_per_seed_and_within_capacity() -> None:
    nodes, pods = synthetic_nodes(0.02), synthetic_pods(0.02)
    first = replay(nodes, pods, ReplayConfig("fgd-residue", 7))
    again = replay(nodes, pods, ReplayConfig("fgd-residue", 7))
    assert first.used_milli == again.used_milli
    assert 0 < first.used_milli[-1] <= first.total_gpus * 1000
    assert first.failed_pods > 0  # tuned to 130 %: some pods cannot fit
