"""The standalone scheduling loop: schedules pods whose ``spec.schedulerName`` is ours, without kube-scheduler.

For clusters without extender configuration and for the local cluster. Queue rules (modelled on kube-scheduler's
active and backoff queues, ``pkg/scheduler/internal/queue`` of kubernetes/kubernetes):

* the pod informer offers every pod (:meth:`StandaloneLoop.offer`); pending, unbound, not terminating pods with
  our scheduler name are queued by ``namespace/name`` (a repeated offer only refreshes the stored object), the
  ready ones taken highest ``spec.priority`` first, first come first within a priority (kube-scheduler's default
  ``PrioritySort``); a bound, finished or deleted pod leaves the queue;
* each attempt runs one cycle (node fit — cordon, nodeSelector, required node affinity, taints — then CPU,
  memory, pod slots, GPU model/UUID and per-GPU fit; see :mod:`.policies`) and commits the result; on failure a
  ``FailedScheduling`` Warning Event carries the reason and the pod waits in backoff: 1 s, doubling to 60 s (a
  retry failing for the same reason raises that Event's count and last timestamp: one Event per pod UID, reason
  and message, as Kubernetes' event recorder keeps them, ``ClusterApi.create_event``);
* a pod with DRA ResourceClaims (``spec.resourceClaims``) has them read, placed with it and allocated before its
  binding (:mod:`.claimcycle`); a claim not usable here is its FailedScheduling reason; such a pod preempts with
  what its claims ask, and a victim frees the claims reserved for it alone (:mod:`.preempting`);
* a pod that fits nowhere may preempt (:meth:`SchedulerService.preempt_for`: victims of strictly lower priority on
  one node, per GPU, kube-scheduler's order, ``preemptionPolicy: Never`` honoured): the pod is nominated
  (``status.nominatedNodeName``) and the service holds what the victims free for it; each victim gets a
  ``Preempted`` Event naming the preemptor and, as kube-scheduler does, the condition ``DisruptionTarget`` (reason
  ``PreemptionByScheduler``, :func:`~domain.kube.podconditions.preemption_condition`), then is deleted gracefully
  (its own grace period); both by UID (a precondition: a pod recreated under its name is never touched), and a
  victim whose condition could not be written is not deleted (the next attempt chooses again); the preemptor
  backs off until the deletions wake it. While victims terminate, it evicts nothing more. A nomination the pod
  can no longer use ends and its ``status.nominatedNodeName`` is cleared: when no victim set makes it fit any more
  (its node cordoned, the room taken by a pod of higher priority…) and when it is bound to another node;
* cluster changes that may make room (node added, pod deleted or finished, a reservation released:
  :meth:`StandaloneLoop.wake`) move the backed-off pods back to the queue at most once per ``min_wake_interval``
  seconds, so a busy cluster cannot turn retries into a busy loop; a pod that fitted nowhere and whose backoff
  ends with nothing changed that may make room is not tried again but backs off once more (no cycle, no Event)
  until its backoff reaches the longest, as kube-scheduler keeps such pods aside (:mod:`.retries`);
* with ``bind_workers`` > 1 binding is asynchronous, as kube-scheduler's binding cycle: a cycle reserves the pod's
  placement and hands its commit (claims, binding) to one of that many threads while the next cycles run, at most
  that many in flight; the reservation counts until the commit ends (bound, or released on failure); Events go to
  one more thread, in order, at most :data:`EVENT_BACKLOG` waiting;
* a standby replica keeps its queue but attempts nothing; only the leader, once its ledger is rebuilt
  (``SchedulerService.serving``), schedules and writes Events;
* the worker never dies: Events are best effort (any error is logged), and any exception in a round is logged
  and followed by a pause (:data:`ERROR_BACKOFF` doubling to :data:`MAX_ERROR_BACKOFF`).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable

from domain.allocation import PodAllocation
from domain.dra.allocate import ClaimNeed
from domain.errors import InvalidRequestError
from domain.kube.objects import ClusterEvent, PodObject
from domain.scheduling.sync import Tombstone
from services._shared.logs import fields

from .bindworkers import BindWorkers
from .commit import CommitError
from .evictions import preempt, unnominate
from .retries import FutileRetries
from .service import NotLeaderError, SchedulerService

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 1.0
"""Seconds before the first retry of an unschedulable pod (kube-scheduler's podInitialBackoffSeconds)."""
MAX_BACKOFF = 60.0
"""Longest wait between attempts, seconds."""
STANDBY_POLL = 0.5
"""Seconds a standby sleeps between leadership checks."""
ERROR_BACKOFF = 0.5
"""Seconds the worker pauses after an unexpected error (doubling while errors repeat)."""
MAX_ERROR_BACKOFF = 30.0
"""Longest pause after repeated unexpected errors, seconds."""
EVENT_BACKLOG = 1000
"""Most Events waiting for the Event thread; more are dropped (client-go's recorder drops past 1000 too)."""


class StandaloneLoop:
    """FIFO + backoff queue and worker of the standalone mode (module docstring). ``clock`` is monotonic
    seconds; ``bind_workers``: commits in flight at most (1: synchronous). Raises :class:`InvalidRequestError` for
    ``bind_workers`` < 1."""

    def __init__(
        self,
        service: SchedulerService,
        *,
        clock: Callable[[], float] = time.monotonic,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        min_wake_interval: float = 0.5,
        bind_workers: int = 1,
    ) -> None:
        if bind_workers < 1:
            raise InvalidRequestError("bind_workers", bind_workers, "must be at least 1")
        self.service = service
        self.bind_workers = bind_workers
        self._workers = BindWorkers(bind_workers)  # both started by run() when bind_workers > 1
        self._events = BindWorkers(1, name="events", limit=EVENT_BACKLOG)
        self._in_flight: dict[str, str] = {}  # pod UID → key, for each pod whose commit a bind worker runs
        self.scheduler_name = service.protocol.scheduler_name
        self.clock = clock
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.min_wake_interval = min_wake_interval
        self._cond = threading.Condition()
        self._ready: collections.OrderedDict[str, None] = collections.OrderedDict()  # FIFO; taken by priority
        self._pods: dict[str, PodObject] = {}
        self._backoff: dict[str, float] = {}  # key → not before (clock s)
        self._delay: dict[str, float] = {}  # key → last backoff delay (s), kept until the pod is bound
        self._last_wake = -float("inf")
        self._woken: set[str] = set()  # backed-off keys a wake brought forward, until they leave the backoff
        self.retries = FutileRetries(service.room_unchanged_since)
        self.attempts = 0
        service.pod_listeners.append(self.offer)
        service.deletion_listeners.append(self._deleted)
        service.change_listeners.append(self.wake)
        service.room_listeners.append(lambda: self._due_now(self.retries.room_changed))
        service.claim_listeners.append(
            lambda ns, name: self._due_now(lambda: self.retries.claim_changed(self._pods, ns, name)))

    # ------------------------------------------------------------------ queue
    def ours(self, pod: PodObject) -> bool:
        """True for a pending, unbound, not terminating pod with our scheduler name."""
        return (pod.scheduler_name == self.scheduler_name and not pod.node_name and not pod.phase.terminal
                and pod.deletion_timestamp is None)

    def offer(self, pod: PodObject) -> None:
        """Queue ``pod`` if it is ours and waiting; drop it otherwise (module docstring)."""
        with self._cond:
            if not self.ours(pod):
                self._drop(pod.key)
                return
            known = pod.key in self._pods
            if known and self._pods[pod.key] != pod:
                self.retries.forget(pod.key)  # a changed pod (tolerations, say) may fit now
            self._pods[pod.key] = pod
            if not known:
                self._ready[pod.key] = None
                self._cond.notify_all()

    def _deleted(self, item: PodObject | Tombstone) -> None:
        with self._cond:
            self._drop(item.key)

    def _drop(self, key: str) -> None:
        self._pods.pop(key, None)
        self._ready.pop(key, None)
        self._backoff.pop(key, None)
        self._woken.discard(key)
        self._delay.pop(key, None)
        self.retries.forget(key)

    def wake(self) -> None:
        """Capacity may have appeared: move backed-off pods back to the queue, at most once per
        ``min_wake_interval`` seconds. A wake inside the interval is not lost: the pods are due at its end (the
        change it reports — a DRA claim deallocated just after its pod ended, say — may be the one that frees them)."""
        with self._cond:
            if not self._backoff:
                return
            now = self.clock()
            if self._last_wake > now:  # a wake is already set for the interval's end: this one joins it
                at = self._last_wake
            else:
                at = self._last_wake = max(now, self._last_wake + self.min_wake_interval)
            for key, due in self._backoff.items():
                if at < due:
                    self._backoff[key] = at
                    self._woken.add(key)
            self._cond.notify_all()

    def delay(self, key: str) -> float | None:
        """The pod's current backoff delay (s), or None when it has not failed since it was queued or bound."""
        with self._cond:
            return self._delay.get(key)

    def waking(self) -> list[str]:
        """Keys of backed-off pods a capacity change brought forward and that have not been tried since; callers
        waiting for a quiescent point wait for them too (a pod only waiting out its own backoff is not listed)."""
        with self._cond:
            return [key for key in self._backoff if key in self._woken]

    def pending(self) -> list[str]:
        """Keys of queued pods (ready first, then backed off, then those whose commit is in flight)."""
        with self._cond:
            queued = [*self._ready, *(k for k in self._backoff if k not in self._ready)]
            return [*queued, *sorted(set(self._in_flight.values()) - set(queued))]

    def _next(self, stop: threading.Event, timeout: float) -> PodObject | None:
        """The next pod due, waiting at most ``timeout`` seconds; None when nothing is due."""
        with self._cond:
            deadline = self.clock() + timeout
            while not stop.is_set():
                now = self.clock()
                for key, due in list(self._backoff.items()):
                    if due <= now and not self._no_room_yet(key, now):
                        del self._backoff[key]
                        self._woken.discard(key)
                        self._ready[key] = None
                if self._ready:
                    key = self._highest()
                    del self._ready[key]
                    return self._pods.get(key)
                waits = [due - now for due in self._backoff.values()]
                remaining = min([deadline - now, *waits])
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return None

    def _no_room_yet(self, key: str, now: float) -> bool:
        """Under ``_cond``, for a pod whose backoff just ended: True, having backed it off once more, when its
        retry is skipped (:mod:`.retries`)."""
        delay = self._delay.get(key, self.max_backoff)
        if not self.retries.skip(key, woken=key in self._woken, delay=delay, longest=self.max_backoff):
            return False
        self._delay[key] = min(delay * 2, self.max_backoff)
        self._backoff[key] = now + self._delay[key]
        return True

    def _due_now(self, skipped: Callable[[], list[str]]) -> None:
        """Takes ``_cond``, then makes the backed-off pods ``skipped()`` names due at once (retries skipped too
        early, :mod:`.retries`)."""
        with self._cond:
            due = [key for key in skipped() if key in self._backoff]
            now = self.clock()
            for key in due:
                self._backoff[key] = min(self._backoff[key], now)
            if due:
                self._cond.notify_all()

    def _highest(self) -> str:
        """The ready key of highest priority, the earliest queued among equals (one pass over the ready pods)."""
        best, top = "", None
        for key in self._ready:
            pod = self._pods.get(key)
            priority = 0 if pod is None else pod.priority
            if top is None or priority > top:
                best, top = key, priority
        return best

    def _current(self, pod: PodObject) -> bool:
        """True while ``pod`` is the one queued under its key (not deleted nor re-created). Under ``_cond``."""
        stored = self._pods.get(pod.key)
        return stored is not None and stored.uid == pod.uid

    def _fail(self, pod: PodObject, reason: str, *, no_room_at: int | None = None, claims_at: int | None = None
              ) -> None:
        """Back ``pod`` off with a FailedScheduling Event; ``no_room_at``: the service's ``room_version`` before a
        cycle in which it fitted nowhere (None for any other failure); ``claims_at``: the loop's claim events before
        that cycle, for a pod with claims (:meth:`.retries.FutileRetries.failed`)."""
        with self._cond:
            if not self._current(pod):
                return
            self.retries.failed(pod.key, no_room_at if self._pods.get(pod.key) == pod else None, claims_at)
            previous = self._delay.get(pod.key)
            delay = self.initial_backoff if previous is None else min(previous * 2, self.max_backoff)
            self._delay[pod.key] = delay
            self._backoff[pod.key] = self.clock() + delay
            self._woken.discard(pod.key)
            self._ready.pop(pod.key, None)
        self._event(pod, "FailedScheduling", reason, "Warning")
        log.info("pod unschedulable", extra=fields(pod=pod.key, reason=reason, retry_in=delay))

    def _event(self, pod: PodObject, reason: str, message: str, kind: str) -> None:
        """Record an Event, on the Event thread while the bind workers run (the cycle never waits on it; past
        :data:`EVENT_BACKLOG` waiting it is dropped); best effort: any failure is logged, never raised."""
        event = ClusterEvent("Pod", pod.name, reason, message[:1000], namespace=pod.namespace, type=kind, uid=pod.uid)
        if self._events.submit(functools.partial(self._write, event)):
            return
        if self._events.running:  # EVENT_BACKLOG Events wait already
            log.warning("event dropped: too many waiting", extra=fields(pod=pod.key, reason=reason))
            return
        self._write(event)

    def _write(self, event: ClusterEvent) -> None:
        try:
            self.service.cluster.create_event(event)
        except Exception as error:  # an Event is never worth a scheduling failure
            log.warning("event not recorded", extra=fields(pod=f"{event.namespace}/{event.name}",
                                                           reason=event.reason, error=str(error)))

    # ------------------------------------------------------------------ worker
    def attempt(self, pod: PodObject) -> bool:
        """One scheduling attempt for ``pod`` (leader only), committed before it returns; returns True when it was
        bound. Failures become a FailedScheduling Event and a backoff; raises nothing the cycle or the commit
        anticipates."""
        if self.service.committed(pod.uid):
            return True
        placed = self._cycle(pod)
        return placed is not None and self._commit(pod, *placed)

    def _cycle(self, pod: PodObject) -> tuple[PodAllocation, ClaimNeed | None, str] | None:
        """The cycle of an attempt: the reserved placement, the pod's claims and its nominated node (or ""), or
        None after a failure (Event, backoff, preemption)."""
        service = self.service
        self.attempts += 1
        version = service.room_version  # before the cycle reads the books
        claims_at = self.retries.claim_events if pod.resource_claims else None
        nominated = pod.nominated_node_name or service.nominated_node(pod.uid)
        claims = service.claim_need(pod) if pod.resource_claims else None
        if isinstance(claims, str):
            self._fail(pod, claims)
            return None
        result = service.schedule_pod(pod, claims=claims)
        if result.allocation is None:
            reason = result.reason
            if reason.startswith("invalid request"):
                self._fail(pod, reason)
                return None
            reason = f"{reason}; {preempt(service, pod, nominated, claims, self.scheduler_name, self._event)}"
            self._fail(pod, reason, no_room_at=version, claims_at=claims_at)  # a nomination made keeps it retried
            return None
        return result.allocation, claims, nominated

    def _commit(self, pod: PodObject, allocation: PodAllocation, claims: ClaimNeed | None, nominated: str) -> bool:
        """The commit of an attempt (claims, binding, Events); True when bound."""
        try:
            self.service.commit(pod, allocation, claims=claims)
        except NotLeaderError:
            with self._cond:
                if self._current(pod):
                    self._ready[pod.key] = None
                    self._cond.notify_all()
            return False
        except CommitError as error:
            self._fail(pod, str(error))
            return False
        with self._cond:
            self._delay.pop(pod.key, None)
        if nominated and nominated != allocation.node:
            unnominate(self.service.cluster, pod, nominated)
        self._event(pod, "Scheduled", f"Successfully assigned {pod.key} to {allocation.node}", "Normal")
        return True

    def _commit_job(self, pod: PodObject, allocation: PodAllocation, claims: ClaimNeed | None, nominated: str
                    ) -> None:
        """:meth:`_commit` on a bind worker; an unexpected error backs the pod off."""
        try:
            self._commit(pod, allocation, claims, nominated)
        except Exception as error:  # one pod's failure is that pod's
            log.exception("commit failed", extra=fields(pod=pod.key))
            self._fail(pod, f"internal error: {error}")
        finally:
            with self._cond:
                self._in_flight.pop(pod.uid, None)
                self._cond.notify_all()

    def run(self, stop: threading.Event, *, poll: float = 1.0) -> None:
        """Work until ``stop`` is set, attempting due pods while leading, committing on ``bind_workers`` daemon
        threads when above 1 (ended before this returns). ``poll``: longest wait (s) for a due pod. Survives any
        exception: logged, then a pause of :data:`ERROR_BACKOFF` s doubling to :data:`MAX_ERROR_BACKOFF` s."""
        pause = ERROR_BACKOFF
        if self.bind_workers > 1:
            self._workers.start()
            self._events.start()
        try:
            while not stop.is_set():
                try:
                    self._round(stop, poll)
                    pause = ERROR_BACKOFF
                except Exception:  # the worker must outlive anything one round raises
                    log.exception("standalone loop round failed", extra=fields(retry_in=pause))
                    stop.wait(pause)
                    pause = min(pause * 2, MAX_ERROR_BACKOFF)
        finally:
            self._workers.stop()  # after every commit handed over, then every Event
            self._events.stop()

    def _round(self, stop: threading.Event, poll: float) -> None:
        if not self.service.serving:
            stop.wait(STANDBY_POLL)
            return
        with self._cond:
            if len(self._in_flight) >= self.bind_workers:  # every bind worker busy: wait for one
                self._cond.wait(poll)
                return
        pod = self._next(stop, poll)
        if pod is None:
            return
        try:
            if not self._workers.running:
                self.attempt(pod)
                return
            if self.service.committed(pod.uid):
                return
            placed = self._cycle(pod)
        except Exception as error:  # one pod's failure is that pod's: back it off and go on
            log.exception("scheduling attempt failed", extra=fields(pod=pod.key))
            self._fail(pod, f"internal error: {error}")
            return
        if placed is not None:
            with self._cond:
                self._in_flight[pod.uid] = pod.key
            job = functools.partial(self._commit_job, pod, *placed)
            if not self._workers.submit(job):  # stopping: commit here
                job()
