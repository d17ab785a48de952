"""DRA claims in the scheduler's cycle: read a pod's ResourceClaims, place them with the pod, write them.

For a pending pod with ``spec.resourceClaims``:

1. :meth:`ClaimCycle.claim_need` takes each claim as the claim informer last showed it
   (:meth:`~domain.scheduling.sync.claims.ClaimEvents.seen_claim`), reading from the API (``ports.claim_writes``,
   outside the lock) only one it has not shown yet, and turns them into a :class:`~domain.dra.allocate.ClaimNeed`;
   a claim not allocated yet that another pod's reservation already expects (that pod's commit is in flight, with
   asynchronous binding) is that pod's to allocate: this pod waits, so the claim's asks are never reserved twice;
   in standalone mode a refusal (:mod:`domain.dra.allocate`) is the pod's FailedScheduling reason and the pod is
   retried; in extender mode a refused claim is left out of the choice (kube-scheduler allocates it);
2. the cycle (:meth:`~.service.SchedulerService.schedule_pod` with ``claims``) places the pod's own containers and
   the claims' asks together, with the pod's policy over the one ledger, restricted to the node of its allocated
   (shared) claims; the reservation holds all of it, and the ledger expects the claims
   (:meth:`~domain.scheduling.sync.claims.ClaimEvents.expect_claims`): whenever one of them is booked as
   allocated — from our write's answer or from the informer, whichever comes first, or from kube-scheduler's write
   in extender mode — its ask containers leave the reservation in the same step, so no GPU is ever counted twice;
3. standalone commit (:meth:`~.service.SchedulerService.commit` with ``claims``), before the binding: each
   unallocated claim is allocated (:func:`~domain.dra.allocate.claim_results`) and reserved for the pod, each shared
   claim not yet reserved for it reserved, each write preconditioned on the resourceVersion read in step 1 (a
   claim someone changed meanwhile — allocated first, deleted — fails the commit and the pod is retried with the
   claim read again) and preceded by the leadership check (a deposed replica writes nothing more). The plan
   annotation carries only the pod's own containers (:func:`~domain.dra.allocate.without_asks`);
4. when the binding fails, the pod leaves the claims' ``reservedFor`` and the claims this commit allocated are
   deallocated (best effort, logged; kube-controller-manager's resourceclaim controller also deallocates a claim
   reserved for nobody) — except when this replica lost leadership: the claims stay reserved for the pod, and the
   next leader finds them allocated and binds the pod to their node without writing them again.

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
        """What ``pod``'s claims ask (step 1), or why they cannot be used now. May read the API; call outside the lock.
        Never raises for bad claim content or a failed read (both are the reason returned)."""
        if self.claim_writes is None:
            return NO_WRITER
        try:
            names = [name for _, name in claim_names(pod)]
            with self._lock:
                claims = {name: self.sync.seen_claim(pod.namespace, name) for name in names}
            for name in [n for n, claim in claims.items() if claim is None]:  # not seen by the informer yet
                claims[name] = self.claim_writes.get(pod.namespace, name)
            need = claim_need(pod, claims, self.protocol)
            with self._lock:
                busy = [(ask.claim, owner) for ask in need.asks
                        if (owner := self.sync.expecting(ask.claim.uid)) not in (None, pod.uid)]
            if busy:
                claim, owner = busy[0]
                return (f"ResourceClaim {claim.key} is being allocated for another pod using it (UID {owner}), "
                        "whose binding is in flight; retried once that allocation is written")
            return need
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
                      written: list[tuple[ClaimAllocation, bool]], may_write: Callable[[], bool]) -> None:
        """Step 3: allocate and reserve the claims, each write after ``may_write`` said yes (a deposed replica
        writes nothing more: :class:`NotLeaderError`), appending each claim written, as stored, with whether this
        commit allocated it, to ``written`` (the caller's, so that it can roll back whatever happened); each is
        booked at once, which hands its ask containers over from the pod's reservation to the claim's record
        (:meth:`~domain.scheduling.sync.claims.ClaimEvents.expect_claims`). Raises :class:`CommitError` naming the
        pod, node and claim."""
        api = self.claim_writes
        if api is None:
            raise CommitError(f"pod {pod.key}: {NO_WRITER}")
        with self._lock:
            gpus = self.sync.ledger.inventory(allocation.node).gpus
            mig = self.sync.books.reservation(pod.uid)  # before any claim's instances leave it
        consumer = Consumer(pod.name, pod.uid)
        try:
            for ask in claims.asks:
                results = claim_results(ask, allocation, gpus, self.protocol, _share_id, mig)
                self._may_write_claim(pod, may_write)
                written.append((api.allocate(ask.claim, results, node=allocation.node, consumer=consumer), True))
                self._book_written(written[-1][0])
            for claim in claims.shared:
                if pod.uid not in claim.reserved_for:
                    self._may_write_claim(pod, may_write)
                    written.append((api.reserve(claim, consumer), False))
                    self._book_written(written[-1][0])
        except (ClusterError, ClaimRefusedError) as error:
            raise CommitError(f"pod {pod.key}: ResourceClaims not allocated on node {allocation.node}: {error}"
                              ) from error
        log.info("claims allocated", extra=fields(pod=pod.key, node=allocation.node,
                                                  claims=[c.key for c, _ in written]))

    @staticmethod
    def _may_write_claim(pod: PodObject, may_write: Callable[[], bool]) -> None:
        if not may_write():
            raise NotLeaderError(f"pod {pod.key}: this replica lost leadership while allocating its claims")

    def _book_written(self, claim: ClaimAllocation) -> None:
        with self._lock:
            self.sync.on_claim(claim)
            self._claim_changed(claim)

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
                self._may_have_room()  # deallocated or one consumer fewer: the books gave its room back
                self._claim_changed(stored)

