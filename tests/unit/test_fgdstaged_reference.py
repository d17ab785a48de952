"""FGD-staged's fast paths (:mod:`domain.scheduling.policies.fgd.staged`, :mod:`~.gapcounts`, :mod:`~.optionvalues`)
decide exactly as a straightforward reference of the same rules, kept here.

The reference (:class:`ReferenceStaged`) is fgd-staged written the plain way: the allowed options as a mask over
every ledger row and GPU, the saturation test and the gap histogram recounted from the ledger at each decision,
the gap key of every free value 0..1000, and share options valued by ``fgd-plus``'s own evaluation
(:meth:`FgdPlusScore._evaluate_options`, a pass over every GPU, head and typical pod). Behaviours covered, on seeded
random clusters (GPU models with and without a restricted claim, quarantined nodes, releases):

* the same pod stream placed by the production ``fgd-staged`` and by the reference gives the same node and GPUs
  for every pod, below and past saturation, for shares with a fixed milli and memory-only shares;
* a one-GPU pod is placed exactly as ``fgd-plus`` places it on a cluster without reserve nodes (nodes of each GPU
  count alike in CPU), and the reference keeps it off reserve nodes, recounted node by node, while another fits;
* :class:`GapPlusScore`'s residue of states it holds no parts for equals FGD-residue's;
* the counts :class:`GapCounts` keeps (gap histogram, widest gap per row, saturation) equal a recount;
* :class:`GapPlusScore`'s option values equal ``fgd-plus``'s evaluation for every fitting (node, GPU) option, valued
  in one batch and one at a time (also when the per-state parts are dropped for want of room), and
  :func:`keys_of_free` equals :func:`keys_by_free` at the values asked;
* its one-GPU values equal FGD-deficit-scarce's evaluation on every node (nodes without a free GPU too), in one
  batch and one node at a time, and so do the scores and tie keys of pods whose class had its node states valued
  beside another class's (siblings).
"""

from __future__ import annotations

from typing import cast

import attrs
import numpy as np
import pytest

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest, single_container_pod
from domain.scheduling.framework.cycle import BoolArray, CycleState, Scheduler, ScorePlugin, TieRefiner, WeightedScore
from domain.scheduling.framework.planner import ChooserPlanner, ensure_gpu_fit
from domain.scheduling.policies.fgd import optionvalues
from domain.scheduling.policies.fgd.fragmentation import I64, FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.gapbalance import gap_histogram
from domain.scheduling.policies.fgd.gapcounts import keys_by_free, keys_of_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.optionvalues import GapPlusScore, is_one_gpu
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.residue import FgdResidueScore
from domain.scheduling.policies.fgd.scarce import FgdScarceScore
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.policies.fgd.staged import (
    SATURATED_WHOLE_GPUS,
    FgdStagedScore,
    is_share,
    reserve_rows,
    saturated,
)
from domain.scheduling.registry import build_profile
from support.fgd_clusters import node

_PLUS, _GAP, _SCARCE = "fgd-staged.plus", "fgd-staged.gap", "fgd-staged.scarce"

OPEN = TypicalPods((PodClass(4000, 1000, 1), PodClass(2000, 500, 1), PodClass(2000, 200, 1), PodClass(8000, 1000, 2),
                    PodClass(4000, 0, 0)), (0.3, 0.3, 0.2, 0.1, 0.1))
"""Typical pods without a model list: every restricted claim is 0."""
RESTRICTED = TypicalPods((PodClass(4000, 1000, 1), PodClass(2000, 300, 1, "T4"), PodClass(2000, 500, 1),
                          PodClass(6000, 1000, 1, "T4|V100"), PodClass(4000, 0, 0)), (0.3, 0.2, 0.2, 0.2, 0.1))
"""Typical pods of which some may use T4 (and V100) only: those models carry a claim."""


