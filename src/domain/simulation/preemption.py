"""Preemption in the trace replay: high-priority arrivals that fit nowhere evict low-priority pods.

A run with ``ReplayConfig.high_share`` > 0 marks each arrival high priority (:data:`HIGH`) with that probability,
drawn from a generator of its own (seeded ``[seed, 36]``), so the arrival stream, the node order and every other
draw are those of the run without priorities. A high-priority pod that fits nowhere runs the scheduler's victim
selection (:mod:`domain.scheduling.preemption.victims`, only pods of priority :data:`LOW` are victims) on every
node where only capacity refuses it and whose low-priority pods could free enough on one GPU (a vectorised
necessary condition that skips the others), takes the best node by kube-scheduler's order, releases the victims
from the ledger (in the replay nothing departs or retries, so an evicted pod is simply gone: counted, never
re-queued) and schedules the pod again with the policy. Nodes are visited by name and the visit stops at the first
node where one victim suffices: with every victim of priority LOW and no budgets, kube-scheduler's order reduces to
the victim count, then the node name, so that node is :func:`~domain.scheduling.preemption.victims.best_node`'s
answer too. Exact search up to :data:`EXACT_LIMIT` candidates per GPU
(then kube-scheduler's reprieve), lower than the scheduler's to keep replays fast.
"""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt

from domain.allocation import PodAllocation
from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.framework.planner import ledger_share_needs
from domain.scheduling.preemption.cluster import preemptable_nodes
from domain.scheduling.preemption.victims import Preemptor, RunningPod, Victims, best_node, select_victims

HIGH = 1000
"""Priority of a high-priority arrival."""
LOW = 0
"""Priority of every other arrival."""
EXACT_LIMIT = 8
"""Candidates per searched group beyond which the replay uses kube-scheduler's reprieve (255 subsets at most)."""


@attrs.define
class Preemptions:
    """The replay's preemption state: which placed pods are low priority (per-GPU usage kept for the necessary
    condition) and what was evicted. ``evicted``: (arrival index of the preemptor, evicted pod UID) in order."""

    ledger: ClusterLedger
    low_core: npt.NDArray[np.int64] = attrs.field(init=False)
    low_mem: npt.NDArray[np.int64] = attrs.field(init=False)
    low: dict[str, PodAllocation] = attrs.field(factory=dict)
    evicted: list[tuple[int, str]] = attrs.field(factory=list)
    evicted_milli: int = 0
    preemptors: int = 0

    def __attrs_post_init__(self) -> None:
        self.low_core = np.zeros_like(self.ledger.core_used)
        self.low_mem = np.zeros_like(self.ledger.mem_used)

    def placed(self, allocation: PodAllocation, priority: int) -> None:
        """A pod was placed; a low-priority one becomes a possible victim."""
        if priority != LOW:
            return
        self.low[allocation.pod_uid] = allocation
        self._count(allocation, 1)

    def _count(self, allocation: PodAllocation, sign: int) -> None:
        slot = self.ledger.slot(allocation.node)
        for index, (core, mem) in allocation.per_gpu_usage().items():
            self.low_core[slot, index] += sign * core
            self.low_mem[slot, index] += sign * mem

    def _hopeful(self, request: PodRequest, nodes: list[str]) -> list[str]:
        """The ``nodes`` where evicting every low-priority pod could free enough on one GPU (share) or leave enough
        GPUs untouched (whole); every node for other shapes."""
        shape = request.simple_shape
        ledger = self.ledger
        if shape is None or shape.kind is GpuKind.NONE:
            return nodes
        fits: npt.NDArray[np.bool_]
        if shape.kind is GpuKind.SHARE:
            core_need, mem_need = ledger_share_needs(ledger, shape)
            room = ((ledger.free_core + self.low_core >= core_need) & (ledger.free_mem + self.low_mem >= mem_need)
                    & ledger.gpu_ok)
            fits = np.count_nonzero(room, axis=1) > 0
        else:
            untouched = ((ledger.core_used == self.low_core) & (ledger.mem_used == self.low_mem) & ledger.gpu_ok
                         & (ledger.core_cap > 0))
            fits = np.count_nonzero(untouched, axis=1) >= shape.gpus
        return [node for node in nodes if fits[ledger.slot(node)]]

    def preempt(self, scheduler: Scheduler, request: PodRequest, number: int) -> PodAllocation | None:
        """Arrival ``number`` (high priority, ``request``) fits nowhere: evict the best victim set (module
        docstring) and schedule it again; the allocation, or None when no victim set makes it fit."""
        ledger = self.ledger
        preemptor = Preemptor(request, HIGH)
        outcomes = []
        for node in sorted(self._hopeful(request, preemptable_nodes(scheduler, request))):
            pods = [RunningPod(uid, LOW) for uid in ledger.pods_on(node) if uid in self.low]
            outcome = select_victims(ledger, node, preemptor, pods, exact_limit=EXACT_LIMIT)
            outcomes.append(outcome)
            if outcome.victims is not None and len(outcome.victims.pods) <= 1:
                break  # every victim has priority LOW and no budget: one victim on the first node by name is best
        chosen: Victims | None = best_node(outcomes)
        if chosen is None or not chosen.pods:
            return None
        for uid in chosen.uids:
            allocation = self.low.pop(uid)
            self._count(allocation, -1)
            ledger.release(uid)
            self.evicted.append((number, uid))
            self.evicted_milli += allocation.gpu_milli
        self.preemptors += 1
        result = scheduler.schedule(request)
        return result.allocation
