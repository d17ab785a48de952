"""kube-scheduler's placement of a pod whose GPUs come from DRA claims: its default node scoring, then the first
devices that fit (the ``dra-first-fit`` baseline of the trace replay).

Source: kube-scheduler's default plugin set and weights (``pkg/scheduler/apis/config/v1/default_plugins.go``) and
the DRA structured-parameters allocator (``staging/src/k8s.io/dynamic-resource-allocation/structured``):

* **node score** = ``NodeResourcesFit`` (strategy ``LeastAllocated``, CPU and memory, weight 1 each) +
  ``NodeResourcesBalancedAllocation`` (CPU and memory), each plugin weight 1. ``DynamicResources`` has no score
  (device scoring, KEP-4970, is not implemented), so the GPUs a node has free do not move its score; the other
  default scorers (taints, affinities, topology spread, image locality) are equal on every node of the replay.

  - LeastAllocated: per resource ``(capacity − requested) · 100 // capacity`` (0 when the request exceeds the
    capacity), ``requested`` counting the pod; the node's score is their mean, integer-divided;
  - BalancedAllocation: with ``f`` = requested ÷ capacity per resource (capped at 1), ``trunc((1 − std(f)) · 100)``;
    for two resources ``std = |f_cpu − f_mem| / 2``;

* **devices**: the allocator walks the node's ResourceSlice devices in order and takes the first that satisfies
  the request — for a share the first GPU (lowest index) with enough free cores and memory, for ``k`` whole GPUs
  the first ``k`` free ones.

The framework takes one score of 0..100 per policy, so the sum (0..200) is halved, integer: two nodes whose sums
differ by one may tie here where kube-scheduler would not. Ties between equally scored nodes follow the run's tie
rule (kube-scheduler draws one at random among the best).
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import I64, MAX_NODE_SCORE, CycleState


def _least_allocated(capacity: I64, requested: I64) -> I64:
    room = np.where((capacity > 0) & (requested <= capacity),
                    (capacity - requested) * MAX_NODE_SCORE // np.maximum(capacity, 1), 0)
    return room.astype(np.int64)


def _fraction(capacity: I64, requested: I64) -> np.ndarray:
    return np.where(capacity > 0, np.minimum(requested / np.maximum(capacity, 1), 1.0), 1.0)


class KubeDefaultScore:
    """kube-scheduler's default node score for CPU and memory (module docstring), halved to 0..100."""

    name = "kube-default"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """(LeastAllocated + BalancedAllocation) // 2 of the node with the pod on it."""
        cpu_cap, mem_cap = ledger.cpu_cap[slots], ledger.hostmem_cap[slots]
        cpu_req = ledger.cpu_used[slots] + pod.cpu_milli
        mem_req = ledger.hostmem_used[slots] + pod.memory_bytes
        least = (_least_allocated(cpu_cap, cpu_req) + _least_allocated(mem_cap, mem_req)) // 2
        spread = np.abs(_fraction(cpu_cap, cpu_req) - _fraction(mem_cap, mem_req)) / 2
        balanced: I64 = ((1.0 - spread) * MAX_NODE_SCORE).astype(np.int64)
        total: I64 = (least + balanced) // 2
        return total

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """No NormalizeScore step (neither plugin has one)."""
        return scores


class FirstFitGpu:
    """The lowest GPU index that fits: the DRA allocator's device order."""

    name = "first-fit"

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """The first index of ``fit`` (ascending)."""
        return int(fit[0])
