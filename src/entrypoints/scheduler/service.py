"""The scheduler component's state: one ledger kept equal to the cluster, one scheduler per policy, commits.

Both drivers (the kube-scheduler extender and the standalone loop) call into one :class:`SchedulerService`:

* **Ledger lifecycle** — :class:`~domain.scheduling.sync.LedgerSync` fed by the node and pod informers
  (``on_node``/``on_node_deleted``/``on_pod``/``on_pod_deleted``); :meth:`SchedulerService.resync` lists
  everything, repairs drift and counts it in the metrics (run periodically and on gaining leadership, which
  rebuilds the books from the API before the replica serves). A standby replica keeps its ledger warm the same
  way, so a takeover needs no cold start.
* **Cycles** — :meth:`schedule_pod` reserves the chosen placement in the ledger as an *assumed* pod, so every
  later cycle sees it while the API calls run; :meth:`commit` writes the plan annotation, then binds
  (:mod:`.commit`), and releases the reservation on any failure (B06/B07). Reservations whose commit never
  comes (kube-scheduler gave up on the pod after our filter) expire after ``assumed_ttl_seconds``
  (:meth:`expire_assumed`).
* **Policies** — :mod:`.policies`: default ``fgd``, per-pod override annotation (unknown → unschedulable with
  a reason), FGD's typical pods from the observed pods topped up by the synthetic workload. GPU model and UUID
  selection/exclusion annotations are read by :func:`domain.kube.translate.pod_request`.
* **Leadership** — only the leader writes (plan, binding, events): :meth:`commit` raises
  :class:`NotLeaderError` on a standby and releases the reservation.

Thread safety: :attr:`SchedulerService.lock` (re-entrant) serialises informer events, cycles, resyncs and
extender calls; API writes of a commit run outside it, protected by the reservation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator

from domain.allocation import PodAllocation
from domain.errors import DomainError, UnknownNodeError, UnknownPolicyError
from domain.kube.annotations import encode_plan
from domain.kube.objects import NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.ledger import ClusterLedger, GpuUsage
from domain.scheduling.drift import DriftReport
from domain.scheduling.framework import ScheduleResult
from domain.scheduling.sync import LedgerSync, Tombstone
from entrypoints._shared.logs import fields
from ports.cluster import ClusterApi
from ports.metrics import SchedulerMetrics

from .commit import CommitError, write_plan_and_bind
from .policies import SchedulerSet, ServiceConfig

log = logging.getLogger(__name__)

__all__ = ["CommitError", "NotLeaderError", "SchedulerService", "ServiceConfig", "drift_count"]


class NotLeaderError(CommitError):
    """This replica is not the leader, so it must not write to the API."""


def drift_count(report: DriftReport) -> int:
    """Entries a resync repaired: pods missing, extra or changed, plus nodes missing or extra."""
    return sum(map(len, (report.missing, report.extra, report.changed, report.nodes_missing, report.nodes_extra)))


class SchedulerService:
    """Ledger, schedulers and commits of one scheduler replica (module docstring).

    ``clock`` returns epoch seconds (inventory heartbeats are epoch times); ``is_leader`` says whether this
    replica may write. Listeners (set by the drivers, called under the lock, must be quick):
    ``pod_listeners(pod)`` after every pod add/update, ``deletion_listeners(pod)`` after a pod delete,
    ``change_listeners()`` when capacity may have appeared (node added, pod deleted or finished).
    """

    def __init__(
        self,
        cluster: ClusterApi,
        protocol: ProtocolConstants,
        metrics: SchedulerMetrics,
        *,
        config: ServiceConfig | None = None,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.cluster = cluster
        self.protocol = protocol
        self.metrics = metrics
        self.config = config or ServiceConfig()
        self.clock = clock
        self.is_leader = is_leader
        self.lock = threading.RLock()
        self.sync = LedgerSync(ClusterLedger(), protocol, clock=clock,
                               assumed_ttl_seconds=self.config.assumed_ttl_seconds)
        self.pod_listeners: list[Callable[[PodObject], None]] = []
        self.deletion_listeners: list[Callable[[PodObject | Tombstone], None]] = []
        self.change_listeners: list[Callable[[], None]] = []
        self.schedulers = SchedulerSet(self.sync, protocol, self.config)
        self._reserved_at: dict[str, float] = {}
        self._committing: set[str] = set()
        self._committed: set[str] = set()
        self._rebuilt = False
        self._term = 0  # bumped on every leadership change, so a late rebuild of an old term serves nothing
        metrics.watch_ledger(self._ledger_view)

    # ------------------------------------------------------------------ informer events
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated (LedgerSync rules); a new node wakes waiting pods. Never raises for bad node content
        (the node is gated instead: ``sync.gates``)."""
        with self.lock:
            new = not self._known(node.name)
            self.sync.on_node(node)
            if new:
                self._changed()

    def on_node_deleted(self, node: NodeObject | str) -> None:
        """Node deleted (its object or its name); its reservations are dropped. Never raises."""
        with self.lock:
            self.sync.on_node_deleted(node if isinstance(node, str) else node.name)

    def on_pod(self, pod: PodObject) -> None:
        """Pod added or updated: books, observed pod classes, listeners; a finished pod wakes waiting pods. Idempotent
        (B04); never raises for bad pod content (recorded in ``sync.problems``)."""
        with self.lock:
            self.sync.on_pod(pod)
            if pod.node_name or pod.phase.terminal:
                self._committed.discard(pod.uid)
            self.schedulers.observe(pod)
            for listener in self.pod_listeners:
                listener(pod)
            if pod.phase.terminal:
                self._changed()

    def on_pod_deleted(self, item: PodObject | Tombstone) -> None:
        """Pod deleted, plainly or as a :class:`Tombstone` (B01); releases what it held. Never raises."""
        with self.lock:
            self.sync.on_pod_deleted(item)
            uid = item.uid if isinstance(item, PodObject) else (item.obj.uid if item.obj is not None else None)
            if uid is not None:
                self.schedulers.forget(uid)
                self._committed.discard(uid)
                self._reserved_at.pop(uid, None)
            for listener in self.deletion_listeners:
                listener(item)
            self._changed()

    def _changed(self) -> None:
        for listener in self.change_listeners:
            listener()

    # ------------------------------------------------------------------ cycles
    def schedule_pod(self, pod: PodObject, *, candidates: Collection[str] | None = None) -> ScheduleResult:
        """One cycle for pending ``pod``, restricted to ``candidates`` (node names) when given; the placement
        is reserved in the ledger as an assumed pod. A pod already holding a reservation on a node among the
        candidates keeps it (re-validated: it is in the books); one elsewhere is released and redone. Never
        raises for bad pod content: invalid requests and unknown policies come back unscheduled with a
        reason, and are counted in the metrics."""
        with self.lock:
            held = self.sync.assumed.get(pod.uid)
            if held is not None:
                if candidates is None or held.node in candidates:
                    return ScheduleResult(pod.uid, held, reason="already reserved", feasible_nodes=1)
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

        Re-books the reservation if it vanished meanwhile. Raises :class:`NotLeaderError` on a standby and
        :class:`CommitError` on any failure; in both cases the reservation is released.
        """
        uid, key = pod.uid, self.protocol.annotations.pod_plan
        with self.lock:
            if not self.is_leader():
                self.release(uid)
                raise NotLeaderError("this replica is not the leader; it writes nothing")
            if uid in self._committing:
                raise CommitError(f"pod {pod.key} is already being bound")
            if self.sync.assumed.get(uid) != allocation:
                try:
                    self.sync.assume(allocation)
                except DomainError as error:
                    self.metrics.decision(scheduled=False, reason="bind-failed")
                    raise CommitError(f"the reservation was lost and no longer fits: {error}") from error
                self._reserved_at[uid] = self.clock()
            plan = encode_plan(allocation, self.sync.ledger.inventory(allocation.node).gpus)
            self._committing.add(uid)
        try:
            write_plan_and_bind(self.cluster, pod, node=allocation.node, key=key, plan=plan)
        except CommitError as error:
            with self.lock:
                self._committing.discard(uid)
                self.release(uid)
                self.metrics.decision(scheduled=False, reason="bind-failed")
            log.warning("commit failed", extra=fields(pod=pod.key, node=allocation.node, error=str(error)))
            raise
        with self.lock:
            self._committing.discard(uid)
            if self.sync.assumed.get(uid) is not None:
                self._committed.add(uid)
            self.metrics.decision(scheduled=True)
        log.info("pod bound", extra=fields(pod=pod.key, node=allocation.node, plan=plan))

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
        """Re-check inventory staleness (no node event comes when a device plugin dies) and expire reservations."""
        with self.lock:
            self.sync.tick()
        self.expire_assumed()

    def resync(self) -> DriftReport:
        """List nodes and pods, repair the live books in place and report drift (counted in the metrics);
        refresh FGD's typical pods. The listing happens under the lock, so no informer event is applied
        between the listing and the repair. Raises :class:`ports.cluster.ClusterError` when listing fails."""
        with self.lock:
            nodes = self.cluster.list_nodes().items
            pods = self.cluster.list_pods().items
            report = self.sync.resync(nodes, pods)
            self.schedulers.reobserve(pods)
            count = drift_count(report)
        self.metrics.drift_repaired(count)
        if count:
            log.warning("ledger drift repaired", extra=fields(
                count=count, missing=list(report.missing), extra_pods=list(report.extra),
                changed=list(report.changed), nodes_missing=list(report.nodes_missing),
                nodes_extra=list(report.nodes_extra)))
        return report

    @property
    def serving(self) -> bool:
        """True while this replica leads and has rebuilt its books since it gained leadership: only then do the
        drivers schedule."""
        return self._rebuilt and self.is_leader()

    def start_leading(self) -> None:
        """Leadership gained: rebuild the books from the API, then serve (:attr:`serving`); publish the leader
        gauge. A failed listing is logged (the informers keep the books; the periodic resync retries)."""
        with self.lock:
            self._term += 1
            term, self._rebuilt = self._term, False
        log.info("leadership gained; rebuilding the ledger")
        self.metrics.set_leader(True)
        try:
            self.resync()
        except Exception as error:  # the periodic resync will retry; informers keep the books meanwhile
            log.warning("rebuild on gaining leadership failed", extra=fields(error=str(error)))
        with self.lock:
            if self._term == term:
                self._rebuilt = True
                self._changed()

    def stop_leading(self) -> None:
        """Leadership lost: publish it and drop reservations that were never committed (no bind will follow)."""
        self.metrics.set_leader(False)
        with self.lock:
            self._term += 1
            self._rebuilt = False
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
