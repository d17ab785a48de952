"""Book problems made visible: Warning Events, log lines and gauges for nodes quarantined with impossible books
and pods holding GPUs gone from their node's inventory.

The ledger sync finds both as part of booking (:attr:`~domain.scheduling.sync.LedgerSync.overbooked`,
:attr:`~domain.scheduling.sync.LedgerSync.vanished`); :meth:`BookAlerts.collect` compares them with what it
reported last, under the service lock, after every informer event, resync and tick:

* a node newly quarantined for impossible books, or whose reason changed (other GPUs or pods): a Warning Event
  ``ImpossibleBooks`` on the node and a warning log line; the quarantine lifted: an info log line;
* a pod newly found on a vanished GPU (or on other vanished GPUs than before): a Warning Event ``GpuVanished`` on
  the pod and one on its node, and a warning log line; cleared: an info log line;
* ``set_overbooked_nodes`` and ``set_vanished_gpu_pods`` get the current counts every time.

The Events are returned for the service to write outside its lock (leader only, best effort, de-duplicated by the
cluster adapter's event correlator); the log lines and gauges are written by every replica. A replica that gains
leadership reports the current problems again (:meth:`BookAlerts.forget`), so problems first seen as a follower get
their Events.
"""

from __future__ import annotations

import logging

from domain.errors import UnknownNodeError
from domain.kube.objects import ClusterEvent
from domain.scheduling.sync import LedgerSync
from domain.scheduling.sync.vanished import VanishedHold
from ports.metrics import SchedulerMetrics
from services._shared.logs import fields

log = logging.getLogger(__name__)

IMPOSSIBLE_BOOKS = "ImpossibleBooks"
GPU_VANISHED = "GpuVanished"
MAX_MESSAGE = 1000
"""Event messages are cut to this many characters (as the service's other Events)."""


def _node_uid(sync: LedgerSync, node: str) -> str:
    try:
        obj = sync.nodes.get(sync.ledger.slot(node))
    except UnknownNodeError:
        return ""
    return "" if obj is None else obj.uid


def _warning(kind: str, name: str, reason: str, message: str, *, namespace: str = "default", uid: str = ""
             ) -> ClusterEvent:
    return ClusterEvent(kind, name, reason, message[:MAX_MESSAGE], namespace=namespace, type="Warning", uid=uid)


class BookAlerts:
    """Reports the ledger sync's book problems once each (module docstring) to ``metrics`` and the log."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics
        self._overbooked: dict[str, str] = {}
        self._vanished: dict[str, VanishedHold] = {}
        metrics.set_overbooked_nodes(0)
        metrics.set_vanished_gpu_pods(0)

    def forget(self) -> None:
        """Forget what was reported, so the next :meth:`collect` reports every current problem again (a replica that
        gains leadership writes the Events its time as a follower did not)."""
        self._overbooked, self._vanished = {}, {}

    def collect(self, sync: LedgerSync) -> list[ClusterEvent]:
        """The Events of problems that are new since the last call; updates the gauges and logs. Call under the
        lock that serialises ``sync``."""
        events = self._overbooking(sync) + self._vanishing(sync)
        self.metrics.set_overbooked_nodes(len(self._overbooked))
        self.metrics.set_vanished_gpu_pods(len(self._vanished))
        return events

    def _overbooking(self, sync: LedgerSync) -> list[ClusterEvent]:
        now = sync.overbooked
        if now == self._overbooked:
            return []
        events = []
        for node in sorted(set(self._overbooked) - set(now)):
            log.info("node books possible again; quarantine lifted", extra=fields(node=node))
        for node, reason in sorted(now.items()):
            if self._overbooked.get(node) == reason:
                continue
            log.warning("node quarantined: impossible books", extra=fields(node=node, reason=reason))
            events.append(_warning("Node", node, IMPOSSIBLE_BOOKS, f"node {node} takes no pods until its books are "
                                   f"possible again: {reason}", uid=_node_uid(sync, node)))
        self._overbooked = now
        return events

    def _vanishing(self, sync: LedgerSync) -> list[ClusterEvent]:
        now = dict(sync.vanished.holds)
        if now == self._vanished:
            return []
        events = []
        for uid in sorted(set(self._vanished) - set(now)):
            gone = self._vanished[uid]
            log.info("pod no longer on a vanished GPU", extra=fields(pod=gone.pod_key, node=gone.node))
        for uid, hold in sorted(now.items()):
            if self._vanished.get(uid) == hold:
                continue
            gpus = ", ".join(hold.gpu_uuids)
            log.warning("pod holds a GPU gone from its node's inventory",
                        extra=fields(pod=hold.pod_key, node=hold.node, gpus=list(hold.gpu_uuids)))
            events.append(_warning(
                "Pod", hold.name, GPU_VANISHED, f"GPU {gpus} of this pod's plan is no longer in node {hold.node}'s "
                f"inventory (the GPU vanished, or the plan names a GPU the node never had); the scheduler keeps "
                f"counting the pod on the node's other GPUs until it ends", namespace=hold.namespace, uid=uid))
            events.append(_warning(
                "Node", hold.node, GPU_VANISHED, f"GPU {gpus} vanished from node {hold.node}'s inventory while pod "
                f"{hold.pod_key} holds it (by its plan); the pod stays counted on the node",
                uid=_node_uid(sync, hold.node)))
        self._vanished = now
        return events
