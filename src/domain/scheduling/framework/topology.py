"""Topology-aware placement: which of a node's free GPUs a pod gets, the filter of pods that require a connected
set, and the tie refiner between nodes.

* :func:`~domain.scheduling.framework.topology_sets.whole_gpus`: the GPUs a pod asking for ``k`` whole GPUs gets
  on a node among those that fit (ascending indexes). Where the node's inventory carries a topology (device plugin
  on a Runtime ≥ 1.2.0), the best-connected set of :func:`domain.topology.best_connected` (NVLink before one PCIe
  root before one NUMA node; whole islands kept free for larger pods); where it does not, the first ``k`` by index
  (the published simulator's rule).
* Pods with several GPU containers: :func:`~domain.scheduling.framework.topology_sets.connected_grants` gives their
  whole-GPU app containers one best-connected set together (:func:`domain.topology.split_connected`; a requirement
  applies to that set), each container the best-connected part of it, before their shares are planned (after
  them where the set would leave a share no GPU).
* Shares: where a share's GPU rule opens an untouched GPU, it takes the interchangeable untouched GPU that breaks
  the fewest wholly free islands (:func:`~domain.scheduling.framework.topology_sets.steer_share`).
* :class:`GpuTopologyTies`: among the nodes tied on the best total score, a pod asking for 2 or more whole GPUs (in
  all its containers) prefers the nodes where its best-connected set has the best tier, then breaks the fewest
  wholly free NVLink islands, PCIe roots and NUMA nodes (a zero-weight score plugin that is a ``TieRefiner``:
  totals, and so every policy's ranking, are unchanged; only ties are settled, before the profile's tie rule).
  Nodes without topology rank with the lowest tier, so where no node reports one nothing changes.
* :class:`GpuTopologyFit`: a pod whose ``gpu_topology`` (the pod annotation ``pod_gpu_topology``) is above
  ``SYSTEM`` passes only nodes whose free eligible GPUs hold a set of at least that tier for all its whole GPUs
  (:func:`domain.topology.can_connect`, exact where :func:`domain.topology.best_connected` ranks every set; a pod
  with several GPU containers is also planned with the requirement, so its shares must fit beside such a set);
  nodes without a reported topology fail it, with that reason. A pod without whole GPUs cannot meet a requirement
  and fails it on every node.

* :class:`GpuTopologyFirst` (optional, ``topology_first`` of the profile): a pod asking for 2 or more whole GPUs
  keeps only the candidates where its best-connected set has the best tier any candidate offers, before the
  policy scores them: connection first, packing second. It never removes the last candidates (nodes without a
  topology rank lowest, so where none reports one nothing changes).

The plugins evaluate each distinct (topology, free GPUs) once per cycle (:class:`TopologyClasses` numbers the
distinct topologies of the ledger's nodes), so thousands of identical nodes cost one evaluation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import I64, BoolArray, CycleState
from domain.scheduling.framework.planner import eligible_gpus, plan_composite
from domain.topology import NodeTopology, Tier, best_connected, can_connect


class TopologyClasses:
    """Numbers the distinct node topologies: class 0 is "no topology", equal topologies share a class. The class of
    every ledger row is kept per capacity generation (the ledger empties that memo whenever a node's inventory is
    set or removed), so a cycle reads it as one array."""

    def __init__(self) -> None:
        self._ids: dict[NodeTopology, int] = {}
        self._topologies: list[NodeTopology | None] = [None]

    def topology(self, number: int) -> NodeTopology | None:
        """The topology of class ``number``."""
        return self._topologies[number]

    def of(self, ledger: ClusterLedger, slots: I64) -> I64:
        """Class per slot of ``slots`` (int64, same order)."""
        memo = ledger.capacity_memo()
        per_row = memo.get(("topology_classes", self))  # the object, not its id: ids are reused
        if not isinstance(per_row, np.ndarray) or len(per_row) != ledger.rows:
            per_row = np.zeros(ledger.rows, np.int64)
            for name in ledger.node_names():
                per_row[ledger.slot(name)] = self._class(ledger.inventory(name).topology)
            per_row.flags.writeable = False
            memo[("topology_classes", self)] = per_row
        out: I64 = per_row[slots]
        return out

    def _class(self, topology: NodeTopology | None) -> int:
        if topology is None:
            return 0
        number = self._ids.get(topology)
        if number is None:
            number = self._ids[topology] = len(self._topologies)
            self._topologies.append(topology)
        return number


_PACKED_WIDTH = 48
"""GPU columns up to which a row's (class, free GPUs) packs into one int64 (class in the bits above)."""


def _per_group(classes: TopologyClasses, ledger: ClusterLedger, slots: I64, fit: BoolArray,
               value: Callable[[NodeTopology | None, list[int]], int]) -> I64:
    """``value(topology, free GPU indexes)`` for each of ``slots``, computed once per distinct (class, free GPUs);
    one call in all when no slot has a topology."""
    numbers = classes.of(ledger, slots)
    if not numbers.any():
        return np.full(len(slots), value(None, []), np.int64)
    rows = fit[slots]
    width = rows.shape[1]
    if width <= _PACKED_WIDTH and int(numbers.max()) < 1 << (62 - _PACKED_WIDTH):
        bits = rows.astype(np.int64) @ (np.int64(1) << np.arange(width, dtype=np.int64))
        unique, inverse = np.unique((numbers << _PACKED_WIDTH) | bits, return_inverse=True)
        groups = [(key >> _PACKED_WIDTH, [i for i in range(width) if key >> i & 1]) for key in unique.tolist()]
    else:
        table, inverse = np.unique(np.concatenate([numbers[:, None], rows.astype(np.int64)], axis=1), axis=0,
                                   return_inverse=True)
        groups = [(row[0], [i for i in range(width) if row[1 + i]]) for row in table.tolist()]
    results = np.array([value(classes.topology(number), free) for number, free in groups], dtype=np.int64)
    out: I64 = results[inverse.reshape(-1)]
    return out


