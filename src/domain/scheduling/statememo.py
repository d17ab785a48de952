"""FGD's state memo: int64 key → int64 value (≥ 0), looked up a batch of keys at a time.

A dict is the authoritative table. Large batches are answered from a sorted snapshot of it (one ``searchsorted``
instead of one dict lookup per key); keys added since the snapshot are looked up in the dict, and the snapshot is
rebuilt once they exceed a quarter of it. Both paths return the same values: −1 marks a key not in the memo.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from domain.scheduling.fragmentation import I64

DICT_BATCH = 64
"""Batches up to this many keys go straight to the dict (a few numpy calls cost more than that many lookups)."""


def _from_dict(table: dict[int, int], keys: I64) -> I64:
    return np.fromiter(map(table.get, keys.tolist(), repeat(-1)), np.int64, count=len(keys))


class StateMemo:
    """Memo of non-negative int64 values by int64 key (module docstring). Not thread-safe (one scheduling
    cycle at a time owns it)."""

    __slots__ = ("_keys", "_table", "_values")

    def __init__(self) -> None:
        self._table: dict[int, int] = {}
        self._keys: I64 = np.zeros(0, np.int64)
        self._values: I64 = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self._table)

    def get_many(self, keys: I64) -> I64:
        """Values for ``keys`` (int64 ``(n,)``), −1 where a key is not memoised (int64 ``(n,)``, a fresh array).
        Raises nothing."""
        table = self._table
        if len(keys) <= DICT_BATCH:
            return _from_dict(table, keys)
        if len(table) - len(self._keys) > max(DICT_BATCH, len(self._keys) // 4):
            self._snapshot()
        known = self._keys
        if not len(known):
            return _from_dict(table, keys)
        at = np.minimum(np.searchsorted(known, keys), len(known) - 1)
        found: I64 = np.where(known[at] == keys, self._values[at], -1)
        if len(table) > len(known):
            rest = np.flatnonzero(found < 0)
            if len(rest):
                found[rest] = _from_dict(table, keys[rest])
        return found

    def update(self, keys: list[int], values: list[int]) -> None:
        """Memoise ``values[i]`` (each ≥ 0) for ``keys[i]``; equal lengths. Raises ValueError on a length mismatch."""
        self._table.update(zip(keys, values, strict=True))

    def _snapshot(self) -> None:
        count = len(self._table)
        keys = np.fromiter(self._table.keys(), np.int64, count=count)
        values = np.fromiter(self._table.values(), np.int64, count=count)
        order = np.argsort(keys, kind="stable")
        self._keys, self._values = keys[order], values[order]
