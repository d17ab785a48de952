"""Which GPUs of one node a pod gets by the node's topology: :func:`whole_gpus` for a pod with one whole-GPU
container, :func:`connected_grants` for the whole-GPU app containers of a pod with several GPU containers (rules:
:mod:`domain.scheduling.framework.topology`), and :func:`steer_share`, the GPU a share opens. Read by the planner of
:mod:`domain.scheduling.framework.planner`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from domain.allocation import ContainerGrant, GpuGrant
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.scheduling.framework.cycle import I64, BoolArray
from domain.topology import NodeTopology, Tier, best_connected, least_breaking, split_connected
from domain.units import MILLI_PER_GPU


def whole_gpus(pod: PodRequest, ledger: ClusterLedger, slot: int, fit: I64, count: int) -> I64 | None:
    """The ``count`` GPU indexes (ascending, int64) the pod gets on ``slot`` among ``fit`` (ascending indexes of
    free eligible GPUs), or None when none meets the pod's ``gpu_topology`` (module docstring)."""
    if len(fit) < count:
        return None
    topology = ledger.inventory(ledger.name(slot)).topology
    if topology is None:
        return None if pod.gpu_topology > Tier.SYSTEM else fit[:count]
    choice = best_connected(topology, fit.tolist(), count, minimum=pod.gpu_topology)
    return None if choice is None else np.asarray(choice.indexes, dtype=np.int64)


def connected_grants(
    app: Sequence[ContainerRequest], free: BoolArray, mem_cap: I64, topology: NodeTopology | None, minimum: Tier
) -> list[ContainerGrant | None] | None:
    """Per container of one pod's connected group (``app``, in order: its app GPU containers, or its one GPU
    container) on one node: the whole-GPU grant of a container asking for
    whole GPUs, chosen among ``free`` (bool ``[gpus]``: eligible GPUs with nothing used) by
    :func:`domain.topology.split_connected` at ``minimum`` (each GPU granted whole: 1000 milli-GPU and its
    ``mem_cap`` bytes), None for the others (planned per container). Where the node has no ``topology`` or the pod
    no whole-GPU app container, None for every container. None in all when ``minimum`` is above ``SYSTEM`` and
    cannot be met (no topology, no whole GPUs, or no set of that tier)."""
    counts = [c.gpus for c in app if c.kind is GpuKind.WHOLE]
    if topology is None or not counts:
        return None if minimum > Tier.SYSTEM else [None] * len(app)
    sets = split_connected(topology, np.flatnonzero(free).tolist(), counts, minimum=minimum)
    if sets is None:
        return None
    parts = iter(sets)
    return [ContainerGrant(c.name, tuple(GpuGrant(i, MILLI_PER_GPU, int(mem_cap[i])) for i in next(parts)),
                           init=c.init, whole=True) if c.kind is GpuKind.WHOLE else None for c in app]


def steer_share(topology: NodeTopology | None, untouched: BoolArray, alike: BoolArray, index: int) -> int:
    """The GPU a share that its chooser put on GPU ``index`` of one node takes: ``index`` itself, unless the node
    has a ``topology`` and ``index`` has nothing used (``untouched``, bool ``[gpus]``); then, among the untouched
    GPUs of ``alike`` (bool ``[gpus]``: GPUs the share fits that are interchangeable with ``index`` for the policy:
    same model and memory; ``index`` among them), the one whose use breaks the fewest wholly free NVLink islands,
    PCIe roots and NUMA nodes (:func:`domain.topology.least_breaking`). Untouched GPUs of one model and memory have
    equal free vectors, so a policy scoring GPUs by their free core and memory scores the node the same."""
    if topology is None or not untouched[index]:
        return index
    candidates = np.flatnonzero(alike & untouched)
    if len(candidates) < 2:
        return index
    return least_breaking(topology, np.flatnonzero(untouched).tolist(), candidates.tolist())
