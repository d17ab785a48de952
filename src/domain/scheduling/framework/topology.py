"""Topology-aware whole-GPU placement: which of a node's free GPUs a multi-GPU pod gets, and the filter of pods
that require a connected set.

* :func:`whole_gpus`: the GPUs a pod asking for ``k`` whole GPUs gets on a node among those that fit (ascending
  indexes). Where the node's inventory carries a topology (device plugin on a Runtime ≥ 1.2.0), the best-connected
  set of :func:`domain.topology.best_connected` (NVLink before one PCIe root before one NUMA node; whole islands kept
  free for larger pods); where it does not, the first ``k`` by index, as before (the published simulator's rule).
* :class:`GpuTopologyTies`: among the nodes tied on the best total score, a pod asking for 2 or more whole GPUs
  prefers the nodes where its best-connected set has the best tier, then breaks the fewest wholly free NVLink
  islands, PCIe roots and NUMA nodes (a zero-weight score plugin that is a ``TieRefiner``: totals, and so every
  policy's ranking, are unchanged; only ties are settled, before the profile's tie rule). Nodes without topology
  rank with the lowest tier, so where no node reports one nothing changes.
* :class:`GpuTopologyFit`: a pod whose ``gpu_topology`` (the pod annotation ``pod_gpu_topology``) is above
  ``SYSTEM`` passes only nodes whose free eligible GPUs hold a set of at least that tier
  (:func:`domain.topology.can_connect`, exact); nodes without a reported topology fail it, with that reason.

Only pods with one GPU container asking for whole GPUs are placed by topology; pods with several GPU containers keep
the greedy per-container plan of :mod:`domain.scheduling.framework.planner` (and a topology requirement fails them on
every node, since no single set is planned for them).
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import I64, BoolArray, CycleState
from domain.topology import Tier, best_connected, can_connect


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


class GpuTopologyFit:
    """Rejects nodes where a pod requiring a connected set of whole GPUs cannot get one (module docstring); every
    other pod passes unchanged. Reads ``state.gpu_fit`` (written by ``GpuFit``, which runs first)."""

    name = "GpuTopology"
    reason = "no connected set of free GPUs as the pod's GPU topology annotation requires"

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` less the nodes that cannot meet the pod's requirement."""
        tier = pod.gpu_topology
        shape = pod.simple_shape if pod.wants_gpu else None
        if tier is Tier.SYSTEM or not pod.wants_gpu:
            return candidates
        if shape is None or shape.kind is not GpuKind.WHOLE or state.gpu_fit is None:
            state.reasons[self.name] = (f"GPU topology {tier.label} is required, which only a pod with one container "
                                        "asking for whole GPUs can get")
            return np.zeros_like(candidates)
        passed = candidates.copy()
        unknown = 0
        for slot in np.flatnonzero(candidates):
            topology = ledger.inventory(ledger.name(int(slot))).topology
            if topology is None:
                unknown += 1
                passed[slot] = False
                continue
            free = np.flatnonzero(state.gpu_fit[slot]).tolist()
            passed[slot] = can_connect(topology, free, shape.gpus, tier)
        state.reasons[self.name] = (
            f"no {shape.gpus} free GPUs connected by {tier.label} or better (GPU topology required by the pod)"
            + (f"; {unknown} of these nodes report no GPU topology (node Runtime before 1.2.0, or the backend does "
               "not know it)" if unknown else "")
        )
        return passed


class GpuTopologyTies:
    """The zero-weight tie refiner of multi-GPU whole pods (module docstring). Its scores are all 0."""

    name = "GpuTopologyTies"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """0 for every slot (the plugin only refines ties)."""
        return np.zeros(len(slots), np.int64)

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """``scores`` unchanged."""
        return scores

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Per tied slot: ``1000·tier − 100·broken islands − 10·broken PCIe roots − broken NUMA nodes`` of the
        pod's best-connected set there (higher is better); 0 for every slot when the pod is not a one-container pod
        of 2 or more whole GPUs, and for slots without topology or set."""
        keys = np.zeros(len(tied), np.int64)
        shape = pod.simple_shape if pod.wants_gpu else None
        if shape is None or shape.kind is not GpuKind.WHOLE or shape.gpus < 2 or state.gpu_fit is None:
            return keys
        memo: dict[tuple[object, tuple[int, ...]], int] = {}
        for position, slot in enumerate(tied.tolist()):
            topology = ledger.inventory(ledger.name(slot)).topology
            if topology is None:
                continue
            free = tuple(np.flatnonzero(state.gpu_fit[slot]).tolist())
            key = memo.get((topology, free))
            if key is None:
                choice = best_connected(topology, free, shape.gpus, minimum=pod.gpu_topology)
                islands, roots, numa = (0, 0, 0) if choice is None else choice.broken
                key = 0 if choice is None else 1000 * int(choice.tier) - 100 * islands - 10 * roots - numa
                memo[(topology, free)] = key
            keys[position] = key
        return keys
