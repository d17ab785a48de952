"""FGD-plus — FGD-deficit-scarce, with shares placed by cluster-wide gap balance.

FGD (Weng et al., ATC '23) judges a share by the fragmentation of the one node it lands on, truncated to an integer
score; which of many similar GPUs a share fills is then settled by ties. Arrivals beyond capacity leave every GPU
with some idle remainder, and which remainders the cluster ends with decides its allocation.

Decision rules (ties of each key go to the next; the profile's tie rule settles what is left):

* **Share** (one container asking part of one GPU): on each feasible node, the GPU with the best
  :mod:`~domain.scheduling.policies.fgd.gapbalance` key (closing a GPU first, then the smaller change of the sum of
  squares of the cluster's gap counts, then best fit; lowest index on ties); across nodes, that key, then
  FGD-deficit-scarce's value of placing the share there (its first key, then its residue score,
  :mod:`~domain.scheduling.policies.fgd.scarce`).
* **Everything else** (whole GPUs, CPU only, several containers): exactly as ``fgd-deficit-scarce``.

For a share the node score (:meth:`FgdPlusScore.score`) is 0 on every node: the ranking is the exact integer key
returned by :meth:`FgdPlusScore.refine`, which the scheduler applies before its tie rule. The gap key depends on
the whole cluster, so it is not memoised per node state: each share decision costs one pass over the ledger's GPUs
(the histogram) and one over the feasible nodes' GPUs, plus FGD-deficit-scarce's evaluation of the best-keyed
options, memoised per (pod class, node state, GPU).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.framework.planner import ensure_gpu_fit
from domain.scheduling.policies.fgd.fragmentation import I64
from domain.scheduling.policies.fgd.gapbalance import gap_histogram, option_keys
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.scarce import FgdScarceScore
from domain.scheduling.policies.fgd.statememo import StateMemo

_GAP = "fgd-plus.gap"


class FgdPlusScore(FgdScarceScore):
    """FGD-plus score plugin, tie refiner and GPU chooser (module docstring)."""

    name = "fgd-plus"

    def __init__(self, cache: NodeStateCache) -> None:
        super().__init__(cache)
        self._option_memo: dict[tuple[int, int, int, int], StateMemo] = {}

    def _forget(self) -> None:
        """Drop every memoised score, the option values included (see :meth:`FgdScarceScore.claim`)."""
        super()._forget()
        self._option_memo.clear()

    @staticmethod
    def _balances(pod: PodRequest) -> bool:
        """Whether ``pod`` is placed by gap balance: one container asking a share of one GPU."""
        shape = pod.simple_shape
        return pod.wants_gpu and shape is not None and shape.kind is GpuKind.SHARE

    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """Shares: 0 per slot, after keying every GPU option of ``slots`` (kept in ``state`` for :meth:`refine` and
        the GPU choice); other pods: FGD-deficit-scarce's score (0..99)."""
        if not self._balances(pod):
            return super().score(pod, ledger, state, slots)
        self.cache.refresh()
        ensure_gpu_fit(pod, ledger, state)
        assert state.gpu_fit is not None
        assert state.core_need is not None
        keys = option_keys(np.take(ledger.sched_free, slots, axis=0), np.take(ledger.core_cap, slots, axis=0),
                           np.take(state.core_need, slots, axis=0), np.take(state.gpu_fit, slots, axis=0),
                           gap_histogram(ledger))
        choice = np.argmax(keys, axis=1).astype(np.int64)
        best = keys[np.arange(len(slots)), choice]
        state.data[_GAP] = (slots, best, choice)
        self._remember_choice(state, slots, choice)
        result: I64 = np.zeros(len(slots), np.int64)
        return result

    def refine(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, tied: I64) -> I64:
        """Second key (higher is better, int64) for ``tied`` slots. Shares: 0 on slots whose best gap key is below
        the best among ``tied``, else 1 + the FGD-deficit-scarce value (first key · 128 + residue score) of placing
        the share on the chosen GPU there. Other pods: FGD-deficit-scarce's residue score (0..99)."""
        if not self._balances(pod):
            return super().refine(pod, ledger, state, tied)
        entry = state.data.get(_GAP)
        if not isinstance(entry, tuple) or not np.isin(tied, entry[0]).all():
            self.score(pod, ledger, state, tied)
            entry = state.data[_GAP]
        slots, best, choice = cast(tuple[I64, I64, I64], entry)
        where = np.searchsorted(slots, tied)
        keys = best[where]
        top = np.flatnonzero(keys == keys.max())
        result: I64 = np.zeros(len(tied), np.int64)
        assert state.core_need is not None
        result[top] = self._option_values(pod, state.core_need, tied[top], choice[where[top]]) + 1
        return result

    def _option_values(self, pod: PodRequest, need: I64, chosen: I64, gpu: I64) -> I64:
        """FGD-deficit-scarce's value (≥ 0) of placing ``pod`` on GPU ``gpu[i]`` of slot ``chosen[i]`` (``need``: the
        cycle's per-GPU milli, ledger rows × GPUs). Memoised per pod class of a share with a fixed milli and per
        (node state, GPU): the value depends on nothing else but the restricted claim, whose change empties the
        memo. Raises nothing."""
        self.claim()  # drops the memo if the claim changed
        class_key = self._memo_key(pod)
        if class_key is None:  # the milli depends on each GPU's memory: evaluate directly
            return self._evaluate_options(pod, need, chosen, gpu)
        memo = self._option_memo.setdefault(class_key, StateMemo())
        packed = (self.cache.slot_state[chosen] << 7) | gpu  # GPU indexes < MAX_GPUS_PER_NODE = 64 < 2^7
        values = memo.get_many(packed)
        missing = np.flatnonzero(values < 0)
        if len(missing):
            unique, first, inverse = np.unique(packed[missing], return_index=True, return_inverse=True)
            fresh = self._evaluate_options(pod, need, chosen[missing[first]], gpu[missing[first]])
            values[missing] = fresh[inverse.reshape(-1)]
            memo.update(unique.tolist(), fresh.tolist())
        return values

    def _evaluate_options(self, pod: PodRequest, need: I64, slots: I64, gpu: I64) -> I64:
        """:meth:`_option_values` without the memo."""
        ledger = self.ledger
        after = np.take(ledger.sched_free, slots, axis=0)
        rows = np.arange(len(slots), dtype=np.int64)
        after[rows, gpu] = np.maximum(after[rows, gpu] - need[slots, gpu], 0)
        return self._rate(slots, rows, ledger.cpu_free[slots] - pod.cpu_milli, after,
                          np.take(ledger.gpu_model, slots, axis=0))
