"""Publishes a component's protocol fingerprint as an annotation, on its Node (device plugin, exporter) or on its
own Pod (scheduler, controller), so ``ljrk protocol check --kubeconfig`` and the scheduler can see which protocol
each running instance loaded.

Written once at start (the fingerprint never changes while the process runs), on the caller's thread, retried
with capped exponential backoff (:data:`FIRST_RETRY_S` doubling up to :data:`MAX_RETRY_S`) while the API server
refuses it; errors are logged, never raised: the component keeps serving without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from domain.kube.protocol import ProtocolConstants
from ports.cluster import NodesApi, PodsApi

log = logging.getLogger(__name__)

FIRST_RETRY_S, MAX_RETRY_S = 1.0, 60.0
"""Retry delays after a failed write, seconds (doubling up to the cap)."""


class PublishCluster(NodesApi, PodsApi, Protocol):
    """The cluster roles the publisher uses: annotate a Node or a Pod."""


class ProtocolPublisher:
    """Writes ``{key: fingerprint}`` on Node ``node``, or on Pod ``pod`` (``(namespace, name)``), through
    ``cluster``; exactly one of the two is given, else ValueError. Call it with the stop event on its own thread
    (module docstring). :attr:`published` is set once the write succeeded."""

    def __init__(self, cluster: PublishCluster, *, key: str, fingerprint: str, node: str | None = None,
                 pod: tuple[str, str] | None = None, first_retry_s: float = FIRST_RETRY_S,
                 max_retry_s: float = MAX_RETRY_S) -> None:
        if (node is None) == (pod is None):
            raise ValueError(f"give exactly one of node={node!r} and pod={pod!r}")
        write: Callable[[], object]
        if pod is not None:
            namespace, name = pod
            if not namespace or not name:
                raise ValueError(f"pod={pod!r}: namespace and name must not be empty")
            self.target = f"pod {namespace}/{name}"
            write = lambda: cluster.patch_pod_annotations(namespace, name, {key: fingerprint})  # noqa: E731
        else:
            assert node is not None
            if not node:
                raise ValueError("node: must not be empty")
            self.target = f"node {node}"
            write = lambda: cluster.patch_node_metadata(node, annotations={key: fingerprint})  # noqa: E731
        self._write = write
        self._fingerprint = fingerprint
        self._first_retry_s = first_retry_s
        self._max_retry_s = max_retry_s
        self.published = threading.Event()

    def __call__(self, stop: threading.Event) -> None:
        """Write until it succeeds or ``stop`` is set. Never raises."""
        delay = self._first_retry_s
        while not stop.is_set():
            try:
                self._write()
            except Exception as error:  # any API or transport failure (RBAC, pod not found yet): retry later
                log.warning("cannot publish the protocol fingerprint on %s: %s; retrying in %.0f s",
                            self.target, error, delay)
                stop.wait(delay)
                delay = min(delay * 2, self._max_retry_s)
                continue
            log.info("published protocol fingerprint %s on %s", self._fingerprint, self.target)
            self.published.set()
            return


def pod_publisher(cluster: PublishCluster, protocol: ProtocolConstants, *, pod_name: str,
                  pod_namespace: str) -> ProtocolPublisher | None:
    """A publisher of ``protocol``'s fingerprint on this replica's own Pod (``pod_namespace/pod_name``, from the
    downward API) under the key ``annotations.node-protocol`` (the one the device plugin writes on its Node; a new
    key would change every fingerprint), or None outside a pod (empty ``pod_name``). Raises ValueError for an empty
    namespace."""
    if not pod_name:
        return None
    return ProtocolPublisher(cluster, pod=(pod_namespace, pod_name), key=protocol.annotations.node_protocol,
                             fingerprint=protocol.fingerprint())
