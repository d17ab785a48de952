"""Filter plugins: node CPU/memory/pod-slot fit, GPU model and UUID selection, per-GPU fit.

Per-GPU fit (``GpuFit``): a share container fits GPU ``j`` iff ``j`` is eligible and
``core_free[j] ≥ core_need[j]`` and ``mem_free[j] ≥ mem_need[j]`` (needs resolved by the default rule of
:mod:`domain.request`); a pod asking for ``k`` whole GPUs needs ``k`` eligible GPUs with nothing used
(core and memory), since a whole grant takes all of a GPU (failure case B11). Multi-container pods are
checked exactly by planning them on each node (a required GPU topology is ``GpuTopology``'s to check).
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState
from domain.scheduling.framework.planner import (
    any_per_row,
    eligible_nodes,
    gpu_fit_mask,
    plan_composite,
    whole_fit_nodes,
)
from domain.units import format_bytes


class NodeResourcesFit:
    """Kubernetes' NodeResourcesFit for CPU (milli), host memory (bytes) and pod slots."""

    name = "NodeResourcesFit"
    reason = "insufficient cpu, memory or pod slots"

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """Nodes whose allocatable minus requested covers the pod's effective CPU and memory requests."""
        passed: BoolArray = (
            candidates
            & (ledger.cpu_free >= pod.cpu_milli)
            & (ledger.hostmem_free >= pod.memory_bytes)
            & (ledger.pods_free >= 1)
        )
        return passed


class _GpuPodFilter:
    """A filter of GPU pods: CPU-only pods pass unchanged, GPU pods are judged by :meth:`gpu_filter`."""

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` as they are for a CPU-only pod, else :meth:`gpu_filter`'s subset of them."""
        if not pod.wants_gpu:
            return candidates
        return self.gpu_filter(pod, ledger, state, candidates)

    def gpu_filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """The subset of ``candidates`` that passes, for a pod that wants a GPU."""
        raise NotImplementedError


class GpuModelMatch(_GpuPodFilter):
    """Rejects nodes with no GPU of an allowed model or UUID (GPU pods only)."""

    name = "GpuModelMatch"
    reason = "no schedulable GPU of an allowed model or UUID"

    def gpu_filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """Candidates having at least one eligible GPU."""
        return candidates & eligible_nodes(pod, ledger, state)


class GpuFit(_GpuPodFilter):
    """Per-GPU fit (see module docstring). Writes ``state.gpu_fit``, ``state.core_need``, ``state.mem_need``."""

    name = "GpuFit"
    reason = "no GPU with enough free core and memory"

    def gpu_filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """Candidates where the pod's GPU containers fit; puts a specific reason in ``state.reasons``."""
        shape = pod.simple_shape
        if shape is None:
            return self._composite(pod, ledger, state, candidates)
        if shape.kind is GpuKind.WHOLE:
            free = gpu_fit_mask(pod, ledger, state, shape, rows=candidates)
            state.gpu_fit = free
            state.reasons[self.name] = f"fewer than gpus={shape.gpus} completely free GPUs"
            enough: BoolArray = candidates & whole_fit_nodes(pod, ledger, free, shape.gpus)
            return enough
        fit = gpu_fit_mask(pod, ledger, state, shape, rows=candidates)
        state.gpu_fit = fit
        if shape.memory_bytes is not None:
            largest = ledger.largest_memory()
            if shape.memory_bytes > largest:
                state.reasons[self.name] = (
                    f"memory_bytes={format_bytes(shape.memory_bytes)} exceeds the largest GPU ({format_bytes(largest)})"
                )
        passed: BoolArray = candidates & any_per_row(fit)
        return passed

    def _composite(
        self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray
    ) -> BoolArray:
        passed = candidates.copy()
        for slot in np.flatnonzero(candidates):
            passed[slot] = plan_composite(pod, ledger, state, int(slot), required=False) is not None
        state.reasons[self.name] = "the pod's containers do not all fit the node's GPUs"
        return passed