def whole_gpu_total(pod: PodRequest) -> int:
    """Whole GPUs the pod's connected set takes (:func:`~.topology_sets.connected_grants`): its one GPU container's
    count when that asks for whole GPUs, else the sum over its whole-GPU app containers; 0 for other pods."""
    if not pod.wants_gpu:
        return 0
    shape = pod.simple_shape
    if shape is not None:
        return shape.gpus if shape.kind is GpuKind.WHOLE else 0
    return sum(c.gpus for c in pod.gpu_containers if not c.init and c.kind is GpuKind.WHOLE)


def _free_whole(pod: PodRequest, ledger: ClusterLedger, state: CycleState) -> BoolArray | None:
    """The GPUs a whole-GPU set may take (bool ``[rows, max_gpus]``): ``state.gpu_fit`` of a one-container pod
    (None before ``GpuFit``), the eligible GPUs with nothing used for a pod with several GPU containers."""
    if pod.simple_shape is not None:
        return state.gpu_fit
    free: BoolArray = eligible_gpus(pod, ledger, state) & ledger.free_whole
    return free


class GpuTopologyFit:
    """Rejects nodes where a pod requiring a connected set of whole GPUs cannot get one (module docstring); every
    other pod passes unchanged. Reads ``state.gpu_fit`` (written by ``GpuFit``, which runs first)."""

    name = "GpuTopology"
    reason = "no connected set of free GPUs as the pod's GPU topology annotation requires"

    def __init__(self, classes: TopologyClasses | None = None) -> None:
        self.classes = classes or TopologyClasses()

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` less the nodes that cannot meet the pod's requirement."""
        tier = pod.gpu_topology
        if tier is Tier.SYSTEM or not pod.wants_gpu:
            return candidates
        count = whole_gpu_total(pod)
        fit = _free_whole(pod, ledger, state)
        if not count or fit is None:
            state.reasons[self.name] = (f"GPU topology {tier.label} is required, which only a pod asking for whole "
                                        "GPUs can get")
            return np.zeros_like(candidates)
        slots = np.flatnonzero(candidates).astype(np.int64)
        passed = np.zeros_like(candidates)
        if len(slots):
            ok = _per_group(self.classes, ledger, slots, fit,
                            lambda topology, free: -1 if topology is None else int(
                                can_connect(topology, free, count, tier)))
            if pod.simple_shape is None:  # its shares must fit beside a set of that tier too: plan it
                ok[ok == 1] = [plan_composite(pod, ledger, state, int(s)) is not None for s in slots[ok == 1]]
            passed[slots] = ok == 1
            unknown = int(np.count_nonzero(ok == -1))
        else:
            unknown = 0
        state.reasons[self.name] = (
            f"no {count} free GPUs connected by {tier.label} or better (GPU topology required by the pod)"
            + (f"; {unknown} of these nodes report no GPU topology (node Runtime before 1.2.0, or the backend does "
               "not know it)" if unknown else "")
        )
        return passed


class GpuTopologyFirst:
    """Keeps the candidates where a pod of 2 or more whole GPUs gets the best tier offered (module docstring); every
    other pod passes unchanged. Reads what ``GpuFit`` wrote (it runs first)."""

    name = "GpuTopologyFirst"
    reason = "a better-connected set of free GPUs is offered by other nodes (--gpu-topology-first)"

    def __init__(self, classes: TopologyClasses | None = None) -> None:
        self.classes = classes or TopologyClasses()

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """The candidates whose best-connected set for the pod has the best tier among them (all when fewer than 2
        whole GPUs are asked, or no candidate reports a topology)."""
        count = whole_gpu_total(pod)
        fit = _free_whole(pod, ledger, state)
        slots = np.flatnonzero(candidates).astype(np.int64)
        if count < 2 or fit is None or len(slots) < 2:
            return candidates

        def tier(topology: NodeTopology | None, free: list[int]) -> int:
            choice = None if topology is None else best_connected(topology, free, count, minimum=pod.gpu_topology)
            return -1 if choice is None else int(choice.tier)

        tiers = _per_group(self.classes, ledger, slots, fit, tier)
        best = int(tiers.max())
        if best < 0:
            return candidates
        kept = np.zeros_like(candidates)
        kept[slots[tiers == best]] = True
        return kept


class GpuTopologyTies:
    """The zero-weight tie refiner of multi-GPU whole pods (module docstring). Its scores are all 0."""

    name = "GpuTopologyTies"

    def __init__(self, classes: TopologyClasses | None = None) -> None:
        self.classes = classes or TopologyClasses()

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """0 for every slot (the plugin only refines ties)."""
        return np.zeros(len(slots), np.int64)

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """``scores`` unchanged."""
        return scores

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Per tied slot: ``1000·tier − 100·broken islands − 10·broken PCIe roots − broken NUMA nodes`` of the
        pod's best-connected set there (higher is better); 0 for every slot when the pod asks for fewer than 2
        whole GPUs (:func:`whole_gpu_total`), and for slots without topology or set."""
        count = whole_gpu_total(pod)
        fit = _free_whole(pod, ledger, state)
        if count < 2 or fit is None:
            return np.zeros(len(tied), np.int64)

        def key(topology: NodeTopology | None, free: list[int]) -> int:
            choice = None if topology is None else best_connected(topology, free, count, minimum=pod.gpu_topology)
            if choice is None:
                return 0
            islands, roots, numa = choice.broken
            return 1000 * int(choice.tier) - 100 * islands - 10 * roots - numa

        return _per_group(self.classes, ledger, tied, fit, key)
