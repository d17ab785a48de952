"""FGD's memoised scores equal a memo-free evaluation (``domain.scheduling.policies.fgd.score``, ``fragmentation``,
``nodestates``).

Behaviours covered:

* ``FragmentationModel.cpu_bucket``: counts the distinct CPU thresholds of GPU-using typical pods met, and two
  states that differ only in CPU left within one bucket get bit-identical ``weighted_frag``.
* ``FgdScore`` shares one state memo between pod classes of one GPU shape (keyed by that bucket): scores and GPU
  choices of pods of one shape and different CPU, scored one after another through one plugin, equal those of a
  fresh plugin per pod; FGD-residue (one memo per class) likewise.
"""

from __future__ import annotations

import numpy as np

from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, PodClass, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.residue import FgdResidueScore
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.registry import build_profile
from domain.units import GiB, MiB

TYPICAL = TypicalPods(
    (PodClass(2000, 500, 1), PodClass(4000, 500, 1), PodClass(8000, 1000, 1), PodClass(1000, 250, 1),
     PodClass(6000, 1000, 2), PodClass(3000, 0, 0)),
    (0.2, 0.15, 0.2, 0.15, 0.1, 0.2),
)


def node(name: str, gpus: int, cpu: int) -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), "G2", 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=1001)


def busy_ledger() -> ClusterLedger:
    rng = np.random.default_rng(11)
    ledger = ClusterLedger([node(f"n{i:02d}", 4, int(rng.choice([12000, 16000, 24000]))) for i in range(24)])
    scheduler = Scheduler(ledger, build_profile("random", ledger, rng=rng))
    for n in range(60):
        cpu = int(rng.integers(0, 6)) * 1000
        if n % 3:
            pod = single_container_pod(f"f{n}", cpu_milli=cpu, core_milli=int(rng.choice([250, 500, 750])))
        else:
            pod = single_container_pod(f"f{n}", cpu_milli=cpu, gpus=1)
        scheduler.schedule(pod)
    return ledger


def test_cpu_bucket_counts_thresholds_and_weighted_frag_depends_only_on_it() -> None:
    ledger = busy_ledger()
    model = FragmentationModel(TYPICAL, ledger)
    assert model.cpu_bucket(np.array([-5, 0, 999, 1000, 2500, 8000, 90000])).tolist() == [0, 0, 0, 1, 2, 5, 5]
    rng = np.random.default_rng(5)
    cpu = rng.integers(-2000, 12000, 300)
    levels = np.array([1000, 2000, 4000, 6000, 8000])
    low = np.where(cpu < 1000, -2000, levels[np.maximum(np.searchsorted(levels, cpu, side="right") - 1, 0)])
    other = np.maximum(low, cpu - rng.integers(0, 900, 300))  # same bucket, another CPU left
    assert (model.cpu_bucket(other) == model.cpu_bucket(cpu)).all()
    free = rng.integers(0, 1001, (300, 4))
    models = np.zeros((300, 4), np.int64)
    assert model.weighted_frag(cpu, free, models).tolist() == model.weighted_frag(other, free, models).tolist()


def test_scores_through_a_shared_memo_equal_a_fresh_plugin_per_pod() -> None:
    ledger = busy_ledger()
    slots = np.flatnonzero(ledger.active).astype(np.int64)
    pods = [single_container_pod(f"p{cpu}-{core}", cpu_milli=cpu, core_milli=core)
            for core in (500, 250) for cpu in (0, 1500, 2000, 3500, 4000, 9000)]
    pods += [single_container_pod(f"w{cpu}", cpu_milli=cpu, gpus=1) for cpu in (1000, 7000, 8000)]
    pods += [single_container_pod(f"c{cpu}", cpu_milli=cpu) for cpu in (500, 2500)]
    for kind in (FgdScore, FgdResidueScore):
        shared = kind(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
        distinct = set()
        for pod in pods:
            fit = slots[ledger.cpu_free[slots] >= pod.cpu_milli]
            fresh = kind(NodeStateCache(FragmentationModel(TYPICAL, ledger)))
            state, alone = CycleState(), CycleState()
            scores = shared.score(pod, ledger, state, fit)
            assert scores.tolist() == fresh.score(pod, ledger, alone, fit).tolist()
            assert [shared._choice(state, int(s)) for s in fit] == [fresh._choice(alone, int(s)) for s in fit]
            distinct.add(tuple(scores.tolist()))
        assert len(distinct) > 3  # the pods are scored differently, so equal results are not trivial
