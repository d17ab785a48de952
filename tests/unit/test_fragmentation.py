"""Typical pods and the fragmentation metric (``docs/trace-replay.md`` §3.1 and §4).

Behaviours covered:

* ``TypicalPods.from_workload``: keys sorted by count descending, ties by key descending (CPU, then per-GPU milli,
  then GPU count, then the spec string); the shortest prefix reaching ≥ 95 % of pods is kept (an exact 95 % stops
  there) and renormalised; memory is not part of the key; empty workloads and bad coverage are refused.
* ``f_t`` per §4 on hand-built nodes: CPU-only typical mass counts every idle milli whether the CPU fits or not
  (xl/xr); a spec without the node's model (or naming a model no node has) is no_access; q1/q2/q4 count every
  idle milli; q3 counts only the GPUs too small for the typical pod; multi-GPU typical pods need k usable GPUs;
  unhealthy GPUs count as 0 free; ``F = Σ p_t f_t`` and the cluster totals.
* ``weighted_frag`` (FGD's ``F`` by prefix sums): equals ``Σ p_t f_t`` on random states, bit for bit the same
  whatever the batch (also between the per-milli table of small batches and the bucket pass of large ones), and
  exactly equal for two states whose ``f_t`` all agree.
* ``NodeStateCache``: after hundreds of reserve/release operations (plus nodes added and one removed), checked
  after every change (the one-slot refresh) and after every seventh, its running totals equal a from-scratch
  recomputation exactly (integer ``f_t`` totals and idle milli), also
  across a node wider than every earlier one (the cache's stored states gain empty GPU columns).
* Real trace (skipped without ``../shared/traces/openb``): the ``default`` workload has 91 keys, keeps 35 typical
  pods covering 7766 of 8152, CPU-only mass ≈ 13.6 %, and the empty 1213-node cluster's frag ratio is 13.94 %.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.policies.fgd.fragmentation import (
    _TABLE_CELLS,
    FragmentationModel,
    PodClass,
    TypicalPods,
    schedulable_free,
)
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.registry import build_profile
from domain.simulation.replay import typical_pods
from domain.simulation.workload import TraceNode, TracePod
from domain.units import GiB, MiB

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"
GPU_MEMORY = 1000 * MiB


def node(name: str, gpus: int, *, cpu: int = 8000, model: str = "G2", unhealthy: tuple[int, ...] = ()) -> NodeInventory:
    devices = tuple(
        Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, GPU_MEMORY, Health.UNHEALTHY if i in unhealthy else Health.HEALTHY)
        for i in range(gpus)
    )
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=64 * GiB, max_pods=1001)


def share(uid: str, on: str, gpu: int, milli: int, *, cpu: int = 0) -> PodAllocation:
    return PodAllocation(uid, on, (ContainerGrant("main", (GpuGrant(gpu, milli, milli * MiB),)),), cpu_milli=cpu)


def whole(uid: str, on: str, gpus: list[int]) -> PodAllocation:
    grants = tuple(GpuGrant(i, 1000, GPU_MEMORY) for i in gpus)
    return PodAllocation(uid, on, (ContainerGrant("main", grants, whole=True),))


# ---------------------------------------------------------------------------------------------- typical pods
def test_typical_pods_sort_cut_at_95_percent_and_renormalise() -> None:
    a, b, c, d = PodClass(1000, 810, 1), PodClass(4000, 0, 0), PodClass(3000, 1000, 1), PodClass(2000, 600, 1)
    e, f = PodClass(2000, 500, 1, ""), PodClass(2000, 500, 1, "T4")
    pods = [a] * 8 + [c] * 4 + [b] * 4 + [d] * 2 + [e, f]  # 20 pods; 95 % = 19
    typical = TypicalPods.from_workload(pods)
    # counts 8, 4, 4, 2, 1, 1: b before c (CPU 4000 > 3000), f before e (spec "T4" > ""); 8+4+4+2+1 = 19 ≥ 19 stops.
    assert typical.classes == (a, b, c, d, f)
    assert typical.probabilities == pytest.approx((8 / 19, 4 / 19, 4 / 19, 2 / 19, 1 / 19), abs=1e-15)
    assert sum(typical.probabilities) == pytest.approx(1.0, abs=1e-12)
    assert (typical.covered_pods, typical.total_pods) == (19, 20)


def test_typical_pods_keep_one_more_key_when_just_short_of_the_cutoff() -> None:
    a, b, c = PodClass(1000, 500, 1), PodClass(1000, 0, 0), PodClass(9000, 1000, 8)
    typical = TypicalPods.from_workload([a] * 18 + [b] + [c])  # 18/20 = 90 % < 95 % → b (by key) then stop at 95 %
    assert typical.classes == (a, c)  # c > b by CPU
    assert typical.probabilities == pytest.approx((18 / 19, 1 / 19), abs=1e-15)


def test_typical_pod_ties_break_by_cpu_then_gpu_milli_then_count_then_spec() -> None:
    keys = [
        PodClass(1000, 0, 0), PodClass(1000, 500, 1), PodClass(1000, 500, 2), PodClass(1000, 1000, 1),
        PodClass(1000, 500, 1, "V100M32"), PodClass(2000, 0, 0),
    ]
    typical = TypicalPods.from_workload(keys, coverage=1.0)
    assert typical.classes == (
        PodClass(2000, 0, 0), PodClass(1000, 1000, 1), PodClass(1000, 500, 2), PodClass(1000, 500, 1, "V100M32"),
        PodClass(1000, 500, 1), PodClass(1000, 0, 0),
    )
    assert typical.probabilities == pytest.approx((1 / 6,) * 6, abs=1e-15)


def test_typical_pod_key_ignores_memory_but_keeps_cpu_and_spec() -> None:
    pods = [
        TracePod("p0", 4000, 1024, 1, 500), TracePod("p1", 4000, 99999, 1, 500),
        TracePod("p2", 4000, 1024, 1, 500, ("T4",)), TracePod("p3", 4001, 1024, 1, 500),
    ]
    typical = typical_pods(pods)
    assert typical.classes[0] == PodClass(4000, 500, 1)
    assert typical.probabilities[0] == pytest.approx(0.5)
    assert set(typical.classes) == {PodClass(4000, 500, 1), PodClass(4000, 500, 1, "T4"), PodClass(4001, 500, 1)}


def test_typical_pods_refuse_empty_workloads_and_bad_coverage() -> None:
    with pytest.raises(InvalidRequestError):
        TypicalPods.from_workload([])
    for coverage in (0.0, 1.5):
        with pytest.raises(InvalidRequestError):
            TypicalPods.from_workload([PodClass(1000, 0, 0)], coverage=coverage)


# ---------------------------------------------------------------------------------------------- f_t categories
CLASSES = (
    PodClass(2000, 0, 0),  # 0: CPU-only, CPU fits (xl)
    PodClass(7000, 0, 0),  # 1: CPU-only, CPU does not fit on "n" (xr)
    PodClass(1000, 500, 1),  # 2: fits on "n" (q3)
    PodClass(1000, 500, 1, "T4"),  # 3: no_access on G2
    PodClass(1000, 1000, 2),  # 4: only one fully free GPU on "n" (q2)
    PodClass(16000, 500, 1),  # 5: GPU fits, CPU does not (q4)
    PodClass(16000, 1000, 4),  # 6: neither (q1)
    PodClass(1000, 500, 1, "G2|T4"),  # 7: model allowed (q3)
    PodClass(1000, 300, 2),  # 8: two GPUs with ≥ 300 (q3)
    PodClass(1000, 500, 1, "A100"),  # 9: a model no node has (no_access everywhere)
)


def frag_ledger() -> ClusterLedger:
    # "n": G2, 4 GPUs, 8000 CPU with 2000 used; free (300, 0, 600, 1000) → Σ = 1900, CPU left 6000.
    # "t": T4, 2 idle GPUs, 8000 CPU. "sick": G2, 2 GPUs, GPU1 unhealthy (counts 0 free).
    ledger = ClusterLedger([node("n", 4), node("t", 2, model="T4"), node("sick", 2, unhealthy=(1,))])
    ledger.observe(share("a", "n", 0, 700, cpu=2000))
    ledger.observe(whole("b", "n", [1]))
    ledger.observe(share("c", "n", 2, 400))
    return ledger


def f_vector(model: FragmentationModel, ledger: ClusterLedger, name: str) -> list[int]:
    slots = np.array([ledger.slot(name)], np.int64)
    cpu_left = (ledger.cpu_cap - ledger.cpu_used)[slots]
    return [int(v) for v in model.frag_vectors(cpu_left, schedulable_free(ledger, slots), ledger.gpu_model[slots])[0]]


def test_frag_categories_on_a_partly_used_node() -> None:
    ledger = frag_ledger()
    model = FragmentationModel(TypicalPods(CLASSES, (0.1,) * 10), ledger)
    idle = 1900
    too_small_for_500 = 300 + 0  # GPUs 0 (300 free) and 1 (0 free)
    too_small_for_300 = 0  # only GPU 1 (0 free); GPU 0 has exactly 300
    assert f_vector(model, ledger, "n") == [
        idle, idle, too_small_for_500, idle, idle, idle, idle, too_small_for_500, too_small_for_300, idle,
    ]


def test_frag_categories_on_an_idle_node_of_another_model() -> None:
    ledger = frag_ledger()
    model = FragmentationModel(TypicalPods(CLASSES, (0.1,) * 10), ledger)
    # "t": T4, 2 idle GPUs, 8000 CPU: CPU-only mass is always fragment (2000 each, the 7000-CPU one fits too);
    # 1-GPU and 2-GPU typical pods fit (0); the 16000-CPU ones lack CPU (2000); A100-only has no access (2000).
    assert f_vector(model, ledger, "t") == [2000, 2000, 0, 0, 0, 2000, 2000, 0, 0, 2000]


def test_unhealthy_gpus_count_as_zero_free() -> None:
    ledger = frag_ledger()
    model = FragmentationModel(TypicalPods(CLASSES, (0.1,) * 10), ledger)
    # "sick": only GPU0 (1000 free) counts; the 2-GPU typical pods cannot fit (q2) → 1000.
    assert f_vector(model, ledger, "sick") == [1000, 1000, 0, 1000, 1000, 1000, 1000, 0, 1000, 1000]


def test_weighted_node_and_cluster_fragmentation() -> None:
    ledger = frag_ledger()
    p = (0.05, 0.05, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)
    cache = NodeStateCache(FragmentationModel(TypicalPods(CLASSES, p), ledger))
    f_n = np.array([1900, 1900, 300, 1900, 1900, 1900, 1900, 300, 0, 1900])
    f_t = np.array([2000, 2000, 0, 0, 0, 2000, 2000, 0, 0, 2000])
    f_sick = np.array([1000, 1000, 0, 1000, 1000, 1000, 1000, 0, 1000, 1000])
    frag, idle = cache.cluster_fragmentation()
    assert idle == 1900 + 2000 + 1000
    assert frag == pytest.approx(float((f_n + f_t + f_sick) @ np.array(p)), rel=1e-12)
    assert cache.total_f.tolist() == (f_n + f_t + f_sick).tolist()


def random_states(
    model: FragmentationModel, rng: np.random.Generator, count: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    cpu = rng.integers(-1, 20000, count)
    free = rng.integers(0, 1001, (count, 4))
    free[rng.random((count, 4)) < 0.3] = 1000
    models = rng.integers(-1, model.ledger.model_count, (count, 4))
    return cpu, free, models


def test_weighted_frag_equals_the_weighted_f_vectors_and_does_not_depend_on_the_batch() -> None:
    ledger = frag_ledger()
    model = FragmentationModel(TypicalPods(CLASSES, (0.02, 0.08, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.05)), ledger)
    cpu, free, models = random_states(model, np.random.default_rng(3), 400)
    batch = model.weighted_frag(cpu, free, models)
    assert batch == pytest.approx(model.weighted(model.frag_vectors(cpu, free, models)), abs=1e-9)
    alone = [float(model.weighted_frag(cpu[i : i + 1], free[i : i + 1], models[i : i + 1])[0]) for i in range(400)]
    assert alone == batch.tolist()  # bit for bit: each row is reduced on its own


def test_weighted_reduces_each_row_on_its_own() -> None:
    """``F = Σ_t p_t f_t`` of a row is the same, bit for bit, whatever other rows share its batch (with a few hundred
    typical pods a BLAS matrix product's last bits depend on the batch)."""
    rng = np.random.default_rng(4)
    weights = rng.random(233)
    classes = tuple(PodClass(100 * t, 1000, 1) for t in range(233))
    model = FragmentationModel(TypicalPods(classes, tuple((weights / weights.sum()).tolist())), frag_ledger())
    for count in (2, 3, 7, 16, 33):
        f = rng.integers(-20000, 20000, (count, 233))
        batch = model.weighted(f)
        assert [float(model.weighted(f[i : i + 1])[0]) for i in range(count)] == batch.tolist(), count
        assert [float(model.weighted(f[i])) for i in range(count)] == batch.tolist(), count


def test_weighted_frag_per_milli_table_equals_the_bucket_pass_for_any_model_typical_pods() -> None:
    unrestricted = tuple(c for c in CLASSES if not c.models)
    model = FragmentationModel(TypicalPods(unrestricted, (0.1, 0.1, 0.3, 0.2, 0.1, 0.1, 0.1)), frag_ledger())
    count = _TABLE_CELLS // (4 * len(model._h_k)) + 1  # one state more than the table takes at 4 GPUs
    cpu, free, models = random_states(model, np.random.default_rng(8), count)
    cpu[:50] = np.arange(-50, 0)  # below every threshold, down to -50
    assert model._usable_heads(free, models) is None  # too many cells: the bucket pass of ``_usable``
    batch = model.weighted_frag(cpu, free, models)
    assert batch == pytest.approx(model.weighted(model.frag_vectors(cpu, free, models)), abs=1e-9)
    for start in range(0, count, 5000):
        part = slice(start, start + 5000)
        assert model._usable_heads(free[part], models[part]) is not None
        assert model.weighted_frag(cpu[part], free[part], models[part]).tolist() == batch[part].tolist()
    for label, value in (("over one GPU", 1500), ("negative", -3)):
        odd = free[:500].copy()
        odd[0, 0] = value  # outside the table, so the generic pass answers
        assert model._usable_heads(odd, models[:500]) is None, label
        expected = model.weighted(model.frag_vectors(cpu[:500], odd, models[:500]))
        assert model.weighted_frag(cpu[:500], odd, models[:500]) == pytest.approx(expected, abs=1e-9), label
    wide = np.zeros((3, 65), np.int64)
    assert model._usable_heads(wide, wide) is None  # over 64 GPUs the packed count could carry


def test_weighted_frag_per_milli_table_is_not_used_once_a_typical_pod_restricts_models() -> None:
    ledger = ClusterLedger([node("n", 4)])  # only G2 known: a pod allowing just G2 restricts nothing yet
    model = FragmentationModel(TypicalPods((PodClass(1000, 500, 1, "G2"), PodClass(1000, 500, 1)), (0.5, 0.5)),
                               ledger)
    cpu, free, models = random_states(model, np.random.default_rng(9), 200)
    assert model._usable_heads(free, models) is not None
    ledger.upsert_node(node("t", 2, model="T4"))  # now a model the first typical pod does not allow
    assert model._usable_heads(free, models) is None
    assert model.weighted_frag(cpu, free, models) == pytest.approx(
        model.weighted(model.frag_vectors(cpu, free, models)), abs=1e-9)


def test_weighted_frag_difference_is_exactly_zero_when_no_typical_pods_fit_changes() -> None:
    ledger = frag_ledger()
    model = FragmentationModel(TypicalPods(CLASSES, (0.02, 0.08, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.05)), ledger)
    cpu, free, models = random_states(model, np.random.default_rng(4), 400)
    thresholds = np.unique(model.cpu_t)
    below = np.array([thresholds[thresholds <= c].max(initial=-1) for c in cpu])  # CPU drops, no threshold crossed
    lower = np.maximum(below, cpu - 700)
    same = (model.frag_vectors(cpu, free, models) == model.frag_vectors(lower, free, models)).all(axis=1)
    assert same.all()
    delta = model.weighted_frag(cpu, free, models) - model.weighted_frag(lower, free, models)
    assert (delta == 0.0).all()  # FGD then scores exactly 50


# ---------------------------------------------------------------------------------------------- NodeStateCache
def recomputed_totals(model: FragmentationModel, ledger: ClusterLedger) -> tuple[list[int], int]:
    slots = np.flatnonzero(ledger.active).astype(np.int64)
    cpu_left = (ledger.cpu_cap - ledger.cpu_used)[slots]
    free = schedulable_free(ledger, slots)
    f = model.frag_vectors(cpu_left, free, ledger.gpu_model[slots])
    return [int(v) for v in f.sum(axis=0)], int(free.sum())


@pytest.mark.parametrize("every", [1, 7])  # refreshed after each change (one slot) or after several
def test_node_state_cache_totals_stay_exact_over_many_reserve_release_operations(every: int) -> None:
    typical = TypicalPods(CLASSES[:9], (0.2, 0.05, 0.25, 0.1, 0.1, 0.05, 0.05, 0.1, 0.1))
    ledger = ClusterLedger([node(f"g{i}", 8, cpu=32000) for i in range(4)] + [node("t", 2, model="T4")])
    cache = NodeStateCache(FragmentationModel(typical, ledger))
    scheduler = Scheduler(ledger, build_profile("random", ledger, rng=np.random.default_rng(1)))
    rng = np.random.default_rng(2024)
    live: list[str] = []
    checks = 0
    for step in range(400):
        if step == 150:
            ledger.upsert_node(node("late", 4, cpu=16000, model="T4"))
        if step == 200:
            ledger.upsert_node(node("wide", 12, cpu=16000))  # more GPUs than any node so far: the ledger widens
            assert ledger.max_gpus == 12
        if step == 300:
            gone = set(ledger.remove_node("g0"))
            assert gone
            live = [uid for uid in live if uid not in gone]
        if live and rng.random() < 0.4:
            ledger.release(live.pop(int(rng.integers(len(live)))))
        else:
            kind = int(rng.integers(3))
            uid = f"pod-{step}"
            cpu = int(rng.integers(1, 5)) * 1000
            if kind == 0:
                pod = single_container_pod(uid, cpu_milli=cpu)
            elif kind == 1:
                pod = single_container_pod(uid, cpu_milli=cpu, core_milli=int(rng.choice([100, 250, 500, 810])))
            else:
                pod = single_container_pod(uid, cpu_milli=cpu, gpus=int(rng.choice([1, 2])))
            if scheduler.schedule(pod).allocation is not None:
                live.append(uid)
        if step % every == 0:
            frag, idle = cache.cluster_fragmentation()
            fresh_f, fresh_idle = recomputed_totals(cache.model, ledger)
            assert cache.total_f.tolist() == fresh_f
            assert idle == fresh_idle
            assert frag == pytest.approx(float(np.array(fresh_f, np.float64) @ cache.model.p), rel=1e-12)
            checks += 1
    fresh = NodeStateCache(FragmentationModel(typical, ledger))
    assert cache.cluster_fragmentation() == pytest.approx(fresh.cluster_fragmentation(), rel=1e-12)
    assert checks == len(range(0, 400, every))
    assert len(live) > 10


def test_node_state_cache_one_slot_refresh_of_a_removed_node_drops_its_idle_and_fragments() -> None:
    typical = TypicalPods(CLASSES[:9], (0.2, 0.05, 0.25, 0.1, 0.1, 0.05, 0.05, 0.1, 0.1))
    ledger = ClusterLedger([node(f"g{i}", 8, cpu=32000) for i in range(3)])
    cache = NodeStateCache(FragmentationModel(typical, ledger))
    cache.cluster_fragmentation()
    slot = ledger.slot("g1")
    ledger.remove_node("g1")  # the only change: the one-slot refresh, on a slot that is now inactive
    assert cache.refresh().tolist() == [slot]
    assert cache.slot_state[slot] == -1
    fresh_f, fresh_idle = recomputed_totals(cache.model, ledger)
    assert (cache.total_f.tolist(), cache.total_idle) == (fresh_f, fresh_idle)
    assert fresh_idle == 2 * 8 * 1000


# ---------------------------------------------------------------------------------------------- real trace
needs_trace = pytest.mark.skipif(not TRACES.is_dir(), reason="trace files ../shared/traces/openb not present")


def read_pods(path: Path) -> list[TracePod]:
    with path.open(newline="") as handle:
        return [
            TracePod(
                row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["num_gpu"]),
                int(row["gpu_milli"]), tuple(t for t in row["gpu_spec"].split("|") if t),
            )
            for row in csv.DictReader(handle)
        ]


