"""FGD-staged (:mod:`domain.scheduling.policies.fgd.staged`) and its gap counts (:mod:`~.gapcounts`) on hand-built
clusters; expected values worked out here.

Behaviours covered:

* saturation: at most 10 % of the schedulable GPUs of active nodes fully free (9 % is, 18 % is not; no GPU: not);
* below saturation a share goes into a partly used GPU by the gap key (where ``fgd-plus`` opens a free GPU), and
  with no partly used GPU, or only ones of a model restricted pods claim, it is placed by FGD;
* saturated, a share is placed exactly as by ``fgd-plus`` (a hand-worked case and 40 random saturated clusters);
* whole-GPU pods of several GPUs and CPU-only pods are scored and placed exactly as by FGD; one-GPU pods as by
  ``fgd-plus`` except on reserve nodes: the most CPU-rich untouched node of a GPU count whose nodes differ in CPU
  (here: where ``fgd-plus`` would take it, and when nothing else fits; ``test_fgdstaged_reference.py`` compares
  with a reference and with ``fgd-plus`` on random clusters);
* :class:`GapCounts` equals :func:`gap_histogram` through reservations, releases, quarantine and a new node;
  :func:`keys_by_free` equals :func:`option_keys` for every free value;
* registry: ``fgd-staged`` is registered, needs typical pods, and a synthetic replay is deterministic per seed.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from domain.allocation import PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Health
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.gapbalance import gap_histogram, option_keys
from domain.scheduling.policies.fgd.gapcounts import GapCounts, keys_by_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.scarce import FgdScarceScore
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.policies.fgd.staged import (
    FgdStagedScore,
    most_cpu_per_gpu_count,
    reserve_rows,
    saturated,
)
from domain.scheduling.registry import POLICIES, build_profile
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from support.fgd_clusters import TYPICAL, gaps_cluster, node, share
from support.fgd_clusters import place_and_release as place


def test_saturation_is_at_most_a_tenth_of_the_gpus_whole() -> None:
    ledger = ClusterLedger([node("a", 10), node("b", 1)])
    for gpu in range(9):
        share(ledger, f"a{gpu}", "a", gpu, 100)
    assert not saturated(ledger)  # a/GPU9 and b/GPU0 whole: 2 of 11
    share(ledger, "b0", "b", 0, 100)
    assert saturated(ledger)  # 1 of 11
    assert not saturated(ClusterLedger([node("cpu", 0)]))


def test_below_saturation_a_share_fills_a_partly_used_gpu() -> None:
    # Partly used options: a/GPU0 700 → 500, ΔSS = (2·1 + 1) + (1 − 2·1) = 2; b/GPU0 500 → 300, (2·3 + 1) + (1 − 2)
    # = 6. fgd-plus prefers a's free GPU1 (ΔSS 1); fgd-staged may not open it below saturation.
    ledger = gaps_cluster()
    assert not saturated(ledger)
    pod = single_container_pod("p", cpu_milli=2000, core_milli=200)
    assert place(ledger, "fgd-staged", pod) == ("a", [0])
    assert place(ledger, "fgd-plus", pod) == ("a", [1])


def test_saturated_a_share_is_placed_as_by_fgd_plus() -> None:
    ledger = gaps_cluster()
    ledger.upsert_node(node("d", 5))
    for gpu in range(5):
        share(ledger, f"d{gpu}", "d", gpu, 1000)  # full GPUs: no gap; 1 whole GPU of 11 (9 %)
    assert saturated(ledger)
    pod = single_container_pod("p", cpu_milli=2000, core_milli=200)
    assert place(ledger, "fgd-staged", pod) == place(ledger, "fgd-plus", pod) == ("a", [1])


def test_saturated_shares_match_fgd_plus_on_random_clusters() -> None:
    rng = np.random.default_rng(7)
    for case in range(40):
        ledger = ClusterLedger([node(f"n{i}", 4, cpu=int(rng.integers(4, 40)) * 1000) for i in range(6)])
        for i in range(6):
            for gpu in range(4):
                if rng.random() < 0.95:
                    share(ledger, f"s{i}-{gpu}", f"n{i}", gpu, int(rng.choice([100, 200, 300, 500, 700, 1000])))
        if not saturated(ledger):
            continue
        pod = single_container_pod(f"p{case}", cpu_milli=1000, core_milli=int(rng.choice([100, 200, 300])))
        assert place(ledger, "fgd-staged", pod) == place(ledger, "fgd-plus", pod), case


def test_without_a_partly_used_gpu_a_share_is_placed_by_fgd() -> None:
    ledger = ClusterLedger([node("a", 2, cpu=8000), node("b", 4), node("c", 1, cpu=6000)])
    for core in (100, 300, 700):
        pod = single_container_pod(f"p{core}", cpu_milli=2000, core_milli=core)
        assert place(ledger, "fgd-staged", pod) == place(ledger, "fgd", pod)


def test_partly_used_gpus_of_a_claimed_model_are_left_to_fgd() -> None:
    # Half the typical demand is restricted to T4, so T4 GPUs carry a claim; the only partly used GPU is a T4.
    typical = TypicalPods((PodClass(2000, 1000, 1), PodClass(2000, 1000, 1, "T4")), (0.5, 0.5))
    ledger = ClusterLedger([node("a", 2, cpu=8000), node("t", 2, model="T4"), node("z", 4)])
    share(ledger, "t0", "t", 0, 500)
    pod = single_container_pod("p", cpu_milli=2000, core_milli=300)
    assert place(ledger, "fgd-staged", pod, typical) == place(ledger, "fgd", pod, typical)
    plugin = FgdStagedScore(NodeStateCache(FragmentationModel(typical, ledger)))
    state = CycleState()
    slots = np.arange(ledger.rows, dtype=np.int64)
    assert plugin.plus.claim()[ledger.model_id("T4")] > 0
    fgd = plugin.fgd.score(pod, ledger, CycleState(), slots)
    assert plugin.score(pod, ledger, state, slots).tolist() == fgd.tolist()
    assert state.data["fgd-staged.plus"] is False  # FGD decided: the T4 gap was not offered to gap balance
    share(ledger, "a0", "a", 0, 500)  # an unclaimed partly used GPU: gap balance decides
    state = CycleState()
    plugin.score(pod, ledger, state, slots)
    assert state.data["fgd-staged.plus"] is True


def test_whole_gpu_and_cpu_only_pods_are_scored_and_placed_as_by_fgd() -> None:
    for ledger, pod in ((reserve_cluster(), single_container_pod("w", cpu_milli=4000, gpus=2)),
                        (gaps_cluster(), single_container_pod("c", cpu_milli=3000))):
        slots = np.arange(ledger.rows, dtype=np.int64)[ledger.active[: ledger.rows]]
        cache = NodeStateCache(FragmentationModel(TYPICAL, ledger))
        staged = FgdStagedScore(cache).score(pod, ledger, CycleState(), slots)
        fgd = FgdScore(NodeStateCache(FragmentationModel(TYPICAL, ledger))).score(pod, ledger, CycleState(), slots)
        assert staged.tolist() == fgd.tolist()
        assert place(ledger, "fgd-staged", pod) == place(ledger, "fgd", pod)


def reserve_cluster() -> ClusterLedger:
    """Two 8-GPU nodes, "a" with 48 cores and "b" with 128; two alike 2-GPU nodes with 16 cores."""
    return ClusterLedger([node("a", 8, cpu=48000), node("b", 8, cpu=128000), node("c", 2, cpu=16000),
                          node("d", 2, cpu=16000)])


def test_reserve_nodes_are_the_untouched_most_cpu_rich_of_their_gpu_count() -> None:
    ledger = reserve_cluster()
    names = [ledger.node_names()[i] for i in range(4)]
    assert [names[i] for i in np.flatnonzero(most_cpu_per_gpu_count(ledger))] == ["b"]  # 2-GPU nodes are alike
    assert [names[i] for i in reserve_rows(ledger)] == ["b"]
    ledger.reserve(PodAllocation("cpu-only", "b", (), cpu_milli=1000))
    assert [names[i] for i in reserve_rows(ledger)] == ["b"]  # a pod without GPUs (a DaemonSet's, say) keeps it
    share(ledger, "s", "b", 3, 100, cpu=0)
    assert not len(reserve_rows(ledger))  # a GPU in use: no longer kept


def test_a_one_gpu_pod_keeps_off_a_reserve_node_while_another_fits() -> None:
    ledger = reserve_cluster()
    hungry = single_container_pod("one", cpu_milli=20000, gpus=1)  # leaves "a" short of CPU for its other GPUs
    assert place(ledger, "fgd-plus", hungry)[0] == "b"  # the CPU-deficit term picks the rich node
    assert place(ledger, "fgd-staged", hungry)[0] == "a"
    assert place(ledger, "fgd-staged", single_container_pod("big", cpu_milli=60000, gpus=1))[0] == "b"  # only b fits


def test_reserve_nodes_follow_capacity_changes_and_ignore_removed_nodes() -> None:
    ledger = reserve_cluster()
    scheduler = Scheduler(ledger, build_profile("fgd-staged", ledger, rng=np.random.default_rng(0), typical=TYPICAL,
                                                tie_break="name"))
    hungry = single_container_pod("one", cpu_milli=20000, gpus=1)
    assert scheduler.schedule(hungry).allocation.node == "a"  # type: ignore[union-attr]
    ledger.release("one")
    ledger.upsert_node(node("a", 8, cpu=200000))  # now "a" is the most CPU-rich 8-GPU node, and "b" is not kept
    assert scheduler.schedule(hungry).allocation.node == "b"  # type: ignore[union-attr]
    alike = ClusterLedger([node("x", 2, cpu=32000), node("y", 2, cpu=32000), node("z", 2, cpu=8000)])
    alike.remove_node("z")  # its slot stays, inactive: it neither counts nor is kept
    assert not most_cpu_per_gpu_count(alike).any()
    alike.upsert_node(node("w", 2, cpu=8000))
    alike.upsert_node(attrs.evolve(alike.inventory("w"), gpus=tuple(
        attrs.evolve(gpu, health=Health.UNHEALTHY) for gpu in alike.inventory("w").gpus)))
    assert not most_cpu_per_gpu_count(alike).any()  # a node without schedulable GPUs counts not


def test_when_every_feasible_node_is_kept_in_reserve_the_choice_is_fgd_plus() -> None:
    for sick in ("b1", "b2"):
        ledger = ClusterLedger([node("a", 8, cpu=48000), node("b1", 8, cpu=128000), node("b2", 8, cpu=128000)])
        gpus = ledger.inventory(sick).gpus
        first_sick = (attrs.evolve(gpus[0], health=Health.UNHEALTHY), *gpus[1:])
        ledger.upsert_node(attrs.evolve(ledger.inventory(sick), gpus=first_sick))
        big = single_container_pod("big", cpu_milli=60000, gpus=1)  # fits b1 and b2 only, both kept in reserve
        assert place(ledger, "fgd-staged", big) == place(ledger, "fgd-plus", big), sick
        slots = np.array([ledger.slot("b1"), ledger.slot("b2")], np.int64)
        staged = FgdStagedScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
        scarce = FgdScarceScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
        scores = staged.score(big, ledger, CycleState(), slots).tolist()
        assert scores == scarce.score(big, ledger, CycleState(), slots).tolist(), sick
        assert max(scores) > 0, sick


def test_a_reserve_node_scores_0_and_every_other_node_one_more_than_fgd_deficit_scarce(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = reserve_cluster()
    staged = FgdStagedScore(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
    monkeypatch.setattr(staged.plus, "score", lambda *args: np.zeros(2, np.int64))  # every node equal for it
    slots = np.array([ledger.slot("a"), ledger.slot("b")], np.int64)
    pod = single_container_pod("one", cpu_milli=1000, gpus=1)
    assert staged.score(pod, ledger, CycleState(), slots).tolist() == [1, 0]


def test_gap_counts_follow_the_ledger() -> None:
    ledger = ClusterLedger([node("a", 4), node("b", 2), node("c", 8)])
    counts = GapCounts(ledger)
    rng = np.random.default_rng(3)
    live: list[str] = []
    for step in range(120):
        if live and rng.random() < 0.3:
            ledger.release(live.pop(int(rng.integers(len(live)))))
        else:
            name, gpus = [("a", 4), ("b", 2), ("c", 8)][int(rng.integers(3))]
            gpu = int(rng.integers(gpus))
            core = int(rng.choice([100, 250, 500, 1000]))
            if name not in ledger.quarantine and ledger.sched_free[ledger.slot(name), gpu] >= core:
                share(ledger, f"s{step}", name, gpu, core, cpu=10)
                live.append(f"s{step}")
        if step == 60:
            ledger.quarantine_node("b", "test")
        if step == 90:
            ledger.upsert_node(node("d", 3))
        assert counts.histogram().tolist() == gap_histogram(ledger).tolist(), step


def test_keys_by_free_are_option_keys_per_free_value() -> None:
    histogram = np.random.default_rng(1).integers(0, 9, 1001).astype(np.int64)
    free = np.arange(1001, dtype=np.int64)[None, :]
    for need in (50, 200, 810, 1000):
        expected = option_keys(free, np.full_like(free, 1000), np.full_like(free, need), free >= need, histogram)[0]
        fits = free[0] >= need
        assert keys_by_free(need, histogram)[fits].tolist() == expected[fits].tolist()


def test_registered_needs_typical_pods_and_replays_deterministically() -> None:
    assert POLICIES["fgd-staged"].needs_typical_pods
    with pytest.raises(InvalidRequestError):
        build_profile("fgd-staged", ClusterLedger([node("a", 1)]), rng=np.random.default_rng(0))
    nodes, pods = synthetic_nodes(scale=0.02), synthetic_pods(scale=0.02)
    first = replay(nodes, pods, ReplayConfig("fgd-staged", 5))
    again = replay(nodes, pods, ReplayConfig("fgd-staged", 5))
    assert first.used_milli == again.used_milli
    assert max(first.used_milli) <= first.total_gpus * 1000
