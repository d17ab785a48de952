"""What one scheduling decision over candidate nodes returns to its driver: :class:`Decision`.

Invariant: every candidate the decision did not choose carries a reason (the node's first failing filter, the MIG
plugin's reason, "lj-runtimekit chose node X" or "unknown"), so kube-scheduler's ``FailedNodes`` and the standalone
loop's events never show a node without an explanation.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.allocation import PodAllocation

UNKNOWN_NODE = "node unknown to lj-runtimekit (no Node object seen yet)"
NOT_SERVING = "this lj-runtimekit scheduler replica is not the leader (or is still rebuilding its ledger)"


def chose_reason(node: str) -> str:
    """The reason given to candidates our policy did not choose: ``lj-runtimekit chose node <node>``."""
    return f"lj-runtimekit chose node {node}"


@attrs.frozen
class Decision:
    """The outcome of :meth:`~services.scheduler.service.SchedulerService.decide` for one pod.

    ``allocation``: the reservation made (its node is the one chosen), or None; ``reasons``: candidate node → why it
    was not chosen; ``error``: why no decision was taken at all (this replica does not serve), else empty;
    ``managed``: False when the pod asks for none of our resources and is left to the caller untouched (every
    candidate passes); ``reason``: the cycle's own summary when nothing was chosen.
    """

    uid: str
    allocation: PodAllocation | None = None
    reasons: Mapping[str, str] = attrs.field(factory=dict)
    error: str = ""
    managed: bool = True
    reason: str = ""

    @property
    def node(self) -> str | None:
        """The chosen node, or None."""
        return None if self.allocation is None else self.allocation.node
