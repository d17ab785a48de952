"""Publishes the exporter's protocol fingerprint on its Node (annotation ``protocol.annotations.
node_exporter_protocol``), so the scheduler can keep GPU pods off a node whose exporter runs another protocol
(issue 7; the device plugin publishes ``node_protocol`` the same way).

Written once at start, retried with capped exponential backoff while the API server refuses it; errors are logged,
never raised (metrics keep being served without it).
"""

from __future__ import annotations

import logging
import threading

from ports.cluster import ClusterApi

log = logging.getLogger(__name__)

FIRST_RETRY_S, MAX_RETRY_S = 1.0, 60.0
"""Retry delays after a failed write, seconds (doubling up to the cap)."""


class ProtocolPublisher:
    """Writes ``{key: fingerprint}`` on Node ``node`` through ``cluster`` (module docstring); call it with the
    stop event on its own thread. :attr:`published` is set once the write succeeded."""

    def __init__(self, cluster: ClusterApi, *, node: str, key: str, fingerprint: str,
                 first_retry_s: float = FIRST_RETRY_S, max_retry_s: float = MAX_RETRY_S) -> None:
        self._cluster = cluster
        self._node = node
        self._key = key
        self._fingerprint = fingerprint
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self.published = threading.Event()

    def __call__(self, stop: threading.Event) -> None:
        """Write until it succeeds or ``stop`` is set. Never raises."""
        delay = self._first_retry_s
        while not stop.is_set():
            try:
                self._cluster.patch_node_metadata(self._node, annotations={self._key: self._fingerprint})
            except Exception as error:  # any API or transport failure: retry later
                log.warning("cannot publish the protocol fingerprint on node %s: %s; retrying in %.0f s",
                            self._node, error, delay)
                stop.wait(delay)
                delay = min(delay * 2, self._max_retry_s)
                continue
            log.info("published protocol fingerprint %s on node %s", self._fingerprint, self._node)
            self.published.set()
            return
