"""What one scheduling decision over candidate nodes returns to its driver: :class:`Decision`.

Invariant: when no node is chosen, every candidate carries a reason (the node's first failing filter, the MIG
plugin's reason, or "unknown"), so kube-scheduler's ``FailedNodes`` (its FitError) never shows a node without an
explanation; when a node is chosen there are no reasons (kube-scheduler 1.20 reads them only for a FitError, when
no feasible node is left: ``pkg/scheduler/core/generic_scheduler.go``, ``Schedule``).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.allocation import PodAllocation

UNKNOWN_NODE = "node unknown to lj-runtimekit (no Node object seen yet)"
NOT_SERVING = "this lj-runtimekit scheduler replica is not the leader (or is still rebuilding its ledger)"


@attrs.frozen
class Decision:
    """The outcome of :meth:`~services.scheduler.service.SchedulerService.decide` for one pod.

    ``allocation``: the reservation made (its node is the one chosen), or None; ``reasons``: candidate node → why it
    cannot take the pod (empty when a node was chosen); ``error``: why no decision was taken at all (this replica
    does not serve), else empty; ``managed``: False when the pod asks for none of our resources and is left to the
    caller untouched (every candidate passes); ``reason``: the cycle's own summary when nothing was chosen.
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
