"""The best-connected set of whole GPUs for a multi-GPU pod on one node (pure; no I/O).

:func:`best_connected` picks ``count`` GPUs among the ``free`` ones of a node whose :class:`NodeTopology` is known.
Candidates are ranked by this key, smallest first (the first difference decides):

1. the set's :class:`Tier`, best first: NVLink-connected, one PCIe root, one NUMA node, across NUMA nodes (two GPUs:
   an NVLink pair before a PCIe pair on one root before a pair on one NUMA node before a cross-NUMA pair; four
   GPUs on a machine of 4-GPU islands: one island);
2. how many groups that were wholly free the choice breaks into, NVLink islands first, then PCIe roots, then NUMA
   nodes (groups of at least 2 GPUs), fewest first: whole islands stay free for larger pods;
3. the NVLinks inside the set (sum over its pairs), most first;
4. the free GPUs left in the groups it touches, fewest first (best fit: partly used islands are filled first);
5. the GPU indexes, lowest first (deterministic).

Every ``count``-subset is ranked while there are at most :data:`EXHAUSTIVE_LIMIT` of them (8 GPUs: at most 70);
beyond that, one greedy set per free GPU as seed (each step adds the GPU with the best tier to the set, then the
most links to it, then the lowest index) is ranked instead, which may miss the best set on large nodes.
:func:`can_connect` says exactly, without enumerating, whether a set of at least a given tier exists.
:func:`split_connected` serves a pod whose several containers ask for whole GPUs: the pod's GPUs together are the
best-connected set of their total, and each container gets the best-connected part of that set.
:func:`least_breaking` chooses, among interchangeable GPUs, the one a share should open (keys 2, 4, 5 of the list).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.topology.types import NodeTopology, Tier

EXHAUSTIVE_LIMIT = 4096
"""The most ``count``-subsets ranked one by one; more are ranked through greedy seeds (module docstring)."""


@attrs.frozen
class Choice:
    """A chosen set: ``indexes`` (ascending GPU indexes), its ``tier``, ``links`` (NVLinks inside the set) and
    ``broken`` (wholly free islands, PCIe roots and NUMA nodes of ≥ 2 GPUs the choice takes GPUs from)."""

    indexes: tuple[int, ...]
    tier: Tier
    links: int
    broken: tuple[int, int, int]


def _groups(topology: NodeTopology) -> tuple[list[frozenset[int]], list[frozenset[int]], list[frozenset[int]]]:
    islands = [frozenset(island) for island in topology.islands() if len(island) > 1]
    roots: dict[str, set[int]] = {}
    numa: dict[int, set[int]] = {}
    for index, gpu in topology.gpus.items():
        if gpu.pcie_root:
            roots.setdefault(gpu.pcie_root, set()).add(index)
        if gpu.numa_node is not None:
            numa.setdefault(gpu.numa_node, set()).add(index)
    return (islands, [frozenset(g) for g in roots.values() if len(g) > 1],
            [frozenset(g) for g in numa.values() if len(g) > 1])


class _Ranker:
    """Ranks candidate sets for one call (module docstring's key)."""

    def __init__(self, topology: NodeTopology, free: frozenset[int]) -> None:
        self.topology = topology
        self.free = free
        self.levels = _groups(topology)

    def choice(self, chosen: Sequence[int]) -> tuple[tuple[object, ...], Choice]:
        topology, taken = self.topology, frozenset(chosen)
        tier = topology.tier(chosen)
        links = sum(topology.links(a, b) for a, b in itertools.combinations(chosen, 2))
        broken = []
        leftover = 0
        for level in self.levels:
            touched = [group for group in level if group & taken]
            broken.append(sum(1 for group in touched if group <= self.free))
            leftover += sum(len((group & self.free) - taken) for group in touched)
        counts = (broken[0], broken[1], broken[2])
        key = (-int(tier), *counts, -links, leftover, tuple(chosen))
        return key, Choice(tuple(chosen), tier, links, counts)

    def greedy(self, seed: int, count: int) -> list[int]:
        chosen = [seed]
        pool = set(self.free) - {seed}
        while len(chosen) < count:
            def rank(index: int) -> tuple[int, int, int]:
                tier = self.topology.tier([*chosen, index])
                return (-int(tier), -sum(self.topology.links(index, c) for c in chosen), index)

            best = min(pool, key=rank)
            chosen.append(best)
            pool.discard(best)
        return sorted(chosen)


def best_connected(
    topology: NodeTopology, free: Iterable[int], count: int, *, minimum: Tier = Tier.SYSTEM
) -> Choice | None:
    """The best set of ``count`` GPUs among ``free`` (module docstring), or None when fewer are free or no set
    reaches ``minimum``. GPUs of ``free`` absent from ``topology`` take part as GPUs without any link, root or NUMA
    node. Raises :class:`InvalidRequestError` (field ``count``) for a count below 1."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidRequestError("count", count, "must be an integer >= 1")
    pool = frozenset(free)
    if len(pool) < count:
        return None
    ranker = _Ranker(topology, pool)
    ordered = sorted(pool)
    if math.comb(len(ordered), count) <= EXHAUSTIVE_LIMIT:
        candidates: Iterable[Sequence[int]] = itertools.combinations(ordered, count)
    else:
        candidates = {tuple(ranker.greedy(seed, count)) for seed in ordered}
    best: tuple[tuple[object, ...], Choice] | None = None
    for chosen in candidates:
        ranked = ranker.choice(chosen)
        if ranked[1].tier >= minimum and (best is None or _less(ranked[0], best[0])):
            best = ranked
    return None if best is None else best[1]


def split_connected(
    topology: NodeTopology, free: Iterable[int], counts: Sequence[int], *, minimum: Tier = Tier.SYSTEM
) -> tuple[tuple[int, ...], ...] | None:
    """Whole GPUs for the containers of one pod on one node: one ascending tuple of GPU indexes per entry of
    ``counts`` (GPUs per container, same order), disjoint, all from ``free``. Their union is
    :func:`best_connected` of ``sum(counts)`` GPUs at ``minimum`` (the tier a pod's requirement applies to: all
    its whole GPUs together); then each container, the largest count first (equal counts in their order), takes the
    best-connected set of its count among what the containers before it left of the union. None when
    :func:`best_connected` finds no union. Raises :class:`InvalidRequestError` (field ``counts``) when ``counts`` is
    empty or holds a count below 1."""
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise InvalidRequestError("counts", list(counts), "must be one or more integers >= 1")
    union = best_connected(topology, free, sum(counts), minimum=minimum)
    if union is None:
        return None
    left = set(union.indexes)
    parts: dict[int, tuple[int, ...]] = {}
    for position in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        part = best_connected(topology, left, counts[position])
        assert part is not None  # the union holds sum(counts) GPUs, so every part finds its count among them
        parts[position] = part.indexes
        left -= set(part.indexes)
    return tuple(parts[i] for i in range(len(counts)))


def least_breaking(topology: NodeTopology, free: Iterable[int], candidates: Iterable[int]) -> int:
    """The GPU of ``candidates`` (non-empty, each in ``free``: the node's GPUs with nothing used) whose use breaks
    the fewest wholly free NVLink islands, then PCIe roots, then NUMA nodes, then leaves the fewest free GPUs in the
    groups it touches (partly used groups first), then the lowest index: :func:`best_connected`'s key for a set of
    one. Raises :class:`InvalidRequestError` (field ``candidates``) when it is empty or names a GPU not in
    ``free``."""
    pool, chosen = frozenset(free), sorted(set(candidates))
    if not chosen or not pool.issuperset(chosen):
        raise InvalidRequestError("candidates", chosen, f"must be one or more of the free GPUs {sorted(pool)}")
    ranker = _Ranker(topology, pool)
    return min(chosen, key=lambda index: ranker.choice([index])[0])


def _less(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return a < b  # keys of one shape: ints then a tuple of ints


def can_connect(topology: NodeTopology, free: Iterable[int], count: int, minimum: Tier) -> bool:
    """True when ``count`` of the ``free`` GPUs can form a set of at least tier ``minimum``: a connected NVLink
    component of the free GPUs with ``count`` GPUs (NVLINK), or one PCIe root (PCIE_ROOT) or NUMA node (NUMA)
    holding ``count`` free GPUs; SYSTEM: ``count`` free GPUs. Exact (a connected component of ``n ≥ count`` GPUs
    holds a connected set of ``count``)."""
    pool = set(free)
    if count < 1 or len(pool) < count:
        return count < 1
    if count == 1 or minimum is Tier.SYSTEM:
        return True
    left = set(pool)
    while left:
        start = left.pop()
        seen, stack = {start}, [start]
        while stack:
            current = stack.pop()
            for other in [i for i in left if topology.links(current, i)]:
                left.discard(other)
                seen.add(other)
                stack.append(other)
        if len(seen) >= count:
            return True
    if minimum is Tier.NVLINK:
        return False
    roots: dict[str, int] = {}
    numa: dict[int, int] = {}
    for index in pool:
        gpu = topology.gpus.get(index)
        if gpu is not None and gpu.pcie_root:
            roots[gpu.pcie_root] = roots.get(gpu.pcie_root, 0) + 1
        if gpu is not None and gpu.numa_node is not None:
            numa[gpu.numa_node] = numa.get(gpu.numa_node, 0) + 1
    if any(n >= count for n in roots.values()):
        return True
    return minimum is Tier.NUMA and any(n >= count for n in numa.values())
