"""Kubernetes Events on this node for the detector's transitions (``domain.exporter.detector``).

:class:`NodeEventRecorder` writes through the cluster port (``EventsApi.create_event``) on its own worker thread,
so a slow or unreachable API server never delays a pull or a scrape. Events are best effort: a failure is logged
(one line per lost Event) and counted, never raised into the collector. At most ``max_pending`` Events wait for
the worker; more are dropped, logged and counted as errors — transitions are rare, so a full queue means the API
server is not answering.

Each Event names the Node: kind ``Node``, name ``--node-name``, namespace ``default`` (where kubelet puts node
Events) and the Node's uid, read once with ``get_node``. While that read fails (no RBAC ``get nodes``, API server
down) the uid is the node name, kubelet's own convention, which ``kubectl describe node`` also matches; the read
is retried before the next Event.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from domain.exporter.detector import Transition, node_event
from domain.exporter.snapshot import EventCounts
from ports.cluster import ClusterError, EventsApi, NodesApi

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 100
"""Events waiting for the worker before new ones are dropped (a burst is one per GPU and XID code)."""


class EventsCluster(NodesApi, EventsApi, Protocol):
    """The cluster roles the recorder uses: read its Node (for the uid), record Events."""


class NodeEventRecorder:
    """Sends transitions as Events on Node ``node`` through ``cluster`` (module docstring). Thread-safe."""

    def __init__(self, cluster: EventsCluster, *, node: str, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._cluster = cluster
        self._node = node
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._pending: list[concurrent.futures.Future[None]] = []
        self._sent: Counter[str] = Counter()
        self._errors = 0
        self._uid = ""
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ljrk-exp-events")

    def submit(self, transitions: Sequence[Transition]) -> None:
        """Queue one Event per transition; returns at once. Never raises (a full queue drops and logs)."""
        for transition in transitions:
            with self._lock:
                self._pending = [f for f in self._pending if not f.done()]
                if len(self._pending) >= self._max_pending:
                    self._errors += 1
                    log.warning("Event %s on node %s dropped: %d Events already wait for the API server",
                                transition.reason, self._node, len(self._pending))
                    continue
                try:
                    self._pending.append(self._executor.submit(self._send, transition))
                except RuntimeError:  # closed
                    self._errors += 1

    def _node_uid(self) -> str:
        if not self._uid:
            try:
                self._uid = self._cluster.get_node(self._node).uid
            except ClusterError as error:
                log.warning("cannot read Node %s for its uid (%s); Events carry the node name as uid", self._node,
                            error)
        return self._uid or self._node

    def _send(self, transition: Transition) -> None:
        event = node_event(transition, node=self._node, uid=self._node_uid())
        try:
            self._cluster.create_event(event)
        except Exception as error:  # ClusterError, or a bug in an adapter: an Event must never stop the exporter
            log.warning("Event %s on node %s not recorded: %s: %s", event.reason, self._node,
                        type(error).__name__, error)
            with self._lock:
                self._errors += 1
            return
        log.info("Event %s (%s) on node %s: %s", event.reason, event.type, self._node, event.message)
        with self._lock:
            self._sent[event.reason] += 1

    def counts(self) -> EventCounts:
        """Events sent (by reason) and lost since start."""
        with self._lock:
            return EventCounts(tuple(sorted(self._sent.items())), self._errors)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait up to ``timeout_s`` seconds for the queued Events; True when none is left."""
        with self._lock:
            pending = list(self._pending)
        _, not_done = concurrent.futures.wait(pending, timeout=timeout_s)
        return not not_done

    def close(self) -> None:
        """Stop the worker; Events still queued are dropped (not waited for). Idempotent."""
        self._executor.shutdown(wait=False, cancel_futures=True)
