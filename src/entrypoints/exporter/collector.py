"""The exporter's background collector: pulls ``ExporterGetDataList`` on an interval, keeps the last good snapshot.

A scrape reads :meth:`SnapshotCollector.snapshot` only, so it never waits on the Runtime (failure case B23). Each
pull runs on a worker thread bounded by ``deadline_s``: a Runtime that fails or hangs past the deadline leaves
the last good data in place, marked stale, increments the error counter and sets ``runtime_up`` to 0. While a
hung pull is still running no second one is started (each interval counts one more error), so a wedged Runtime
cannot pile up threads. Kubelet's pod-resources list is read on the same worker right after the Runtime data; when
it fails, the last good list is used (so a pod kubelet no longer runs is never resurrected) and its own error
counter grows.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable

import attrs

from domain.exporter.attribution import PodContainerDevices, attribute
from domain.exporter.snapshot import Snapshot
from domain.runtime.types import ExporterData
from ports.pod_resources import PodResourcesError, PodResourcesLister
from ports.runtime import NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)


class SnapshotCollector:
    """Pulls from ``runtime`` (and ``pod_resources``, None = no attribution filter) every ``interval_s`` seconds,
    each pull bounded by ``deadline_s`` (module docstring). ``clock`` gives epoch seconds. Thread-safe."""

    def __init__(
        self, runtime: NodeRuntime, pod_resources: PodResourcesLister | None = None, *,
        interval_s: float = 10.0, deadline_s: float = 5.0, clock: Callable[[], float] = time.time,
    ) -> None:
        self._runtime = runtime
        self._pod_resources = pod_resources
        self._interval_s = interval_s
        self._deadline_s = deadline_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot = Snapshot(pod_resources_up=pod_resources is not None)
        self._listed: tuple[PodContainerDevices, ...] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ljrk-exp-pull")
        self._inflight: concurrent.futures.Future[tuple[ExporterData, bool]] | None = None

    def snapshot(self) -> Snapshot:
        """The current snapshot; never blocks on the Runtime."""
        with self._lock:
            return self._snapshot

    def _pull(self) -> tuple[ExporterData, bool]:
        data = self._runtime.exporter_data()
        pods_ok = True
        if self._pod_resources is not None:
            try:
                self._listed = self._pod_resources.list_containers()
            except PodResourcesError as error:
                log.warning("pod-resources List failed: %s; using the last good list", error)
                pods_ok = False
            if self._listed is None:
                # never listed yet: show no container rather than guess which pods still exist
                return attrs.evolve(data, containers=()), pods_ok
        return attribute(data, self._listed), pods_ok

    def refresh(self) -> bool:
        """One pull (module docstring); returns True when the Runtime answered within the deadline."""
        if self._inflight is not None and not self._inflight.done():
            return self._failed("the previous pull is still running (Runtime hung?)")
        self._inflight = future = self._executor.submit(self._pull)
        try:
            data, pods_ok = future.result(timeout=self._deadline_s)
        except concurrent.futures.TimeoutError:
            return self._failed(f"no answer within {self._deadline_s:g} s")
        except NodeRuntimeError as error:
            return self._failed(str(error))
        except Exception as error:  # a bug in an adapter must not stop the collector
            log.exception("exporter pull failed")
            return self._failed(f"{type(error).__name__}: {error}")
        with self._lock:
            old = self._snapshot
            self._snapshot = Snapshot(
                data=data, pulled_at=self._clock(), runtime_up=True, pod_resources_up=pods_ok,
                runtime_errors=old.runtime_errors,
                pod_resources_errors=old.pod_resources_errors + (0 if pods_ok else 1),
            )
        return True

    def _failed(self, reason: str) -> bool:
        log.warning("node Runtime ExporterGetDataList failed: %s; serving the last snapshot (stale)", reason)
        with self._lock:
            old = self._snapshot
            self._snapshot = attrs.evolve(old, runtime_up=False, runtime_errors=old.runtime_errors + 1,
                                          last_error=reason)
        return False

    def run(self, stop: threading.Event) -> None:
        """Refresh now and then every ``interval_s`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.refresh()
            stop.wait(self._interval_s)

    def close(self) -> None:
        """Stop the worker without waiting for a hung pull."""
        self._executor.shutdown(wait=False, cancel_futures=True)
