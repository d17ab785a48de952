"""Node-scoring policies, GPU choosers and tie rules on hand-built tiny clusters (``docs/trace-replay.md`` §3.4-§3.6).

Behaviours covered (every expected score is worked out by hand from the §3.6 formula in the test):

* GPU packing: idle nodes score ``max(33 − nfree, nfree)`` (32/31/29/25 for 1/2/4/8 GPUs); a share on a
  partly used GPU scores ``100 − ⌊free/100⌋`` (97 for 350 free); fresh GPUs on a used node score
  ``max(50 − k, 33)``; CPU-only pods score 0 everywhere.
* GPU clustering: base 75/50/25/0 (own tag only / own among others / no GPU pods / only other tags) plus
  ``⌊25·(8000 − gL)/8000⌋``; ``<k>-gpu`` tags differ per GPU count; CPU-only pods score 0.
* Best-fit: raw ``trunc((1 − [0.5·(cpuLeft − c)/128000 + 0.5·(gL − G)/8000])·100)`` and min–max normalisation
  with integer division (all 0 when every score is equal); the scheduler picks the least-leftover node.
* Dot-product: ``trunc(100·(1 − dot/2))`` with the fixed 128000/8000 normalisers (94 for a (3152, 810) pod on
  an idle G2 node, 99 on a nearly full one).
* FGD: exactly 50 for a CPU-only pod when no typical pod's fit flips; the σ score of a hand-computed Δ when a
  fit flips (CPU or GPU); the GPU chosen for a share is the first index reaching the max *truncated* score
  (not the float argmax); whole-GPU pods take the first free GPUs; memoised scores equal fresh ones.
* Random: exactly one feasible node scores 100, reproducible per seed.
* Binpack / spread: node-level used-after ratio for GPU pods, CPU ratio for CPU-only pods; spread = 100 − binpack;
  the scheduler's resulting node order.
* GPU choosers: best-fit (smallest sufficient free, lowest index on ties), worst-fit (spread), whole-GPU pods
  (first k fully free GPUs by index), random (only fitting GPUs, every one reachable).
* Tie rules: fixed-order (one random node order per seed; same seed same order; different seeds differ;
  ties keep stacking onto the first node), name (lexicographically smallest), random (uniform among tied),
  unknown names refused.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import UnknownPolicyError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.choosers import BestFitGpu, RandomGpu, WorstFitGpu
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.framework.planner import ensure_gpu_fit
from domain.scheduling.framework.tiebreak import FixedOrderTieBreak, NameTieBreak, RandomTieBreak, make_tie_breaker
from domain.scheduling.policies.classic import (
    BestFitScore,
    BinpackScore,
    DotProductScore,
    GpuClusteringScore,
    GpuPackingScore,
    RandomScore,
    SpreadScore,
)
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.registry import build_profile
from domain.units import GiB, MiB

GPU_MEMORY = 1000 * MiB
"""Per-GPU memory: with it a share of ``u`` milli-GPU defaults to exactly ``u`` MiB."""


# ---------------------------------------------------------------------------------------------- helpers
def node(name: str, gpus: int, *, cpu: int = 96000, model: str = "G2") -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, GPU_MEMORY) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=1001)


def share_alloc(uid: str, on: str, gpu: int, milli: int, *, cpu: int = 0) -> PodAllocation:
    grant = GpuGrant(gpu, milli, milli * MiB)
    return PodAllocation(uid, on, (ContainerGrant("main", (grant,)),), cpu_milli=cpu)


def whole_alloc(uid: str, on: str, gpus: list[int], *, cpu: int = 0) -> PodAllocation:
    grants = tuple(GpuGrant(i, 1000, GPU_MEMORY) for i in gpus)
    return PodAllocation(uid, on, (ContainerGrant("main", grants, whole=True),), cpu_milli=cpu)


def cpu_alloc(uid: str, on: str, cpu: int) -> PodAllocation:
    return PodAllocation(uid, on, (), cpu_milli=cpu)


def share_pod(milli: int, *, cpu: int = 1000, uid: str = "p") -> PodRequest:
    return single_container_pod(uid, cpu_milli=cpu, core_milli=milli)


def whole_pod(gpus: int, *, cpu: int = 1000, uid: str = "p") -> PodRequest:
    return single_container_pod(uid, cpu_milli=cpu, gpus=gpus)


def cpu_pod(cpu: int, *, uid: str = "p") -> PodRequest:
    return single_container_pod(uid, cpu_milli=cpu)


def ledger_of(*nodes: NodeInventory, allocations: tuple[PodAllocation, ...] = ()) -> ClusterLedger:
    ledger = ClusterLedger(list(nodes))
    for allocation in allocations:
        ledger.observe(allocation)
    return ledger


def slots_of(ledger: ClusterLedger, names: list[str]) -> np.ndarray:
    return np.array([ledger.slot(n) for n in names], np.int64)


def scores(plugin: object, pod: PodRequest, ledger: ClusterLedger, names: list[str]) -> list[int]:
    result = plugin.score(pod, ledger, CycleState(), slots_of(ledger, names))  # type: ignore[attr-defined]
    return [int(v) for v in result]


def sigma_score(delta_milli: float) -> int:
    """The §3.6 FGD score written out: trunc(100 · 1/(1 + e^(−Δ/1000)))."""
    return int(100 * (1 / (1 + math.exp(-delta_milli / 1000))))


def place(ledger: ClusterLedger, policy: str, pod: PodRequest, *, seed: int = 0, **kwargs: object) -> PodAllocation:
    profile = build_profile(policy, ledger, rng=np.random.default_rng(seed), **kwargs)  # type: ignore[arg-type]
    result = Scheduler(ledger, profile).schedule(pod)
    assert result.allocation is not None, result.reason
    return result.allocation


def gpu_indexes(allocation: PodAllocation) -> list[int]:
    return [g.gpu_index for c in allocation.containers for g in c.grants]


# ---------------------------------------------------------------------------------------------- GPU packing
def test_gpu_packing_idle_nodes_score_max_of_33_minus_nfree_and_nfree() -> None:
    ledger = ledger_of(node("g1", 1), node("g2", 2), node("g4", 4), node("g8", 8))
    names = ["g1", "g2", "g4", "g8"]
    expected = [max(33 - n, n) for n in (1, 2, 4, 8)]
    assert expected == [32, 31, 29, 25]
    assert scores(GpuPackingScore(), share_pod(500), ledger, names) == expected
    assert scores(GpuPackingScore(), whole_pod(1), ledger, names) == expected


def test_gpu_packing_share_on_partly_used_gpu_scores_100_minus_free_hundreds() -> None:
    # "used": GPU0 has 350 free (650 used) → a 300-milli share lands there: 100 − ⌊⌊350·100/1000⌋/10⌋ = 97.
    # "fresh": GPU0 has 200 free (too small for 300) → the share needs a fully free GPU: max(50 − 1, 33) = 49.
    ledger = ledger_of(
        node("used", 8), node("fresh", 8), node("idle8", 8), node("idle2", 2),
        allocations=(share_alloc("a", "used", 0, 650), share_alloc("b", "fresh", 0, 800)),
    )
    names = ["used", "fresh", "idle8", "idle2"]
    assert 100 - (350 * 100 // 1000) // 10 == 97
    assert scores(GpuPackingScore(), share_pod(300), ledger, names) == [97, 49, 25, 31]


@pytest.mark.parametrize(("free", "expected"), [(50, 100), (350, 97), (999, 91), (100, 99)])
def test_gpu_packing_case1_buckets_free_milli_in_hundreds(free: int, expected: int) -> None:
    ledger = ledger_of(node("n", 4), allocations=(share_alloc("a", "n", 2, 1000 - free),))
    assert scores(GpuPackingScore(), share_pod(free), ledger, ["n"]) == [expected]


def test_gpu_packing_whole_gpu_pods_on_used_nodes_score_50_minus_k() -> None:
    ledger = ledger_of(node("used", 8), node("idle", 8), allocations=(share_alloc("a", "used", 0, 100),))
    assert scores(GpuPackingScore(), whole_pod(2), ledger, ["used", "idle"]) == [48, 25]
    assert scores(GpuPackingScore(), whole_pod(1), ledger, ["used", "idle"]) == [49, 25]


def test_gpu_packing_cpu_only_pods_score_zero_everywhere() -> None:
    ledger = ledger_of(node("used", 8), node("idle", 2), allocations=(share_alloc("a", "used", 0, 100),))
    assert scores(GpuPackingScore(), cpu_pod(4000), ledger, ["used", "idle"]) == [0, 0]


# ---------------------------------------------------------------------------------------------- GPU clustering
def test_gpu_clustering_base_values_plus_free_gpu_bonus() -> None:
    ledger = ledger_of(
        node("idle8", 8), node("idle2", 2), node("own", 8), node("mixed", 8), node("other", 8), node("two", 4),
        allocations=(
            share_alloc("s1", "own", 0, 500),
            share_alloc("s2", "mixed", 0, 500), whole_alloc("w1", "mixed", [1]),
            whole_alloc("w2", "other", [0]),
            whole_alloc("w3", "two", [0, 1]),
        ),
    )
    names = ["idle8", "idle2", "own", "mixed", "other", "two"]

    def bonus(free: int) -> int:
        return 25 * (8000 - free) // 8000

    share_expected = [
        25 + bonus(8000),  # no GPU pods: 25 + 0
        25 + bonus(2000),  # small idle node: 25 + 18
        75 + bonus(7500),  # only share pods: 75 + 1
        50 + bonus(6500),  # share among 1-gpu: 50 + 4
        0 + bonus(7000),  # only a 1-gpu pod: 0 + 3
        0 + bonus(2000),  # only a 2-gpu pod: 0 + 18
    ]
    assert share_expected == [25, 43, 76, 54, 3, 18]
    assert scores(GpuClusteringScore(), share_pod(300), ledger, names) == share_expected
    one_gpu_expected = [25, 43, 0 + 1, 50 + 4, 75 + 3, 0 + 18]
    assert scores(GpuClusteringScore(), whole_pod(1), ledger, names) == one_gpu_expected
    two_gpu = scores(GpuClusteringScore(), whole_pod(2), ledger, names)
    assert two_gpu == [25, 43, 1, 4, 3, 75 + 18]


def test_gpu_clustering_cpu_only_pods_score_zero() -> None:
    ledger = ledger_of(node("a", 8), node("b", 2), allocations=(share_alloc("s", "a", 0, 500),))
    assert scores(GpuClusteringScore(), cpu_pod(2000), ledger, ["a", "b"]) == [0, 0]


# ---------------------------------------------------------------------------------------------- best-fit
def test_best_fit_raw_scores_and_min_max_normalisation() -> None:
    # Pod: 8000 CPU-milli, one whole GPU (G = 1000).
    # idle8 (96000 CPU, 8 GPUs): 1 − [0.5·88000/128000 + 0.5·7000/8000] = 0.21875 → 21
    # idle2 (104000 CPU, 2 GPUs): 1 − [0.5·96000/128000 + 0.5·1000/8000] = 0.5625 → 56
    # full (96000 CPU with 48000 used, 6 GPUs held): 1 − [0.5·40000/128000 + 0.5·1000/8000] = 0.78125 → 78
    ledger = ledger_of(
        node("idle8", 8), node("idle2", 2, cpu=104000), node("full", 8),
        allocations=(whole_alloc("w", "full", [0, 1, 2, 3, 4, 5], cpu=48000),),
    )
    names = ["idle8", "idle2", "full"]
    pod = whole_pod(1, cpu=8000)
    plugin = BestFitScore()
    raw = scores(plugin, pod, ledger, names)
    assert raw == [21, 56, 78]
    normalised = plugin.normalize(pod, np.array(raw, np.int64)).tolist()
    assert normalised == [(21 - 21) * 100 // 57, (56 - 21) * 100 // 57, (78 - 21) * 100 // 57]
    assert normalised == [0, 61, 100]
    assert plugin.normalize(pod, np.array([40, 40, 40], np.int64)).tolist() == [0, 0, 0]
    assert place(ledger, "best-fit", pod).node == "full"


# ---------------------------------------------------------------------------------------------- dot-product
def test_dot_product_published_example_94_idle_99_nearly_full() -> None:
    # idle G2: dot = (96000/128000)(3152/128000) + (8000/8000)(810/8000) = 0.11971875 → trunc(100·0.940140625) = 94
    # nearly full: cpuLeft 8000, gL 1000: dot = 0.0625·0.024625 + 0.125·0.10125 = 0.01419... → 99
    ledger = ledger_of(
        node("idle", 8), node("nearly", 8),
        allocations=(whole_alloc("w", "nearly", [0, 1, 2, 3, 4, 5, 6], cpu=88000),),
    )
    pod = share_pod(810, cpu=3152)
    idle_dot = (96000 / 128000) * (3152 / 128000) + (8000 / 8000) * (810 / 8000)
    nearly_dot = (8000 / 128000) * (3152 / 128000) + (1000 / 8000) * (810 / 8000)
    assert [int(100 * (1 - idle_dot / 2)), int(100 * (1 - nearly_dot / 2))] == [94, 99]
    assert scores(DotProductScore(), pod, ledger, ["idle", "nearly"]) == [94, 99]
    assert place(ledger, "dot-product", pod).node == "nearly"


def test_dot_product_cpu_only_pod_uses_cpu_dimension_only() -> None:
    # CPU-only pod, 64000 CPU-milli: dot = (cpuLeft/128000)(0.5) → idle 96000: 1 − 0.1875 = 0.8125 → 81;
    # a node with 32000 CPU left: 1 − 0.0625 = 0.9375 → 93.
    ledger = ledger_of(node("idle", 8), node("busy", 8), allocations=(cpu_alloc("c", "busy", 64000),))
    assert scores(DotProductScore(), cpu_pod(64000), ledger, ["idle", "busy"]) == [81, 93]


# ---------------------------------------------------------------------------------------------- FGD
def fgd_plugin(ledger: ClusterLedger, typical: TypicalPods) -> FgdScore:
    return FgdScore(NodeStateCache(FragmentationModel(typical, ledger)))


def test_fgd_cpu_only_pod_scores_exactly_50_when_no_fit_flips() -> None:
    typical = TypicalPods(
        (PodClass(4000, 500, 1), PodClass(2000, 0, 0), PodClass(8000, 1000, 2, "T4")), (0.1, 0.2, 0.7)
    )
    ledger = ledger_of(node("a", 8), node("b", 2), allocations=(share_alloc("s", "a", 0, 300, cpu=2000),))
    plugin = fgd_plugin(ledger, typical)
    first = scores(plugin, cpu_pod(1000), ledger, ["a", "b"])
    assert first == [50, 50]
    assert scores(plugin, cpu_pod(1000), ledger, ["a", "b"]) == [50, 50]  # memoised path


def test_fgd_cpu_only_pod_that_breaks_a_typical_fit_scores_sigma_of_delta() -> None:
    # Typical: t1 = (4000 CPU, 500, 1 GPU) p = 0.5, t2 = CPU-only p = 0.5. Node "tight": 8 idle GPUs, 4500 CPU left.
    # A 1000-CPU pod leaves 3500 < 4000: t1 goes q3 (f = 0) → q4 (f = 8000); t2 stays 8000 → 8000.
    # Δ = 0.5·(0 − 8000) + 0.5·0 = −4000 → trunc(100·σ(−4)) = 1. Node "roomy" (no flip) scores 50.
    typical = TypicalPods((PodClass(4000, 500, 1), PodClass(2000, 0, 0)), (0.5, 0.5))
    ledger = ledger_of(node("tight", 8), node("roomy", 8), allocations=(cpu_alloc("c", "tight", 91500),))
    assert sigma_score(-4000) == 1
    assert scores(fgd_plugin(ledger, typical), cpu_pod(1000), ledger, ["tight", "roomy"]) == [1, 50]


def test_fgd_share_score_and_gpu_choice_prefer_keeping_gpus_usable() -> None:
    # Typical: t1 = (1000, 500, 1) p = 0.5; t2 = CPU-only p = 0.5. Node GPUs free (600, 1000); pod (1000 CPU, 500).
    # GPU0 → (100, 1000): f1 0 → 100, f2 1600 → 1100: Δ = 0.5·(−100) + 0.5·500 = 200 → 54.
    # GPU1 → (600, 500):  f1 0 → 0,   f2 1600 → 1100: Δ = 250 → 56. Best score 56 on GPU1 (best-fit would pick GPU0).
    typical = TypicalPods((PodClass(1000, 500, 1), PodClass(1000, 0, 0)), (0.5, 0.5))
    ledger = ledger_of(node("n", 2), node("other", 2), allocations=(share_alloc("s", "n", 0, 400),))
    assert (sigma_score(200), sigma_score(250)) == (54, 56)
    plugin = fgd_plugin(ledger, typical)
    pod = share_pod(500)
    state = CycleState()
    slot = ledger.slot("n")
    assert plugin.score(pod, ledger, state, np.array([slot], np.int64)).tolist() == [56]
    assert plugin.choose(pod, ledger, state, slot, np.array([0, 1], np.int64)) == 1
    allocation = place(ledger, "fgd", share_pod(500, uid="q"), typical=typical)
    assert (allocation.node, gpu_indexes(allocation)) == ("n", [1])


def test_fgd_gpu_choice_is_first_index_reaching_max_truncated_score() -> None:
    # Typical: t1 = (1000, 200, 1) p = 0.3, t2 = CPU-only p = 0.65, t3 = (1000, 600, 1) p = 0.05.
    # Node GPUs free (600, 1000); pod (1000 CPU, 500 milli).
    # GPU0 → (100, 1000): Δ = 0.3·(0 − 100) + 0.65·500 + 0.05·(0 − 100) = 290 → σ → 57.19… → 57
    # GPU1 → (600, 500):  Δ = 0.3·0 + 0.65·500 + 0.05·(0 − 500) = 300 → σ → 57.44… → 57
    # Equal truncated scores: GPU0 (the first index) wins although GPU1 has the larger float score.
    typical = TypicalPods((PodClass(1000, 200, 1), PodClass(1000, 0, 0), PodClass(1000, 600, 1)), (0.3, 0.65, 0.05))
    ledger = ledger_of(node("n", 2), allocations=(share_alloc("s", "n", 0, 400),))
    assert sigma_score(290) == sigma_score(300) == 57
    assert 1 / (1 + math.exp(-0.3)) > 1 / (1 + math.exp(-0.29))
    plugin = fgd_plugin(ledger, typical)
    state = CycleState()
    slot = ledger.slot("n")
    assert plugin.score(share_pod(500), ledger, state, np.array([slot], np.int64)).tolist() == [57]
    assert plugin.choose(share_pod(500), ledger, state, slot, np.array([0, 1], np.int64)) == 0


def test_fgd_whole_gpu_pod_takes_first_free_gpus_and_scores_sigma_of_delta() -> None:
    # Typical: t1 = (1000, 1000, 1) p = 0.5; t2 = CPU-only p = 0.5. Node GPUs free (500, 1000, 1000, 1000).
    # A 2-GPU pod takes GPUs 1 and 2 → (500, 0, 0, 1000): f1 500 → 500, f2 3500 → 1500: Δ = 1000 → σ(1) → 73.
    typical = TypicalPods((PodClass(1000, 1000, 1), PodClass(1000, 0, 0)), (0.5, 0.5))
    ledger = ledger_of(node("n", 4), allocations=(share_alloc("s", "n", 0, 500),))
    assert sigma_score(1000) == 73
    assert scores(fgd_plugin(ledger, typical), whole_pod(2), ledger, ["n"]) == [73]
    allocation = place(ledger, "fgd", whole_pod(2, uid="q"), typical=typical)
    assert gpu_indexes(allocation) == [1, 2]


def test_fgd_prefers_the_node_whose_fragmentation_grows_least() -> None:
    # Typical as in the first share test. "used" has GPUs (500, 1000), "idle" (1000, 1000); pod (1000, 500).
    # used/GPU0 → (0, 1000): f1 0 → 0, f2 1500 → 1000: Δ = 250 → 56; idle → (500, 1000): Δ = 250 too → 56;
    # both tie at 56, so add a typical 2-GPU pod t3 = (1000, 1000, 2) to tell them apart (p = 1/3 each):
    # used/GPU0: Δ = (0 + 500 + (1500 − 1000)) / 3 = 333.3 → 58; idle: Δ = (0 + 500 + (0 − 1500)) / 3 = −333.3 → 41.
    third = 1 / 3
    typical = TypicalPods((PodClass(1000, 500, 1), PodClass(1000, 0, 0), PodClass(1000, 1000, 2)), (third,) * 3)
    ledger = ledger_of(node("used", 2), node("idle", 2), allocations=(share_alloc("s", "used", 0, 500),))
    assert (sigma_score(1000 / 3), sigma_score(-1000 / 3)) == (58, 41)
    assert scores(fgd_plugin(ledger, typical), share_pod(500), ledger, ["used", "idle"]) == [58, 41]


# ---------------------------------------------------------------------------------------------- random
def test_random_score_gives_100_to_exactly_one_node_reproducibly() -> None:
    ledger = ledger_of(*(node(f"n{i}", 2) for i in range(6)))
    names = [f"n{i}" for i in range(6)]
    first = scores(RandomScore(np.random.default_rng(3)), share_pod(100), ledger, names)
    again = scores(RandomScore(np.random.default_rng(3)), share_pod(100), ledger, names)
    assert sorted(first) == [0, 0, 0, 0, 0, 100]
    assert first == again
    winners = {scores(RandomScore(np.random.default_rng(s)), share_pod(100), ledger, names).index(100)
               for s in range(40)}
    assert len(winners) > 1


# ---------------------------------------------------------------------------------------------- binpack / spread
def test_binpack_and_spread_node_ratios_and_ordering() -> None:
    ledger = ledger_of(
        node("idle", 8), node("half", 8), node("small", 2),
        allocations=(whole_alloc("w", "half", [0, 1, 2, 3], cpu=40000), share_alloc("s", "small", 0, 500)),
    )
    names = ["idle", "half", "small"]
    # GPU pod (1 GPU): used-after / capacity → idle 1000/8000 = 12, half 5000/8000 = 62, small 1500/2000 = 75.
    assert scores(BinpackScore(), whole_pod(1), ledger, names) == [12, 62, 75]
    assert scores(SpreadScore(), whole_pod(1), ledger, names) == [88, 38, 25]
    # CPU-only pod (8000): CPU used-after / CPU capacity → 8000/96000 = 8, 48000/96000 = 50, 8000/96000 = 8.
    assert scores(BinpackScore(), cpu_pod(8000), ledger, names) == [8, 50, 8]
    assert scores(SpreadScore(), cpu_pod(8000), ledger, names) == [92, 50, 92]
    assert place(ledger, "spread", whole_pod(1, uid="q1")).node == "idle"
    assert place(ledger, "binpack", whole_pod(1, uid="q2")).node == "small"


# ---------------------------------------------------------------------------------------------- GPU choosers
def chooser_ledger() -> ClusterLedger:
    # GPUs free: (1000, 300, 600, 300, 0, 1000): used 0, 700, 400, 700, whole, 0.
    return ledger_of(
        node("n", 6),
        allocations=(
            share_alloc("a", "n", 1, 700), share_alloc("b", "n", 2, 400), share_alloc("c", "n", 3, 700),
            whole_alloc("d", "n", [4]),
        ),
    )


def choose(chooser: object, pod: PodRequest, ledger: ClusterLedger) -> int:
    state = CycleState()
    ensure_gpu_fit(pod, ledger, state)
    assert state.gpu_fit is not None
    slot = ledger.slot("n")
    fit = np.flatnonzero(state.gpu_fit[slot]).astype(np.int64)
    return int(chooser.choose(pod, ledger, state, slot, fit))  # type: ignore[attr-defined]


def test_best_fit_gpu_smallest_sufficient_free_lowest_index_on_ties() -> None:
    ledger = chooser_ledger()
    assert choose(BestFitGpu(), share_pod(300), ledger) == 1  # 300 free on GPUs 1 and 3 → lowest index
    assert choose(BestFitGpu(), share_pod(500), ledger) == 2  # 600 is the smallest free ≥ 500
    assert choose(BestFitGpu(), share_pod(700), ledger) == 0  # only fully free GPUs 0 and 5 fit → 0
    assert gpu_indexes(place(ledger, "best-fit", share_pod(250))) == [1]


def test_worst_fit_gpu_takes_the_most_free_lowest_index_on_ties() -> None:
    ledger = chooser_ledger()
    assert choose(WorstFitGpu(), share_pod(300), ledger) == 0
    assert gpu_indexes(place(ledger, "spread", share_pod(300))) == [0]


@pytest.mark.parametrize("policy", ["best-fit", "gpu-packing", "gpu-clustering", "dot-product", "binpack", "spread"])
def test_whole_gpu_pods_take_the_first_fully_free_gpus_by_index(policy: str) -> None:
    ledger = ledger_of(node("n", 8), allocations=(share_alloc("a", "n", 0, 100), whole_alloc("b", "n", [2])))
    assert gpu_indexes(place(ledger, policy, whole_pod(3))) == [1, 3, 4]


def test_random_gpu_picks_only_fitting_gpus_and_reaches_each_of_them() -> None:
    ledger = chooser_ledger()
    picks = {choose(RandomGpu(np.random.default_rng(s)), share_pod(500), ledger) for s in range(60)}
    assert picks == {0, 2, 5}


# ---------------------------------------------------------------------------------------------- tie rules
def many_nodes(count: int = 12) -> ClusterLedger:
    return ledger_of(*(node(f"node-{i:02d}", 1) for i in range(count)))


def test_fixed_order_is_a_permutation_fixed_per_seed() -> None:
    ledger = many_nodes()
    names = sorted(ledger.node_names())
    first = FixedOrderTieBreak(ledger, np.random.default_rng(42))
    same = FixedOrderTieBreak(ledger, np.random.default_rng(42))
    other = FixedOrderTieBreak(ledger, np.random.default_rng(43))
    ranks = [first.rank(n) for n in names]
    assert sorted(ranks) == list(range(len(names)))
    assert ranks == [same.rank(n) for n in names]
    assert ranks != [other.rank(n) for n in names]
    assert ranks == np.random.default_rng(42).permutation(len(names)).tolist()


def test_fixed_order_picks_the_first_ranked_tied_node_every_time() -> None:
    ledger = many_nodes()
    rule = FixedOrderTieBreak(ledger, np.random.default_rng(7))
    tied = slots_of(ledger, ["node-03", "node-05", "node-08", "node-11"])
    expected = min(tied.tolist(), key=lambda s: rule.rank(ledger.name(s)))
    assert [rule.pick(ledger, tied) for _ in range(5)] == [expected] * 5
    everyone = slots_of(ledger, ledger.node_names())
    assert rule.rank(ledger.name(rule.pick(ledger, everyone))) == 0


def test_fixed_order_ties_keep_stacking_cpu_only_pods_on_one_node() -> None:
    # GPU packing scores every CPU-only pod 0 on every node: each pod is a 12-way tie, resolved by the fixed order.
    ledger = ledger_of(*(node(f"node-{i:02d}", 1, cpu=4000) for i in range(12)))
    profile = build_profile("gpu-packing", ledger, rng=np.random.default_rng(5))
    scheduler = Scheduler(ledger, profile)
    placed = [scheduler.schedule(cpu_pod(1000, uid=f"c{i}")).allocation for i in range(8)]
    nodes = [a.node for a in placed if a is not None]
    assert len(nodes) == 8
    assert nodes[:4] == [nodes[0]] * 4  # the first node in the order takes pods until its 4000 CPU are used
    assert nodes[4:] == [nodes[4]] * 4
    assert nodes[4] != nodes[0]


def test_name_tie_break_picks_the_smallest_name() -> None:
    ledger = ledger_of(node("zeta", 1), node("alpha", 1), node("mid", 1))
    tied = slots_of(ledger, ["zeta", "mid", "alpha"])
    assert ledger.name(NameTieBreak().pick(ledger, np.sort(tied))) == "alpha"
    rule = make_tie_breaker("name", ledger, np.random.default_rng(0))
    assert ledger.name(rule.pick(ledger, np.sort(tied))) == "alpha"


def test_random_tie_break_is_uniform_among_tied_nodes() -> None:
    ledger = many_nodes()
    tied = slots_of(ledger, ["node-01", "node-04", "node-09"])
    rule = RandomTieBreak(np.random.default_rng(11))
    picks = [rule.pick(ledger, tied) for _ in range(300)]
    assert set(picks) == set(tied.tolist())
    assert min(picks.count(s) for s in tied.tolist()) > 60  # each ≈ 100 of 300


def test_unknown_tie_rule_is_refused() -> None:
    with pytest.raises(UnknownPolicyError):
        make_tie_breaker("coin-flip", many_nodes(), np.random.default_rng(0))
