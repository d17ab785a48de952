"""The scheduler's ledger lifecycle: :class:`LedgerSync` = the event-driven books (:mod:`.events`) plus our
reservations (assume, forget) and the rebuild from a full listing (rebuild, adopt, resync).

Invariants: a reservation is booked in the ledger (and the MIG books) all or nothing and counts until the pod's
object speaks for it, a failed bind rolls it back, a resync listing that lacks its pod drops it after
``assumed_ttl_seconds``; :meth:`LedgerSync.rebuild` from the same objects gives the same books whatever order the
events came in; :meth:`LedgerSync.adopt` repairs the live ledger in place (readers keep their references).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from domain.allocation import PodAllocation
from domain.dra.claims import ClaimAllocation
from domain.dra.slices import ResourceSlice
from domain.errors import DomainError, InvalidRequestError, UnknownNodeError
from domain.gpu import Gpu
from domain.kube.annotations import MigInstanceRecord, decode_plan
from domain.kube.inference import check_plan
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.translate import AllocationSource
from domain.kube.translate.mig import asks_mig
from domain.ledger import ClusterLedger
from domain.mig.ledger import MigPodAllocation
from domain.request import PodRequest
from domain.scheduling.framework.cycle import Scheduler, ScheduleResult
from domain.scheduling.mig.cycle import schedule_mig
from domain.scheduling.nodefit import PodConstraints, node_fit_reason
from domain.scheduling.sync.claims import ClaimEvents
from domain.scheduling.sync.drift import DriftReport, compare_books
from domain.scheduling.sync.overbooking import checks_books


class LedgerSync(ClaimEvents):
    """Keeps ``ledger`` equal to the cluster plus this scheduler's reservations (module docstring; state and
    events: :class:`~domain.scheduling.sync.events.LedgerEvents`, DRA claims:
    :class:`~domain.scheduling.sync.claims.ClaimEvents`)."""

    # ------------------------------------------------------------------ reservations
    @checks_books
    def assume(self, allocation: PodAllocation, *, mig: MigPodAllocation | None = None) -> None:
        """Count our reservation of a pending pod until the watch confirms it (keyed by UID, B04); ``mig``: its
        MIG instances (a MIG pod's ``allocation`` is node-only). Books it with :meth:`ClusterLedger.reserve`
        unless the ledger already holds this exact record (the scheduler reserved it), and ``mig`` in the MIG
        books likewise, both or neither. Raises what ``reserve`` raises (and :meth:`MigBooks.reserve`). A pod
        already seen bound is left to its object."""
        uid = allocation.pod_uid
        if uid in self._pods:
            return
        booked = False
        if self.ledger.record(uid) != allocation:
            self.ledger.reserve(allocation)
            booked = True
        if mig is not None and self.books.record(uid) != mig:
            try:
                self.books.reserve(mig)
            except DomainError:
                if booked:
                    self.ledger.release(uid)
                raise
        if mig is not None:
            self.books.remember(uid, mig)
        self._assumed[uid] = (allocation, self.clock())
        self.sources[uid] = AllocationSource.ASSUMED
        self._reinfer(allocation.node)

    @checks_books
    def forget(self, uid: str) -> bool:
        """Roll back our reservation of ``uid`` (bind failed, B06); idempotent; returns True if one existed. A pod
        already seen bound stays counted from its object."""
        entry = self._assumed.pop(uid, None)
        self.forget_expected(uid)
        mig = self.books.forget(uid)
        if uid in self._pods:
            if mig is not None:
                self._count_mig(uid)  # only a trusted plan counts now
            return entry is not None
        self.holds.release(uid)
        self.books.release(uid)
        record = self.ledger.release(uid)
        self.sources.pop(uid, None)
        if record is not None:
            self._reinfer(record.node)
        return entry is not None or record is not None

    def reservation_problem(self, pod: PodObject, held: PodAllocation) -> str:
        """Why ``held`` (pending ``pod``'s reservation) must not be kept any more, or empty: the pod's request no
        longer reads, its node is unknown, quarantined or gated for GPU pods (stale inventory and the like), fails
        the pod's node fit (cordon, nodeSelector, required affinity, taints), or a granted GPU is gone, unhealthy,
        or excluded by the pod's GPU model/UUID selection; for a MIG pod, also when its MIG reservation is gone,
        its node takes no MIG pods, a booked GPU is unhealthy or the record no longer applies
        (:meth:`MigBooks.held_problem`). Capacity is not re-checked: the reservation holds it."""
        try:
            request = self.requests.get(pod)
        except InvalidRequestError as error:
            return f"invalid request: {error}"
        ledger, node = self.ledger, held.node
        try:
            slot = ledger.slot(node)
        except UnknownNodeError:
            return f"node {node} is unknown"
        if not ledger.admitting[slot]:
            return f"node {node} is quarantined"
        if (request.wants_gpu or request.wants_mig) and node in self.gates:
            return f"node {node} is not taking GPU pods: {self.gates[node]}"
        if request.wants_mig:
            problem = self.books.held_problem(pod.uid)
            if problem:
                return problem
        obj = self.nodes.get(slot)
        fit = "" if obj is None else node_fit_reason(PodConstraints.of(pod), obj)
        if fit:
            return f"node {node}: {fit}"
        gpus = {g.index: g for g in ledger.inventory(node).gpus}
        for container in held.containers:
            for grant in container.grants:
                gpu = gpus.get(grant.gpu_index)
                if gpu is None or not ledger.gpu_ok[slot, grant.gpu_index]:
                    return f"GPU {grant.gpu_index} of node {node} is gone or not schedulable"
                if not request.selector.allows(gpu):
                    return f"GPU {gpu.uuid} ({gpu.model}) of node {node} is excluded by the pod's GPU selection"
        return ""

    @property
    def assumed(self) -> dict[str, PodAllocation]:
        """Reservations not yet confirmed by the watch, by pod UID (a copy)."""
        return {uid: allocation for uid, (allocation, _) in self._assumed.items()}

    def bound_pods(self, node: str) -> list[PodObject]:
        """The pod objects this sync counts as bound to ``node`` (terminating ones included), by UID."""
        return [self._pods[uid] for uid in sorted(self._on_node.get(node, ())) if uid in self._pods]

    def attach(self, scheduler: Scheduler) -> None:
        """Make every unreserve of ``scheduler`` (failed bind, B06) forget the reservation here too."""

        def rollback(pod: PodRequest, allocation: PodAllocation) -> None:
            self.forget(allocation.pod_uid)

        scheduler.on_unreserve.append(rollback)

    def schedule(self, scheduler: Scheduler, pod: PodObject, *, candidates: Collection[str] | None = None,
                 request: PodRequest | None = None) -> ScheduleResult:
        """One scheduling cycle for a pending ``pod`` among ``candidates`` (node names; None: every node):
        translate, record its node constraints, run ``scheduler``
        (sharing this ledger; :func:`~domain.scheduling.mig.cycle.schedule_mig` for a MIG pod), and assume
        the reservation. Never raises for bad pod content: an invalid request (B12) becomes an unscheduled result
        whose reason names the container, resource and value. ``request``: the pod's request when the caller made
        it (a pod with DRA claims: :mod:`domain.dra.allocate`), else the pod's own."""
        try:
            request = self.requests.get(pod) if request is None else request
        except InvalidRequestError as error:
            return ScheduleResult(pod.uid or pod.key, None, reason=f"invalid request: {error}")
        self.record_constraints(pod)
        if request.wants_mig:
            result, mig = schedule_mig(self.ledger, self.books, scheduler, request, candidates=candidates)
            if result.allocation is not None:
                self.assume(result.allocation, mig=mig)
        else:
            result = scheduler.schedule(request, candidates=candidates)
            if result.allocation is not None:
                self.assume(result.allocation)
        if result.allocation is not None and pod.uid not in self._pods:
            self.holds.hold(pod.uid, result.allocation.node, request, label=pod.key, now=self.clock())
        return result

    def record_constraints(self, pod: PodObject) -> None:
        """Record ``pod``'s node constraints, as a cycle does (the node filters, preemption's too, read them)."""
        self.constraints[pod.uid] = PodConstraints.of(pod, ignore=self._our_resources)

    # ------------------------------------------------------------------ rebuild and resync
    def rebuild(
        self,
        nodes: Iterable[NodeObject],
        pods: Iterable[PodObject],
        *,
        keep_assumed: bool = False,
        last_good: Mapping[str, tuple[Gpu, ...]] | None = None,
        mig_last_good: Mapping[str, tuple[Mapping[int, tuple[MigInstanceRecord, ...]], str]] | None = None,
        claims: Iterable[ClaimAllocation] = (),
        slices: Iterable[ResourceSlice] = (),
    ) -> LedgerSync:
        """A new :class:`LedgerSync` on a fresh ledger, built from API objects only (same protocol and clock).

        ``last_good``: per node, the GPU list a node with a missing or malformed inventory is counted on (default:
        this instance's, :meth:`last_good`); ``mig_last_good`` likewise its MIG layout and strategy (default:
        :meth:`MigBooks.last_good`). Given explicitly and with ``keep_assumed`` False, this reads nothing of this
        instance that changes, so a caller may run it without its lock and :meth:`adopt` the result under it.
        ``claims``: the listed ResourceClaims (:class:`~domain.scheduling.sync.claims.ClaimEvents`); ``slices``:
        the listed ResourceSlices (:meth:`on_slice`). With
        ``keep_assumed``, this instance's reservations are carried over (see :meth:`adopt`).
        """
        fresh = LedgerSync(ClusterLedger(max_gpus=self.ledger.max_gpus), self.protocol, clock=self.clock,
                           assumed_ttl_seconds=self.assumed_ttl_seconds, mig_mode=self.mig_mode,
                           hold_window_seconds=self.holds.window_s)
        fresh._last_good = dict(self._last_good if last_good is None else last_good)
        fresh.books.seed(self.books.last_good() if mig_last_good is None else mig_last_good)
        for resource_slice in slices:
            fresh.slices.put(resource_slice)
        with fresh.books_guard.deferred():  # judged once, after every object is booked
            for node in nodes:
                fresh.on_node(node)
            fresh._last_good = {name: gpus for name, gpus in fresh._last_good.items() if name in fresh._counted}
            fresh.books.prune(fresh._counted)
            for claim in claims:
                fresh.on_claim(claim)
            pods = list(pods)
            fresh._listed = {p.uid: p for p in pods}
            fresh._reinfer_later = set()
            for pod in pods:
                if not fresh._book_planned(pod):
                    fresh.on_pod(pod)
            later, fresh._reinfer_later = fresh._reinfer_later, None
            for name in sorted(later):
                fresh._reinfer(name)
            if keep_assumed:
                fresh._carry(self._assumed, self.constraints, self.books.assumed)
        return fresh

    def _book_planned(self, pod: PodObject) -> bool:
        """Within :meth:`rebuild` only (the books guard deferred, re-inference deferred): book the usual pod, a
        Running one bound to a counted node, first seen under its UID and ``namespace/name``, without a
        reservation, asking for our time-sharing GPU resources and no MIG instance, with a trusted plan, exactly
        as :meth:`on_pod` would (same state, same record, same order of writes), in one lean pass. Returns False,
        having changed nothing, for any other pod: :meth:`on_pod` then takes it."""
        uid, node = pod.uid, pod.node_name
        if (pod.phase is not PodPhase.RUNNING or not uid or not node or node not in self._counted
                or pod.key in self._uid_by_key or uid in self._pods or uid in self._assumed
                or asks_mig(pod, self.protocol)):
            return False
        key = self.protocol.annotations.pod_plan
        text = pod.annotations.get(key)
        if text is None:
            return False
        try:
            request = self.requests.get(pod)
        except InvalidRequestError:
            return False
        if not request.wants_gpu:
            return False
        gpus = self._counted[node].gpus
        try:
            plan = decode_plan(text, key=key, pod_uid=uid, node=node, node_gpus=gpus,
                               cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes)
            check_plan(plan, request, gpus, key=key)
        except InvalidRequestError:
            return False
        self._uid_by_key[pod.key] = uid  # on_pod
        self._pods[uid] = pod
        self.holds.release(uid)  # _track_hold of a pod that is not Pending
        self._on_node.setdefault(node, set()).add(uid)
        self.constraints.pop(uid, None)
        self.problems.pop(uid, None)  # _count with a trusted plan (and no MIG ask: _count_mig books nothing)
        self._gates.mark_gpu_unknown(node, uid, None, now=self.clock())
        self.vanished.track(pod, None)
        inferred = self._inferred.setdefault(node, set())
        was_inferred = uid in inferred
        inferred.discard(uid)
        self.sources[uid] = AllocationSource.PLAN
        try:
            changed = self.ledger.observe(plan)
        except InvalidRequestError as error:
            self.problems[uid] = f"reservation dropped: {error}"
            inferred.add(uid)
            changed = was_inferred = True
        if inferred and (changed or was_inferred):
            self._reinfer(node)
        return True

    def _carry(self, assumed: Mapping[str, tuple[PodAllocation, float]],
               constraints: Mapping[str, PodConstraints], mig_assumed: Mapping[str, MigPodAllocation]) -> None:
        """Book ``assumed`` (another instance's reservations) here, unless their pod is listed in a terminal
        phase, or is absent from the listing and was reserved more than ``assumed_ttl_seconds`` ago, or their
        node is gone; take over the constraints of pods not seen bound."""
        now = self.clock()
        for uid, (allocation, since) in assumed.items():
            pod = self._listed.get(uid)
            expired = pod is None and now - since > self.assumed_ttl_seconds
            if expired or (pod is not None and pod.phase.terminal) or allocation.node not in self._counted:
                continue
            mig = mig_assumed.get(uid)
            stored = self._pods.get(uid)
            if stored is not None:  # bound: its object speaks; the reservation only stands in for a missing plan
                self._assumed[uid] = (allocation, since)
                if mig is not None:
                    self.books.remember(uid, mig)
                if stored.node_name in self._counted and self._count(uid):
                    self._reinfer(stored.node_name)
                continue
            try:
                self.ledger.observe(allocation)
            except InvalidRequestError:
                continue  # names a GPU the node no longer has: dropped
            if mig is not None:
                if self.books.observe(mig):
                    self.ledger.release(uid)
                    continue  # its MIG GPUs are gone: dropped
                self.books.remember(uid, mig)
            self.sources[uid] = AllocationSource.ASSUMED
            self._assumed[uid] = (allocation, since)
            self._reinfer(allocation.node)  # plan-less pods go on top of the reservation
        self._listed = {}
        self.constraints.update({k: v for k, v in constraints.items() if k not in self._pods})

    @checks_books
    def adopt(self, fresh: LedgerSync, *, claims_listed_at: str = "") -> DriftReport:
        """Make the live books equal ``fresh`` (a :meth:`rebuild` from a listing, claims listed at resourceVersion
        ``claims_listed_at``, without reservations) plus this instance's reservations and newer claims
        (:meth:`take_newer`), repairing the live ledger in place (its readers keep their reference), and report
        the drift. The caller holds its lock; cost: the reservations and the differences, not the cluster."""
        fresh._carry(self._assumed, self.constraints, self.books.assumed)
        fresh._expected = dict(self._expected)
        for claim_uid in [uid for uid in fresh._expected if uid in fresh._claims]:  # listed allocated since
            fresh._hand_over(claim_uid)
        fresh.take_newer(self, claims_listed_at)
        report = compare_books(self.ledger, fresh.ledger)
        self._adopt(fresh, report)
        return report

    def resync(self, nodes: Iterable[NodeObject], pods: Iterable[PodObject],
               claims: Iterable[ClaimAllocation] = (), slices: Iterable[ResourceSlice] = ()) -> DriftReport:
        """Compare the live books with a rebuild from a full listing (reservations kept), repair the live ledger
        in place (the scheduler and its plugins keep their reference), and report the drift."""
        return self.adopt(self.rebuild(nodes, pods, claims=claims, slices=slices))

    # ------------------------------------------------------------------ ResourceSlices
    def on_slice(self, resource_slice: ResourceSlice) -> None:
        """One of our DRA driver's ResourceSlices added or updated (another driver's is ignored): its node's GPUs
        are read again (:meth:`on_node`)."""
        self._slices_changed(self.slices.put(resource_slice))

    def on_slice_deleted(self, resource_slice: ResourceSlice) -> None:
        """A ResourceSlice deleted: as :meth:`on_slice`."""
        self._slices_changed(self.slices.delete(resource_slice))

    def tick(self) -> None:
        """:meth:`LedgerEvents.tick`, then read again each node with slices gated on its annotation: one gone
        stale (its device plugin gone) sends no node event, and the slices count from then on."""
        super().tick()
        for name in self.slices.nodes():
            node = self._node_objects.get(name)
            if node is not None and name not in self.claims_only and self.gates.get(name):
                self.on_node(node)

    def _slices_changed(self, nodes: set[str]) -> None:
        for node in [self._node_objects[n] for n in sorted(nodes) if n in self._node_objects]:
            self.on_node(node)

    def _adopt(self, fresh: LedgerSync, report: DriftReport) -> None:
        """Repair the live ledger in place; cost: the differences (and one pass over the node table). Only nodes
        whose books may be off are verified: those with differing totals, those the record repairs touched, new
        ones and quarantined ones (any other node's totals equal the rebuild's, derived from the same records)."""
        ledger, records = self.ledger, fresh.ledger.records()
        suspect = {*report.totals, *report.nodes_missing, *ledger.quarantine}
        for uid in (*report.extra, *report.changed):
            released = ledger.release(uid)
            if released is not None:
                suspect.add(released.node)
        for name in report.nodes_extra:
            self.nodes.drop(ledger.slot(name))
            ledger.remove_node(name)
        for name, inventory in fresh._counted.items():
            same = self._counted.get(name) == inventory and name not in report.nodes_missing
            slot = ledger.slot(name) if same else ledger.upsert_node(inventory)
            self.nodes.put(slot, fresh._node_objects[name])
        missing: dict[str, list[str]] = {}
        for uid in report.missing:
            missing.setdefault(records[uid].node, []).append(uid)
        for name, uids in missing.items():  # a node the live books lack entirely (a new leader's) in one update
            if ledger.pod_count(name) == 0 and len(uids) == fresh.ledger.pod_count(name):
                ledger.copy_node(fresh.ledger, name)
            else:
                for uid in uids:
                    ledger.observe(records[uid])
            suspect.add(name)
        for uid in report.changed:
            ledger.observe(records[uid])
            suspect.add(records[uid].node)
        for name in sorted(suspect & set(fresh._counted)):
            if ledger.verify_node(name) or name in ledger.quarantine:
                ledger.repair(name)
        self._gates.adopt(fresh._gates)  # the node filters hold the gates mapping: refilled in place
        self.claims_only.clear()
        self.claims_only.update(fresh.claims_only)
        self.slices = fresh.slices
        self.vanished = fresh.vanished
        self.constraints.clear()
        self.constraints.update(fresh.constraints)
        self.problems, self.sources = fresh.problems, fresh.sources
        self._node_objects, self._counted, self._pods = fresh._node_objects, fresh._counted, fresh._pods
        self._last_good = fresh._last_good
        self._uid_by_key, self._on_node, self._inferred = fresh._uid_by_key, fresh._on_node, fresh._inferred
        self._assumed = fresh._assumed
        self._claims, self._claim_uid_by_key, self._seen = fresh._claims, fresh._claim_uid_by_key, fresh._seen
        self._expected = fresh._expected
        self.claim_problems = fresh.claim_problems
        self.holds.adopt(fresh.holds, keep=self._assumed)
        self.books.adopt(fresh.books)
        self.requests = fresh.requests
