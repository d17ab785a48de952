"""The scheduler component's state: one ledger kept equal to the cluster, one scheduler per policy, commits.

Both drivers (the kube-scheduler extender and the standalone loop) call into one :class:`SchedulerService`:

* **Ledger lifecycle** — :class:`~domain.scheduling.sync.LedgerSync` fed by the node and pod informers
  (``on_node``/``on_node_deleted``/``on_pod``/``on_pod_deleted``); :meth:`SchedulerService.resync` lists
  everything, repairs drift and counts it in the metrics (run periodically and on gaining leadership, which
  rebuilds the books from the API before the replica serves). A standby replica keeps its ledger warm the same
  way, so a takeover needs no cold start.
* **Resync without stalling** — the LISTs and the rebuild run *outside* the lock; only the adoption (carry the
  current reservations over, compare, repair in place) takes it, and only when the listing is consistent with
  what the informers already applied: each listing's resourceVersion must be at least the informer's
  (:attr:`SchedulerService.watermarks`, set by the app), else an event newer than the listing was applied and
  adopting would undo it, so the service lists again (:data:`RESYNC_ATTEMPTS` times, then
  :class:`StaleListingError`). After an adoption, informer updates whose object resourceVersion is not newer than
  the adopted listing are not re-applied to the books (they are already in it); listeners still see them.
* **Cycles** — :meth:`schedule_pod` reserves the chosen placement in the ledger as an *assumed* pod, so every
  later cycle sees it while the API calls run; a repeated cycle for a pod that holds a reservation keeps it only
  while it still passes the node-level checks (inventory gate, node fit, GPU selection and health), else
  decides again. :meth:`commit` writes the plan annotation, then binds (:mod:`.commit`), and releases the
  reservation on any failure — any exception at all (B06/B07). Reservations whose commit never comes
  (kube-scheduler gave up on the pod after our filter) expire after ``assumed_ttl_seconds``
  (:meth:`expire_assumed`).
* **MIG** — pods asking for ``<prefix>/mig-<profile>`` instances are routed by
  :meth:`~domain.scheduling.sync.LedgerSync.schedule` to the MIG plugin (node-level filters of the policy's
  scheduler, then MIG filter, score and reserve on the MIG books, in the placement mode ``config.mig_strategy``);
  their reservation is node-only in the time-sharing ledger plus instances in the MIG books, and :meth:`commit`
  writes the MIG part of the plan (what each container receives at Allocate) the same way. An unknown profile
  name is an invalid request whose reason says "unknown profile" (B30), never a silent Pending.
* **Book problems** — a node quarantined for impossible books (a GPU booked beyond its core or memory) and a pod
  whose plan names a GPU gone from its node's inventory are found by the ledger sync while booking; :mod:`.alerts`
  turns them into Warning Events (leader only), log lines and the ``overbooked_nodes``/``vanished_gpu_pods``
  gauges after every informer event, resync and tick.
* **Policies** — :mod:`.policies`: default ``fgd``, per-pod override annotation (unknown → unschedulable with
  a reason), FGD's typical pods from the observed pods topped up by the synthetic workload. GPU model and UUID
  selection/exclusion annotations are read by :func:`domain.kube.translate.pod_request`.
* **Leadership** — only the leader writes (plan, binding, events): :meth:`commit` raises
  :class:`NotLeaderError` on a standby and releases the reservation, and asks again right before the binding
  (a replica deposed meanwhile binds nothing). Each leadership gain opens a *term*
  (:meth:`SchedulerService.begin_leading`, synchronous, on the elector's thread); the rebuild of that term
  (:meth:`SchedulerService.rebuild_ledger`, on a thread of its own) waits for both informers to have listed,
  retries failed rebuilds with backoff, and stops as soon as the term is over; :attr:`serving` and the leader
  gauge follow the current term only. The commit's API calls go through ``commit_cluster`` (by default the
  same port), which the composition root gives a request timeout below ``lease_duration − renew_deadline``, so
  a binding sent just before leadership expires cannot land after a successor took over (client-side bound).

Thread safety: :attr:`SchedulerService.lock` (re-entrant) serialises informer events, cycles, the adoption
step of resyncs and extender calls; API calls (a commit's writes, a resync's LISTs) and rebuilds run outside it,
the commit protected by the reservation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Protocol

from domain.allocation import PodAllocation
from domain.errors import DomainError, InvalidRequestError, UnknownNodeError, UnknownPolicyError
from domain.kube.annotations import encode_plan
from domain.kube.objects import ClusterEvent, NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import PROTOCOL_PUBLISHERS, mig_container_plans, pod_request, protocol_mismatches
from domain.ledger import ClusterLedger, GpuUsage
from domain.mig.gpu import PlacementMode
from domain.scheduling.drift import DriftReport
from domain.scheduling.framework import ScheduleResult
from domain.scheduling.nodefit import PodConstraints, node_fit_reason
from domain.scheduling.sync import LedgerSync, Tombstone
from ports.cluster import EventsApi, NodesApi, PodsApi
from ports.metrics import SchedulerMetrics
from services._shared.logs import fields

from .alerts import BookAlerts
from .commit import CommitError, NotLeaderError, write_plan_and_bind
from .policies import SchedulerSet, ServiceConfig

log = logging.getLogger(__name__)

__all__ = ["CommitError", "NotLeaderError", "SchedulerService", "ServiceConfig", "StaleListingError", "drift_count"]

RESYNC_ATTEMPTS = 3
"""Listings a resync tries before giving up when each one is older than what the informers applied."""
REBUILD_BACKOFF = (0.5, 30.0)
"""First and longest wait (s) between failed rebuilds of a new term (doubling)."""
READY_POLL = 0.1
"""Seconds between checks of the informers' readiness while a new term waits to rebuild."""


