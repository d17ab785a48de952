"""One node's emulated kubelet: the pod lifecycle on top of the device manager and the pod-resources server.

:class:`NodeKubelet` lists and watches the pods bound to its node and does what kubelet does with them, minus real
containers: admission through the device manager (one pod at a time; rejected → a Warning event and phase
``Failed``), emulated durations (:data:`DURATION_ANNOTATION`), device release on exit or delete, restarts that keep
running pods and their devices. Invariant: a pod's devices are freed exactly once, before its terminal phase or
removal is written. Rules, and what is not emulated: ``docs/kubelet-emulator.md``. Threads: a watcher, a worker.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from domain.kube.objects import ClusterEvent, EventType, PodObject, PodPhase
from ports.cluster import ClusterApi, ClusterError, GoneError, NotFoundError
from ports.resource_claims import ResourceClaimsApi

from .clock import Clock, SystemClock
from .devicemanager import DeviceManager
from .dra import DraManager
from .podresources import PodResourcesServer

log = logging.getLogger(__name__)

DURATION_ANNOTATION = "lj-runtimekit.io/emulated-duration-seconds"
"""Pod annotation: how long the emulated containers run, in seconds of trace time (a non-negative decimal such as
``"90"`` or ``"2.5"``); absent = until the pod is deleted. A malformed value fails the pod with
:data:`INVALID_DURATION_REASON`."""

INVALID_DURATION_REASON = "InvalidEmulatedDuration"
"""Rejection reason for a pod whose :data:`DURATION_ANNOTATION` is not a non-negative number of seconds."""


@attrs.frozen
class Rejection:
    """Why a pod was not admitted: kubelet's ``reason`` and ``message`` (without the ``Pod was rejected:``
    prefix)."""

    reason: str
    message: str


class _Action(enum.Enum):
    NONE = "none"
    PHASE = "phase"  # write run.phase
    DELETE = "delete"  # delete with grace 0


@attrs.define
class _Run:
    pod: PodObject
    phase: PodPhase  # what the emulator holds the pod's phase to be
    deadline: float | None = None  # clock s when a Running pod's containers exit; None = until deleted
    action: _Action = _Action.NONE  # the cluster write still owed
    retry_at: float = 0.0
    rejection: Rejection | None = None
    terminating: bool = False  # its deletion was seen: devices freed, delete with grace 0 sent or owed


_Item = tuple[str, object]


def parse_duration(pod: PodObject) -> float | None:
    """The pod's :data:`DURATION_ANNOTATION` in seconds, None when absent. Raises ValueError when it is not a
    finite non-negative number."""
    text = pod.annotations.get(DURATION_ANNOTATION)
    if text is None:
        return None
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{DURATION_ANNOTATION}={text!r}: must be a finite number of seconds >= 0")
    return value


class NodeKubelet:
    """Emulated kubelet of ``node`` (module docstring) over ``cluster``, admitting through ``device_manager`` and
    serving ``pod_resources`` (optional). ``clock`` defaults to wall time; ``speedup`` (> 0) divides every emulated
    duration; ``watch_timeout_s``, ``retry_s`` and ``registration_wait_s`` are seconds. Raises ValueError for a
    non-positive ``speedup``, ``watch_timeout_s`` or ``retry_s``, or an empty node name. Thread-safe."""

    def __init__(
        self, cluster: ClusterApi, *, node: str, device_manager: DeviceManager,
        pod_resources: PodResourcesServer | None = None, clock: Clock | None = None, speedup: float = 1.0,
        watch_timeout_s: float = 2.0, retry_s: float = 1.0, registration_wait_s: float = 0.0,
    ) -> None:
        if not node:
            raise ValueError("node must not be empty")
        for name, value in (("speedup", speedup), ("watch_timeout_s", watch_timeout_s), ("retry_s", retry_s)):
            if not value > 0:
                raise ValueError(f"{name}={value}: must be > 0")
        if registration_wait_s < 0:
            raise ValueError(f"registration_wait_s={registration_wait_s}: must be >= 0")
        self.cluster = cluster
        self.node = node
        self.device_manager = device_manager
        self.pod_resources = pod_resources
        self._clock: Clock = clock or SystemClock()
        self._speedup = speedup
        self._watch_timeout_s = watch_timeout_s
        self._retry_s = retry_s
        self._registration_wait_s = registration_wait_s
        self._cond = threading.Condition()
        self._inbox: list[_Item] = []
        self._runs: dict[str, _Run] = {}
        self._counts = {"admitted": 0, "rejected": 0, "succeeded": 0, "deleted": 0}
        self._stopping = False
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def create(cls, cluster: ClusterApi, *, node: str, plugin_dir: Path, pod_resources_dir: Path | None,
               clock: Clock | None = None, speedup: float = 1.0, registration_wait_s: float = 0.0,
               cdi_dir: Path | None = None, registry_dir: Path | None = None,
               claims: ResourceClaimsApi | None = None) -> NodeKubelet:
        """A kubelet: DeviceManager on ``plugin_dir`` (CDI in ``cdi_dir``), DraManager on ``registry_dir`` over
        ``claims`` (both given), pod-resources on ``<pod_resources_dir>/kubelet.sock`` (None: none)."""
        dra = None if registry_dir is None or claims is None else DraManager(
            node=node, registry_dir=registry_dir, claims=claims, cdi_dir=cdi_dir,
            registration_wait_s=registration_wait_s)
        manager = DeviceManager(plugin_dir, cdi_dir=cdi_dir, dra=dra)
        server = None if pod_resources_dir is None else PodResourcesServer(pod_resources_dir, manager.admitted)
        return cls(cluster, node=node, device_manager=manager, pod_resources=server, clock=clock, speedup=speedup,
                   registration_wait_s=registration_wait_s)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Serve Registration and pod-resources (no-ops when already serving) and start the watcher and worker.
        Raises OSError when a socket cannot be bound, RuntimeError when already started."""
        if self._threads:
            raise RuntimeError("NodeKubelet already started")
        self.device_manager.start()
        if self.pod_resources is not None:
            self.pod_resources.start()
        for name, target in (("watch", self._watch_loop), ("work", self._work_loop)):
            thread = threading.Thread(target=target, name=f"kubelet-emu-{self.node}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop the threads (the watcher ends at its watch timeout at the latest) and the servers. Pods are left as
        they are in the cluster. Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self._watch_timeout_s + 15)
        if self.pod_resources is not None:
            self.pod_resources.stop()
        self.device_manager.stop()

    def restart(self) -> None:
        """A kubelet restart (module docstring): device and DRA managers and pod-resources re-serve afresh."""
        self.device_manager.restart()
        if self.pod_resources is not None:
            self.pod_resources.restart()

    # ------------------------------------------------------------------ queries
    def wait_synced(self, timeout_s: float) -> bool:
        """True once the first pod list was taken (within ``timeout_s`` s)."""
        return self._synced.wait(timeout_s)

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
        """Wait until ``predicate()`` holds (re-evaluated after each handled event and at least every 50 ms); False
        after ``timeout_s`` s (wall time)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def phases(self) -> dict[str, PodPhase]:
        """The phase the emulator holds for each pod it knows (``namespace/name`` → phase)."""
        with self._cond:
            return {run.pod.key: run.phase for run in self._runs.values()}

    def running(self) -> tuple[str, ...]:
        """``namespace/name`` of the pods running now."""
        with self._cond:
            return tuple(run.pod.key for run in self._runs.values() if run.phase is PodPhase.RUNNING)

    def rejections(self) -> dict[str, Rejection]:
        """Rejected pods still in the cluster: ``namespace/name`` → reason and message."""
        with self._cond:
            return {run.pod.key: run.rejection for run in self._runs.values() if run.rejection is not None}

    def counts(self) -> dict[str, int]:
        """Totals since start: ``admitted``, ``rejected``, ``succeeded`` (ran to their duration), ``deleted``
        (deleted while admitted)."""
        with self._cond:
            return dict(self._counts)

    # ------------------------------------------------------------------ watcher
    def _watch_loop(self) -> None:
        selector = f"spec.nodeName={self.node}"
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listing = self.cluster.list_pods(field_selector=selector)
                    self._post(("list", listing.items))
                    self._synced.set()
                    version = listing.resource_version
                for event in self.cluster.watch_pods(resource_version=version, timeout_seconds=self._watch_timeout_s,
                                                     field_selector=selector):
                    version = event.resource_version or version
                    if event.object is not None and event.type is not EventType.BOOKMARK:
                        self._post(("gone" if event.type is EventType.DELETED else "pod", event.object))
                    if self._stop.is_set():
                        return
            except GoneError:
                version = ""
            except ClusterError as error:
                log.warning("node %s: pod watch failed: %s; relisting in %.1f s", self.node, error, self._retry_s)
                version = ""
                self._stop.wait(self._retry_s)
            except Exception:  # keep watching whatever the adapter raised
                log.exception("node %s: pod watch failed; relisting in %.1f s", self.node, self._retry_s)
                version = ""
                self._stop.wait(self._retry_s)

    def _post(self, item: _Item) -> None:
        with self._cond:
            self._inbox.append(item)
            self._cond.notify_all()

    # ------------------------------------------------------------------ worker
    def _work_loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not self._inbox:
                    wake = self._next_wake()
                    now = self._clock.now()
                    if wake is not None and wake <= now:
                        break
                    self._clock.wait(self._cond, None if wake is None else wake - now)
                if self._stopping:
                    return
                inbox, self._inbox = self._inbox, []
            for kind, payload in inbox:
                try:
                    self._handle(kind, payload)
                except Exception:  # one bad pod must not stop the node
                    log.exception("node %s: handling %s failed", self.node, kind)
            self._fire_timers()
            self._flush()
            with self._cond:
                self._cond.notify_all()

    def _next_wake(self) -> float | None:
        """Earliest deadline or retry among the runs (caller holds the lock)."""
        times = [r.deadline for r in self._runs.values() if r.phase is PodPhase.RUNNING and r.deadline is not None]
        times += [r.retry_at for r in self._runs.values() if r.action is not _Action.NONE]
        return min(times, default=None)

    def _handle(self, kind: str, payload: object) -> None:
        if kind == "list":
            assert isinstance(payload, tuple)
            pods = [p for p in payload if isinstance(p, PodObject)]
            listed = {p.uid for p in pods}
            with self._cond:
                vanished = [r.pod for uid, r in self._runs.items() if uid not in listed]
            for pod in vanished:
                self._gone(pod)
            for pod in pods:
                self._upsert(pod)
        elif isinstance(payload, PodObject):
            if kind == "gone":
                self._gone(payload)
            else:
                self._upsert(payload)

    def _upsert(self, pod: PodObject) -> None:
        with self._cond:
            run = self._runs.get(pod.uid)
            if run is not None:
                run.pod = pod
        if run is not None:
            if pod.deletion_timestamp is not None and not run.terminating:
                self._terminate(run)
            elif run.phase is PodPhase.RUNNING and run.action is _Action.NONE and pod.phase.terminal:
                self._end(run, pod.phase, owe=_Action.NONE)  # someone else ended it
            return
        if pod.deletion_timestamp is not None:  # never ran here: finish the deletion
            self.device_manager.release_pod(pod.uid)
            self._store(_Run(pod, pod.phase, action=_Action.DELETE, retry_at=self._clock.now(), terminating=True))
        elif pod.phase.terminal:
            self.device_manager.release_pod(pod.uid)
            self._store(_Run(pod, pod.phase))
        else:
            self._store(self._admit(pod))

    def _store(self, run: _Run) -> None:
        with self._cond:
            self._runs[run.pod.uid] = run

    def _admit(self, pod: PodObject) -> _Run:
        now = self._clock.now()
        try:
            duration = parse_duration(pod)
        except ValueError as error:
            return self._reject(pod, Rejection(INVALID_DURATION_REASON, str(error)))
        if self._registration_wait_s > 0:
            wanted = {r for c in pod.containers for r in (*c.limits, *c.requests)}
            self.device_manager.wait_listed(wanted & self.device_manager.known_resources, self._registration_wait_s)
        result = self.device_manager.admit_pod(pod)
        if result.admission is None:
            return self._reject(pod, Rejection(result.reason, result.message))
        with self._cond:
            self._counts["admitted"] += 1
        log.info("node %s: admitted %s", self.node, pod.key)
        deadline = None if duration is None else now + duration / self._speedup
        return _Run(pod, PodPhase.RUNNING, deadline=deadline, action=_Action.PHASE, retry_at=now)

    def _reject(self, pod: PodObject, rejection: Rejection) -> _Run:
        log.warning("node %s: rejected %s: %s: %s", self.node, pod.key, rejection.reason, rejection.message)
        with self._cond:
            self._counts["rejected"] += 1
        try:
            self.cluster.create_event(ClusterEvent(kind="Pod", name=pod.name, namespace=pod.namespace,
                                                   reason=rejection.reason, message=rejection.message,
                                                   type="Warning", uid=pod.uid))
        except ClusterError as error:
            log.warning("node %s: cannot record the rejection event of %s: %s", self.node, pod.key, error)
        return _Run(pod, PodPhase.FAILED, action=_Action.PHASE, retry_at=self._clock.now(), rejection=rejection)

    def _terminate(self, run: _Run) -> None:
        with self._cond:
            run.terminating = True
            if run.phase is PodPhase.RUNNING:
                self._counts["deleted"] += 1
        self._end(run, run.phase if run.phase.terminal else PodPhase.FAILED, owe=_Action.DELETE)

    def _end(self, run: _Run, phase: PodPhase, *, owe: _Action) -> None:
        """The pod's containers stop: devices freed, then the phase (or deletion) is owed to the API."""
        self.device_manager.release_pod(run.pod.uid)
        with self._cond:
            run.phase, run.deadline, run.action, run.retry_at = phase, None, owe, self._clock.now()

    def _gone(self, pod: PodObject) -> None:
        with self._cond:
            run = self._runs.pop(pod.uid, None)
            if run is not None and run.phase is PodPhase.RUNNING:
                self._counts["deleted"] += 1
        self.device_manager.release_pod(pod.uid)

    def _fire_timers(self) -> None:
        now = self._clock.now()
        with self._cond:
            due = [r for r in self._runs.values()
                   if r.phase is PodPhase.RUNNING and r.deadline is not None and r.deadline <= now]
            self._counts["succeeded"] += len(due)
        for run in due:
            log.info("node %s: %s completed", self.node, run.pod.key)
            self._end(run, PodPhase.SUCCEEDED, owe=_Action.PHASE)

    def _flush(self) -> None:
        """Perform the cluster writes that are due; failures are retried after ``retry_s``."""
        now = self._clock.now()
        with self._cond:
            owed = [r for r in self._runs.values() if r.action is not _Action.NONE and r.retry_at <= now]
        for run in owed:
            self._write(run)

    def _write(self, run: _Run) -> None:
        pod = run.pod
        action = run.action
        try:
            if action is _Action.DELETE:
                self.cluster.delete_pod(pod.namespace, pod.name, grace_period_seconds=0)
            else:
                self.cluster.set_pod_phase(pod.namespace, pod.name, run.phase)
        except NotFoundError:
            self._gone(pod)
            return
        except Exception as error:  # ClusterError, or an adapter bug: retry later either way, never spin
            if isinstance(error, ClusterError):
                log.warning("node %s: %s of %s failed: %s; retrying", self.node, action.value, pod.key, error)
            else:
                log.exception("node %s: %s of %s failed; retrying", self.node, action.value, pod.key)
            with self._cond:
                run.retry_at = self._clock.now() + self._retry_s
            return
        with self._cond:
            if run.action is action:
                run.action = _Action.NONE

