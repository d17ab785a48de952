"""FGD-deficit-scarce — FGD-deficit whose first key also charges GPU taken from models restricted pods need.

**Restricted claim** of GPU model ``m`` (dimensionless, 0..1): the share of ``m``'s GPUs that the model-restricted
typical pods want when the typical demand equals the cluster's GPU capacity, each restricted pod spreading over
its allowed models in proportion to their GPU counts:
``r_m = min(1, (C / Σ_t p_t u_t k_t) · Σ_{t restricted, m ∈ A_t} p_t u_t k_t / C(A_t))`` with ``C`` the cluster's
GPUs, ``C(A_t)`` the GPUs of the models ``t`` allows, sums over GPU-using typical pods (FGD's, Weng et al.,
ATC '23). A placement that takes ``Δ_g`` milli from GPU ``g`` costs ``Σ_g r_{m(g)} Δ_g`` milli-GPU: the
restricted demand it is expected to displace.

Decision rule: FGD-deficit (:mod:`domain.scheduling.policies.fgd.deficit`) with that cost subtracted, in milli-GPU,
inside the first key's sigmoid beside FGD's change and the deficit change. With no restricted typical pod every
``r_m`` is 0 and the policy scores exactly as FGD-deficit. ``r`` is recomputed when nodes join or leave
(``ledger.node_set_generation``), a new model appears or capacity changes, and memoised scores are then dropped.
No constant is fitted: ``r`` comes from the typical pods and the inventory; its "demand equals capacity" point is
x = 100 of the published allocation curve.
"""

from __future__ import annotations

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.policies.fgd.deficit import FgdDeficitScore, cpu_deficit
from domain.scheduling.policies.fgd.fragmentation import F64, I64, FragmentationModel, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.residue import SECONDARY_SPAN, residue_vectors
from domain.scheduling.policies.fgd.score import sigmoid_score


def restricted_claim(model: FragmentationModel, ledger: ClusterLedger) -> F64:
    """``r`` (module docstring) per ledger model id, float64 ``(model_count + 1,)``; the last entry (model id −1,
    a slot without a GPU) is 0. GPUs counted: schedulable-capacity GPUs of active nodes. All zeros when no typical
    pod uses a GPU or none is restricted. Raises nothing."""
    table = model.allowed_table()  # (U, model_count + 1); resolves every allowed model to an id first
    count = ledger.model_count
    claim: F64 = np.zeros(count + 1, np.float64)
    active = np.flatnonzero(ledger.active)
    ids = ledger.gpu_model[active].ravel()
    present = (ids >= 0) & (ledger.core_cap[active].ravel() > 0)
    gpus = np.bincount(ids[present], minlength=count + 1)[: count + 1].astype(np.float64)
    demand = model.p * model.u_t * model.k_t * ~model.cpu_only_t
    typical_demand = float(demand.sum())
    if typical_demand <= 0 or gpus.sum() <= 0:
        return claim
    restricted = np.array([bool(models) for models in model.allowed_lists], np.bool_)
    for t in np.flatnonzero((demand > 0) & restricted[model.group_t]).tolist():
        allowed = table[model.group_t[t]]
        allowed_gpus = float(gpus[allowed].sum())
        if allowed_gpus > 0:
            claim[allowed] += demand[t] / allowed_gpus
    claim = np.minimum(1.0, claim * float(gpus.sum()) / typical_demand)
    claim[count] = 0.0
    return claim


class FgdScarceScore(FgdDeficitScore):
    """FGD-deficit-scarce score plugin, tie refiner and GPU chooser (module docstring)."""

    name = "fgd-deficit-scarce"

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self._claim: F64 = np.zeros(0, np.float64)
        self._claim_key = (-1, -1, -1)

    def claim(self) -> F64:
        """:func:`restricted_claim` for the ledger now (memoised on its node-set generation, model count and capacity
        generation). When it changes, every memoised score is dropped: those values were computed with the old
        claim."""
        key = (self.ledger.node_set_generation, self.ledger.model_count, self.ledger.capacity_generation)
        if key != self._claim_key:
            claim = restricted_claim(self.cache.model, self.ledger)
            if not np.array_equal(claim, self._claim):
                self._forget()
            self._claim, self._claim_key = claim, key
        return self._claim

    def _forget(self) -> None:
        """Drop every memoised score (state memos and per-slot values)."""
        self._memo.clear()
        self._by_slot.clear()

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """FGD-deficit's score (0..99) with the claim term, after bringing the claim up to date."""
        self.claim()
        return super().score(pod, ledger, state, slots)

    def _rate(self, slots: I64, rows: I64, cpu_left: I64, after: I64, models: I64) -> I64:
        """``first key · SPAN + residue score`` per option (see :meth:`FgdResidueScore._rate`); the first key is
        FGD-deficit's with the restricted-claim cost subtracted (module docstring)."""
        model = self.cache.model
        ledger = self.ledger
        where = slots[rows]
        free = schedulable_free(ledger, where)
        change = self.cache.weighted_f[self.cache.slot_state[where]] - model.weighted_frag(cpu_left, after, models)
        if self.rho > 0:
            before = cpu_deficit(self.rho, ledger.cpu_free[where], free)
            change = change - (cpu_deficit(self.rho, cpu_left, after) - before) / self.rho
        change = change - ((free - after) * self.claim()[models]).sum(axis=1)
        residue = model.weighted(self._residue_now(slots)[rows] - residue_vectors(model, cpu_left, after, models))
        result: I64 = sigmoid_score(change) * SECONDARY_SPAN + sigmoid_score(residue)
        return result
