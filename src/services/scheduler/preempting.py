"""The scheduler service's preemption entries: kube-scheduler's proposed victims minimised (extender mode) and the
standalone loop's own victim choice, nomination and hold (:mod:`.nominations`, :mod:`.preemption`).

A pod with DRA claims preempts with what its unallocated claims ask (:mod:`.claimcycle`), on the node its
allocated claims pin it to when they do; a victim frees, besides its own GPUs, those of the claims reserved for it
alone (:meth:`domain.scheduling.sync.claims.ClaimEvents.claims_held`): deleting it ends its claims' only
reservation, and kube-controller-manager's resourceclaim controller then deallocates them (a claim shared with
another pod frees nothing). PodDisruptionBudgets are listed outside the lock: once per ``preempt`` verb in extender
mode, and in standalone mode only for a pod some victim set makes fit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from domain.dra.allocate import ClaimNeed
from domain.errors import InvalidRequestError, UnknownPolicyError
from domain.kube.budgets import DisruptionBudget
from domain.kube.objects import PodObject
from domain.request import PodRequest
from domain.scheduling.preemption.victims import Victims
from ports.cluster import ClusterError
from services._shared.logs import fields

from .nominations import plan_preemption
from .preemption import NodeVictims, minimise
from .upkeep import ServiceUpkeep

log = logging.getLogger(__name__)


class PreemptionEntries(ServiceUpkeep):
    """Preemption for :class:`~.service.SchedulerService` (module docstring)."""

    def preempt(self, pod: PodObject, proposals: Mapping[str, NodeVictims]) -> dict[str, NodeVictims]:
        """kube-scheduler's proposed victims per node for pending ``pod``, minimised with our per-GPU books
        (:mod:`.preemption`); nodes where no victim set makes the pod fit are left out. A replica that is not
        serving answers with no node. Never raises for bad pod content; changes nothing."""
        if not self.serving:
            return {}
        budgets = self._list_budgets(pod)
        with self._lock:
            return minimise(self.sync, pod, proposals, budgets=budgets)

    def _list_budgets(self, pod: PodObject) -> list[DisruptionBudget] | None:
        """The cluster's PodDisruptionBudgets for one preemption of ``pod`` (an API call: outside the lock); None
        when none are read (no port, or the list failed: logged)."""
        if self.budgets is None:
            return None
        try:
            return self.budgets.list_budgets()
        except ClusterError as error:
            log.warning("PodDisruptionBudgets not read: preempting as if none protected a pod",
                        extra=fields(pod=pod.key, error=str(error)))
            return None

    def _plan(self, pod: PodObject, claims: ClaimNeed | None,
              budgets: Sequence[DisruptionBudget]) -> tuple[PodRequest, Victims | str] | str:
        """Under the lock: ``pod``'s request (with its claims' asks) and the victim set :func:`plan_preemption`
        chooses with ``budgets``, or why the request cannot be read."""
        try:
            request = self.sync.requests.get(pod)
            request = request if claims is None else claims.request(request)
            scheduler = self.schedulers.get(self.schedulers.policy_for(pod))
        except (InvalidRequestError, UnknownPolicyError) as error:
            return str(error)
        earlier = self.nominations.get(pod.uid)
        return request, plan_preemption(self.sync, scheduler, pod, request, held=self.nominations.held_for(pod),
                                        budgets=budgets, only=None if claims is None else claims.node,
                                        kept_claims=() if claims is None else [c.uid for c in claims.shared],
                                        gone=() if earlier is None else earlier.victims)

    def preempt_for(self, pod: PodObject, *, claims: ClaimNeed | None = None) -> Victims | str:
        """Standalone preemption for pending ``pod`` that fits nowhere, with its DRA ``claims`` when it has some:
        the victim set chosen (and the pod nominated to its node, with the hold) or why there is none
        (:func:`.nominations.plan_preemption`; the pod's nomination, if any, then ends). Victims with empty
        ``pods``: wait for the terminating ones. Never raises for bad pod content. The budgets are listed only when
        some victim set makes the pod fit (they choose among victim sets, they never make one fit), so a pod that
        no eviction can help costs no API call."""
        with self._lock:
            first = self._plan(pod, claims, ())
        if isinstance(first, str):
            return first
        if isinstance(first[1], Victims) and self.budgets is not None:
            budgets = self._list_budgets(pod) or ()
            with self._lock:
                first = self._plan(pod, claims, budgets)
            if isinstance(first, str):
                return first
        request, planned = first
        with self._lock:
            if isinstance(planned, Victims):
                self.nominations.add(pod, request, planned)
            else:
                self.nominations.end(pod.uid)  # no victim set makes it fit anywhere: no node is held for it
            return planned

    def follow(self, pod: PodObject) -> None:
        """Under the lock: keep this replica's nomination of pending ``pod`` equal to its ``status.nominatedNodeName``
        when that nomination is read from the field (kube-scheduler's after its preemption, in extender mode with
        ``config.follow_nominations``; a previous leader's, restored by :meth:`_adopted`): a followed nomination
        has no victims of its own (the pods terminating on its node count as freed,
        :meth:`.nominations.Nominations.blocked_by`), so our ``filter`` keeps a lower-priority pod from taking
        what they free. A cleared or moved field ends or moves it; a node where no victim set would make the pod
        fit ends it; a pod holding a reservation in our books is not nominated (it is being placed). This
        replica's own nominations (the standalone loop's) are left to the loop. Pods with DRA claims are not
        followed. Never raises for bad pod content."""
        node = pod.nominated_node_name
        current = self.nominations.get(pod.uid)
        if current is not None and not current.followed:
            return
        if not node or pod.node_name or pod.phase.terminal or pod.resource_claims or pod.uid in self.sync.assumed:
            if current is not None:
                self.nominations.end(pod.uid)
            return
        if current is not None and current.node == node:
            return
        try:
            request = self.sync.requests.get(pod)
            scheduler = self.schedulers.get(self.schedulers.policy_for(pod))
        except (InvalidRequestError, UnknownPolicyError):
            return
        self.sync.record_constraints(pod)
        planned = plan_preemption(self.sync, scheduler, pod, request, only=node)
        if isinstance(planned, Victims):
            self.nominations.add(pod, request, planned, followed=True)
        else:
            self.nominations.end(pod.uid)

    def _adopted(self, pods: Sequence[PodObject]) -> None:
        """After a rebuild or resync (under the lock): nominations whose pod the listing no longer shows pending
        end; the pending pods' ``status.nominatedNodeName`` is followed (:meth:`follow`) for every pod in extender
        mode, and in standalone mode for our scheduler's pods this replica holds no nomination of (a previous
        leader's: nominations otherwise live in one replica's memory) and for followed ones."""
        pending = {p.uid: p for p in pods if not p.node_name and not p.phase.terminal}
        for nomination in self.nominations.all():
            if nomination.uid not in pending:
                self.nominations.end(nomination.uid)
        ours = self.protocol.scheduler_name
        for pod in pending.values():
            current = self.nominations.get(pod.uid)
            if (self.config.follow_nominations or (current is not None and current.followed)
                    or (current is None and pod.nominated_node_name and pod.scheduler_name == ours)):
                self.follow(pod)

    def nominated_node(self, uid: str) -> str:
        """The node pod ``uid`` is nominated to in this replica's books, or ""."""
        with self._lock:
            nomination = self.nominations.get(uid)
            return "" if nomination is None else nomination.node
