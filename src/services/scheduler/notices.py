"""What the scheduler tells operators besides its decisions: Warning Events (written by the leader only) and the
protocol each node component speaks compared with the scheduler's.

Invariant: an Event is never worth a failure — writing one is best effort, logged when refused, and never done by a
standby replica (replicas would repeat each other); a protocol mismatch is announced once per change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from domain.kube.objects import ClusterEvent, NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import PROTOCOL_PUBLISHERS
from ports.cluster import EventsApi
from ports.metrics import SchedulerMetrics
from services._shared.logs import fields

log = logging.getLogger(__name__)


class Notices:
    """Events through ``cluster`` while ``is_leader()``, protocol mismatch counts into ``metrics``."""

    def __init__(self, cluster: EventsApi, metrics: SchedulerMetrics, protocol: ProtocolConstants, *,
                 is_leader: Callable[[], bool]) -> None:
        self.cluster = cluster
        self.metrics = metrics
        self.protocol = protocol
        self.is_leader = is_leader
        self._mismatched: dict[str, dict[str, str]] = {}  # node → {component: fingerprint} differing from ours
        metrics.set_protocol(protocol.fingerprint())
        metrics.set_protocol_mismatches(dict.fromkeys(PROTOCOL_PUBLISHERS, 0))

    def emit(self, events: list[ClusterEvent]) -> None:
        """Write ``events`` (leader only); failures are logged, never raised. Call without the service's lock."""
        if not events or not self.is_leader():
            return
        for event in events:
            try:
                self.cluster.create_event(event)
            except Exception as error:  # an Event is never worth an informer failure
                log.warning("event not recorded", extra=fields(kind=event.kind, name=event.name, reason=event.reason,
                                                               error=str(error)))

    def track_protocol(self, node: str, mismatches: dict[str, str]) -> dict[str, str]:
        """Record ``node``'s protocol mismatches (component → fingerprint differing from ours) and update the
        per-component node counts; returns the mismatches that are new (a component that started differing, or
        now differs in another way). Not thread-safe: call under the service's lock."""
        before = self._mismatched.get(node, {})
        if mismatches == before:
            return {}
        if mismatches:
            self._mismatched[node] = mismatches
        else:
            self._mismatched.pop(node, None)
        counts = dict.fromkeys(PROTOCOL_PUBLISHERS, 0)
        for found in self._mismatched.values():
            for component in found:
                counts[component] += 1
        self.metrics.set_protocol_mismatches(counts)
        return {c: f for c, f in mismatches.items() if before.get(c) != f}

    def protocol_mismatch(self, node: NodeObject, appeared: dict[str, str]) -> None:
        """A ``ProtocolMismatch`` Warning Event on ``node`` per component in ``appeared`` (from
        :meth:`track_protocol`). Call without the service's lock."""
        for component, fingerprint in appeared.items():
            message = (f"{component} on node {node.name} runs protocol {fingerprint}, the scheduler "
                       f"{self.protocol.fingerprint()}: no GPU pods are placed here until they agree (compare the "
                       "ConfigMaps with `ljrk protocol check`)")
            self.emit([ClusterEvent("Node", node.name, "ProtocolMismatch", message[:1000], type="Warning",
                                    uid=node.uid)])