class ReferenceStaged(FgdStagedScore):
    """fgd-staged written the plain way (module docstring): same rules, no kept counts, no per-state parts."""

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self.plus = FgdPlusScore(cache)

    def _reference_allowed(self, ledger: ClusterLedger, state: CycleState, slots: I64,
                           whole_too: bool) -> BoolArray | None:
        rows = ledger.rows
        assert state.gpu_fit is not None
        feasible = np.zeros(rows, np.bool_)
        feasible[slots] = True
        allowed = state.gpu_fit[:rows] & feasible[:, None]
        if not whole_too:
            allowed &= ledger.sched_free[:rows] < ledger.core_cap[:rows]
            claim = self.plus.claim()
            allowed &= claim[ledger.gpu_model[:rows]] <= 0
        return allowed if allowed.any() else None

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        allowed = None
        state.data[_SCARCE] = False
        shape = pod.simple_shape
        one_gpu = shape is not None and shape.kind is GpuKind.WHOLE and shape.gpus == 1
        if one_gpu:
            state.data[_PLUS], state.data[_SCARCE] = False, True
            scores = self.plus.score(pod, ledger, state, slots)
            reserve = np.array([reference_reserve(ledger, int(slot)) for slot in slots], np.bool_)
            if reserve.any() and not reserve.all():
                scores = np.where(reserve, 0, scores + 1)
            return scores
        if is_share(pod):
            ensure_gpu_fit(pod, ledger, state)
            allowed = self._reference_allowed(ledger, state, slots, saturated(ledger))
        state.data[_PLUS] = allowed is not None
        if allowed is None:
            return self.fgd.score(pod, ledger, state, slots)
        shape = pod.simple_shape
        assert shape is not None
        assert state.gpu_fit is not None
        if shape.core_milli is None or not self._uniform_gpus():
            masked = state.gpu_fit.copy()
            masked[: ledger.rows] = allowed
            state.gpu_fit = masked
            state.data[_GAP] = None
            return self.plus.score(pod, ledger, state, slots)
        self.cache.refresh()
        keys = keys_by_free(shape.core_milli, gap_histogram(ledger))
        free = ledger.sched_free[: ledger.rows]
        present = np.zeros(len(keys), np.bool_)
        present[free[allowed]] = True
        best = int(np.flatnonzero(present)[np.argmax(keys[present])])
        top_rows, top_gpus = np.nonzero(allowed & (free == best))
        first = np.flatnonzero(np.r_[True, top_rows[1:] != top_rows[:-1]])
        state.data[_GAP] = (top_rows[first].astype(np.int64), top_gpus[first].astype(np.int64))
        return np.zeros(len(slots), np.int64)


def reference_reserve(ledger: ClusterLedger, slot: int) -> bool:
    """Whether ``slot`` is a reserve node, recounted GPU by GPU: every schedulable GPU untouched, and the most CPU
    among the active nodes of its GPU count with a schedulable GPU, which are not all alike in CPU."""
    def usable(name: str) -> bool:
        return bool(ledger.active[ledger.slot(name)]) and any(g.schedulable for g in ledger.gpus(name))

    [name] = [other for other in ledger.node_names() if ledger.slot(other) == slot]
    inventory = ledger.inventory(name)
    peers = [ledger.inventory(other).cpu_milli for other in ledger.node_names()
             if usable(other) and ledger.inventory(other).gpu_count == inventory.gpu_count]
    untouched = all(g.core_used == 0 and g.memory_used == 0 for g in ledger.gpus(name) if g.schedulable)
    return usable(name) and untouched and inventory.cpu_milli == max(peers) > min(peers)


def cluster(rng: np.random.Generator, nodes: int) -> ClusterLedger:
    """``nodes`` nodes of 1, 2, 4 or 8 GPUs of G2, T4 or V100 with 8..96 cores (seeded)."""
    return ClusterLedger([node(f"n{i:03d}", int(rng.choice([1, 2, 4, 8])), cpu=int(rng.integers(8, 97)) * 1000,
                               model=str(rng.choice(["G2", "T4", "V100"]))) for i in range(nodes)])


def random_pod(rng: np.random.Generator, uid: str) -> PodRequest:
    """A share (mostly: fixed milli, sometimes memory only), a whole-GPU pod or a CPU-only pod."""
    cpu = int(rng.integers(0, 9)) * 1000
    kind = rng.random()
    if kind < 0.6:
        core = int(rng.choice([50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 750, 810, 900]))
        return single_container_pod(uid, cpu_milli=cpu, core_milli=core)
    if kind < 0.65:
        return single_container_pod(uid, cpu_milli=cpu, gpu_memory_bytes=int(rng.integers(50, 900)) * 2**20)
    if kind < 0.7:
        return single_container_pod(uid, cpu_milli=cpu, core_milli=300, models=("T4",))
    if kind < 0.9:
        return single_container_pod(uid, cpu_milli=cpu, gpus=int(rng.choice([1, 1, 2, 4])))
    return single_container_pod(uid, cpu_milli=cpu + 1000)


