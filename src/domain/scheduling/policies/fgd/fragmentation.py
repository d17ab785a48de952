"""GPU fragmentation against a typical-pod distribution (FGD, Weng et al., USENIX ATC '23, §3-§4).

Typical pods (§3.1 of ``docs/trace-replay.md``): the workload's pods grouped by
``(cpu_milli, per-GPU milli, GPU count, model allow-list)``; keys sorted by count descending, ties by key
descending; the shortest prefix covering ≥ 95 % of pods is kept and renormalised to frequencies ``p_t``.

Fragment of node ``n`` for typical pod ``t`` (``f_t(n)``, milli-GPU, exact integers):

* ``t`` is CPU-only, or no GPU of ``n`` is of a model ``t`` allows, or fewer than ``k_t`` allowed GPUs have
  ``free ≥ u_t``, or ``cpuLeft < c_t``: every free milli of ``n`` (categories xl/xr/no_access/q1/q2/q4);
* otherwise (q3, ``t`` fits): the free milli of the GPUs that cannot host one of ``t``'s GPUs.

``F(n) = Σ_t p_t f_t(n)``; cluster fragmentation is ``Σ_n F(n)`` and the frag ratio ``100 × frag / idle``.
GPUs that are unhealthy or in MIG mode count as 0 free milli here: they serve no time-sharing pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs
import numpy as np
import numpy.typing as npt

from domain.errors import InvalidRequestError
from domain.ledger import ClusterLedger
from domain.units import MILLI_PER_GPU

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_TABLE_CELLS = 2**19
"""Up to this many ``states × GPUs × heads`` cells (4 MiB of int64), :meth:`FragmentationModel.weighted_frag` reads
usable GPUs per head from a per-milli table (one gather of that many integers); larger batches use ``_usable``."""
_NO_CPU_LIMIT = 2**50
"""CPU-milli added to the CPU left of typical pods that ask no CPU, so their CPU copies exceed any GPU copies."""
_DIRECT_STATES = 48
"""Up to this many states, :meth:`FragmentationModel._usable` compares every GPU with every threshold directly
(fewer array operations); above it the threshold buckets of ``_usable_any_model`` cost less. Same integers."""


@attrs.frozen(order=True)
class PodClass:
    """Key of a typical pod: CPU (milli-cores), per-GPU milli, GPU count, model allow-list (``|``-joined)."""

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    models: str = ""

    @property
    def model_list(self) -> tuple[str, ...]:
        """The allow-list as a tuple (empty = any model)."""
        return tuple(m for m in self.models.split("|") if m)


@attrs.frozen
class TypicalPods:
    """The typical-pod distribution: ``classes[i]`` with probability ``probabilities[i]`` (sums to 1)."""

    classes: tuple[PodClass, ...]
    probabilities: tuple[float, ...]
    covered_pods: int = 0
    total_pods: int = 0

    @classmethod
    def from_workload(cls, pods: Iterable[PodClass], *, coverage: float = 0.95) -> TypicalPods:
        """Compute the distribution from a workload's pods (all of them, CPU-only included).

        Raises :class:`InvalidRequestError` for an empty workload or a coverage outside (0, 1].
        """
        if not 0 < coverage <= 1:
            raise InvalidRequestError("coverage", coverage, "must be in (0, 1]")
        counts = Counter(pods)
        total = sum(counts.values())
        if total == 0:
            raise InvalidRequestError("workload", 0, "needs at least one pod to derive typical pods")
        ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
        kept: list[tuple[PodClass, int]] = []
        cumulative = 0
        for key, count in ranked:
            kept.append((key, count))
            cumulative += count
            if cumulative >= coverage * total:
                break
        return cls(
            classes=tuple(k for k, _ in kept),
            probabilities=tuple(c / cumulative for _, c in kept),
            covered_pods=cumulative,
            total_pods=total,
        )


class FragmentationModel:
    """Vectorised ``f_t`` for many node states at once, bound to one ledger's model ids."""

    def __init__(self, typical: TypicalPods, ledger: ClusterLedger) -> None:
        self.typical = typical
        self.ledger = ledger
        self.p: F64 = np.array(typical.probabilities, np.float64)
        self.cpu_t: I64 = np.array([c.cpu_milli for c in typical.classes], np.int64)
        self.u_t: I64 = np.array([c.gpu_milli for c in typical.classes], np.int64)
        self.k_t: I64 = np.array([c.gpu_count for c in typical.classes], np.int64)
        self.cpu_only_t = (self.u_t == 0) | (self.k_t == 0)
        # The saturation residue's per-pod constants (residue.residue_from_units): GPU copies divide the usable units
        # by the GPU count (whole-GPU pods; shares count units), CPU copies divide the CPU left by the CPU ask (no CPU
        # ask: an offset no GPU count reaches), a copy takes ``u_t · k_t`` milli (0 for CPU-only pods, whose residue
        # is then all free milli).
        self.copy_divisor_t: I64 = np.where(self.u_t < MILLI_PER_GPU, 1, np.maximum(self.k_t, 1)).astype(np.int64)
        self.cpu_divisor_t: I64 = np.maximum(self.cpu_t, 1)
        self.cpu_offset_t: I64 = np.where(self.cpu_t > 0, 0, _NO_CPU_LIMIT).astype(np.int64)
        self.milli_per_copy_t: I64 = self.u_t * self.k_t
        # Typical pods sharing (per-GPU milli, allow-list) see the same usable GPUs on every node, so the per-GPU
        # work is done once per such group (a few dozen) and expanded to the T classes (hundreds) by ``group_t``.
        groups: dict[tuple[int, str], int] = {}
        self.group_t: I64 = np.array(
            [groups.setdefault((c.gpu_milli, c.models), len(groups)) for c in typical.classes], np.int64)
        self.u_g: I64 = np.zeros(len(groups), np.int64)
        self._allowed_lists: list[set[str]] = [set() for _ in groups]
        for (milli, models_key), g in groups.items():
            self.u_g[g] = milli
            self._allowed_lists[g] = set(PodClass(0, milli, 1, models_key).model_list)
        for models in self._allowed_lists:
            for model in models:
                ledger.model_id(model)
        self._allowed: npt.NDArray[np.bool_] = np.zeros((len(groups), 0), np.bool_)
        self._any_model = False
        # Distinct per-GPU thresholds, ascending, and each group's position among them (:meth:`_usable_any_model`).
        self._levels: I64 = np.unique(self.u_g)
        self._level_g: I64 = np.searchsorted(self._levels, self.u_g).astype(np.int64)
        # The GPU-using typical pods of one (group, GPU count) — a head — differ only in CPU, so the weight of those
        # that fit a node is a prefix sum of ``p_t`` over their sorted CPU thresholds: :meth:`weighted_frag`, which
        # FGD's score calls for every option, needs no (states × T) pass (``f_t`` is computed only for new states).
        subgroups: dict[tuple[int, int], list[int]] = {}
        for t in np.flatnonzero(~self.cpu_only_t).tolist():
            subgroups.setdefault((int(self.group_t[t]), int(self.k_t[t])), []).append(t)
        self.p_total = float(self.p.sum())
        self._h_group: I64 = np.array([g for g, _ in subgroups], np.int64)
        self._h_k: I64 = np.array([k for _, k in subgroups], np.int64)
        self._cpu_levels: I64 = np.unique(self.cpu_t[~self.cpu_only_t])
        self.cpu_buckets = len(self._cpu_levels) + 1
        """Number of values :meth:`cpu_bucket` returns (0 .. ``cpu_buckets − 1``)."""
        # Row b, column h: the summed ``p_t`` of head h's members whose CPU threshold a CPU left in bucket b meets.
        # Every threshold is a level, so the bucket's lowest CPU left (−1, then each level) meets the same ones.
        lowest = np.concatenate([np.array([-1], np.int64), self._cpu_levels])
        self._bucket_weights: F64 = np.zeros((len(lowest), len(subgroups)), np.float64)
        for h, members in enumerate(subgroups.values()):
            ordered = sorted(members, key=lambda t: (int(self.cpu_t[t]), t))
            prefix = [0.0]
            for t in ordered:
                prefix.append(prefix[-1] + float(self.p[t]))
            met = np.searchsorted(self.cpu_t[ordered], lowest, side="right")
            self._bucket_weights[:, h] = np.array(prefix, np.float64)[met]
        # Per GPU free milli x (0 .. MILLI_PER_GPU) and head h: ``x · 128 + 1`` when a GPU with x free can host
        # one of h's GPUs, else 0. Summed over a node's GPUs (≤ 64, so the count stays below 128) this packs the
        # head's usable-GPU count and their free milli into one integer (:meth:`_usable_heads`).
        x = np.arange(MILLI_PER_GPU + 1, dtype=np.int64)[:, None]
        self._head_table: I64 = np.where(x >= self.u_g[self._h_group][None, :], x * 128 + 1, 0)

    def cpu_bucket(self, cpu_left: I64) -> I64:
        """Per state (int64 ``(M,)``), how many distinct CPU thresholds of GPU-using typical pods ``cpu_left``
        (CPU-milli, any sign) meets. :meth:`weighted_frag` depends on ``cpu_left`` only through this bucket: two
        states differing only in CPU left within one bucket get bit-identical ``F``. Raises nothing."""
        bucket: I64 = np.searchsorted(self._cpu_levels, cpu_left, side="right").astype(np.int64)
        return bucket

    @property
    def allowed_lists(self) -> tuple[frozenset[str], ...]:
        """Per group ``u`` (:attr:`group_t`): the models its typical pods allow (empty = any model)."""
        return tuple(frozenset(models) for models in self._allowed_lists)

    def allowed_table(self) -> npt.NDArray[np.bool_]:
        """Bool ``(U, models + 1)``: the typical pods of group ``u`` (:attr:`group_t`) may run on model id ``m``;
        the last column (model id −1, a slot without a GPU) is all False."""
        count = self.ledger.model_count
        if self._allowed.shape[1] != count + 1:
            table = np.ones((len(self._allowed_lists), count + 1), np.bool_)
            for g, models in enumerate(self._allowed_lists):
                if models:
                    table[g, :] = False
                    for model in models:
                        table[g, self.ledger.model_id(model)] = True
            table[:, count] = False  # padding column for GPU slots without a GPU (model id -1)
            self._allowed = table
            self._any_model = bool(table[:, :count].all())
        return self._allowed

    def allowed_for(self, models: I64) -> npt.NDArray[np.bool_]:
        """Bool ``(M, U, G)``: GPU ``g`` of state ``m`` (model ids ``models`` (M, G), −1 = no GPU) may host the
        typical pods of group ``u`` (:attr:`group_t`)."""
        return self.allowed_table()[:, models].transpose(1, 0, 2)

    def _every_model_allowed(self) -> bool:
        """Whether every group may use every model the ledger knows now (:meth:`allowed_table` kept current)."""
        self.allowed_table()
        return self._any_model

    def _usable(self, free: I64, models: I64, allowed: npt.NDArray[np.bool_] | None) -> tuple[I64, I64]:
        """Per state and group (M, U): how many GPUs could host one GPU of the group's typical pods, and their free
        milli summed; ``allowed`` as in :meth:`frag_vectors`. When every group may use every model, the same
        integers come from :meth:`_usable_any_model` in ``O(M·(G + U))`` instead of ``O(M·U·G)``."""
        if allowed is None:
            if self._every_model_allowed():
                if len(free) > _DIRECT_STATES:
                    return self._usable_any_model(free, models)
                usable = (free[:, None, :] >= self.u_g[None, :, None]) & (models >= 0)[:, None, :]
                return usable.sum(axis=-1), (free[:, None, :] * usable).sum(axis=-1)
            allowed = self.allowed_for(models)
        usable = allowed & (free[:, None, :] >= self.u_g[None, :, None])
        count: I64 = usable.sum(axis=-1)
        milli: I64 = (free[:, None, :] * usable).sum(axis=-1)
        return count, milli

    def _usable_any_model(self, free: I64, models: I64) -> tuple[I64, I64]:
        """:meth:`_usable` when no group restricts models: a GPU (model id ≥ 0) can host group ``u`` iff
        ``free ≥ u_g[u]``. Each GPU goes to bucket ``k`` = number of distinct thresholds ``≤ free`` (0 for a slot
        without a GPU); group ``u`` (threshold ``levels[j]``) counts the GPUs in buckets ``> j``: a suffix sum of
        the per-state bucket histogram (and of the free milli per bucket: exact integers, summed in float64 far
        below 2^53). Raises nothing."""
        states, levels = len(free), len(self._levels)
        bucket = np.searchsorted(self._levels, free, side="right")
        bucket[models < 0] = 0
        flat = (np.arange(states, dtype=np.int64)[:, None] * (levels + 1) + bucket).ravel()
        size = states * (levels + 1)
        hist = np.bincount(flat, minlength=size).reshape(states, levels + 1)
        mass = np.bincount(flat, weights=free.ravel().astype(np.float64), minlength=size).reshape(states, levels + 1)
        above = self._level_g + 1
        count: I64 = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, above].astype(np.int64)
        milli: I64 = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1][:, above].astype(np.int64)
        return count, milli

    def frag_vectors(
        self, cpu_left: I64, free: I64, models: I64, *, allowed: npt.NDArray[np.bool_] | None = None
    ) -> I64:
        """``f_t`` for ``M`` node states: ``cpu_left`` (M,), ``free`` (M, G) milli, ``models`` (M, G) → (M, T).
        ``allowed``: :meth:`allowed_for` of ``models`` (M, U, G), when the caller already has it."""
        return self._frag_from(cpu_left, free.sum(axis=-1), self._usable(free, models, allowed))

    def _frag_from(self, cpu_left: I64, total: I64, usable: tuple[I64, I64]) -> I64:
        count_g, milli_g = usable
        count, usable_milli = count_g[:, self.group_t], milli_g[:, self.group_t]
        fits = (count >= self.k_t[None, :]) & (cpu_left[:, None] >= self.cpu_t[None, :]) & ~self.cpu_only_t[None, :]
        frag: I64 = (total[:, None] - np.where(fits, usable_milli, 0)).astype(np.int64)
        return frag

    def frag_and_weighted(self, cpu_left: I64, free: I64, models: I64) -> tuple[I64, F64]:
        """:meth:`frag_vectors` and :meth:`weighted_frag` of the same ``M`` states, sharing one usable-GPU pass
        (identical results to the two calls). Raises nothing."""
        total = free.sum(axis=-1)
        usable = self._usable(free, models, None)
        return self._frag_from(cpu_left, total, usable), self._weighted_from(cpu_left, total, usable)

    def weighted_frag(self, cpu_left: I64, free: I64, models: I64) -> F64:
        """``F = Σ_t p_t f_t`` (float64, milli-GPU) for ``M`` node states, same inputs as :meth:`frag_vectors`,
        computed per (group, GPU count) with prefix sums of ``p_t`` over CPU thresholds. Equal terms give equal
        results whatever ``M`` (rows are reduced independently), so two states whose ``f_t`` all agree have
        exactly the same ``F`` and FGD's "nothing changes" scores exactly 50. Raises nothing."""
        total = free.sum(axis=-1)
        heads = self._usable_heads(free, models)
        if heads is not None:
            return self._weighted_heads(cpu_left, total, *heads)
        return self._weighted_from(cpu_left, total, self._usable(free, models, None))

    @property
    def head_count(self) -> int:
        """Number of heads ``H``: distinct (group, GPU count) pairs of the GPU-using typical pods."""
        return len(self._h_k)

    def head_usable(self, free: I64, models: I64) -> tuple[I64, I64]:
        """Per state and head (int64 ``(M, H)`` each): the usable-GPU counts and free milli :meth:`weighted_frag`
        reads for states with per-GPU free milli ``free`` and model ids ``models`` (M, G). Raises nothing."""
        heads = self._usable_heads(free, models)
        if heads is not None:
            return heads
        count_g, milli_g = self._usable(free, models, None)
        return count_g[:, self._h_group], milli_g[:, self._h_group]

    def head_change(self, before: I64, after: I64, model_ids: I64) -> tuple[I64, I64]:
        """How :meth:`head_usable` moves (int64 ``(M, H)`` each: counts, free milli) when one GPU of model
        ``model_ids[i]`` (≥ 0) goes from ``before[i]`` to ``after[i]`` free milli (each 0..capacity). Raises
        nothing."""
        threshold = self.u_g[self._h_group][None, :]
        allowed = self.allowed_table()[self._h_group][:, model_ids].T
        was, now = allowed & (before[:, None] >= threshold), allowed & (after[:, None] >= threshold)
        count: I64 = now.astype(np.int64) - was
        milli: I64 = np.where(now, after[:, None], 0) - np.where(was, before[:, None], 0)
        return count, milli

    def weighted_heads(self, cpu_left: I64, total: I64, count: I64, milli: I64) -> F64:
        """:meth:`weighted_frag` of ``M`` states from their CPU left (M,), total free milli (M,) and
        :meth:`head_usable` ``(count, milli)``: the very arithmetic :meth:`weighted_frag` ends with. Raises
        nothing."""
        return self._weighted_heads(cpu_left, total, count, milli)

    def _usable_heads(self, free: I64, models: I64) -> tuple[I64, I64] | None:
        """Per state and head (M, H): GPUs that can host one GPU of the head's typical pods and their free milli,
        read from the per-milli table (one gather and one sum), when every group may use every model and
        ``0 ≤ free ≤ MILLI_PER_GPU`` on at most 64 GPUs, within :data:`_TABLE_CELLS`; else None (use
        :meth:`_usable`). Same integers as :meth:`_usable` expanded by head."""
        if free.size * len(self._h_k) > _TABLE_CELLS or free.shape[1] > 64 or not free.size:
            return None
        if not self._every_model_allowed() or free.min() < 0 or free.max() > MILLI_PER_GPU:
            return None
        packed = self._head_table[np.where(models >= 0, free, 0)].sum(axis=1)
        return packed & 127, packed >> 7

    def _weighted_from(self, cpu_left: I64, total: I64, usable: tuple[I64, I64]) -> F64:
        count_g, milli_g = usable
        return self._weighted_heads(cpu_left, total, count_g[:, self._h_group], milli_g[:, self._h_group])

    def _weighted_heads(self, cpu_left: I64, total: I64, count: I64, usable_milli: I64) -> F64:
        weights = self._bucket_weights[np.searchsorted(self._cpu_levels, cpu_left, side="right")]
        terms = np.where(count >= self._h_k[None, :], usable_milli, 0) * weights
        result: F64 = total * self.p_total - terms.sum(axis=1)
        return result

    def weighted(self, f: I64) -> F64:
        """``F = Σ_t p_t f_t`` along the last axis (float64). Each row is reduced on its own (an elementwise product
        and numpy's pairwise sum), so a row's result does not depend on the other rows of its batch (a BLAS matrix
        product's last bits do). Raises nothing."""
        result: F64 = (f * self.p).sum(axis=-1)
        return result


def schedulable_free(ledger: ClusterLedger, slots: I64 | slice) -> I64:
    """Free milli per GPU of the given slots, 0 on unschedulable GPUs (``[len(slots), max_gpus]``, a fresh array:
    rows of the ledger's :attr:`~domain.ledgerslots.LedgerSlots.sched_free`)."""
    if isinstance(slots, slice):
        return ledger.sched_free[slots].copy()
    result: I64 = np.take(ledger.sched_free, slots, axis=0)
    return result
