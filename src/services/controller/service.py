"""The node controller's use case: informer events in, reconciles out, steps executed through the cluster port.

:class:`ToggleController` keeps the controller's view — the last Node object per name, our Jobs per node (only
Jobs that :func:`~domain.toggle.jobs.is_ours` accepts), and the record of every managed node — and a
:class:`~.workqueue.WorkQueue` of node names. Rules:

* **what triggers work (B25)** — a Node event queues its node only when the enable label's value or the node's
  UID changed, or on first sight of a node that has the label, a state annotation or Jobs of ours; updates of
  other labels, annotations (our own write-back included) and status never queue anything, so they cost no
  reconcile and no API write. Every Job event of ours queues the Job's node (a Job finishing is news);
* **one reconcile at a time** — one worker pops due nodes and runs :func:`~domain.toggle.reconcile.reconcile`
  on a snapshot, then executes the steps in order; the first failing step stops the rest, the record is kept
  as it was, and the node is retried after ``retry_seconds``. A 409 on create (the deterministic name exists:
  our informer lags) reads the Job and retries at once. The decision's ``wake_at`` re-queues the node (retry
  backoff, failed-Job TTL, stuck deadline);
* **the cache follows our own writes** — a created Job enters the cache at once (so the next reconcile sees it
  even before its watch event); a deleted Job leaves it, and late events of a deleted Job's UID are ignored
  until its DELETED event, so a deleted Job never comes back as a ghost;
* **leadership** — only the leader reconciles, and it checks leadership again before every write; on gaining
  leadership the records are dropped (re-read from the nodes' annotations) and every known node and every node
  with Jobs is queued: the startup sweep (B26, B27). Nothing is reconciled before both informers have listed
  (``synced``), so a Job is never taken for an orphan because its node was not listed yet;
* **causes** — the pods of a failed Job are read once (:mod:`.causes`) so the job agent's own cause, not only
  the Job condition, reaches the node annotation and the Events;
* **resync** — every ``resync_seconds`` the leader queues every managed node again (a safety net; steady nodes
  cost no write).

Thread-safe: informer handlers and the worker share one lock; API calls run outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from domain.kube.objects import JobObject, NodeObject, Propagation
from domain.toggle.jobs import is_ours, job_action, job_generation, job_node
from domain.toggle.reconcile import (
    CreateJob,
    Decision,
    DeleteJob,
    EmitEvent,
    Forget,
    NodeView,
    Step,
    ToggleSettings,
    WriteState,
    reconcile,
)
from domain.toggle.record import NodeToggle
from domain.toggle.states import Action, ToggleState
from ports.cluster import ClusterError, ConflictError, EventsApi, JobsApi, NodesApi, NotFoundError, PodsApi
from ports.metrics import ControllerMetrics
from services._shared.logs import fields

from .causes import JobCauses
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

GONE_MEMORY = 10_000
"""UIDs of Jobs we deleted that are remembered until their DELETED event (bounded)."""


class _StepFailedError(Exception):
    """A step failed; the reconcile is retried later (``immediate``: at once)."""

    def __init__(self, message: str, *, immediate: bool = False) -> None:
        super().__init__(message)
        self.immediate = immediate


class ControllerCluster(NodesApi, PodsApi, EventsApi, JobsApi, Protocol):
    """The cluster roles the controller uses: patch Nodes, create/read/delete Jobs, list a Job's pods (failure
    causes), record Events."""


class ToggleController:
    """The node controller (module docstring).

    ``cluster``: the port every write goes through; ``settings``: policy, Job template and annotation keys;
    ``enable_label``: the label key (protocol ``node_label``); ``clock``: epoch seconds; ``is_leader``: whether
    this replica may write; ``retry_seconds``: delay after a failed step; ``resync_seconds``: period of the
    safety-net resync. Counters for tests and benchmarks: :attr:`writes` (API writes attempted),
    :attr:`reconciles`.
    """

    def __init__(
        self,
        cluster: ControllerCluster,
        settings: ToggleSettings,
        metrics: ControllerMetrics,
        *,
        enable_label: str,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        retry_seconds: float = 5.0,
        resync_seconds: float = 600.0,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.metrics = metrics
        self.enable_label = enable_label
        self.clock = clock
        self.is_leader = is_leader
        self.retry_seconds = retry_seconds
        self.resync_seconds = resync_seconds
        self.synced: Callable[[], bool] = lambda: True
        self.queue = WorkQueue(clock)
        self.writes = 0
        self.reconciles = 0
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeObject] = {}
        self._label_changes: dict[str, int] = {}
        self._jobs: dict[str, dict[str, JobObject]] = {}
        self._generations: dict[str, int] = {}
        self._gone: dict[str, None] = {}
        self._records: dict[str, NodeToggle] = {}
        self._causes = JobCauses(cluster)
        self._next_resync = clock() + resync_seconds
        metrics.watch_states(self.state_counts)
        metrics.watch_failed_nodes(self.failed_nodes)

    # ------------------------------------------------------------------ informer handlers
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated: queue it only for a change the controller acts on (module docstring)."""
        label = node.labels.get(self.enable_label)
        with self._lock:
            prev = self._nodes.get(node.name)
            self._nodes[node.name] = node
            if prev is not None and prev.uid == node.uid:
                if prev.labels.get(self.enable_label) == label:
                    return  # B25: nothing the controller cares about changed
                self._label_changes[node.name] = self._label_changes.get(node.name, 0) + 1
            elif (prev is None and label is None and self.settings.state_key not in node.annotations
                  and not self._jobs.get(node.name)):
                return  # a node the controller does not manage
        self.queue.add(node.name)

    def on_node_deleted(self, node: NodeObject) -> None:
        """Node deleted (last known state): forget its object and queue it (its Jobs go, its record is dropped)."""
        with self._lock:
            cached = self._nodes.get(node.name)
            if cached is not None and cached.uid == node.uid:
                del self._nodes[node.name]
                self._label_changes.pop(node.name, None)
                self._generations.pop(node.name, None)
        self.queue.add(node.name)

    def on_job(self, job: JobObject) -> None:
        """A Job of ours added or updated: cache it and queue its node. Jobs that are not ours are ignored."""
        if not is_ours(job):
            return
        node = job_node(job)
        with self._lock:
            if job.uid in self._gone:
                return  # a late event of a Job we deleted
            self._remember(node, job)
        self.queue.add(node)

    def on_job_deleted(self, job: JobObject) -> None:
        """A Job deleted (or no longer matching our selector): drop it if cached and queue its node."""
        with self._lock:
            self._gone.pop(job.uid, None)
            cached = (n for n, jobs in self._jobs.items() if job.name in jobs and jobs[job.name].uid == job.uid)
            node = next(cached, job_node(job) if is_ours(job) else "")
            if not node:
                return
            self._drop_job(node, job.name, job.uid)
        self.queue.add(node)

    def _remember(self, node: str, job: JobObject) -> None:
        self._jobs.setdefault(node, {})[job.name] = job
        self._generations[node] = max(self._generations.get(node, 0), job_generation(job))

    def _drop_job(self, node: str, name: str, uid: str) -> None:
        jobs = self._jobs.get(node)
        if jobs is not None and name in jobs and (not uid or jobs[name].uid == uid):
            del jobs[name]
            if not jobs:
                del self._jobs[node]

    # ------------------------------------------------------------------ leadership and views
    def begin_leading(self) -> None:
        """Leadership gained: drop the records (re-read from annotations) and queue every known node and every
        node with Jobs of ours (the startup sweep)."""
        self.metrics.set_leader(True)
        with self._lock:
            self._records.clear()
            names = set(self._nodes) | set(self._jobs)
        for name in sorted(names):
            self.queue.add(name)
        log.info("leading: sweeping nodes", extra=fields(nodes=len(names)))

    def stop_leading(self) -> None:
        """Leadership lost: stop writing (the worker checks :attr:`is_leader`)."""
        self.metrics.set_leader(False)

    def state_counts(self) -> dict[ToggleState, int]:
        """Managed nodes per state (for the metrics)."""
        with self._lock:
            return dict(Counter(r.state for r in self._records.values()))

    def failed_nodes(self) -> dict[str, Action | None]:
        """Managed nodes in the ``failed`` state → the target whose tries failed (for the metrics)."""
        with self._lock:
            return {r.node: r.target for r in self._records.values() if r.state is ToggleState.FAILED}

    def record(self, node: str) -> NodeToggle | None:
        """The record of ``node`` (None when not managed)."""
        with self._lock:
            return self._records.get(node)

    def jobs(self, node: str) -> list[JobObject]:
        """The cached Jobs of ours for ``node``."""
        with self._lock:
            return list(self._jobs.get(node, {}).values())

    # ------------------------------------------------------------------ the worker
    def run_due(self) -> int:
        """Reconcile every node that is due now (synchronously); returns how many. Does nothing unless leading
        and synced."""
        done = 0
        while self.is_leader() and self.synced():
            name = self.queue.pop_due()
            if name is None:
                break
            self.process(name)
            done += 1
        return done

    def run(self, stop: threading.Event, *, idle_wait: float = 0.5) -> None:
        """Worker loop until ``stop`` is set: reconcile due nodes while leading and synced, resync periodically.
        Never raises: a failing reconcile is logged and retried after ``retry_seconds``."""
        while not stop.is_set():
            if not (self.is_leader() and self.synced()):
                stop.wait(0.1)
                continue
            if self.clock() >= self._next_resync:
                self._next_resync = self.clock() + self.resync_seconds
                self.resync()
            if self.run_due() == 0:
                self.queue.wait(idle_wait)

    def resync(self) -> None:
        """Queue every managed node and every node with Jobs of ours."""
        with self._lock:
            names = set(self._records) | set(self._jobs)
        for name in names:
            self.queue.add(name)

    def _snapshot(self, name: str) -> tuple[NodeView | None, NodeToggle | None, list[JobObject]]:
        keys = (self.settings.state_key, self.settings.detail_key)
        with self._lock:
            node = self._nodes.get(name)
            view = None if node is None else NodeView(
                name, node.uid, node.labels.get(self.enable_label),
                {k: node.annotations[k] for k in keys if k in node.annotations},
                self._label_changes.get(name, 0), self._generations.get(name, 0))
            return view, self._records.get(name), list(self._jobs.get(name, {}).values())

    def process(self, name: str) -> Decision | None:
        """Reconcile node ``name`` once and execute the steps (module docstring); returns the decision (None when
        a bug raised; logged, retried)."""
        self.reconciles += 1
        try:
            view, record, jobs = self._snapshot(name)
            decision = reconcile(name, view, record, jobs, now=self.clock(), settings=self.settings,
                                 causes=self._causes.of(jobs))
        except Exception:
            log.exception("reconcile failed", extra=fields(node=name))
            self.queue.add(name, at=self.clock() + self.retry_seconds)
            return None
        try:
            for step in decision.steps:
                self._execute(name, step)
        except _StepFailedError as failure:
            log.warning("reconcile step failed; retrying", extra=fields(node=name, error=str(failure)))
            self.queue.add(name, at=self.clock() + (0.0 if failure.immediate else self.retry_seconds))
            return decision
        self._commit(name, decision)
        return decision

    def _commit(self, name: str, decision: Decision) -> None:
        with self._lock:
            if decision.record is None:
                self._records.pop(name, None)
            else:
                self._records[name] = decision.record
        for previous, new in decision.transitions:
            self.metrics.transition(previous, new)
            log.info("toggle %s → %s", previous.value, new.value, extra=fields(node=name))
        for action in decision.failed:
            self.metrics.job_failed(action)
        if decision.wake_at is not None:
            self.queue.add(name, at=decision.wake_at)

    # ------------------------------------------------------------------ steps
    def _write(self, verb: str, call: Callable[[], object]) -> object:
        if not self.is_leader():
            raise _StepFailedError("no longer leading")
        self.writes += 1
        try:
            result = call()
        except ClusterError:
            self.metrics.api_write(verb, ok=False)
            raise
        self.metrics.api_write(verb, ok=True)
        return result

    def _execute(self, name: str, step: Step) -> None:
        if isinstance(step, CreateJob):
            self._create(step.job)
        elif isinstance(step, WriteState):
            try:
                self._write("patch_node", lambda: self.cluster.patch_node_metadata(
                    step.node, annotations=dict(step.annotations)))
            except ClusterError as error:
                raise _StepFailedError(f"write state of node {step.node}: {error}") from error
        elif isinstance(step, DeleteJob):
            self._delete(name, step)
        elif isinstance(step, EmitEvent):
            try:
                self._write("create_event", lambda: self.cluster.create_event(step.event))
            except ClusterError as error:  # best effort
                log.warning("event not recorded", extra=fields(node=step.event.name, reason=step.event.reason,
                                                               error=str(error)))
        elif isinstance(step, Forget):
            with self._lock:
                self._records.pop(step.node, None)
            log.info("node gone: forgotten", extra=fields(node=step.node))

    def _create(self, job: JobObject) -> None:
        try:
            created = self._write("create_job", lambda: self.cluster.create_job(job))
        except ConflictError as error:
            self._adopt(job)
            raise _StepFailedError(f"create job {job.name}: {error}", immediate=True) from error
        except ClusterError as error:
            raise _StepFailedError(f"create job {job.name}: {error}") from error
        assert isinstance(created, JobObject)
        action = job_action(created)
        if action is not None:
            self.metrics.job_created(action)
        with self._lock:
            self._remember(job_node(created), created)
        log.info("job created", extra=fields(node=created.node_name, job=created.name))

    def _adopt(self, job: JobObject) -> None:
        """The name exists (our cache lags): read it into the cache so the next reconcile sees it."""
        try:
            found = self.cluster.get_job(job.namespace, job.name)
        except ClusterError:
            return
        self.on_job(found)

    def _delete(self, node: str, step: DeleteJob) -> None:
        with self._lock:
            cached = self._jobs.get(node, {}).get(step.name)
        try:
            self._write("delete_job", lambda: self.cluster.delete_job(
                step.namespace, step.name, propagation=Propagation.BACKGROUND))
        except NotFoundError:
            pass  # already gone: the goal is reached
        except ClusterError as error:
            raise _StepFailedError(f"delete job {step.name}: {error}") from error
        else:
            self.metrics.job_deleted(step.reason)
        with self._lock:
            if cached is not None:
                self._gone[cached.uid] = None
                while len(self._gone) > GONE_MEMORY:
                    del self._gone[next(iter(self._gone))]
                self._drop_job(node, cached.name, cached.uid)
        log.info("job deleted", extra=fields(job=step.name, reason=step.reason))