def scheduler(ledger: ClusterLedger, typical: TypicalPods, reference: bool) -> Scheduler:
    """``fgd-staged`` through the production profile, its score plugin swapped for the reference when asked."""
    profile = build_profile("fgd-staged", ledger, rng=np.random.default_rng(0), typical=typical)
    if reference:
        plugin = ReferenceStaged(NodeStateCache(FragmentationModel(typical, ledger)))
        profile = attrs.evolve(profile, scores=(WeightedScore(plugin),), planner=ChooserPlanner(plugin))
    return Scheduler(ledger, profile)


def released(rng: np.random.Generator, chance: float, booked: list[str], ledgers: list[ClusterLedger]) -> bool:
    """With probability ``chance`` (when a pod is booked), release a random booked pod from every ledger."""
    if not booked or rng.random() >= chance:
        return False
    uid = booked.pop(int(rng.integers(len(booked))))
    for ledger in ledgers:
        ledger.release(uid)
    return True


def test_placements_equal_the_reference_below_and_past_saturation() -> None:
    for seed, typical in ((11, OPEN), (12, RESTRICTED), (13, OPEN), (14, RESTRICTED)):
        rng = np.random.default_rng(seed)
        nodes = int(rng.integers(8, 25))
        ledgers = [cluster(np.random.default_rng(seed), nodes) for _ in range(2)]
        fast, slow = scheduler(ledgers[0], typical, False), scheduler(ledgers[1], typical, True)
        booked: list[str] = []
        regimes = set()
        for number in range(700):
            if released(rng, 0.15, booked, ledgers):
                continue
            if number == 200:
                name = f"n{int(rng.integers(nodes)):03d}"
                for ledger in ledgers:
                    ledger.quarantine_node(name, "test")
            pod = random_pod(rng, f"p{number}")
            regimes.add((saturated(ledgers[0]), is_one_gpu(pod) and bool(len(reserve_rows(ledgers[0])))))
            got, want = fast.schedule(pod), slow.schedule(pod)
            placed = [None if r.allocation is None else (r.allocation.node, sorted(r.allocation.per_gpu_usage()))
                      for r in (got, want)]
            assert placed[0] == placed[1], (seed, number)
            if got.allocation is not None:
                booked.append(pod.uid)
        assert {(False, True), (True, False)} <= regimes, seed  # saturation, and one-GPU pods beside reserve nodes


def alike_cluster(rng: np.random.Generator, nodes: int) -> ClusterLedger:
    """Like :func:`cluster`, but the nodes of each GPU count alike in CPU (12 cores per GPU): no reserve node."""
    return ClusterLedger([node(f"n{i:03d}", gpus, cpu=12000 * gpus, model=str(rng.choice(["G2", "T4", "V100"])))
                          for i, gpus in enumerate(int(rng.choice([1, 2, 4, 8])) for _ in range(nodes))])


