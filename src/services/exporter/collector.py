"""The exporter's background collector: pulls ``ExporterGetDataList`` on an interval, keeps the last good snapshot.

A scrape reads :meth:`SnapshotCollector.snapshot` only, so it never waits on the Runtime (failure case B23). Each
pull runs on a worker thread bounded by ``deadline_s``: a Runtime that fails or hangs past the deadline leaves
the last good data in place, marked stale, increments the error counter and sets ``runtime_up`` to 0. While a
hung pull is still running no second one is started (each interval counts one more error), so a wedged Runtime
cannot pile up threads. Kubelet's pod-resources list is read on the same worker right after the Runtime data; when
it fails, the last good list is used (so a pod kubelet no longer runs is never resurrected) and its own error
counter grows. Container rows whose GPUs kubelet contradicts (``domain.exporter.attribution``) are not served;
their number is in the snapshot and each such container is logged once, when its mismatch starts.

With ``ended_pods`` (the Kubernetes API, :mod:`.podphases`: a watched view of the node's pods, started by
:meth:`SnapshotCollector.start`), each successful pull then drops the rows of pods the API shows terminal or no
longer has (a DRA claim's rows, whose ``pod_uid`` is the claim's, are left to pod-resources), and shows their MIG
instances free (``domain.exporter.liveness``): kubelets before 1.34 keep listing
a terminated pod in pod-resources, and the Runtime keeps its record until the device plugin releases it, so without
the API a completed pod's series would outlive it by up to a minute.

With an event recorder, every refresh ends by comparing the detector's state with the previous refresh's
(``domain.exporter.detector``) and queueing an Event per transition — transitions only, never one per refresh.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

import attrs

from domain.exporter.attribution import AttributionMismatch, PodContainerDevices, attribute_checked
from domain.exporter.detector import DetectorState, detector_state, transitions
from domain.exporter.liveness import drop_pods
from domain.exporter.snapshot import Snapshot
from domain.runtime.enforcement import Enforcement, advertised_enforcement
from domain.runtime.types import ExporterData
from ports.pod_resources import PodResourcesError, PodResourcesLister
from ports.runtime import NodeRuntime, NodeRuntimeError

from .events import NodeEventRecorder
from .podphases import EndedPods

log = logging.getLogger(__name__)

STALE_AFTER_INTERVALS = 3
"""Default staleness threshold of the detector, in refresh intervals: three missed pulls."""


@attrs.frozen
class _Pulled:
    data: ExporterData
    pods_ok: bool
    mismatches: int
    enforcement: Enforcement = Enforcement.UNKNOWN


class SnapshotCollector:
    """Pulls from ``runtime`` (and ``pod_resources``, None = no attribution filter) every ``interval_s`` seconds,
    each pull bounded by ``deadline_s`` (module docstring). ``events`` (None = no Events) receives the detector's
    transitions; ``ended_pods`` (None = pod-resources alone decides) removes the rows of ended pods; the data counts
    as stale after ``stale_after_s`` seconds (default :data:`STALE_AFTER_INTERVALS` × ``interval_s``). ``clock``
    gives epoch seconds. Thread-safe."""

    def __init__(
        self, runtime: NodeRuntime, pod_resources: PodResourcesLister | None = None, *,
        interval_s: float = 10.0, deadline_s: float = 5.0, clock: Callable[[], float] = time.time,
        events: NodeEventRecorder | None = None, stale_after_s: float | None = None,
        ended_pods: EndedPods | None = None,
    ) -> None:
        self._runtime = runtime
        self._pod_resources = pod_resources
        self._interval_s = interval_s
        self._deadline_s = deadline_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = Snapshot(pod_resources_up=pod_resources is not None,
                                  pod_api_errors=None if ended_pods is None else 0)
        self._listed: tuple[PodContainerDevices, ...] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ljrk-exp-pull")
        self._inflight: concurrent.futures.Future[_Pulled] | None = None
        self._mismatched: frozenset[tuple[str, str, str]] = frozenset()
        self._events = events
        self._stale_after_s = STALE_AFTER_INTERVALS * interval_s if stale_after_s is None else stale_after_s
        self._detected: DetectorState | None = None
        self._ended_pods = ended_pods

    @property
    def events(self) -> NodeEventRecorder | None:
        """The event recorder (None = Events disabled)."""
        return self._events

    def snapshot(self) -> Snapshot:
        """The current snapshot, with the Event counts of now; never blocks on the Runtime."""
        with self._lock:
            snapshot = self._snapshot
        return snapshot if self._events is None else attrs.evolve(snapshot, events=self._events.counts())

    def _log_mismatches(self, mismatches: tuple[AttributionMismatch, ...]) -> None:
        keys = frozenset(m.key for m in mismatches)
        for mismatch in mismatches:
            if mismatch.key not in self._mismatched:
                log.warning("container not attributed, GPU mismatch: %s", mismatch.describe())
        self._mismatched = keys  # only current mismatches: a container that mismatches again is logged again

    def _pull(self) -> _Pulled:
        data = self._runtime.exporter_data()
        enforcement = advertised_enforcement(self._runtime.get_version().capabilities)  # follows a Runtime restart
        pods_ok = True
        if self._pod_resources is not None:
            try:
                self._listed = self._pod_resources.list_containers()
            except PodResourcesError as error:
                log.warning("pod-resources List failed: %s; using the last good list", error)
                pods_ok = False
            if self._listed is None:
                # never listed yet: show no container (nor MIG owner) rather than guess which pods still exist
                return _Pulled(attribute_checked(data, ()).data, pods_ok, 0, enforcement)
        attributed = attribute_checked(data, self._listed)
        self._log_mismatches(attributed.mismatches)
        return _Pulled(attributed.data, pods_ok, len(attributed.mismatches), enforcement)

    def refresh(self) -> bool:
        """One pull (module docstring); returns True when the Runtime answered within the deadline."""
        if self._inflight is not None and not self._inflight.done():
            return self._failed("the previous pull is still running (Runtime hung?)")
        self._inflight = future = self._executor.submit(self._pull)
        try:
            pulled = future.result(timeout=self._deadline_s)
        except concurrent.futures.TimeoutError:
            return self._failed(f"no answer within {self._deadline_s:g} s")
        except NodeRuntimeError as error:
            return self._failed(str(error))
        except Exception as error:  # a bug in an adapter must not stop the collector
            log.exception("exporter pull failed")
            return self._failed(f"{type(error).__name__}: {error}")
        data, api_errors = pulled.data, None
        if self._ended_pods is not None:
            uids = {row.pod_uid for row in data.containers if not row.claim_name}  # a claim row's is the claim's
            uids.update(m.instance.owner.pod_uid for m in data.mig if m.instance.owner is not None)
            data = drop_pods(data, self._ended_pods.update(uids))
            api_errors = self._ended_pods.errors
        with self._lock:
            old = self._snapshot
            self._snapshot = Snapshot(
                data=data, pulled_at=self._clock(), runtime_up=True, pod_resources_up=pulled.pods_ok,
                runtime_errors=old.runtime_errors,
                pod_resources_errors=old.pod_resources_errors + (0 if pulled.pods_ok else 1),
                attribution_mismatches=pulled.mismatches, pod_api_errors=api_errors,
                enforcement=pulled.enforcement.value,
            )
        self._detect()
        return True

    def _failed(self, reason: str) -> bool:
        log.warning("node Runtime ExporterGetDataList failed: %s; serving the last snapshot (stale)", reason)
        with self._lock:
            old = self._snapshot
            self._snapshot = attrs.evolve(old, runtime_up=False, runtime_errors=old.runtime_errors + 1,
                                          last_error=reason)
        self._detect()
        return False

    def _detect(self) -> None:
        if self._events is None:
            return
        with self._lock:
            snapshot = self._snapshot
        current = detector_state(snapshot, now=self._clock(), stale_after_s=self._stale_after_s)
        changes = transitions(self._detected, current)
        self._detected = current
        if changes:
            self._events.submit(changes)

    def start(self) -> None:
        """Start what runs beside the pulls: the ended-pods watch (when there is one). :meth:`close` stops it."""
        if self._ended_pods is not None:
            self._ended_pods.start()

    def run(self, stop: threading.Event) -> None:
        """Refresh now and then every ``interval_s`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.refresh()
            stop.wait(self._interval_s)

    def close(self) -> None:
        """Stop the worker without waiting for a hung pull, the ended-pods watch and the event recorder."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._ended_pods is not None:
            self._ended_pods.close()
        if self._events is not None:
            self._events.close()
