"""FGD's state memo and batch dedupe (``domain.scheduling.policies.fgd.statememo``,
``domain.scheduling.policies.fgd.score.distinct_keys``).

Behaviours covered:

* ``StateMemo.get_many``: the dict path (small batches) and the snapshot path (large ones) return the same values
  as a plain dict, −1 for keys never memoised, including keys added after the last snapshot and negative keys.
* ``StateMemo.update_missing``: keys already memoised keep their values, the others are added once (no key
  twice in a snapshot).
* ``distinct_keys``: the dict path (≤ 32 keys) and the ``np.unique`` path both give the distinct keys ascending,
  first occurrences and an inverse that rebuild the input.
"""

from __future__ import annotations

import numpy as np
import pytest

from domain.scheduling.policies.fgd.score import distinct_keys
from domain.scheduling.policies.fgd.statememo import DICT_BATCH, StateMemo


def test_get_many_matches_a_dict_on_both_paths_across_snapshots() -> None:
    rng = np.random.default_rng(3)
    memo, reference = StateMemo(), dict[int, int]()
    universe = rng.choice(np.arange(-(2**40), 2**40, 7919), 4000, replace=False)
    for step in range(40):
        added = universe[step * 90 : step * 90 + 90]  # grows past an eighth of the snapshot now and then
        values = rng.integers(0, 2**40, len(added))
        memo.update(added.tolist(), values.tolist())
        reference.update(zip(added.tolist(), values.tolist(), strict=True))
        for size in (1, DICT_BATCH, DICT_BATCH + 1, 700):
            keys = rng.choice(universe, size)  # about 60 % of the universe is never memoised
            expected = [reference.get(k, -1) for k in keys.tolist()]
            assert memo.get_many(keys).tolist() == expected
    assert len(memo) == len(reference) == 3600
    assert memo._keys.size > 0  # the large batches went through a snapshot


def test_get_many_finds_keys_added_after_the_snapshot() -> None:
    memo = StateMemo()
    memo.update(list(range(0, 2000, 2)), list(range(1000)))
    batch = np.arange(0, 400, dtype=np.int64)
    assert memo.get_many(batch).tolist() == [k // 2 if k % 2 == 0 else -1 for k in range(400)]
    memo.update([1, 3], [7, 9])  # too few to trigger a merge into the snapshot
    assert memo.get_many(batch)[:4].tolist() == [0, 7, 1, 9]


def test_large_batch_before_any_snapshot_reads_the_dict() -> None:
    memo = StateMemo()
    assert memo.get_many(np.arange(200, dtype=np.int64)).tolist() == [-1] * 200
    memo.update([5, 150], [1, 2])  # too few for a snapshot
    found = memo.get_many(np.arange(200, dtype=np.int64))
    assert memo._keys.size == 0
    assert found[[5, 150]].tolist() == [1, 2]
    assert (np.delete(found, [5, 150]) == -1).all()


def test_update_with_unequal_lengths_raises() -> None:
    memo = StateMemo()
    with pytest.raises(ValueError, match="differ in length: 2 keys, 1 values"):
        memo.update([1, 2], [3])
    with pytest.raises(ValueError, match="differ in length: 1 keys, 2 values"):
        memo.update_missing([1], [3, 4])
    assert len(memo) == 0


def test_update_missing_keeps_memoised_keys_and_adds_the_others_once() -> None:
    memo = StateMemo()
    memo.update(list(range(0, 2000, 2)), list(range(1000)))
    memo.get_many(np.arange(100, dtype=np.int64))  # a snapshot holds the even keys
    memo.update_missing([4, 5, 6, 7], [99, 50, 99, 70])
    memo.update_missing([5], [99])
    assert len(memo) == 1002
    assert memo.get_many(np.arange(4, 8, dtype=np.int64)).tolist() == [2, 50, 3, 70]
    memo.update(list(range(3001, 3401, 2)), [1] * 200)  # enough new keys to merge them into a snapshot
    batch = np.arange(0, 400, dtype=np.int64)
    assert memo.get_many(batch).tolist() == [k // 2 if k % 2 == 0 else {5: 50, 7: 70}.get(k, -1) for k in range(400)]
    assert memo._keys.tolist() == sorted(set(memo._keys.tolist()))  # every key once in the snapshot


@pytest.mark.parametrize("size", [1, 5, 32, 33, 500])
def test_distinct_rebuilds_the_keys_and_points_at_first_occurrences(size: int) -> None:
    keys = np.random.default_rng(size).integers(-50, 50, size).astype(np.int64)
    unique, first, inverse = distinct_keys(keys)
    assert unique == sorted(set(keys.tolist()))  # ascending, as np.unique gives them
    assert np.array(unique, np.int64)[inverse].tolist() == keys.tolist()
    assert keys[first].tolist() == unique
    assert all(k not in keys[: f].tolist() for k, f in zip(unique, first.tolist(), strict=True))
