"""The exporter's view of which pods on its node ended, learned from the Kubernetes API.

:class:`EndedPods` lists the node's pods (``spec.nodeName=<node>``) once per collector pull, right after the
Runtime's data was read, and applies ``domain.exporter.liveness``: a pod terminal in the listing or missing from it
has ended, and its series leave ``/metrics`` at that pull. The listing runs on its own worker thread bounded by the
pull deadline, so a slow or failing API server never counts against the Runtime (``exporter_runtime_up`` stays
honest); a failed or late listing keeps what was learned before (an ended pod stays ended, a new pod is never
dropped on old evidence), is logged and counted (``exporter_pod_api_errors_total``). While a late listing still
runs, no second one starts.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Collection

from domain.exporter.liveness import ended_uids
from domain.kube.objects import Listing, PodObject
from ports.cluster import PodsApi

log = logging.getLogger(__name__)


class EndedPods:
    """Ended pods of node ``node`` (module docstring); ``deadline_s``: seconds one listing may take. Thread-safe."""

    def __init__(self, cluster: PodsApi, *, node: str, deadline_s: float = 5.0) -> None:
        self._cluster = cluster
        self._selector = f"spec.nodeName={node}"
        self._deadline_s = deadline_s
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ljrk-exp-pods")
        self._inflight: concurrent.futures.Future[Listing[PodObject]] | None = None
        self._ended: frozenset[str] = frozenset()
        self._errors = 0

    @property
    def errors(self) -> int:
        """Failed or late pod listings since start."""
        with self._lock:
            return self._errors

    def update(self, uids: Collection[str]) -> frozenset[str]:
        """The pod UIDs among ``uids`` (read from the Runtime just before) whose pod ended: what a listing taken now
        shows, plus what was learned before; only the latter when the listing fails or is late. Never raises."""
        with self._lock:
            known = self._ended & frozenset(uids)
            self._ended = known
            late = self._inflight is not None and not self._inflight.done()
            if not late:
                self._inflight = self._executor.submit(self._cluster.list_pods, field_selector=self._selector)
            future = self._inflight
        if late or future is None:
            return self._failed(known, "the previous listing is still running (API server slow?)")
        try:
            listing = future.result(timeout=self._deadline_s)
        except concurrent.futures.TimeoutError:
            return self._failed(known, f"no answer within {self._deadline_s:g} s")
        except Exception as error:  # ClusterError, or a bug in an adapter: never stops the collector
            return self._failed(known, f"{type(error).__name__}: {error}")
        ended = known | ended_uids(uids, listing.items)
        with self._lock:
            self._ended = ended
        return ended

    def _failed(self, known: frozenset[str], reason: str) -> frozenset[str]:
        log.warning("listing the pods of the node (%s) failed: %s; ended pods are those known before",
                    self._selector, reason)
        with self._lock:
            self._errors += 1
        return known

    def close(self) -> None:
        """Stop the worker without waiting for a late listing."""
        self._executor.shutdown(wait=False, cancel_futures=True)