def test_a_one_gpu_pod_is_placed_as_by_fgd_plus_where_no_node_is_kept_in_reserve() -> None:
    """On clusters whose nodes of each GPU count are alike in CPU, a one-GPU pod goes where ``fgd-plus`` puts it at
    every fill: the same feasible nodes, node scores and tie keys, and the same allocation; a 2-GPU pod keeps FGD's
    node scores."""
    for seed, typical in ((21, OPEN), (22, RESTRICTED), (23, OPEN), (24, RESTRICTED)):
        rng = np.random.default_rng(seed)
        ledgers = [alike_cluster(np.random.default_rng(seed), 64) for _ in range(2)]
        staged = scheduler(ledgers[0], typical, False)
        plus = Scheduler(ledgers[1], build_profile("fgd-plus", ledgers[1], rng=np.random.default_rng(0),
                                                   typical=typical))
        booked: list[str] = []
        fgd = FgdScore(NodeStateCache(FragmentationModel(typical, ledgers[0])))
        placed = contested = wider = 0
        fills = set()
        for number in range(1200):
            assert not len(reserve_rows(ledgers[0]))
            if released(rng, 0.1, booked, ledgers):
                continue
            fills.add(saturated(ledgers[0]))
            if number % 3 == 0:  # wider whole-GPU pods keep FGD's scores
                pod = single_container_pod(f"two{number}", cpu_milli=1000, gpus=2)
                cycle = CycleState()
                slots, _ = staged.feasible(pod, cycle)
                if len(slots):
                    plugin = cast(ScorePlugin, staged.profile.scores[0].plugin)
                    assert (plugin.score(pod, ledgers[0], cycle, slots).tolist()
                            == fgd.score(pod, ledgers[0], CycleState(), slots).tolist()), (seed, number)
                    wider += 1
            if rng.random() < 0.4:
                pod = single_container_pod(f"one{number}", cpu_milli=int(rng.integers(0, 17)) * 1000, gpus=1)
                cycles = (CycleState(), CycleState())
                keys = []
                for sched, cycle, ledger in zip((staged, plus), cycles, ledgers, strict=True):
                    slots, _ = sched.feasible(pod, cycle)
                    contested += len(slots) > 1 and sched is staged
                    plugin = cast(TieRefiner, sched.profile.scores[0].plugin)
                    scores = cast(ScorePlugin, plugin).score(pod, ledger, cycle, slots)
                    keys.append((slots.tolist(), scores.tolist(), plugin.refine(pod, ledger, cycle, slots).tolist()))
                assert keys[0] == keys[1], (seed, number)  # node scores and tie keys of every feasible node
                got, want = staged.schedule(pod), plus.schedule(pod)
                assert got.allocation == want.allocation, (seed, number)
                placed += got.allocation is not None
                allocation = got.allocation
            else:
                allocation = staged.schedule(random_pod(rng, f"r{number}")).allocation
                if allocation is not None:
                    ledgers[1].reserve(allocation)
            if allocation is not None:
                booked.append(allocation.pod_uid)
        assert placed >= 100, (seed, placed)
        assert contested >= 50, (seed, contested)  # decisions among several nodes
        assert wider >= 20, (seed, wider)
        assert fills == {False, True}, seed  # below and past saturation


def test_residue_parts_read_first_equal_fgd_residue() -> None:
    """GapPlusScore's residue of node states it holds no parts for yet equals FGD-residue's (its per-state arrays
    grow while being read)."""
    ledger = cluster(np.random.default_rng(3), 20)
    cache = NodeStateCache(FragmentationModel(RESTRICTED, ledger))
    cache.refresh()
    slots = np.arange(ledger.rows, dtype=np.int64)
    plain = FgdResidueScore(cache)
    assert GapPlusScore(cache)._residue_now(slots).tolist() == plain._residue_now(slots).tolist()


def test_kept_counts_equal_a_recount() -> None:
    rng = np.random.default_rng(5)
    ledger = cluster(rng, 12)
    sched = scheduler(ledger, OPEN, False)
    plugin = sched.profile.scores[0].plugin
    assert isinstance(plugin, FgdStagedScore)
    booked: list[str] = []
    for number in range(400):
        if not released(rng, 0.2, booked, [ledger]):
            pod = random_pod(rng, f"p{number}")
            if sched.schedule(pod).allocation is not None:
                booked.append(pod.uid)
        if number == 150:
            ledger.quarantine_node("n003", "test")
        if number == 300:
            ledger.upsert_node(node("late", 3))
        free, cap = ledger.sched_free, ledger.core_cap
        widest = np.where((free > 0) & (free < cap), free, 0).max(axis=1)
        assert plugin.gaps.widest_gap().tolist() == widest.tolist(), number
        assert plugin.gaps.histogram().tolist() == gap_histogram(ledger).tolist(), number
        for fraction in (SATURATED_WHOLE_GPUS, 0.3, 0.6):
            assert plugin.gaps.saturated(fraction) == saturated(ledger, fraction), number


def test_option_values_equal_fgd_plus_evaluation_when_the_state_parts_are_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optionvalues, "MAX_STATES", 3)  # parts of more than 3 states: all dropped, recomputed
    test_option_values_equal_fgd_plus_evaluation()


def filled_cluster(seed: int, typical: TypicalPods,
                   pods: int) -> tuple[np.random.Generator, ClusterLedger, Scheduler, NodeStateCache]:
    """A seeded 30-node :func:`cluster` partly filled with ``pods`` random pods by ``fgd-staged`` (its rng, ledger and
    scheduler), and a fresh state cache over it, refreshed."""
    rng = np.random.default_rng(seed)
    ledger = cluster(rng, 30)
    sched = scheduler(ledger, typical, False)
    for number in range(pods):
        sched.schedule(random_pod(rng, f"fill{number}"))
    cache = NodeStateCache(FragmentationModel(typical, ledger))
    cache.refresh()
    return rng, ledger, sched, cache


