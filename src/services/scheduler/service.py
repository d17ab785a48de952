"""The scheduler component's service: one ledger kept equal to the cluster, one scheduler per policy, commits.

Both drivers (the kube-scheduler extender and the standalone loop) call into one :class:`SchedulerService`:
informer events keep the books (:class:`~domain.scheduling.sync.LedgerSync`); :meth:`SchedulerService.decide` and
:meth:`SchedulerService.schedule_pod` reserve a placement; :meth:`SchedulerService.commit` binds with the plan in the
same write, and releases the reservation on any failure; resyncs repair drift without stalling events; only the leader
of the current term, with its books rebuilt, schedules and writes. Invariants: a reservation exists exactly while
its pod is pending and ours (:mod:`.reservations`); a listing older than the informers is never adopted
(:mod:`.listing`). The rules in full: ``docs/scheduler-service.md``.

Thread safety: one private re-entrant lock serialises informer events, cycles and the adoption step of resyncs;
API calls (a commit's writes, a resync's LISTs) and rebuilds run outside it, the commit protected by the
reservation. Readers take it through :meth:`SchedulerService.books`.

Split by responsibility: the shared state, the lock and the views are :mod:`.state`; reservation expiry, ticks,
resyncs and leadership terms are :mod:`.upkeep`; informer events and cycles (decide, schedule, commit) are here.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.dra.allocate import ClaimNeed, without_asks
from domain.dra.booking import claim_record_uid
from domain.dra.claims import ClaimAllocation
from domain.dra.slices import ResourceSlice
from domain.errors import DomainError, InvalidRequestError, UnknownPolicyError
from domain.kube.annotations import encode_plan
from domain.kube.objects import NodeObject, PodObject
from domain.kube.translate import mig_container_plans, protocol_mismatches
from domain.request import PodRequest
from domain.scheduling.framework.candidates import rejection_reasons
from domain.scheduling.framework.cycle import Scheduler, ScheduleResult
from domain.scheduling.mig.cycle import mig_reasons
from domain.scheduling.sync import Tombstone
from services._shared.logs import fields

from .claimcycle import ClaimCycle
from .commit import CommitError, NotLeaderError, write_plan_and_bind
from .decision import NOT_SERVING, UNKNOWN_NODE, Decision
from .listing import StaleListingError, drift_count
from .policies import ServiceConfig
from .preempting import PreemptionEntries
from .state import SchedulerCluster

log = logging.getLogger(__name__)

__all__ = ["CommitError", "NotLeaderError", "SchedulerCluster", "SchedulerService", "ServiceConfig",
           "StaleListingError", "drift_count"]


class SchedulerService(PreemptionEntries, ClaimCycle):
    """Ledger, schedulers and commits of one scheduler replica (module docstring).

    ``clock`` returns epoch seconds (inventory heartbeats are epoch times); ``is_leader`` says whether this
    replica may write; ``commit_cluster`` carries the commit's API calls (default: ``cluster``). Listeners (set
    by the drivers, called under the lock, must be quick): ``pod_listeners(pod)`` after every pod add/update,
    ``deletion_listeners(pod)`` after a pod delete, ``change_listeners()`` when capacity may have appeared (node
    added, pod deleted or finished, claim deallocated, reservation given back), ``room_listeners()`` and
    ``claim_listeners(namespace, name)`` (:class:`~.state.ServiceState`).
    """

    # ------------------------------------------------------------------ informer events
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated (LedgerSync rules); a new node wakes waiting pods, an update that changed what a fit
        reads (:meth:`_node_view`) counts as room. Never raises for bad node content (the node is gated instead:
        ``sync.gates``)."""
        with self._lock:
            new = not self._known(node.name)
            if not self.listing.holds_node(node.resource_version):
                before = self._node_view(node.name)
                self.sync.on_node(node)
                if self._node_view(node.name) != before:
                    self._may_have_room()  # a heartbeat alone changes nothing a fit reads
            if new and self._known(node.name):
                self._changed()
            appeared = self.notices.track_protocol(node.name, protocol_mismatches(node, self.protocol))
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)
        self.notices.protocol_mismatch(node, appeared)

    def on_node_deleted(self, node: NodeObject | str) -> None:
        """Node deleted (its object or its name); its reservations are dropped. Never raises."""
        with self._lock:
            name = node if isinstance(node, str) else node.name
            self.sync.on_node_deleted(name)
            self.nominations.node_deleted(name)
            self.notices.track_protocol(name, {})
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    def on_pod(self, pod: PodObject) -> None:
        """Pod added or updated: books, observed pod classes, listeners; a finished pod wakes waiting pods. Idempotent
        (B04); never raises for bad pod content (recorded in ``sync.problems``). A new UID under a known
        ``namespace/name`` first forgets the old UID (its delete was missed)."""
        with self._lock:
            previous = self.sync.uid_of(pod.key)
            replaced = previous is not None and previous != pod.uid
            if previous is not None and replaced:
                self.sync.on_pod_deleted(Tombstone(pod.key))  # names ``previous``
                self._forget(previous)
            held = self.sync.holds.holding(pod.uid)
            booked = self.sync.ledger.record(pod.uid)
            if not self.listing.holds_pod(pod.resource_version):
                self.sync.on_pod(pod)
            if booked is not None and self.sync.ledger.record(pod.uid) != booked:
                self._may_have_room()  # its booking moved or shrank, say
            unheld = held and not self.sync.holds.holding(pod.uid)  # its devices came: twins may come now
            if pod.node_name or pod.phase.terminal:
                self._reservations.confirmed(pod.uid)
                self.nominations.end(pod.uid)
            elif self._follows(pod) and not self.listing.holds_pod(pod.resource_version):
                self.follow(pod)
            self.schedulers.observe(pod)
            for listener in self.pod_listeners:
                listener(pod)
            if pod.phase.terminal or replaced or unheld:
                self._changed()
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    def _follows(self, pod: PodObject) -> bool:
        """True when ``pod``'s nomination follows its status field (:meth:`follow`)."""
        nomination = self.nominations.get(pod.uid)
        return self.config.follow_nominations or (nomination is not None and nomination.followed)

    def on_pod_deleted(self, item: PodObject | Tombstone) -> None:
        """Pod deleted, plainly or as a :class:`Tombstone` (B01); releases what it held. Never raises."""
        with self._lock:
            self.sync.on_pod_deleted(item)
            uid = item.uid if isinstance(item, PodObject) else (item.obj.uid if item.obj is not None else None)
            if uid is not None:
                self._forget(uid)
                self.nominations.end(uid)
            for listener in self.deletion_listeners:
                listener(item)
            self._changed()
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    def on_claim(self, claim: ClaimAllocation) -> None:
        """ResourceClaim added or updated: book what its allocation holds of our driver, release what it no longer
        holds (:mod:`domain.scheduling.sync.claims`); what was counted on the safe side is logged once per change.
        Never raises for bad claim content."""
        with self._lock:
            before = self.sync.claim_problems.get(claim.key)
            held = self.sync.holds_claim(claim.uid)
            booked = self.sync.ledger.record(claim_record_uid(claim.uid))
            if not self.listing.holds_claim(claim.resource_version):
                self.sync.on_claim(claim)
            if booked is not None and self.sync.ledger.record(claim_record_uid(claim.uid)) != booked:
                self._may_have_room()
            self._claim_changed(claim)
            problem = self.sync.claim_problems.get(claim.key)
            if held and not self.sync.holds_claim(claim.uid):
                self._changed()  # deallocated: capacity may have appeared
            events = self.alerts.collect(self.sync)
        if problem and problem != before:
            log.warning("DRA claim counted on the safe side", extra=fields(claim=claim.key, problem=problem))
        self.notices.emit(events)

    def on_claim_deleted(self, claim: ClaimAllocation) -> None:
        """ResourceClaim deleted: release what it held. Never raises."""
        with self._lock:
            if self.sync.on_claim_deleted(claim):
                self._changed()
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    def on_slice(self, resource_slice: ResourceSlice) -> None:
        """ResourceSlice added or updated: a node without a device plugin books the GPUs our DRA driver publishes
        (:mod:`domain.scheduling.sync.draslices`; another driver's slice is ignored); waiting pods are woken when it
        changed what a fit reads of a node (:meth:`_node_view`), not for a slice published again unchanged.
        Never raises for bad slice content (the node is gated instead)."""
        with self._lock:
            if not self.listing.holds_slice(resource_slice.resource_version):
                names = sorted(self.sync.slices.nodes_of(resource_slice))
                before = [self._node_view(name) for name in names]
                self.sync.on_slice(resource_slice)
                if [self._node_view(name) for name in names] != before:
                    self._changed()
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    def on_slice_deleted(self, resource_slice: ResourceSlice) -> None:
        """ResourceSlice deleted: as :meth:`on_slice`. Never raises."""
        with self._lock:
            self.sync.on_slice_deleted(resource_slice)
            self._may_have_room()  # its node is read again: a gate may lift
            events = self.alerts.collect(self.sync)
        self.notices.emit(events)

    # ------------------------------------------------------------------ cycles
    def decide(self, pod: PodObject, candidates: Sequence[str], *, rank_all_pods: bool = False,
               claims: ClaimNeed | None = None) -> Decision:
        """The one entry of a driver that offers candidate nodes (the extender's ``filter``): pending ``pod`` over
        ``candidates`` (node names) → :class:`Decision`, with the reservation made (:meth:`schedule_pod`); when no
        node is chosen, a reason for every candidate (nodes the ledger does not know, the first node filter or MIG
        reason that removes each), when one is, none (:mod:`.decision`). A pod asking for none of our resources is not
        ours (``managed`` False) unless ``rank_all_pods``. Never raises for bad pod content: an invalid request
        is every candidate's reason; a replica that is not serving answers with ``error`` only. ``claims``: what the
        pod's DRA claims ask, placed with it (:mod:`.claimcycle`; the devices stay kube-scheduler's choice)."""
        if not self.serving:
            return Decision(pod.uid, error=NOT_SERVING)
        names = list(candidates)
        with self._lock:
            try:
                request = self.sync.requests.get(pod)
                request = request if claims is None else claims.request(request)
            except InvalidRequestError as error:
                self.metrics.decision(scheduled=False, reason="invalid-request")
                return Decision(pod.uid, reasons=dict.fromkeys(names, f"invalid request: {error}"))
            if not (request.wants_gpu or request.wants_mig) and not rank_all_pods:
                return Decision(pod.uid, managed=False)
            known = self.sync.ledger.select(names)[0]
            reasons: dict[str, str] = {}
            if len(known) < len(names):
                kept = set(known)
                reasons = {n: UNKNOWN_NODE for n in names if n not in kept}
            if not known:
                return Decision(pod.uid, reasons=reasons, reason="no candidate node is known")
            result = self.schedule_pod(pod, candidates=known, claims=claims)
            if result.allocation is not None:
                return Decision(pod.uid, result.allocation)
            try:
                scheduler = self.schedulers.get(self.schedulers.policy_for(pod))
                if request.wants_mig:
                    reasons.update(mig_reasons(self.sync.books, scheduler, request, known, fallback=result.reason))
                else:
                    reasons.update(rejection_reasons(scheduler, request, known, fallback=result.reason))
            except DomainError:  # unknown policy and the like: the cycle's reason says it all
                reasons.update(dict.fromkeys(known, result.reason))
            for name in known:
                reasons.setdefault(name, result.reason)
            return Decision(pod.uid, reasons=reasons, reason=result.reason)

    def schedule_pod(self, pod: PodObject, *, candidates: Collection[str] | None = None,
                     claims: ClaimNeed | None = None) -> ScheduleResult:
        """One cycle for pending ``pod``, restricted to ``candidates`` (node names) when given, with its DRA
        ``claims`` (:mod:`.claimcycle`) when it has some; the placement is reserved in the ledger as an assumed
        pod. A pod already holding a reservation on a node among the candidates keeps it while
        :meth:`LedgerSync.reservation_problem` finds nothing (its resources are in the books already); otherwise it
        is released and the cycle runs again. Never raises for bad pod content: invalid requests and unknown
        policies come back unscheduled with a reason, and are counted in the metrics. A nominated pod placed on
        another node than its nomination's loses the nomination
        (:mod:`.nominations`)."""
        with self._lock:
            held = self.sync.assumed.get(pod.uid)
            if held is not None:
                if candidates is None or held.node in candidates:
                    problem = self.sync.reservation_problem(pod, held)
                    if not problem:
                        return ScheduleResult(pod.uid, held, reason="already reserved", feasible_nodes=1)
                    log.info("reservation no longer valid; deciding again",
                             extra=fields(pod=pod.key, node=held.node, reason=problem))
                self.release(pod.uid)
            try:
                scheduler = self.schedulers.get(self.schedulers.policy_for(pod))
                request, candidates = (None, candidates) if claims is None else self._claim_request(
                    pod, claims, candidates)
            except (UnknownPolicyError, InvalidRequestError) as error:
                invalid = isinstance(error, InvalidRequestError)
                self.metrics.decision(scheduled=False, reason="invalid-request" if invalid else "unknown-policy")
                return ScheduleResult(pod.uid, None, reason=f"invalid request: {error}" if invalid else str(error))
            offered = None if candidates is None else frozenset(candidates)
            result = self.sync.schedule(scheduler, pod, candidates=offered, request=request)
            result = self._respect_holds(scheduler, pod, result, offered, request)
            if result.allocation is not None:
                self._reservations.made(pod.uid)
                if claims is not None:
                    self.sync.expect_claims(pod.uid, claims.expected())
                nomination = self.nominations.get(pod.uid)
                if nomination is not None and nomination.node != result.allocation.node:
                    self.nominations.end(pod.uid)  # placed elsewhere: the hold on its old node is stale
            else:
                invalid = result.reason.startswith("invalid request")
                self.metrics.decision(scheduled=False, reason="invalid-request" if invalid else "unschedulable")
            return result

    def _respect_holds(self, scheduler: Scheduler, pod: PodObject, result: ScheduleResult,
                       offered: frozenset[str] | None, request: PodRequest | None) -> ScheduleResult:
        """``result`` when its node breaks no nominee's hold (:mod:`.nominations`), else the cycle again without
        that node (released first), until one does or none is left. Under the lock."""
        refused: dict[str, str] = {}
        while result.allocation is not None:
            why = self.nominations.blocked_by(self.sync, pod, result.allocation.node)
            if not why:
                return result
            self._reservations.release(pod.uid)
            refused[result.allocation.node] = why
            names = set(self.sync.ledger.node_names()) if offered is None else set(offered)
            result = self.sync.schedule(scheduler, pod, candidates=frozenset(names - set(refused)), request=request)
        if refused:
            held = "; ".join(refused.values())
            return attrs.evolve(result, reason=f"{result.reason}; {held}" if result.reason else held)
        return result

    def release(self, uid: str) -> bool:
        """Drop the reservation of ``uid`` (idempotent) and wake waiting pods when one existed (its room is free
        again, as kube-scheduler's forgetting an assumed pod: :class:`.reservations.Reservations`); returns True
        when one existed. Never raises."""
        with self._lock:
            return self._reservations.release(uid)

    def reservation(self, uid: str) -> PodAllocation | None:
        """The assumed (not yet confirmed) placement of ``uid``, if any."""
        with self._lock:
            return self.sync.assumed.get(uid)

    def committed(self, uid: str) -> bool:
        """True when ``uid`` was bound by this replica and the watch has not shown it bound yet."""
        with self._lock:
            return self._reservations.committed(uid)

    def commit(self, pod: PodObject, allocation: PodAllocation, *, claims: ClaimNeed | None = None,
               write_claims: bool = True) -> None:
        """Bind ``pod`` as ``allocation`` says, its plan annotation carried by the binding in the same write
        (:mod:`.commit`), after allocating its DRA ``claims`` (:mod:`.claimcycle`: undone when the binding fails;
        with ``write_claims`` False, in extender mode, kube-scheduler allocates them and the plan leaves them out).

        Re-books the reservation if it vanished meanwhile (a MIG pod's MIG reservation must still be held: its
        instances are not re-planned here). Raises :class:`NotLeaderError` on a standby (or when
        leadership ends before the binding) and :class:`CommitError` on any other failure — whatever the
        exception underneath, which is chained; in every case the reservation is released before the error
        propagates, and nothing stays written (the plan exists only on a bound pod). Messages name the pod.
        """
        uid, key = pod.uid, self.protocol.annotations.pod_plan
        with self._lock:
            if not self.is_leader():
                self.release(uid)
                raise NotLeaderError(f"pod {pod.key}: this replica is not the leader; it writes nothing")
            if self._reservations.committing(uid):
                raise CommitError(f"pod {pod.key} is already being bound")
            try:
                request = self.sync.requests.get(pod)
                wants_mig = (request if claims is None else claims.request(request)).wants_mig
                mig = self.sync.books.reservation(uid) if wants_mig else None
                if wants_mig and (mig is None or mig.node != allocation.node):
                    raise CommitError(f"pod {pod.key}: no MIG reservation on node {allocation.node} (it expired or "
                                      "was released); schedule the pod again")
                if self.sync.assumed.get(uid) != allocation:
                    self.release(uid)
                    self.sync.assume(allocation, mig=mig)
                    self._reservations.made(uid)
                gpus = self.sync.ledger.inventory(allocation.node).gpus
                mig_plans = () if mig is None or not request.wants_mig else mig_container_plans(
                    request, mig, gpus, self.sync.books.instance_ids(allocation.node))
                plan = encode_plan(without_asks(allocation), gpus, writer=self.protocol.scheduler_name, mig=mig_plans)
            except Exception as error:  # nothing is written yet: release and fail
                self.release(uid)
                self.metrics.decision(scheduled=False, reason="bind-failed")
                if isinstance(error, CommitError):
                    raise
                why = ("the reservation was lost and no longer fits" if isinstance(error, DomainError)
                       else "the plan could not be prepared")
                raise CommitError(f"pod {pod.key}: {why}: {error}") from error
            term = self._terms.number
            self._reservations.start_commit(uid)
        bound, deposed, written = False, False, list[tuple[ClaimAllocation, bool]]()
        try:
            if claims is not None and write_claims:
                self._write_claims(pod, allocation, claims, written, lambda: self._may_write(term))
            write_plan_and_bind(self.commit_cluster, pod, node=allocation.node, key=key, plan=plan,
                                writer=self.protocol.scheduler_name, may_write=lambda: self._may_write(term))
            bound = True
        except CommitError as error:
            deposed = isinstance(error, NotLeaderError)  # its claims stay reserved: the next leader uses them
            log.warning("commit failed", extra=fields(pod=pod.key, node=allocation.node, error=str(error)))
            raise
        except Exception as error:  # write_plan_and_bind wraps everything; this is the last line of defence
            log.exception("commit failed", extra=fields(pod=pod.key, node=allocation.node))
            raise CommitError(f"pod {pod.key}: binding to node {allocation.node} failed: {error!r}") from error
        finally:
            if written and not bound and not deposed:
                self._unwrite_claims(pod, written)
            with self._lock:
                self._reservations.end_commit(uid, bound=bound)
                if bound:
                    self.metrics.decision(scheduled=True)
                else:
                    self.metrics.decision(scheduled=False, reason="bind-failed")
        log.info("pod bound", extra=fields(pod=pod.key, node=allocation.node, plan=plan))

    def _may_write(self, term: int) -> bool:
        """True while this replica leads in term ``term`` (asked right before a binding)."""
        with self._lock:
            return self._terms.number == term and self.is_leader()
