"""``dra-first-fit``: kube-scheduler's DRA placement as a replay baseline (``domain.scheduling.policies.kubedefault``).

Scores worked out by hand from kube-scheduler's formulas (LeastAllocated mean of CPU and memory, integer; plus
BalancedAllocation ``trunc((1 − |f_cpu − f_mem| / 2) · 100)``, the sum halved to the framework's 0..100): a node
at 50 % CPU and 50 % memory with the pod scores (50 + 100) // 2 = 75; one at 25 % CPU and 100 % memory
``((75 + 0) // 2 + trunc(62.5)) // 2`` = 49; a pod asking more
CPU than a node has scores 0 for CPU there. GPUs free on a node do not move its score. Devices: a share takes the
lowest-index GPU that fits even where another is a tighter fit; whole GPUs the first free ones (through the
registered policy and the scheduler)."""

from __future__ import annotations

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState, Scheduler
from domain.scheduling.policies.kubedefault import KubeDefaultScore
from domain.scheduling.registry import build_profile
from domain.units import GiB


def node(name: str, *, cpu: int = 32000, memory: int = 128 * GiB, gpus: int = 4) -> NodeInventory:
    devices = tuple(Gpu(i, GpuUuid(f"{name}-{i}"), "A100", 16 * GiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=memory, max_pods=110)


def cpu_pod(uid: str, on: str, cpu: int, memory: int) -> PodAllocation:
    return PodAllocation(uid, on, (), cpu_milli=cpu, memory_bytes=memory)


def share(uid: str, on: str, gpu: int, milli: int) -> PodAllocation:
    return PodAllocation(uid, on, (ContainerGrant("main", (GpuGrant(gpu, milli, milli * 16 * GiB // 1000),)),))


def test_scores_are_kube_schedulers_least_allocated_plus_balanced_allocation() -> None:
    ledger = ClusterLedger([node("even"), node("lopsided"), node("small", cpu=4000)])
    ledger.observe(cpu_pod("a", "even", 8000, 32 * GiB))
    ledger.observe(cpu_pod("b", "lopsided", 0, 96 * GiB))
    ledger.observe(share("c", "lopsided", 0, 900))  # GPU use does not move the score
    pod = single_container_pod("p", cpu_milli=8000, memory_bytes=32 * GiB, core_milli=300)
    slots = np.array([ledger.slot(n) for n in ("even", "lopsided", "small")], np.int64)
    got = [int(v) for v in KubeDefaultScore().score(pod, ledger, CycleState(), slots)]
    # small: CPU 8000 > 4000 → 0; memory (128-32)/128 → 75; least (0 + 75) // 2 = 37; f = (1.0, 0.25) → 62
    assert got == [150 // 2, 99 // 2, (37 + 62) // 2]


def test_a_share_takes_the_first_gpu_that_fits_and_whole_gpus_the_first_free() -> None:
    ledger = ClusterLedger([node("n")])
    ledger.observe(share("x", "n", 1, 700))  # GPU 1 would be the tighter fit for a 300 share
    profile = build_profile("dra-first-fit", ledger, rng=np.random.default_rng(0))
    placed = Scheduler(ledger, profile).schedule(single_container_pod("s", cpu_milli=1000, core_milli=300))
    assert placed.allocation is not None
    assert [g.gpu_index for c in placed.allocation.containers for g in c.grants] == [0]
    ledger.observe(placed.allocation)
    whole = Scheduler(ledger, profile).schedule(single_container_pod("w", cpu_milli=1000, gpus=2))
    assert whole.allocation is not None
    assert [g.gpu_index for c in whole.allocation.containers for g in c.grants] == [2, 3]



def test_fgd_node_first_fit_takes_fgds_node_and_the_first_gpu_that_fits_on_it() -> None:
    from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods

    typical = TypicalPods((PodClass(4000, 500, 1), PodClass(4000, 1000, 1)), (0.5, 0.5))
    pod = single_container_pod("s", cpu_milli=1000, core_milli=500)
    chosen = {}
    for name in ("fgd", "fgd-node-first-fit"):
        ledger = ClusterLedger([node("a"), node("b")])
        ledger.observe(share("x", "b", 2, 500))  # fgd closes GPU 2 of b: no half-used GPU is left
        placed = Scheduler(ledger, build_profile(name, ledger, rng=np.random.default_rng(0),
                                                 typical=typical)).schedule(pod)
        assert placed.allocation is not None
        chosen[name] = (placed.allocation.node, [g.gpu_index for c in placed.allocation.containers for g in c.grants])
    assert chosen == {"fgd": ("b", [2]), "fgd-node-first-fit": ("b", [0])}
