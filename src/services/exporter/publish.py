"""Publishes the exporter's protocol fingerprint on its Node (annotation ``protocol.annotations.
node_exporter_protocol``), so the scheduler can keep GPU pods off a node whose exporter runs another protocol
(the device plugin publishes ``node_protocol`` the same way).

The publisher is the shared one (:class:`services._shared.publish.ProtocolPublisher`, also used by the scheduler
and the controller on their own Pods): written once at start, retried with capped exponential backoff while the
API server refuses it; errors are logged, never raised (metrics keep being served without it).
"""

from __future__ import annotations

from services._shared.publish import FIRST_RETRY_S, MAX_RETRY_S, ProtocolPublisher

__all__ = ["FIRST_RETRY_S", "MAX_RETRY_S", "ProtocolPublisher"]
