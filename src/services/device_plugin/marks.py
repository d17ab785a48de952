"""The "allocated" mark: once the device plugin has served every resource of every container of a pod, the pod gets
the annotation ``protocol.annotations.pod_allocated`` = ``"<epoch seconds>"``. The scheduler holds back a second pod
with an identical GPU request on the node until the mark appears (:mod:`domain.scheduling.nodefit.holds`), because
kubelet's Allocate cannot tell two such pending pods apart (:mod:`domain.device_plugin.matching`, "Limits").

Off the Allocate path: :meth:`AllocatedMarker.submit` only queues the pod (kubelet's Allocate never waits on the API
server) and wakes the worker (:meth:`AllocatedMarker.run`), which writes the queued marks. Best effort: a write that
fails is logged and retried at the next submission (the next Allocate) or after ``retry_s`` seconds, whichever comes
first; a failure never reaches kubelet.

Each write lists the node's pods (``spec.nodeName=<node>``, the call Allocate already makes) to find the pod by UID,
then merge-patches its annotations with the listed ``resourceVersion`` as precondition, so a pod deleted and
re-created under the same name is never marked for its predecessor (the new UID is not queued; a conflict is
retried at once with a fresh listing, up to :data:`CONFLICT_TRIES` times). A queued pod that is gone, or already
carries the mark, is dropped without a write: each pod is patched once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import attrs

from domain.kube.objects import PodObject
from ports.cluster import ClusterError, ConflictError, NotFoundError, PodsApi

log = logging.getLogger(__name__)

MARK_RETRY_S = 2.0
"""Seconds between retries of marks that could not be written (when no Allocate wakes the worker sooner)."""

CONFLICT_TRIES = 3
"""Writes per pod and pass when the pod changed between the listing and the patch (409)."""


@attrs.frozen
class PodRef:
    """A pod to mark: ``uid`` (authoritative), ``namespace``, ``name``."""

    uid: str
    namespace: str
    name: str

    @property
    def label(self) -> str:
        """``namespace/name (uid)`` for logs."""
        return f"{self.namespace}/{self.name} ({self.uid})"


class AllocatedMarker:
    """Writes the allocated mark (module docstring) on pods of ``node`` through ``cluster``: annotation ``key`` set to
    ``clock()`` (epoch seconds) as an integer string. ``retry_s`` in seconds. Thread-safe; :meth:`flush` runs one
    pass in the caller's thread (tests), :meth:`run` loops on a worker thread.

    ``written`` counts marks written, ``failures`` failed write attempts (for tests and logs).
    """

    def __init__(
        self, cluster: PodsApi, *, node: str, key: str, clock: Callable[[], float] = time.time,
        retry_s: float = MARK_RETRY_S,
    ) -> None:
        self._cluster = cluster
        self._node = node
        self._key = key
        self._clock = clock
        self._retry_s = retry_s
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending: dict[str, PodRef] = {}
        self._wake = threading.Event()
        self.written = 0
        self.failures = 0

    def submit(self, pod: PodRef) -> None:
        """Queue ``pod`` for marking and wake the worker; returns at once, never raises."""
        with self._lock:
            self._pending[pod.uid] = pod
        self._wake.set()

    def pending(self) -> tuple[PodRef, ...]:
        """The pods queued and not yet marked, oldest first."""
        with self._lock:
            return tuple(self._pending.values())

    def wake(self) -> None:
        """Make a waiting :meth:`run` loop take its next turn now (at shutdown, after its stop event was set)."""
        self._wake.set()

    def flush(self) -> int:
        """One pass (module docstring): write the queued marks; returns how many were written. Failures are logged
        and their pods stay queued; never raises for a cluster error."""
        with self._flush_lock:
            written = 0
            retry: set[str] | None = None  # None: every queued pod; then only those that hit a conflict
            for _ in range(CONFLICT_TRIES):
                todo = [ref for ref in self.pending() if retry is None or ref.uid in retry]
                if not todo:
                    break
                try:
                    listing = self._cluster.list_pods(field_selector=f"spec.nodeName={self._node}")
                except ClusterError as error:
                    self.failures += 1
                    log.warning("cannot list node %s's pods to mark %d pod(s) allocated: %s; retrying", self._node,
                                len(todo), error)
                    break
                pods = {p.uid: p for p in listing.items}
                retry = set()
                for ref in todo:
                    outcome = self._mark(ref, pods.get(ref.uid))
                    if outcome == "conflict":
                        retry.add(ref.uid)
                    elif outcome == "written":
                        written += 1
                if not retry:
                    break
            else:
                if retry:
                    self.failures += 1
                    log.warning("allocated mark of %d pod(s) on node %s kept conflicting %d times; retrying later",
                                len(retry), self._node, CONFLICT_TRIES)
            return written

    def _mark(self, ref: PodRef, pod: PodObject | None) -> str:
        """One pod: ``written``, ``done`` (nothing to write), ``conflict`` or ``failed``; dequeues unless retrying."""
        if pod is None:
            log.info("pod %s left node %s before its allocated mark was written; dropped", ref.label, self._node)
            self._drop(ref)
            return "done"
        if self._key in pod.annotations:
            self._drop(ref)
            return "done"
        try:
            self._cluster.patch_pod_annotations(pod.namespace, pod.name, {self._key: str(int(self._clock()))},
                                                resource_version=pod.resource_version or None)
        except NotFoundError:
            self._drop(ref)
            return "done"
        except ConflictError:
            return "conflict"
        except ClusterError as error:
            self.failures += 1
            log.warning("cannot mark pod %s allocated: %s; retrying", ref.label, error)
            return "failed"
        self._drop(ref)
        self.written += 1
        log.info("marked pod %s allocated (%s)", ref.label, self._key)
        return "written"

    def _drop(self, ref: PodRef) -> None:
        with self._lock:
            if self._pending.get(ref.uid) == ref:
                del self._pending[ref.uid]

    def run(self, stop: threading.Event) -> None:
        """Write marks whenever one is submitted, and retry failed ones every ``retry_s`` seconds, until ``stop`` is
        set (then call :meth:`wake`). Never raises."""
        while not stop.is_set():
            self._wake.wait(self._retry_s)
            self._wake.clear()
            if stop.is_set():
                break
            try:
                self.flush()
            except Exception:  # an adapter bug must not end the worker: the marks stay queued
                log.exception("writing allocated marks failed; retrying")