class StaleListingError(Exception):
    """Every listing of a resync was older than what the informers had already applied; nothing was adopted."""


def drift_count(report: DriftReport) -> int:
    """Entries a resync repaired: pods missing, extra or changed, nodes missing or extra, plus nodes whose
    totals differed (``report.totals``; a corrupted running total can drift with every record equal)."""
    return sum(map(len, (report.missing, report.extra, report.changed, report.nodes_missing, report.nodes_extra,
                         report.totals)))


def _rv(text: str) -> int | None:
    """A resourceVersion as a number (kube-apiserver's are etcd revisions), None when it is not one."""
    return int(text) if text.isdigit() else None


class SchedulerCluster(NodesApi, PodsApi, EventsApi, Protocol):
    """The cluster roles the scheduler service uses: list nodes and pods, read a pod, record Events."""


class SchedulerService:
    """Ledger, schedulers and commits of one scheduler replica (module docstring).

    ``clock`` returns epoch seconds (inventory heartbeats are epoch times); ``is_leader`` says whether this
    replica may write; ``commit_cluster`` carries the commit's API calls (default: ``cluster``). Listeners (set
    by the drivers, called under the lock, must be quick): ``pod_listeners(pod)`` after every pod add/update,
    ``deletion_listeners(pod)`` after a pod delete, ``change_listeners()`` when capacity may have appeared (node
    added, pod deleted or finished). ``watermarks`` (set by the app; None = no check): returns the node and
    pod informers' resourceVersions, against which :meth:`resync` checks its listings.
    """

    def __init__(
        self,
        cluster: SchedulerCluster,
        protocol: ProtocolConstants,
        metrics: SchedulerMetrics,
        *,
        config: ServiceConfig | None = None,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        commit_cluster: PodsApi | None = None,
    ) -> None:
        self.cluster = cluster
        self.commit_cluster: PodsApi = cluster if commit_cluster is None else commit_cluster
        self.protocol = protocol
        self.metrics = metrics
        self.config = config or ServiceConfig()
        self.clock = clock
        self.is_leader = is_leader
        self.lock = threading.RLock()
        self.sync = LedgerSync(ClusterLedger(), protocol, clock=clock,
                               assumed_ttl_seconds=self.config.assumed_ttl_seconds,
                               mig_mode=PlacementMode(self.config.mig_strategy),
                               hold_window_seconds=self.config.admission_hold_seconds)
        self.pod_listeners: list[Callable[[PodObject], None]] = []
        self.deletion_listeners: list[Callable[[PodObject | Tombstone], None]] = []
        self.change_listeners: list[Callable[[], None]] = []
        self.watermarks: Callable[[], tuple[str, str]] | None = None
        self.schedulers = SchedulerSet(self.sync, protocol, self.config)
        self._reserved_at: dict[str, float] = {}
        self._committing: set[str] = set()
        self._committed: set[str] = set()
        self._rebuilt = False  # the current term's rebuild succeeded
        self._leading = False  # a term is open (begin_leading … stop_leading)
        self._term = 0  # bumped on every leadership change, so a late rebuild of an old term serves nothing
        self._floor: tuple[int | None, int | None] = (None, None)  # (nodes, pods) RVs of the adopted listing
        self._mismatched: dict[str, dict[str, str]] = {}  # node → {component: fingerprint} differing from ours
        self.alerts = BookAlerts(metrics)
        metrics.watch_ledger(self._ledger_view)
        metrics.set_protocol(protocol.fingerprint())
        metrics.set_protocol_mismatches(dict.fromkeys(PROTOCOL_PUBLISHERS, 0))

    # ------------------------------------------------------------------ informer events
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated (LedgerSync rules); a new node wakes waiting pods. Never raises for bad node content
        (the node is gated instead: ``sync.gates``)."""
        with self.lock:
            new = not self._known(node.name)
            if not self._adopted(node.resource_version, self._floor[0]):
                self.sync.on_node(node)
            if new and self._known(node.name):
                self._changed()
            appeared = self._track_protocol(node.name, protocol_mismatches(node, self.protocol))
            events = self.alerts.collect(self.sync)
        self._emit(events)
        for component, fingerprint in appeared.items():
            self._node_event(node, "ProtocolMismatch", f"{component} on node {node.name} runs protocol "
                             f"{fingerprint}, the scheduler {self.protocol.fingerprint()}: no GPU pods are placed "
                             f"here until they agree (compare the ConfigMaps with `ljrk protocol check`)")

    def on_node_deleted(self, node: NodeObject | str) -> None:
        """Node deleted (its object or its name); its reservations are dropped. Never raises."""
        with self.lock:
            name = node if isinstance(node, str) else node.name
            self.sync.on_node_deleted(name)
            self._track_protocol(name, {})
            events = self.alerts.collect(self.sync)
        self._emit(events)

    def _track_protocol(self, node: str, mismatches: dict[str, str]) -> dict[str, str]:
        """Record ``node``'s protocol mismatches, update the per-component node counts; returns the mismatches
        that are new (a component that started differing, or now differs in another way). Caller holds the
        lock."""
        before = self._mismatched.get(node, {})
        if mismatches == before:
            return {}
        if mismatches:
            self._mismatched[node] = mismatches
        else:
            self._mismatched.pop(node, None)
        counts = dict.fromkeys(PROTOCOL_PUBLISHERS, 0)
        for found in self._mismatched.values():
            for component in found:
                counts[component] += 1
        self.metrics.set_protocol_mismatches(counts)
        return {c: f for c, f in mismatches.items() if before.get(c) != f}

    def _node_event(self, node: NodeObject, reason: str, message: str) -> None:
        """A Warning Event on ``node`` (:meth:`_emit`)."""
        self._emit([ClusterEvent("Node", node.name, reason, message[:1000], type="Warning", uid=node.uid)])

    def _emit(self, events: list[ClusterEvent]) -> None:
        """Write ``events`` (leader only, so replicas do not repeat them); best effort: failures are logged, never
        raised. Call without the lock."""
        if not events or not self.is_leader():
            return
        for event in events:
            try:
                self.cluster.create_event(event)
            except Exception as error:  # an Event is never worth an informer failure
                log.warning("event not recorded", extra=fields(kind=event.kind, name=event.name, reason=event.reason,
                                                               error=str(error)))

    def on_pod(self, pod: PodObject) -> None:
        """Pod added or updated: books, observed pod classes, listeners; a finished pod wakes waiting pods. Idempotent
        (B04); never raises for bad pod content (recorded in ``sync.problems``). A new UID under a known
        ``namespace/name`` first forgets the old UID (its delete was missed)."""
        with self.lock:
            previous = self.sync.uid_of(pod.key)
            replaced = previous is not None and previous != pod.uid
            if previous is not None and replaced:
                self.sync.on_pod_deleted(Tombstone(pod.key))  # names ``previous``
                self._forget(previous)
            held = self.sync.holds.holding(pod.uid)
            if not self._adopted(pod.resource_version, self._floor[1]):
                self.sync.on_pod(pod)
            unheld = held and not self.sync.holds.holding(pod.uid)  # its devices came: twins may come now
            if pod.node_name or pod.phase.terminal:
                self._committed.discard(pod.uid)
            self.schedulers.observe(pod)
            for listener in self.pod_listeners:
                listener(pod)
            if pod.phase.terminal or replaced or unheld:
                self._changed()
            events = self.alerts.collect(self.sync)
        self._emit(events)

    def on_pod_deleted(self, item: PodObject | Tombstone) -> None:
        """Pod deleted, plainly or as a :class:`Tombstone` (B01); releases what it held. Never raises."""
        with self.lock:
            self.sync.on_pod_deleted(item)
            uid = item.uid if isinstance(item, PodObject) else (item.obj.uid if item.obj is not None else None)
            if uid is not None:
                self._forget(uid)
            for listener in self.deletion_listeners:
                listener(item)
            self._changed()
            events = self.alerts.collect(self.sync)
        self._emit(events)

    def _forget(self, uid: str) -> None:
        self.schedulers.forget(uid)
        self._committed.discard(uid)
        self._reserved_at.pop(uid, None)

    @staticmethod
    def _adopted(resource_version: str, floor: int | None) -> bool:
        """True when an object at ``resource_version`` is already reflected by the adopted listing."""
        rv = _rv(resource_version)
        return floor is not None and rv is not None and rv <= floor

    def _changed(self) -> None:
        for listener in self.change_listeners:
            listener()

    # ------------------------------------------------------------------ cycles
    def schedule_pod(self, pod: PodObject, *, candidates: Collection[str] | None = None) -> ScheduleResult:
        """One cycle for pending ``pod``, restricted to ``candidates`` (node names) when given; the placement
        is reserved in the ledger as an assumed pod. A pod already holding a reservation on a node among the
        candidates keeps it while the reservation still passes :meth:`held_problem` (its resources are in the
        books already); otherwise it is released and the cycle runs again. Never raises for bad pod content:
        invalid requests and unknown policies come back unscheduled with a reason, and are counted in the
        metrics."""
        with self.lock:
            held = self.sync.assumed.get(pod.uid)
            if held is not None:
                if candidates is None or held.node in candidates:
                    problem = self.held_problem(pod, held)
                    if not problem:
                        return ScheduleResult(pod.uid, held, reason="already reserved", feasible_nodes=1)
                    log.info("reservation no longer valid; deciding again",
                             extra=fields(pod=pod.key, node=held.node, reason=problem))
                self.release(pod.uid)
            try:
                scheduler = self.schedulers.get(self.schedulers.policy_for(pod))
            except UnknownPolicyError as error:
                self.metrics.decision(scheduled=False, reason="unknown-policy")
                return ScheduleResult(pod.uid, None, reason=str(error))
            if candidates is not None:
                self.schedulers.candidates[pod.uid] = frozenset(candidates)
            try:
                result = self.sync.schedule(scheduler, pod)
            finally:
                self.schedulers.candidates.pop(pod.uid, None)
            if result.allocation is not None:
                self._reserved_at[pod.uid] = self.clock()
            else:
                invalid = result.reason.startswith("invalid request")
                self.metrics.decision(scheduled=False, reason="invalid-request" if invalid else "unschedulable")
            return result

    def held_problem(self, pod: PodObject, held: PodAllocation) -> str:
        """Why ``held`` (the pod's reservation) must not be kept any more, or empty: the pod's request no longer
        reads, its node is unknown, quarantined or gated for GPU pods (stale inventory and the like), fails the
        pod's node fit (cordon, nodeSelector, required affinity, taints), or a granted GPU is gone, unhealthy,
        or excluded by the pod's GPU model/UUID selection; for a MIG pod, also when its MIG reservation is gone,
        its node takes no MIG pods, a booked GPU is unhealthy or the record no longer applies. Capacity is not
        re-checked: the reservation holds it. Call under the lock."""
        try:
            request = pod_request(pod, self.protocol)
        except InvalidRequestError as error:
            return f"invalid request: {error}"
        ledger, node = self.sync.ledger, held.node
        try:
            slot = ledger.slot(node)
        except UnknownNodeError:
            return f"node {node} is unknown"
        if not ledger.admitting[slot]:
            return f"node {node} is quarantined"
        if (request.wants_gpu or request.wants_mig) and node in self.sync.gates:
            return f"node {node} is not taking GPU pods: {self.sync.gates[node]}"
        if request.wants_mig:
            problem = self.sync.books.held_problem(pod.uid)
            if problem:
                return problem
        obj = self.sync.nodes.get(slot)
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

    def release(self, uid: str) -> bool:
        """Drop the reservation of ``uid`` (idempotent); returns True when one existed. Never raises."""
        with self.lock:
            self._reserved_at.pop(uid, None)
            self._committed.discard(uid)
            return self.sync.forget(uid)

    def reservation(self, uid: str) -> PodAllocation | None:
        """The assumed (not yet confirmed) placement of ``uid``, if any."""
        with self.lock:
            return self.sync.assumed.get(uid)

    def committed(self, uid: str) -> bool:
        """True when ``uid`` was bound by this replica and the watch has not shown it bound yet."""
        with self.lock:
            return uid in self._committed

    def commit(self, pod: PodObject, allocation: PodAllocation) -> None:
        """Write the plan annotation of ``allocation`` on ``pod``, then bind it (:mod:`.commit`).

        Re-books the reservation if it vanished meanwhile (a MIG pod's MIG reservation must still be held: its
        instances are not re-planned here). Raises :class:`NotLeaderError` on a standby (or when
        leadership ends before the binding) and :class:`CommitError` on any other failure — whatever the
        exception underneath, which is chained; in every case the reservation is released and the plan
        annotation rolled back (best effort) before the error propagates. Messages name the pod.
        """
        uid, key = pod.uid, self.protocol.annotations.pod_plan
        with self.lock:
            if not self.is_leader():
                self.release(uid)
                raise NotLeaderError(f"pod {pod.key}: this replica is not the leader; it writes nothing")
            if uid in self._committing:
                raise CommitError(f"pod {pod.key} is already being bound")
            try:
                request = pod_request(pod, self.protocol)
                mig = self.sync.books.reservation(uid) if request.wants_mig else None
                if request.wants_mig and (mig is None or mig.node != allocation.node):
                    raise CommitError(f"pod {pod.key}: no MIG reservation on node {allocation.node} (it expired or "
                                      "was released); schedule the pod again")
                if self.sync.assumed.get(uid) != allocation:
                    self.release(uid)
                    self.sync.assume(allocation, mig=mig)
                    self._reserved_at[uid] = self.clock()
                gpus = self.sync.ledger.inventory(allocation.node).gpus
                mig_plans = () if mig is None else mig_container_plans(
                    request, mig, gpus, self.sync.books.instance_ids(allocation.node))
                plan = encode_plan(allocation, gpus, writer=self.protocol.scheduler_name, mig=mig_plans)
            except Exception as error:  # nothing is written yet: release and fail
                self.release(uid)
                self.metrics.decision(scheduled=False, reason="bind-failed")
                if isinstance(error, CommitError):
                    raise
                why = ("the reservation was lost and no longer fits" if isinstance(error, DomainError)
                       else "the plan could not be prepared")
                raise CommitError(f"pod {pod.key}: {why}: {error}") from error
            term = self._term
            self._committing.add(uid)
        bound = False
        try:
            write_plan_and_bind(self.commit_cluster, pod, node=allocation.node, key=key, plan=plan,
                                writer=self.protocol.scheduler_name, may_write=lambda: self._may_write(term))
            bound = True
        except CommitError as error:
            log.warning("commit failed", extra=fields(pod=pod.key, node=allocation.node, error=str(error)))
            raise
        except Exception as error:  # write_plan_and_bind wraps everything; this is the last line of defence
            log.exception("commit failed", extra=fields(pod=pod.key, node=allocation.node))
            raise CommitError(f"pod {pod.key}: binding to node {allocation.node} failed: {error!r}") from error
        finally:
            with self.lock:
                self._committing.discard(uid)
                if bound:
                    if self.sync.assumed.get(uid) is not None:
                        self._committed.add(uid)
                    self.metrics.decision(scheduled=True)
                else:
                    self.release(uid)
                    self.metrics.decision(scheduled=False, reason="bind-failed")
        log.info("pod bound", extra=fields(pod=pod.key, node=allocation.node, plan=plan))

    def _may_write(self, term: int) -> bool:
        """True while this replica leads in term ``term`` (asked right before a binding)."""
        with self.lock:
            return self._term == term and self.is_leader()

    # ------------------------------------------------------------------ maintenance
    def expire_assumed(self) -> list[str]:
        """Release reservations older than ``assumed_ttl_seconds`` that were never committed (the bind never
        came); returns their UIDs."""
        expired = []
        with self.lock:
            now = self.clock()
            assumed = self.sync.assumed
            for uid in [u for u in self._reserved_at if u not in assumed]:
                del self._reserved_at[uid]
            for uid in assumed:
                if uid in self._committing or uid in self._committed:
                    continue
                since = self._reserved_at.setdefault(uid, now)
                if now - since > self.config.assumed_ttl_seconds:
                    self.release(uid)
                    expired.append(uid)
        for uid in expired:
            log.info("reservation expired", extra=fields(pod_uid=uid, ttl=self.config.assumed_ttl_seconds))
        return expired

    def tick(self) -> None:
        """Re-check inventory staleness (no node event comes when a device plugin dies), expire reservations and
        report book problems (:mod:`.alerts`)."""
        with self.lock:
            self.sync.tick()
        self.expire_assumed()
        with self.lock:
            events = self.alerts.collect(self.sync)  # a lapsed reservation may have ended an over-booking
        self._emit(events)

    def resync(self) -> DriftReport:
        """List nodes and pods, rebuild the books from the listing and adopt them (repairing the live books in
        place), report the drift (counted in the metrics), and refresh FGD's typical pods.

        The listing and the rebuild run without the lock; the adoption takes it and happens only when each
        listing's resourceVersion is at least the informer's (:attr:`watermarks`): otherwise an event newer than
        the listing was already applied, so the service lists again (module docstring). Raises
        :class:`ports.cluster.ClusterError` when listing fails and :class:`StaleListingError` after
        :data:`RESYNC_ATTEMPTS` listings that were all too old.
        """
        for attempt in range(1, RESYNC_ATTEMPTS + 1):
            nodes = self.cluster.list_nodes()
            pods = self.cluster.list_pods()
            with self.lock:
                last_good, mig_last_good = self.sync.last_good(), self.sync.books.last_good()
            fresh = self.sync.rebuild(nodes.items, pods.items, last_good=last_good, mig_last_good=mig_last_good)
            with self.lock:
                behind = self._behind(nodes.resource_version, pods.resource_version)
                if not behind:
                    held = set(self.sync.holds.holders())
                    report = self.sync.adopt(fresh)
                    self.schedulers.reobserve(pods.items)
                    if held - set(self.sync.holds.holders()):
                        self._changed()  # holds the listing ended (a mark the informer had not shown yet)
                    self._floor = (_rv(nodes.resource_version), _rv(pods.resource_version))
                    count = drift_count(report)
                    events = self.alerts.collect(self.sync)
                    break
            log.info("resync listing older than the informers; listing again",
                     extra=fields(attempt=attempt, behind=behind))
        else:
            raise StaleListingError(f"{RESYNC_ATTEMPTS} listings were older than what the informers had applied")
        self.metrics.drift_repaired(count)
        self._emit(events)
        if count:
            log.warning("ledger drift repaired", extra=fields(
                count=count, missing=list(report.missing), extra_pods=list(report.extra),
                changed=list(report.changed), nodes_missing=list(report.nodes_missing),
                nodes_extra=list(report.nodes_extra), totals=sorted(report.totals)))
        return report

    def _behind(self, nodes_rv: str, pods_rv: str) -> str:
        """Which listing (``nodes``/``pods``) is older than its informer, or empty. Unnumbered versions pass."""
        if self.watermarks is None:
            return ""
        late = []
        for what, listed, applied in zip(("nodes", "pods"), (nodes_rv, pods_rv), self.watermarks(), strict=True):
            have, seen = _rv(listed), _rv(applied)
            if have is not None and seen is not None and have < seen:
                late.append(f"{what} {have} < {seen}")
        return ", ".join(late)

    @property
    def serving(self) -> bool:
        """True while this replica leads and has rebuilt its books in the current term: only then do the
        drivers schedule."""
        return self._rebuilt and self.is_leader()

    def begin_leading(self) -> int:
        """Leadership gained: open a new term (not serving until :meth:`rebuild_ledger` succeeds for it) and
        publish the leader gauge. Call synchronously where leadership is learnt; returns the term token."""
        with self.lock:
            self._term += 1
            self._leading, self._rebuilt = True, False
            self.metrics.set_leader(True)
            self.alerts.forget()  # the term's first report writes the Events a follower did not
            term = self._term
        log.info("leadership gained; rebuilding the ledger", extra=fields(term=term))
        return term

    def current_term(self, term: int) -> bool:
        """True while ``term`` is the open term."""
        with self.lock:
            return self._leading and self._term == term

    def rebuild_ledger(
        self,
        term: int,
        *,
        ready: Callable[[], bool] = lambda: True,
        stop: threading.Event | None = None,
        backoff: tuple[float, float] = REBUILD_BACKOFF,
    ) -> bool:
        """Rebuild the books for ``term`` and then serve: wait until ``ready()`` (both informers have listed),
        :meth:`resync`, and on success mark the term rebuilt. A failed rebuild is logged and retried after
        ``backoff`` (first, longest; seconds, doubling). Returns True once serving; False as soon as the term is
        over or ``stop`` is set."""
        stop = stop or threading.Event()
        delay, longest = backoff
        while not stop.is_set() and self.current_term(term):
            if not ready():
                stop.wait(READY_POLL)
                continue
            try:
                self.resync()
            except Exception as error:  # listing failed or stayed too old: retry, never serve unrebuilt books
                log.warning("ledger rebuild failed; retrying", extra=fields(term=term, error=str(error),
                                                                            retry_in=delay))
                stop.wait(delay)
                delay = min(delay * 2, longest)
                continue
            with self.lock:
                if not (self._leading and self._term == term):
                    break
                self._rebuilt = True
                self._changed()
            log.info("ledger rebuilt; serving", extra=fields(term=term))
            return True
        return False

    def start_leading(
        self,
        *,
        ready: Callable[[], bool] = lambda: True,
        stop: threading.Event | None = None,
        backoff: tuple[float, float] = REBUILD_BACKOFF,
    ) -> bool:
        """:meth:`begin_leading`, then :meth:`rebuild_ledger` for that term on this thread."""
        return self.rebuild_ledger(self.begin_leading(), ready=ready, stop=stop, backoff=backoff)

    def stop_leading(self) -> None:
        """Leadership lost: close the term, publish it and drop reservations that were never committed (no bind
        will follow)."""
        with self.lock:
            self._term += 1
            self._leading, self._rebuilt = False, False
            self.metrics.set_leader(False)
            for uid in list(self.sync.assumed):
                if uid not in self._committing and uid not in self._committed:
                    self.release(uid)
        log.info("leadership lost")

    # ------------------------------------------------------------------ views
    def knows_node(self, name: str) -> bool:
        """True when the ledger books node ``name``."""
        with self.lock:
            return self._known(name)

    def _known(self, name: str) -> bool:
        try:
            self.sync.ledger.slot(name)
        except UnknownNodeError:
            return False
        return True

    def gpus(self, node: str) -> list[GpuUsage]:
        """Per-GPU books of ``node`` (core milli-GPU, memory bytes). Raises UnknownNodeError."""
        with self.lock:
            return self.sync.ledger.gpus(node)

    def _ledger_view(self) -> Iterator[tuple[str, GpuUsage]]:
        with self.lock:
            ledger = self.sync.ledger
            rows = [(name, gpu) for name in ledger.node_names() for gpu in ledger.gpus(name)]
        return iter(rows)
