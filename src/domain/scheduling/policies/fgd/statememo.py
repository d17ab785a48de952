"""FGD's state memo: int64 key → int64 value (≥ 0), looked up a batch of keys at a time.

A dict is the authoritative table. Large batches are answered from a sorted snapshot of it (one ``searchsorted``
instead of one dict lookup per key); keys the snapshot lacks are looked up in the dict. Entries added since the
snapshot are merged into it (two sorted runs, one stable sort) once they exceed an eighth of it. Both paths return
the same values: −1 marks a key not in the memo. A key's value never changes once memoised (it memoises a pure
function), so :meth:`StateMemo.update` takes new keys only.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from domain.scheduling.policies.fgd.fragmentation import I64

DICT_BATCH = 64
"""Batches up to this many keys go straight to the dict (a few numpy calls cost more than that many lookups)."""


def _from_dict(table: dict[int, int], keys: I64) -> I64:
    return np.fromiter(map(table.get, keys.tolist(), repeat(-1)), np.int64, count=len(keys))


class StateMemo:
    """Memo of non-negative int64 values by int64 key (module docstring). Not thread-safe (one scheduling
    cycle at a time owns it)."""

    __slots__ = ("_added", "_keys", "_table", "_values")

    def __init__(self) -> None:
        self._table: dict[int, int] = {}
        self._keys: I64 = np.zeros(0, np.int64)
        self._values: I64 = np.zeros(0, np.int64)
        self._added: list[int] = []  # keys memoised since the snapshot (their values are in the table)

    def __len__(self) -> int:
        return len(self._table)

    def get_many(self, keys: I64) -> I64:
        """Values for ``keys`` (int64 ``(n,)``), −1 where a key is not memoised (int64 ``(n,)``, a fresh array).
        Raises nothing."""
        table = self._table
        if len(keys) <= DICT_BATCH:
            return _from_dict(table, keys)
        if len(self._added) > max(DICT_BATCH, len(self._keys) // 8):
            self._snapshot()
        known = self._keys
        if not len(known):
            return _from_dict(table, keys)
        at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
        found: I64 = np.where(known[at] == keys, self._values[at], -1)
        if self._added:
            rest = np.flatnonzero(found < 0)
            if len(rest):
                found[rest] = _from_dict(table, keys[rest])
        return found

    def update(self, keys: list[int], values: list[int]) -> None:
        """Memoise ``values[i]`` (each ≥ 0) for ``keys[i]``, keys not memoised yet; equal lengths. Raises ValueError
        on a length mismatch (nothing is memoised then)."""
        if len(keys) != len(values):
            raise ValueError(f"keys and values differ in length: {len(keys)} keys, {len(values)} values")
        self._table.update(zip(keys, values, strict=True))
        self._added += keys

    def update_missing(self, keys: list[int], values: list[int]) -> None:
        """Memoise ``values[i]`` (each ≥ 0) for those ``keys[i]`` (distinct) not memoised yet (a memoised key keeps
        its value: both are the same pure function's). Raises ValueError on a length mismatch (nothing is memoised
        then)."""
        if len(keys) != len(values):
            raise ValueError(f"keys and values differ in length: {len(keys)} keys, {len(values)} values")
        table = self._table
        fresh = [i for i, key in enumerate(keys) if key not in table]
        self.update([keys[i] for i in fresh], [values[i] for i in fresh])

    def _snapshot(self) -> None:
        added = sorted(self._added)
        keys = np.concatenate([self._keys, np.array(added, np.int64)])
        values = np.concatenate([self._values, _from_dict(self._table, keys[len(self._keys):])])
        merged = np.argsort(keys, kind="stable")  # two sorted runs: a linear merge
        self._keys, self._values = keys[merged], values[merged]
        self._added = []
