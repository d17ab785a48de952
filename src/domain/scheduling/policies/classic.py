"""Scheduling policies: named, pure node-scoring strategies plus their GPU chooser and tie rule.

The six policies of the published experiment follow docs/trace-replay.md §3.6 exactly (integer truncation,
fixed normalisation constants 128000 CPU-milli and 8000 GPU-milli, no normalize step except best-fit's
min-max), plus ``binpack`` and ``spread`` for production use. Notation: ``cpuLeft`` = free CPU-milli of the
node, ``gL`` = free milli-GPU of its schedulable GPUs, ``c`` = the pod's CPU-milli, ``G`` = its total GPU milli.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import I64, MAX_NODE_SCORE, CycleState
from domain.scheduling.framework.planner import ensure_gpu_fit
from domain.scheduling.policies.fgd.fragmentation import schedulable_free
from domain.units import MILLI_PER_GPU

MAX_SPEC_CPU = 128000
"""CPU-milli normaliser of best-fit and dot-product (the simulator's fixed "max spec", not node capacity)."""

MAX_SPEC_GPU = 8000
"""GPU-milli normaliser of best-fit, dot-product and GPU clustering (8 GPUs)."""


def _node_vectors(ledger: ClusterLedger, slots: I64) -> tuple[I64, I64]:
    return ledger.cpu_free[slots], ledger.sched_free_sum[slots]


class _NoNormalize:
    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """No NormalizeScore step."""
        return scores


class BestFitScore(_NoNormalize):
    """``trunc((1 − [0.5·(cpuLeft−c)/128000 + 0.5·(gL−G)/8000]) · 100)``, then min–max normalised."""

    name = "best-fit"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Raw best-fit scores (clipped to 0..100 for nodes larger than the max spec)."""
        cpu_left, gpu_left = _node_vectors(ledger, slots)
        cpu_term = 0.5 * (cpu_left - pod.cpu_milli).astype(np.float64) / MAX_SPEC_CPU
        gpu_term = 0.5 * (gpu_left - pod.effective_gpu_milli).astype(np.float64) / MAX_SPEC_GPU
        raw = ((1.0 - (cpu_term + gpu_term)) * MAX_NODE_SCORE).astype(np.int64)
        return np.clip(raw, 0, MAX_NODE_SCORE)

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """Min–max with integer division: ``(s − lo)·100 // (hi − lo)``; all 0 when ``hi = lo``."""
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.zeros_like(scores)
        return (scores - lo) * MAX_NODE_SCORE // (hi - lo)


class DotProductScore(_NoNormalize):
    """``trunc(100 · (1 − dot/2))`` with ``dot = (cpuLeft/128000)(c/128000) + (gL/8000)(G/8000)`` (as published)."""

    name = "dot-product"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Dot-product scores; the smaller the alignment, the higher the score."""
        cpu_left, gpu_left = _node_vectors(ledger, slots)
        dot = (cpu_left / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU) + (gpu_left / MAX_SPEC_GPU) * (
            pod.effective_gpu_milli / MAX_SPEC_GPU
        )
        return np.clip((MAX_NODE_SCORE * (1.0 - dot / 2.0)).astype(np.int64), 0, MAX_NODE_SCORE)


class GpuPackingScore(_NoNormalize):
    """GPU packing (§3.6): fill partly used GPUs > fresh GPUs on used nodes > idle nodes (smaller first)."""

    name = "gpu-packing"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Case 3 (node idle): ``max(33 − nfree, nfree)``; case 2: ``max(50 − fresh GPUs used, 33)``;
        case 1: ``max(100 − ⌊Σ⌊free·100/1000⌋/10⌋, 50)``; CPU-only pods: 0."""
        shape = pod.simple_shape
        if not pod.wants_gpu or shape is None:
            return np.zeros(len(slots), np.int64)
        ensure_gpu_fit(pod, ledger, state)
        assert state.gpu_fit is not None
        free = schedulable_free(ledger, slots)
        exists = np.arange(ledger.max_gpus)[None, :] < ledger.gpu_count[slots][:, None]
        fully_free = (free == MILLI_PER_GPU) & exists
        nfree = fully_free.sum(axis=1)
        idle = nfree == ledger.gpu_count[slots]
        case3 = np.maximum(33 - nfree, nfree)
        fit = state.gpu_fit[slots]
        if shape.kind is GpuKind.WHOLE:
            case2 = np.full(len(slots), max(50 - shape.gpus, 33), np.int64)
            return np.where(idle, case3, case2).astype(np.int64)
        smallest = np.where(fit, free, np.iinfo(np.int64).max).min(axis=1)
        case2 = np.full(len(slots), max(50 - 1, 33), np.int64)
        case1 = np.maximum(MAX_NODE_SCORE - (smallest * 100 // MILLI_PER_GPU) // 10, 50)
        return np.where(idle, case3, np.where(smallest == MILLI_PER_GPU, case2, case1)).astype(np.int64)


class GpuClusteringScore(_NoNormalize):
    """GPU clustering (§3.6): ``base + ⌊25·(8000 − gL)/8000⌋``; base 75 own tag only, 50 own among others,
    25 no GPU pods, 0 only other tags. Tags: ``share-gpu`` or ``<k>-gpu``; CPU-only pods score 0."""

    name = "gpu-clustering"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Clustering scores for ``slots``."""
        if not pod.wants_gpu:
            return np.zeros(len(slots), np.int64)
        whole = sum(c.gpus for c in pod.gpu_containers if not c.init and c.kind is GpuKind.WHOLE)
        tag = ledger.tag_id(f"{whole}-gpu" if whole else "share-gpu")
        counts = ledger.tag_counts[slots]
        own = counts[:, tag] > 0
        other = (counts.sum(axis=1) - counts[:, tag]) > 0
        base = np.where(own & ~other, 75, np.where(own, 50, np.where(other, 0, 25)))
        _, gpu_left = _node_vectors(ledger, slots)
        bonus = (25 * (MAX_SPEC_GPU - gpu_left)) // MAX_SPEC_GPU
        return np.clip(base + bonus, 0, MAX_NODE_SCORE).astype(np.int64)


class RandomScore(_NoNormalize):
    """Random-fit: one feasible node drawn uniformly scores 100, all others 0."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """100 for one uniformly drawn slot, 0 elsewhere."""
        scores = np.zeros(len(slots), np.int64)
        scores[int(self.rng.integers(len(slots)))] = MAX_NODE_SCORE
        return scores


class BinpackScore(_NoNormalize):
    """Node-level binpack: ``trunc(100 · used-after / capacity)`` of GPU milli (GPU pods) or CPU (CPU-only)."""

    name = "binpack"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Higher for fuller nodes."""
        if pod.wants_gpu:
            capacity = ledger.sched_cap[slots]
            used = capacity - ledger.sched_free_sum[slots] + pod.effective_gpu_milli
        else:
            capacity = ledger.cpu_cap[slots]
            used = ledger.cpu_used[slots] + pod.cpu_milli
        ratio = np.where(capacity > 0, used * MAX_NODE_SCORE // np.maximum(capacity, 1), 0)
        return np.clip(ratio, 0, MAX_NODE_SCORE).astype(np.int64)


class SpreadScore(BinpackScore):
    """Node-level spread: ``100 − binpack``."""

    name = "spread"

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Higher for emptier nodes."""
        return MAX_NODE_SCORE - super().score(pod, ledger, state, slots)
