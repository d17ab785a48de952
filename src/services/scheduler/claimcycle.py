"""DRA claims in the standalone scheduler's cycle: read a pod's ResourceClaims, place them with the pod, write them.

For a pending pod with ``spec.resourceClaims`` (standalone mode; in extender mode kube-scheduler's DynamicResources
plugin allocates):

1. :meth:`ClaimCycle.claim_need` reads each claim (``ports.claim_writes``, outside the lock) and turns them into a
   :class:`~domain.dra.allocate.ClaimNeed`; a refusal (:mod:`domain.dra.allocate`) is the pod's FailedScheduling
   reason, and the pod is retried;
2. the cycle (:meth:`~.service.SchedulerService.schedule_pod` with ``claims``) places the pod's own containers and
   the claims' asks together, with the pod's policy over the one ledger, restricted to the node of its allocated
   (shared) claims; the reservation holds all of it;
3. the commit (:meth:`~.service.SchedulerService.commit` with ``claims``), before the binding: each unallocated claim
   is allocated (:func:`~domain.dra.allocate.claim_results`) and reserved for the pod, each shared claim reserved
   for it, every write preconditioned on the resourceVersion read in step 1, so a claim someone changed meanwhile
   (allocated first, deleted) fails the commit and the pod is retried with the claim read again. Then, under the
   lock, the written claims are booked as claim records (the informer's event for the same claim changes nothing
   more) and the pod's reservation shrinks to its own containers, which alone its plan annotation carries: nothing
   is counted twice;
4. when the binding fails, the pod leaves the claims' ``reservedFor`` and the claims this commit allocated are
   deallocated (best effort, logged; kube-controller-manager's resourceclaim controller also deallocates a claim
   reserved for nobody).

Deallocation when the last pod using a claim ends is kube-controller-manager's, as with kube-scheduler; the claim
informer then releases the record. After a restart the books rebuild from the claims' status and the pods' plans.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection

from domain.allocation import PodAllocation
from domain.dra.allocate import ClaimNeed, ClaimRefusedError, claim_names, claim_need, claim_results
from domain.dra.claims import ClaimAllocation
from domain.kube.objects import PodObject
from domain.request import PodRequest
from ports.claim_writes import Consumer
from ports.cluster import ClusterError
from services._shared.logs import fields

from .commit import CommitError, NotLeaderError
from .upkeep import ServiceUpkeep

log = logging.getLogger(__name__)

NO_WRITER = ("the pod uses ResourceClaims and this scheduler allocates none (started without DRA claims, "
             "--no-dra-claims); leave the pod to kube-scheduler")


def _share_id() -> str:
    return str(uuid.uuid4())


class ClaimCycle(ServiceUpkeep):
    """Steps 1, 3 and 4 of the module docstring for :class:`~.service.SchedulerService`."""

    def claim_need(self, pod: PodObject) -> ClaimNeed | str:
        """What ``pod``'s claims ask (step 1), or why they cannot be used now. API reads; call outside the lock.
        Never raises for bad claim content or a failed read (both are the reason returned)."""
        if self.claim_writes is None:
            return NO_WRITER
        try:
            names = claim_names(pod)
            claims = {name: self.claim_writes.get(pod.namespace, name) for _, name in names}
            return claim_need(pod, claims, self.protocol)
        except ClaimRefusedError as error:
            return str(error)
        except ClusterError as error:
            return f"the pod's ResourceClaims could not be read: {error}"

    def _claim_request(self, pod: PodObject, claims: ClaimNeed, candidates: Collection[str] | None
                       ) -> tuple[PodRequest, Collection[str] | None]:
        """The request of ``pod`` with its claims' asks, and the candidates narrowed to the node its allocated
        claims pin it to (step 2). Under the lock. Raises :class:`~domain.errors.InvalidRequestError`."""
        request = claims.request(self.sync.requests.get(pod))
        if claims.node is not None:
            candidates = [claims.node] if candidates is None or claims.node in candidates else []
        return request, candidates

    def _write_claims(self, pod: PodObject, allocation: PodAllocation, claims: ClaimNeed,
                      may_write: Callable[[], bool]) -> list[tuple[ClaimAllocation, bool]]:
        """Step 3: allocate and reserve the claims, then book them and shrink the reservation; returns each claim
        written, as stored, with whether this commit allocated it. ``may_write`` is asked first (a deposed replica
        writes nothing: :class:`NotLeaderError`). Raises :class:`CommitError` (naming the pod, node and claim)
        after rolling back what it wrote."""
        api = self.claim_writes
        if api is None:
            raise CommitError(f"pod {pod.key}: {NO_WRITER}")
        if not may_write():
            raise NotLeaderError(f"pod {pod.key}: this replica lost leadership before allocating its claims")
        with self._lock:
            gpus = self.sync.ledger.inventory(allocation.node).gpus
        consumer = Consumer(pod.name, pod.uid)
        written: list[tuple[ClaimAllocation, bool]] = []
        try:
            for ask in claims.asks:
                results = claim_results(ask, allocation, gpus, self.protocol, _share_id)
                written.append((api.allocate(ask.claim, results, node=allocation.node, consumer=consumer), True))
            for claim in claims.shared:
                if pod.uid not in claim.reserved_for:
                    written.append((api.reserve(claim, consumer), False))
        except (ClusterError, ClaimRefusedError) as error:
            self._unwrite_claims(pod, written)
            raise CommitError(f"pod {pod.key}: ResourceClaims not allocated on node {allocation.node}: {error}"
                              ) from error
        with self._lock:
            self.sync.forget(pod.uid)
            for claim, _ in written:
                self.sync.on_claim(claim)
            self.sync.assume(claims.pod_part(allocation))
        log.info("claims allocated", extra=fields(pod=pod.key, node=allocation.node,
                                                  claims=[c.key for c, _ in written]))
        return written

    def _unwrite_claims(self, pod: PodObject, written: list[tuple[ClaimAllocation, bool]]) -> None:
        """Step 4: take ``pod`` out of the claims' ``reservedFor``, deallocating those it allocated. Never raises:
        a failed write is logged (the resourceclaim controller deallocates a claim reserved for nobody)."""
        api = self.claim_writes
        if api is None:
            return
        for claim, allocated in reversed(written):
            try:
                stored = api.unreserve(claim, pod.uid, deallocate=allocated)
            except Exception as error:  # a rollback is best effort; the log says what is left
                log.warning("claim not rolled back", extra=fields(pod=pod.key, claim=claim.key, error=str(error)))
                continue
            with self._lock:
                self.sync.on_claim(stored)