def test_option_values_equal_fgd_plus_evaluation() -> None:
    for seed, typical in ((21, OPEN), (22, RESTRICTED), (23, OPEN), (24, RESTRICTED)):
        rng, ledger, _, cache = filled_cluster(seed, typical, 60)
        fast, plain = GapPlusScore(cache), FgdPlusScore(cache)
        checked = 0
        for number in range(40):
            cpu = int(rng.integers(0, 9)) * 1000
            pod = single_container_pod(f"q{number}", cpu_milli=cpu, core_milli=int(rng.choice([50, 200, 500, 810])))
            state = CycleState()
            ensure_gpu_fit(pod, ledger, state)
            assert state.gpu_fit is not None
            assert state.core_need is not None
            slots, gpus = np.nonzero(state.gpu_fit & (ledger.cpu_free >= cpu)[:, None])
            slots, gpus = slots.astype(np.int64), gpus.astype(np.int64)
            if not len(slots):
                continue
            want = plain._evaluate_options(pod, state.core_need, slots, gpus)
            assert fast._evaluate_options(pod, state.core_need, slots, gpus).tolist() == want.tolist(), number
            for i in rng.choice(len(slots), min(5, len(slots)), replace=False).tolist():
                one = fast._evaluate_options(pod, state.core_need, slots[i:i + 1], gpus[i:i + 1])
                assert one.tolist() == plain._evaluate_options(pod, state.core_need, slots[i:i + 1],
                                                               gpus[i:i + 1]).tolist()
            checked += len(slots)
        assert checked > 100, seed


def test_one_gpu_values_equal_fgd_deficit_scarce_evaluation() -> None:
    """:class:`GapPlusScore` values a one-GPU pod from per-state parts as FGD-deficit-scarce's own evaluation does,
    on every node (those without a free GPU too: left as they are), in one batch and one node at a time, for pods of
    any model and of one model; the values it memoises for other CPU asks while valuing one are those a pod of that
    ask gets, and tie keys asked for nodes its last pass did not score are scored again."""
    for seed, typical in ((31, OPEN), (32, RESTRICTED)):
        rng, ledger, sched, cache = filled_cluster(seed, typical, 80)
        fast, plain = GapPlusScore(cache), FgdScarceScore(cache)
        slots = np.arange(ledger.rows, dtype=np.int64)
        for number in range(24):  # four CPU asks: each pod's class is valued beside the others' (siblings)
            models = ("T4",) if number % 3 == 2 else ()  # a narrower fit: other fit bits under the same class
            pod = single_container_pod(f"o{number}", cpu_milli=int(rng.choice([0, 4000, 8000, 12000])), gpus=1,
                                       models=models)
            state = CycleState()
            cache.refresh()  # as scoring does first
            ensure_gpu_fit(pod, ledger, state)
            assert state.gpu_fit is not None
            assert not state.gpu_fit.any(axis=1).all()  # some nodes without a free GPU
            want = plain._evaluate(pod, state, slots)
            got = fast._evaluate(pod, state, slots)
            assert (got[0].tolist(), got[1].tolist()) == (want[0].tolist(), want[1].tolist()), (seed, number)
            for i in rng.choice(len(slots), 5, replace=False).tolist():
                assert fast._evaluate(pod, state, slots[i:i + 1])[0].tolist() == [int(want[0][i])]
            # Scored through the memo: the scores and tie keys of every node equal FGD-deficit-scarce's.
            scored = []
            for plugin in (fast, plain):
                cycle = CycleState()
                scored.append((plugin.score(pod, ledger, cycle, slots).tolist(),
                               plugin.refine(pod, ledger, cycle, slots).tolist()))
            assert scored[0] == scored[1], (seed, number)
            cycle = CycleState()  # tie keys asked for nodes this cycle did not score: scored again, the same keys
            fast.score(pod, ledger, cycle, slots[::2])
            assert fast.refine(pod, ledger, cycle, slots).tolist() == scored[1][1], (seed, number)
            sched.schedule(pod)  # a node changes state: the next pods' classes value it anew


def test_keys_of_free_are_keys_by_free_at_those_values() -> None:
    rng = np.random.default_rng(9)
    histogram = rng.integers(0, 30, 1001).astype(np.int64)
    for need in (1, 50, 333, 810, 1000):
        free = np.unique(rng.integers(0, 1001, 40)).astype(np.int64)
        assert keys_of_free(need, free, histogram).tolist() == keys_by_free(need, histogram)[free].tolist()
