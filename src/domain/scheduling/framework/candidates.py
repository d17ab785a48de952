"""Scheduling among the nodes another scheduler offers, and explaining per node why a pod does not fit.

The kube-scheduler extender driver (``ExtenderArgs.NodeNames``, k8s.io/kube-scheduler/extender/v1) receives, for each
pod, the names of the nodes that passed kube-scheduler's own filters. To keep our policy's ranking *and* tie rule
(extender priorities are only 0..10 and kube-scheduler breaks equal totals at random), the driver runs our whole cycle
restricted to those names and hands back only the node it chose; every other candidate is reported as failed with a
reason.

* :class:`CandidateNodes` is the filter that restricts a cycle to the node names its :class:`CycleState` carries
  (``candidates``, given to :meth:`Scheduler.schedule` for that cycle only); a cycle without them is unrestricted (the
  standalone loop).
* :func:`rejection_reasons` re-runs a profile's filters with per-node bookkeeping, for the ``FailedNodes`` map
  of an unschedulable pod (``Scheduler.feasible`` only counts nodes per reason).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState, Scheduler

NOT_ADMITTING = "node not admitting pods (quarantined or cordoned)"
"""Reason of nodes the ledger itself refuses (same text as :meth:`Scheduler.feasible`)."""


class CandidateNodes:
    """Keeps only the nodes named in the cycle's ``state.candidates``; a cycle without them passes every node.

    Names the ledger does not know are ignored here (the caller reports them).
    """

    name = "CandidateNodes"
    reason = "not among the candidate nodes offered for this pod"

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` (bool mask over ledger slots) restricted to the cycle's candidate nodes."""
        names = state.candidates
        if names is None:
            return candidates
        passed: BoolArray = candidates & ledger.select(names)[1]
        return passed


def rejection_reasons(
    scheduler: Scheduler, pod: PodRequest, names: Collection[str], *, fallback: str
) -> dict[str, str]:
    """Why each of ``names`` cannot take ``pod`` under ``scheduler``'s profile: node name → reason.

    Runs the profile's filters in order on a fresh :class:`CycleState`, like :meth:`Scheduler.feasible`, and
    gives each node the reason of the first filter that removed it (a quarantined node: the quarantine's reason).
    Nodes the filters keep (the pod was refused
    later, at planning or reservation) get ``fallback``; names the ledger does not know are left out. Does not
    change the ledger.
    """
    ledger = scheduler.ledger
    wanted = ledger.select(names)[1]
    reasons: dict[int, str] = {}
    mask = ledger.active & wanted
    for slot in np.flatnonzero(mask & ~ledger.admitting):
        why = ledger.quarantine.get(ledger.name(int(slot)))
        reasons[int(slot)] = NOT_ADMITTING if why is None else f"{NOT_ADMITTING}: {why}"
    mask = mask & ledger.admitting
    state = CycleState()
    for plugin in scheduler.profile.filters:
        if not mask.any():
            break
        passed = plugin.filter(pod, ledger, state, mask)
        reason = state.reasons.pop(plugin.name, plugin.reason)
        for slot in np.flatnonzero(mask & ~passed):
            reasons[int(slot)] = reason
        mask = passed
    for slot in np.flatnonzero(mask):
        reasons[int(slot)] = fallback
    return {ledger.name(slot): reason for slot, reason in sorted(reasons.items())}
