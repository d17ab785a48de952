"""Tie rules: how one node is chosen among equally scored best nodes.

The published experiment (docs/trace-replay.md §3.4) gives ties to the lexicographically smallest node name,
where every name carries a random ``%04d-`` prefix drawn once per run: first-fit over a random node order fixed
for the whole run (``fixed-order``). Uniform random ties (kube-scheduler's reservoir sampling, ``random``) cost
FGD about 5 pp of allocation on the trace. ``name`` is the plain lexicographic rule.
"""

from __future__ import annotations

import numpy as np

from domain.errors import UnknownPolicyError
from domain.ledger import ClusterLedger
from domain.scheduling.framework.cycle import I64, TieBreaker


class FixedOrderTieBreak:
    """Ties go to the node ranked first in a random order drawn once (per run) from ``rng``.

    Nodes present at construction are ranked by a permutation over their sorted names (§2.2 step 7); nodes added
    later rank after them, in arrival order.
    """

    name = "fixed-order"

    def __init__(self, ledger: ClusterLedger, rng: np.random.Generator) -> None:
        names = sorted(ledger.node_names())
        permutation = rng.permutation(len(names))
        self._rank: dict[str, int] = {n: int(r) for n, r in zip(names, permutation, strict=True)}
        self._by_slot: I64 = np.zeros(0, np.int64)
        self._seen_generation = -1

    def rank(self, name: str) -> int:
        """The node's position in the run's order (0 = first)."""
        if name not in self._rank:
            self._rank[name] = len(self._rank)
        return self._rank[name]

    def _slot_ranks(self, ledger: ClusterLedger) -> I64:
        if len(self._by_slot) != ledger.rows or self._seen_generation != ledger.node_set_generation:
            ranks = np.full(ledger.rows, np.iinfo(np.int64).max, np.int64)
            for name in ledger.node_names():
                ranks[ledger.slot(name)] = self.rank(name)
            self._by_slot = ranks
            self._seen_generation = ledger.node_set_generation
        return self._by_slot

    def pick(self, ledger: ClusterLedger, tied: I64) -> int:
        """The tied slot that comes first in the run's order."""
        return int(tied[int(np.argmin(self._slot_ranks(ledger)[tied]))])


class RandomTieBreak:
    """Uniform among tied nodes on every decision (kube-scheduler's default behaviour)."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick(self, ledger: ClusterLedger, tied: I64) -> int:
        """A uniformly random tied slot."""
        return int(tied[int(self.rng.integers(len(tied)))])


class NameTieBreak:
    """Lexicographically smallest node name."""

    name = "name"

    def pick(self, ledger: ClusterLedger, tied: I64) -> int:
        """The tied slot whose node name sorts first."""
        return min((int(s) for s in tied), key=ledger.name)


TIE_BREAKS = ("fixed-order", "random", "name")


def make_tie_breaker(name: str, ledger: ClusterLedger, rng: np.random.Generator) -> TieBreaker:
    """Build a tie rule by name. Raises :class:`UnknownPolicyError` for an unknown name."""
    if name == "fixed-order":
        return FixedOrderTieBreak(ledger, rng)
    if name == "random":
        return RandomTieBreak(rng)
    if name == "name":
        return NameTieBreak()
    raise UnknownPolicyError(name, list(TIE_BREAKS))
