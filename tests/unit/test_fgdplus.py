"""FGD-plus (:mod:`domain.scheduling.policies.fgd.plus`) on hand-built clusters; expected values worked out here.

Behaviours covered:

* a share goes to the option with the best gap key across the cluster (a closing GPU first; else the smaller
  sum-of-squares change, counting gaps on nodes the pod cannot use), whatever node order and FGD say;
* ties of the gap key are settled by FGD-deficit-scarce's value of the option, then the node order;
* pods other than shares are scored, refined and placed exactly as by FGD-deficit-scarce;
* registry: ``fgd-plus`` and ``fgd-residue`` are registered and need typical pods; a replay is deterministic per
  seed and never books more than the capacity.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.errors import InvalidRequestError
from domain.ledger import ClusterLedger
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.scarce import FgdScarceScore
from domain.scheduling.registry import POLICIES, build_profile
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from support.fgd_clusters import TYPICAL, gaps_cluster, node, place, share


def test_a_share_fills_common_gaps_and_creates_rare_ones() -> None:
    # "a": GPU0 300 used (gap 700), GPU1 free; "b": one GPU 500 used (gap 500); "c": three GPUs 700 used (gap 300
    # each) and no CPU left, so the pod cannot go there but its gaps count: N(300) = 3, N(500) = 1, N(700) = 1.
    # A 200-milli share: a/GPU0 700 → 500: ΔSS = (2·1 + 1) + (1 − 2·1) = 2; b/GPU0 500 → 300: (2·3 + 1) + (1 − 2) = 6;
    # a/GPU1 1000 → 800: 2·0 + 1 = 1. Best fit would take b's 500 gap; FGD-plus opens a's free GPU.
    ledger = gaps_cluster()
    pod = single_container_pod("p", cpu_milli=2000, core_milli=200)
    assert place(ledger, "fgd-plus", pod) == ("a", [1])
    assert place(ledger, "best-fit", single_container_pod("q", cpu_milli=2000, core_milli=200))[0] == "b"


def test_a_closing_gpu_beats_every_other_option() -> None:
    # "b" GPU0 has 560 used: a 400-milli share leaves 40 < 100 there (closing), against fresh GPUs on "a" (the
    # earlier node by name).
    ledger = ClusterLedger([node("a", 2), node("b", 2)])
    share(ledger, "b0", "b", 0, 560)
    pod = single_container_pod("p", cpu_milli=2000, core_milli=400)
    assert place(ledger, "fgd-plus", pod) == ("b", [0])


def test_gap_key_ties_go_to_the_better_fgd_scarce_value_then_node_order() -> None:
    # Two nodes, each one fresh GPU and nothing else: the 200-milli share's gap keys are equal (fresh → 800 on
    # both). "a" has 4000 CPU, "b" 96000: after the pod "a" keeps 2000 CPU, under the 4000 the typical whole-GPU
    # and CPU-only pods ask, so FGD counts a's GPU milli as fragmented for them and scores "a" lower: "b" wins
    # although "a" comes first by name.
    ledger = ClusterLedger([node("a", 1, cpu=4000), node("b", 1)])
    pod = single_container_pod("p", cpu_milli=2000, core_milli=200)
    plus = FgdPlusScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    scheduler = Scheduler(ledger, build_profile("fgd-plus", ledger, rng=np.random.default_rng(0), typical=TYPICAL))
    state = CycleState()
    slots, _ = scheduler.feasible(pod, state)
    assert plus.score(pod, ledger, state, slots).tolist() == [0, 0]
    keys = plus.refine(pod, ledger, state, slots)
    assert keys[1] > keys[0] > 0
    assert place(ledger, "fgd-plus", pod) == ("b", [0])
    # Equal nodes: the node order (by name here) settles it.
    twins = ClusterLedger([node("a", 1), node("b", 1)])
    assert place(twins, "fgd-plus", pod) == ("a", [0])


def test_refine_of_slots_not_scored_yet_scores_them_first() -> None:
    ledger = ClusterLedger([node("a", 2), node("b", 2)])
    share(ledger, "b0", "b", 1, 560)
    pod = single_container_pod("p", cpu_milli=2000, core_milli=400)
    plus = FgdPlusScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    scheduler = Scheduler(ledger, build_profile("fgd-plus", ledger, rng=np.random.default_rng(0), typical=TYPICAL))
    state = CycleState()
    slots, _ = scheduler.feasible(pod, state)
    keys = plus.refine(pod, ledger, state, slots)
    assert keys[0] == 0  # "a" has only fresh GPUs: its best key is below b's closing one
    assert keys[1] > 0
    assert plus.choose(pod, ledger, state, int(slots[1]), np.array([0, 1], np.int64)) == 1


@pytest.mark.parametrize("pod", [single_container_pod("whole", cpu_milli=8000, gpus=2),
                                 single_container_pod("cpu", cpu_milli=8000)], ids=["whole", "cpu-only"])
def test_pods_other_than_shares_are_scored_as_by_fgd_deficit_scarce(pod: PodRequest) -> None:
    ledger = ClusterLedger([node("a", 4, cpu=16000), node("b", 4), node("c", 3, cpu=20000)])
    share(ledger, "a0", "a", 0, 500, cpu=6000)
    share(ledger, "c0", "c", 1, 200)
    plus = FgdPlusScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    scarce = FgdScarceScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    scheduler = Scheduler(ledger, build_profile("fgd-plus", ledger, rng=np.random.default_rng(0), typical=TYPICAL))
    state, again = CycleState(), CycleState()
    slots, _ = scheduler.feasible(pod, state)
    scheduler.feasible(pod, again)
    assert len(slots) == 3
    assert plus.score(pod, ledger, state, slots).tolist() == scarce.score(pod, ledger, again, slots).tolist()
    assert plus.refine(pod, ledger, state, slots).tolist() == scarce.refine(pod, ledger, again, slots).tolist()
    assert place(ledger, "fgd-plus", pod) == place(ledger, "fgd-deficit-scarce", pod)


def test_registry_has_fgd_plus_and_fgd_residue_and_both_need_typical_pods() -> None:
    for name in ("fgd-plus", "fgd-residue"):
        assert POLICIES[name].needs_typical_pods
        with pytest.raises(InvalidRequestError, match=name):
            build_profile(name, ClusterLedger([node("n", 2)]), rng=np.random.default_rng(0))


def test_replay_with_fgd_plus_is_deterministic_per_seed_and_within_capacity() -> None:
    nodes, pods = synthetic_nodes(0.05), synthetic_pods(0.05, seed=3)
    first = replay(nodes, pods, ReplayConfig("fgd-plus", 7))
    again = replay(nodes, pods, ReplayConfig("fgd-plus", 7))
    assert first.used_milli == again.used_milli
    assert max(first.used_milli) <= first.total_gpus * 1000
    assert first.used_milli[-1] > 0


@pytest.mark.parametrize("policy", ["fgd", "fgd-deficit-scarce", "fgd-plus"])
def test_a_share_can_take_gpu_63_of_a_64_gpu_node(policy: str) -> None:
    # GPUs 0-62 full: the only fit is index 63, the highest a node may have (MAX_GPUS_PER_NODE = 64); the chosen
    # index travels packed as choice + 1 = 64, which must decode back to 63.
    ledger = ClusterLedger([node("big", 64, cpu=512000)])
    for gpu in range(63):
        share(ledger, f"f{gpu}", "big", gpu, 1000)
    assert place(ledger, policy, single_container_pod("p", cpu_milli=2000, core_milli=200)) == ("big", [63])
