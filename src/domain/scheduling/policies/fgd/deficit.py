"""FGD-deficit — FGD-residue whose first key also counts the GPUs a placement leaves without their typical CPU.

**CPU deficit** of node ``n`` (CPU-milli): ``D(n) = max(0, ρ · freeGPU(n) − cpuLeft(n))``, where ``freeGPU`` is the
free milli of the node's schedulable GPUs and ``ρ`` the CPU the typical GPU demand asks per milli-GPU:
``ρ = Σ_t p_t c_t / Σ_t p_t u_t k_t`` over the GPU-using typical pods (FGD's typical pods, Weng et al., ATC '23;
CPU-only pods are left out since they ask no GPU). ``D(n) / ρ`` is the free GPU milli of ``n`` that the CPU left
there cannot back at the typical ratio: a CPU-heavy pod on a node with little CPU per GPU strands the GPUs
beside it, which FGD sees only once ``cpuLeft`` falls below some typical pod's whole CPU ask.

Decision rule: FGD-residue (:mod:`domain.scheduling.policies.fgd.residue`) with FGD's change replaced, in its first
key, by ``trunc(100 · σ((F(n) − F(n') − (D(n') − D(n)) / ρ) / 1000))``: the deficit change, in milli-GPU, is added to
FGD's fragmentation change before the sigmoid, so both are judged in one unit at FGD's scale (σ over 1000
milli). FGD-residue's residue score stays the second key, the run's node order the last; the GPU inside a node is
chosen by the same keys. No constant is fitted to a trace: ``ρ`` comes from the typical pods, the rest is
FGD's. A placement that creates no deficit anywhere scores exactly as under FGD-residue.

Cost per decision: one more ``(nodes × options)`` pass of a few vector operations inside FGD's memoised
evaluation (values depend only on the node state and the pod class, as FGD's do).
"""

from __future__ import annotations

import numpy as np

from domain.scheduling.policies.fgd.fragmentation import F64, I64, FragmentationModel, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.residue import SECONDARY_SPAN, FgdResidueScore, residue_vectors
from domain.scheduling.policies.fgd.score import sigmoid_score


def typical_cpu_per_gpu(model: FragmentationModel) -> float:
    """``ρ`` (module docstring), CPU-milli per milli-GPU, of the GPU-using typical pods of ``model``; 0.0 when
    there are none (then no deficit ever arises). Raises nothing."""
    gpu = ~model.cpu_only_t
    demand = float((model.p * model.u_t * model.k_t)[gpu].sum())
    return float((model.p * model.cpu_t)[gpu].sum()) / demand if demand > 0 else 0.0


def cpu_deficit(rho: float, cpu_left: I64, free: I64) -> F64:
    """``D = max(0, ρ · Σ_g free_g − cpuLeft)`` (CPU-milli, float64 ``(M,)``) for ``M`` node states:
    ``cpu_left`` (M,) CPU-milli, ``free`` (M, G) milli per GPU. Raises nothing."""
    return cpu_deficit_of_total(rho, cpu_left, free.sum(axis=1))


def cpu_deficit_of_total(rho: float, cpu_left: I64, total: I64) -> F64:
    """:func:`cpu_deficit` from the states' total free milli ``total`` (M,) instead of per-GPU free. Raises
    nothing."""
    result: F64 = np.maximum(rho * total - cpu_left, 0.0)
    return result


class FgdDeficitScore(FgdResidueScore):
    """FGD-deficit score plugin, tie refiner and GPU chooser (module docstring)."""

    name = "fgd-deficit-blend"

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self.rho = typical_cpu_per_gpu(cache.model)

    def _rate(self, slots: I64, rows: I64, cpu_left: I64, after: I64, models: I64) -> I64:
        """``first key · SPAN + residue score`` per option (see :meth:`FgdResidueScore._rate`); the first key is
        FGD's with the deficit change added (module docstring)."""
        model = self.cache.model
        ledger = self.ledger
        where = slots[rows]
        change = self.cache.weighted_f[self.cache.slot_state[where]] - model.weighted_frag(cpu_left, after, models)
        if self.rho > 0:
            before = cpu_deficit(self.rho, ledger.cpu_free[where], schedulable_free(ledger, where))
            change = change - (cpu_deficit(self.rho, cpu_left, after) - before) / self.rho
        residue = model.weighted(self._residue_now(slots)[rows] - residue_vectors(model, cpu_left, after, models))
        result: I64 = sigmoid_score(change) * SECONDARY_SPAN + sigmoid_score(residue)
        return result
