"""Hand-built clusters for the FGD-family policy tests: a typical-pod mix, nodes of 1000-MiB GPUs, shares booked
straight into the ledger, and one placement through the production scheduler."""

from __future__ import annotations

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods
from domain.scheduling.registry import build_profile
from domain.units import GiB, MiB

TYPICAL = TypicalPods((PodClass(4000, 1000, 1), PodClass(2000, 500, 1), PodClass(2000, 200, 1), PodClass(4000, 0, 0)),
                      (0.4, 0.3, 0.2, 0.1))
"""Typical pods (cpu milli, GPU milli, GPUs) with their weights: a whole GPU, two shares, a CPU-only pod."""


def node(name: str, gpus: int, *, cpu: int = 96000, model: str = "G2") -> NodeInventory:
    """A node of ``gpus`` GPUs of ``model`` (1000 MiB each, uuids ``<name>-gpu<i>``), ``cpu`` milli, 512 GiB."""
    devices = tuple(Gpu(i, GpuUuid(f"{name}-gpu{i}"), model, 1000 * MiB) for i in range(gpus))
    return NodeInventory(NodeName(name), devices, cpu_milli=cpu, memory_bytes=512 * GiB, max_pods=100)


def share(ledger: ClusterLedger, uid: str, name: str, gpu: int, core: int, cpu: int = 1000) -> None:
    """Book pod ``uid`` on node ``name``: ``core`` milli of GPU ``gpu``, 1 MiB, ``cpu`` milli of CPU."""
    ledger.reserve(PodAllocation(uid, name, (ContainerGrant("main", (GpuGrant(gpu, core, MiB),)),), cpu_milli=cpu))


def gaps_cluster() -> ClusterLedger:
    """"a": GPU0 300 used (gap 700), GPU1 free; "b": one GPU 500 used (gap 500); "c": three GPUs 700 used (gap 300
    each) and no CPU left for a 2000-milli pod, though its gaps count: N(300) = 3, N(500) = 1, N(700) = 1; one whole
    GPU of 6 free."""
    ledger = ClusterLedger([node("a", 2), node("b", 1), node("c", 3, cpu=3000)])
    share(ledger, "a0", "a", 0, 300)
    share(ledger, "b0", "b", 0, 500)
    for gpu in range(3):
        share(ledger, f"c{gpu}", "c", gpu, 700)
    return ledger


def place(ledger: ClusterLedger, policy: str, pod: PodRequest, typical: TypicalPods = TYPICAL) -> tuple[str, list[int]]:
    """Schedule ``pod`` with ``policy`` (tie rule ``name``, generator seed 0) and keep it booked; return its node and
    GPU indices. Fails the test when the pod fits nowhere."""
    scheduler = Scheduler(ledger, build_profile(policy, ledger, rng=np.random.default_rng(0), typical=typical,
                                                tie_break="name"))
    result = scheduler.schedule(pod)
    assert result.allocation is not None
    return result.allocation.node, sorted(result.allocation.per_gpu_usage())


def place_and_release(ledger: ClusterLedger, policy: str, pod: PodRequest,
                      typical: TypicalPods = TYPICAL) -> tuple[str, list[int]]:
    """:func:`place`, then release the pod: the ledger is left as it was, so policies can be compared on it."""
    placed = place(ledger, policy, pod, typical)
    ledger.release(pod.uid)
    return placed