def read_nodes(path: Path) -> list[TraceNode]:
    with path.open(newline="") as handle:
        return [
            TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


@needs_trace
def test_default_workload_typical_pods_match_the_published_check() -> None:
    pods = read_pods(TRACES / "openb_pod_list_default.csv")
    typical = typical_pods(pods)
    assert len({p.pod_class for p in pods}) == 91
    assert (len(typical.classes), typical.covered_pods, typical.total_pods) == (35, 7766, 8152)
    assert typical.classes[:3] == (PodClass(3152, 810, 1), PodClass(11300, 1000, 1), PodClass(11400, 1000, 1))
    assert [round(p, 3) for p in typical.probabilities[:3]] == [0.135, 0.113, 0.077]
    cpu_only = sum(p for c, p in zip(typical.classes, typical.probabilities, strict=True) if c.gpu_count == 0)
    assert cpu_only == pytest.approx(0.136, abs=0.0005)


@needs_trace
def test_empty_cluster_frag_ratio_is_13_94_percent_on_default() -> None:
    nodes = read_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert (len(nodes), sum(n.gpus for n in nodes)) == (1213, 6212)
    ledger = ClusterLedger([n.inventory() for n in nodes])
    cache = NodeStateCache(FragmentationModel(typical_pods(read_pods(TRACES / "openb_pod_list_default.csv")), ledger))
    frag, idle = cache.cluster_fragmentation()
    assert idle == 6_212_000
    assert 100 * frag / idle == pytest.approx(13.94, abs=0.05)


@pytest.mark.parametrize("restricted", [False, True])
def test_usable_gpus_by_threshold_buckets_equal_the_per_group_pass(restricted: bool) -> None:
    """The O(M·(G+U)) bucket count of usable GPUs (no group restricts models) equals the O(M·U·G) pass, for random
    states with missing GPUs (model id −1) and free values on, just below and just above each threshold; with a
    model allow-list the per-group pass is used (same answers as the generic one by construction)."""
    classes = [PodClass(1000, 500, 1), PodClass(0, 0, 0), PodClass(2000, 1000, 2), PodClass(500, 250, 1),
               PodClass(300, 500, 1), PodClass(100, 1000, 1, "G2" if restricted else "")]
    ledger = ClusterLedger([node("a", 4), node("b", 2, model="G3")])
    model = FragmentationModel(TypicalPods.from_workload(classes, coverage=1.0), ledger)
    rng = np.random.default_rng(5)
    values = np.array([0, 1, 249, 250, 251, 499, 500, 501, 999, 1000])
    free = rng.choice(values, size=(200, 6))
    models = rng.integers(-1, ledger.model_count, size=(200, 6))
    allowed = model.allowed_for(models)
    usable = allowed & (free[:, None, :] >= model.u_g[None, :, None])
    count, milli = model._usable(free, models, None)
    assert model._any_model is (not restricted)  # the path under test
    assert np.array_equal(count, usable.sum(axis=-1))
    assert np.array_equal(milli, (free[:, None, :] * usable).sum(axis=-1))
