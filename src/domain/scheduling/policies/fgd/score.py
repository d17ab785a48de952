"""FGD — Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC '23; rules as in docs/trace-replay.md §3.6).

Node score: ``trunc(100 · σ((F(n) − F(n')) / 1000))`` with ``σ(x) = 1/(1+e^{−x})``, where ``n'`` is the node after
placing the pod. Each typical pod's term ``f_t(n) − f_t(n')`` is computed exactly in integers and only then
weighted by ``p_t`` (so "nothing changes" scores exactly 50). For a share the node score is the max over the
GPUs that fit, and the Reserve step takes the first GPU index reaching that max truncated score. Whole-GPU pods
take the first ``k`` free GPUs; CPU-only pods change only ``cpuLeft``.

Scores are memoised per (node state, per-GPU fit pattern, pod GPU shape, CPU-threshold bucket of the CPU left):
nodes in identical states are evaluated once, and pod classes that differ only in CPU share results where the
same typical pods' CPU thresholds are met (FGD-residue keeps one memo per class); and per slot and pod class, so a
cycle looks up only the slots whose state changed since that class was last scored (one decision changes one
node).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from domain.errors import DomainError
from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import MAX_NODE_SCORE, BoolArray, CycleState
from domain.scheduling.framework.planner import ensure_gpu_fit, plan_composite
from domain.scheduling.policies.fgd.fragmentation import F64, I64, schedulable_free
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.statememo import StateMemo
from domain.units import MILLI_PER_GPU

_CHOICE = "fgd.choice"
_CHOICE_BITS = 7  # choice + 1 ≤ MAX_GPUS_PER_NODE (64) < 2^7
CHOICE_SPAN = 1 << _CHOICE_BITS
MEMO_MAX_GPUS = 32
"""Widest ledger (GPUs per node) the memo serves: its key packs ``state id << GPUs | fit bits`` into an int64, so
state ids keep 31 bits; a fit pattern of 63 or more GPUs would also reach the sign bit (the unseen-slot marker)."""
_NEVER = np.iinfo(np.int64).min  # no slot state and fit pattern packs to this
_KEY_BASE = 2048  # > MILLI_PER_GPU: packs a GPU's (model, free milli, need milli) into one int64
SLOT_MEMO_BYTES = 256 * 2**20
"""Memory for the per-slot scores (two int64 per ledger row and pod class), enough for every distinct (CPU, GPU
shape) class of the synthetic workload on a 20,000-node ledger, so a class is not dropped between two of its pods
(a dropped class looks every slot up again); the least recently used class beyond it falls back to the state memo.
Only classes that occur take memory."""


def sigmoid_score(delta: F64) -> I64:
    """``trunc(100 · σ(Δ/1000))`` for Δ in milli-GPU (float64 array) → int64 in 0..99 (100 only in the limit)."""
    return (MAX_NODE_SCORE * (1.0 / (1.0 + np.exp(-delta / 1000.0)))).astype(np.int64)


_BYTE_BITS = np.uint64(0x0102040810204080)  # Σ_g 2^(56 − 7g): moves the low bit of byte g to bit 56 + g


def fit_bits(fit: BoolArray) -> I64:
    """``Σ_g fit[row, g] · 2^g`` per row of ``fit`` (bool ``[rows, G]`` → int64 ``[rows]``). For ``G = 8`` each row
    is read as one little-endian uint64 of 0/1 bytes and multiplied (mod 2^64) by ``Σ_g 2^(56 − 7g)``, which moves
    byte ``g``'s bit to bit ``56 + g``; every other partial product lands above bit 63 or below bit 56 without
    carrying into them (the byte-to-bit packing multiply; all 256 rows are checked by the unit tests), so a shift by
    56 leaves the packed bits. Raises nothing."""
    if fit.shape[1] == 8 and fit.flags.c_contiguous and np.little_endian:
        packed: I64 = ((fit.view(np.uint64)[:, 0] * _BYTE_BITS) >> np.uint64(56)).astype(np.int64)
        return packed
    weights = np.int64(1) << np.arange(fit.shape[1], dtype=np.int64)
    summed: I64 = fit.astype(np.int64) @ weights
    return summed


_DISTINCT_BY_DICT = 32
"""Up to this many keys, :func:`distinct_keys` dedupes with a dict (``np.unique`` sorts, costing more)."""


def distinct_keys(keys: I64) -> tuple[list[int], I64, I64]:
    """``(unique, first, inverse)`` of ``keys`` (int64 ``(n,)``) as ``np.unique`` returns them: the distinct keys
    ascending (a list), the index of each one's first occurrence, and per key its position in ``unique``
    (``unique[inverse[i]] == keys[i]``). Raises nothing."""
    if len(keys) > _DISTINCT_BY_DICT:
        unique, index, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return unique.tolist(), index.astype(np.int64), inverse.reshape(-1).astype(np.int64)
    listed = keys.tolist()
    first_at: dict[int, int] = {}
    for i, key in enumerate(listed):
        first_at.setdefault(key, i)
    ordered = sorted(first_at)
    position = {key: i for i, key in enumerate(ordered)}
    first = np.array([first_at[key] for key in ordered], np.int64)
    return ordered, first, np.array([position[key] for key in listed], np.int64)


class FgdScore:
    """FGD score plugin and GPU chooser (one object, so Reserve reuses the scoring pass)."""

    name = "fgd"

    def __init__(self, cache: NodeStateCache) -> None:
        self.cache = cache
        self.ledger: ClusterLedger = cache.ledger
        self._memo: dict[tuple[int, ...], StateMemo] = {}
        self._memo_width = self.ledger.max_gpus
        self._by_slot: OrderedDict[tuple[int, int, int, int], tuple[I64, I64]] = OrderedDict()
        self._lower: dict[int, BoolArray] = {}  # per GPU width: bool [G, G], True where j < i

    # ------------------------------------------------------------------ evaluation
    def _rate(self, slots: I64, rows: I64, cpu_left: I64, after: I64, models: I64) -> I64:
        """Value of each option (higher is better, ≥ 0): option ``i`` leaves slot ``slots[rows[i]]`` with
        ``cpu_left[i]`` CPU-milli and per-GPU free milli ``after[i]`` (models ``models[i]``). FGD's value is its
        node score ``trunc(100 · σ(Δ/1000))``; subclasses may return finer values (they decode them in
        :meth:`_publish`)."""
        now = self.cache.weighted_f[self.cache.slot_state[slots[rows]]]
        return sigmoid_score(now - self.cache.model.weighted_frag(cpu_left, after, models))

    def _evaluate(self, pod: PodRequest, state: CycleState, slots: I64) -> tuple[I64, I64]:
        """Values (:meth:`_rate`) and chosen GPU (−1 when not a share) for ``slots``, computed without the memo."""
        ledger = self.ledger
        cpu_left = ledger.cpu_free[slots] - pod.cpu_milli
        free = schedulable_free(ledger, slots)
        models = np.take(ledger.gpu_model, slots, axis=0)
        shape = pod.simple_shape
        count = len(slots)
        every = np.arange(count, dtype=np.int64)
        if not pod.wants_gpu:
            return self._rate(slots, every, cpu_left, free, models), np.full(count, -1, np.int64)
        if shape is None:
            return self._evaluate_composite(pod, state, slots, cpu_left, free, models)
        assert state.gpu_fit is not None
        fit = np.take(state.gpu_fit, slots, axis=0)
        if shape.kind is GpuKind.WHOLE:
            take = fit & (np.cumsum(fit, axis=1) <= shape.gpus)
            after = free - np.where(take, free, 0)
            return self._rate(slots, every, cpu_left, after, models), np.full(count, -1, np.int64)
        assert state.core_need is not None
        need = np.take(state.core_need, slots, axis=0)
        width = free.shape[1]
        # A GPU whose (free, model, need) equals an earlier fitting GPU's yields the same node multiset, hence
        # the same score; the earlier index wins ties anyway, so only first occurrences are evaluated.
        # On a fitting GPU 1 ≤ need ≤ free ≤ 1000, so (model, free, need) packs exactly into one integer; a GPU that
        # does not fit is never an earlier twin (masked) and its own result is unused.
        packed = (models * _KEY_BASE + free) * _KEY_BASE + np.minimum(need, _KEY_BASE - 1)
        lower = self._lower.get(width)
        if lower is None:
            lower = self._lower.setdefault(width, np.tri(width, width, -1, np.bool_))
        twin = ((packed[:, :, None] == packed[:, None, :]) & (fit[:, None, :] & lower)).any(axis=2)
        rows, options = np.nonzero(fit & ~twin)
        after = free[rows]
        option_rows = np.arange(len(rows))
        after[option_rows, options] = np.maximum(after[option_rows, options] - need[rows, options], 0)
        values = self._rate(slots, rows.astype(np.int64), cpu_left[rows], after, models[rows])
        scores = np.full((count, width), -1, np.int64)
        scores[rows, options] = values
        choice = np.argmax(scores, axis=1).astype(np.int64)
        return scores.max(axis=1), choice

    def _evaluate_composite(
        self, pod: PodRequest, state: CycleState, slots: I64, cpu_left: I64, free: I64, models: I64
    ) -> tuple[I64, I64]:
        after = free.copy()
        for row, slot in enumerate(slots):
            plan = plan_composite(pod, self.ledger, state, int(slot))
            if plan is not None:
                for index, (core, _) in plan.per_gpu_usage().items():
                    after[row, index] = max(after[row, index] - core, 0)
        every = np.arange(len(slots), dtype=np.int64)
        return self._rate(slots, every, cpu_left, after, models), np.full(len(slots), -1, np.int64)

    def _memo_key(self, pod: PodRequest) -> tuple[int, int, int, int] | None:
        shape = pod.simple_shape
        if not pod.wants_gpu:
            return (pod.cpu_milli, 0, 0, 0)
        if shape is None or (shape.kind is GpuKind.SHARE and shape.core_milli is None):
            return None  # per-GPU needs vary with GPU memory; evaluate directly
        if shape.kind is GpuKind.WHOLE:
            return (pod.cpu_milli, MILLI_PER_GPU, shape.gpus, 1)
        assert shape.core_milli is not None
        return (pod.cpu_milli, shape.core_milli, 1, 2)

    # ------------------------------------------------------------------ plugin API
    def score(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slots: I64) -> I64:
        """FGD node scores (0..99) for ``slots``; records the chosen GPU per slot for Reserve. Values are memoised
        per (pod class, node state, per-GPU fit) as ``value · 128 + choice + 1`` (GPU indexes 0..126), while nodes
        have at most :data:`MEMO_MAX_GPUS` GPUs; wider ledgers are evaluated without the memo."""
        self.cache.refresh()
        if pod.wants_gpu and pod.simple_shape is not None:
            ensure_gpu_fit(pod, ledger, state)
        key = self._memo_key(pod) if ledger.max_gpus <= MEMO_MAX_GPUS else None
        if key is None:
            values, choice = self._evaluate(pod, state, slots)
            state.data[_CHOICE] = (slots, values * CHOICE_SPAN + (choice + 1))
            return self._publish(state, slots, values)
        if self._memo_width != ledger.max_gpus:
            self._memo.clear()
            self._by_slot.clear()
            self._memo_width = ledger.max_gpus
        # Over every ledger row (contiguous, cheaper than gathering the candidates first): slot state and fit bits.
        combined = self.cache.slot_state[: ledger.rows] << ledger.max_gpus
        if pod.wants_gpu:
            assert state.gpu_fit is not None
            combined |= fit_bits(state.gpu_fit[: ledger.rows])
        seen, values = self._slot_memo(key, ledger.rows)
        stale = slots[(seen[: ledger.rows] != combined)[slots]]
        if len(stale):
            fresh = combined[stale]
            values[stale] = self._lookup(pod, state, key, stale, fresh)
            seen[stale] = fresh
        per_slot = values[slots]
        state.data[_CHOICE] = (slots, per_slot)
        return self._publish(state, slots, per_slot >> _CHOICE_BITS)  # packed ≥ 0: value · 128 + choice + 1

    def _publish(self, state: CycleState, slots: I64, values: I64) -> I64:
        """Node scores (0..100) from the per-slot values of :meth:`_rate`; FGD's values are its scores."""
        return values

    def _slot_memo(self, key: tuple[int, int, int, int], rows: int) -> tuple[I64, I64]:
        """Per ledger slot, the ``(slot state << width) | fit bits`` value last scored for pod class ``key`` and
        its packed result (``score · 128 + choice + 1``): a slot whose value is unchanged needs no lookup. At most
        :data:`SLOT_MEMO_BYTES` worth of classes are kept (least recently used dropped; at least 16)."""
        entry = self._by_slot.pop(key, None)
        if entry is None or len(entry[0]) < rows:
            seen = np.full(rows, _NEVER, np.int64)
            values = np.zeros(rows, np.int64)
            if entry is not None:
                seen[: len(entry[0])], values[: len(entry[1])] = entry
            entry = (seen, values)
        self._by_slot[key] = entry
        while len(self._by_slot) > max(16, SLOT_MEMO_BYTES // (16 * rows)):
            del self._by_slot[next(iter(self._by_slot))]
        return entry

    def _lookup(self, pod: PodRequest, state: CycleState, key: tuple[int, int, int, int], slots: I64,
                combined: I64) -> I64:
        """Packed results for ``slots`` from the state memo, evaluating the states not seen yet once each (in
        ascending order of their key, one batch)."""
        memo, combined = self._state_memo(pod, key, slots, combined)
        packed = memo.get_many(combined)  # packed values are ≥ 0, so −1 marks a miss
        missing = np.flatnonzero(packed < 0)
        if len(missing):
            unique, first, inverse = distinct_keys(combined[missing])
            scores, choice = self._evaluate(pod, state, slots[missing[first]])
            values = scores * CHOICE_SPAN + (choice + 1)
            packed[missing] = values[inverse]
            memo.update(unique, values.tolist())
        return packed

    def _memo_for(self, key: tuple[int, ...]) -> StateMemo:
        """The state memo of ``key`` (created empty on first use)."""
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = StateMemo()
        return memo

    def _state_memo(self, pod: PodRequest, key: tuple[int, int, int, int], slots: I64,
                    combined: I64) -> tuple[StateMemo, I64]:
        """The state memo for pod class ``key`` and its keys for ``slots`` (``combined``: slot state and fit bits).
        FGD's value depends on the pod's CPU only through which typical pods' CPU thresholds the node's CPU left
        still meets (:meth:`FragmentationModel.cpu_bucket`), so pod classes of one GPU shape share one memo keyed by
        ``combined · buckets + bucket``. Raises nothing."""
        model = self.cache.model
        bucket = model.cpu_bucket(self.ledger.cpu_free[slots] - pod.cpu_milli)
        return self._memo_for(key[1:]), combined * model.cpu_buckets + bucket

    @staticmethod
    def _remember_choice(state: CycleState, slots: I64, choice: I64) -> None:
        """Record ``choice`` (GPU index per slot of ``slots``, < 127) as this cycle's choice for :meth:`choose`, in
        the packing :meth:`score` uses (any value · 128 + choice + 1)."""
        state.data[_CHOICE] = (slots, choice + 1)

    @staticmethod
    def _choice(state: CycleState, slot: int) -> int | None:
        """The GPU the last scoring pass of this cycle chose on ``slot``, or None when it did not score it."""
        entry = state.data.get(_CHOICE)
        if not isinstance(entry, tuple):
            return None
        slots, packed = entry
        where = np.flatnonzero(slots == slot)
        return int(packed[where[0]]) % CHOICE_SPAN - 1 if len(where) else None

    def normalize(self, pod: PodRequest, scores: I64) -> I64:
        """FGD has no normalize step."""
        return scores

    def choose(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, slot: int, fit: I64) -> int:
        """First GPU index reaching the node's max truncated FGD score (computed now if scoring was skipped)."""
        choice = self._choice(state, slot)
        if choice is None:
            self.score(pod, ledger, state, np.array([slot], np.int64))
            choice = self._choice(state, slot)
            assert choice is not None
        if choice not in set(fit.tolist()):
            raise DomainError(f"fgd chose gpu {choice} on slot {slot}, which does not fit")
        return choice
