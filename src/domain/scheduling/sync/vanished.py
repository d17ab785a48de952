"""Pods holding GPUs their node no longer lists: found when the pod is booked, kept until it ends or the GPU
is back.

A bound pod's plan names its GPUs by UUID. When the node's inventory stops listing one of them (the GPU fell off
the bus, was reset, or left the device plugin's list), the plan can no longer be trusted for that GPU, so
:class:`~domain.scheduling.sync.LedgerSync` keeps the pod counted by inference on the GPUs the node still has; the
pod's process may still hold memory or be dead, and nobody knows which. :class:`VanishedGpus` records such pods
(:class:`VanishedHold`) so the scheduler service can say so (a Warning Event on the pod and on the node, a gauge).

Only nodes whose GPU list comes from an inventory that decoded are judged: a node never seen with a readable
inventory (after a restart, for example) has no GPU list yet, and every plan there would look vanished. A plan
that is not this pod's on this node (another pod object's, another node's, malformed) names nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.kube.annotations import plan_gpu_uuids
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants


@attrs.frozen
class VanishedHold:
    """Pod ``namespace/name`` (UID ``pod_uid``), bound to ``node``, whose plan names ``gpu_uuids`` (sorted), which
    the node's inventory does not list."""

    pod_uid: str
    namespace: str
    name: str
    node: str
    gpu_uuids: tuple[str, ...]

    @property
    def pod_key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def vanished_gpus(pod: PodObject, node_gpus: Sequence[Gpu], protocol: ProtocolConstants) -> tuple[str, ...]:
    """The GPU UUIDs ``pod``'s plan names that ``node_gpus`` (its node's GPUs) lacks, sorted; empty for a pod
    without a plan of its own on its node."""
    key = protocol.annotations.pod_plan
    text = pod.annotations.get(key)
    if text is None or not pod.node_name:
        return ()
    try:
        named = plan_gpu_uuids(text, key=key, pod_uid=pod.uid, node=pod.node_name)
    except InvalidRequestError:
        return ()
    listed = {g.uuid for g in node_gpus}
    return tuple(u for u in named if u not in listed)


class VanishedGpus:
    """The bound pods on GPUs gone from their node's inventory: ``holds`` (pod UID → :class:`VanishedHold`)."""

    def __init__(self, protocol: ProtocolConstants) -> None:
        self.protocol = protocol
        self.holds: dict[str, VanishedHold] = {}

    def track(self, pod: PodObject, node_gpus: Sequence[Gpu] | None) -> None:
        """Record or clear bound ``pod`` against its node's GPUs; ``node_gpus`` None: the node has no GPU list from
        a decoded inventory yet (module docstring), so nothing is judged."""
        gone = () if node_gpus is None else vanished_gpus(pod, node_gpus, self.protocol)
        if gone:
            self.holds[pod.uid] = VanishedHold(pod.uid, pod.namespace, pod.name, pod.node_name, gone)
        else:
            self.holds.pop(pod.uid, None)

    def forget(self, uid: str) -> None:
        """The pod ended, left its node or was deleted."""
        self.holds.pop(uid, None)

    def forget_node(self, node: str) -> None:
        """The node was deleted: its pods are counted nowhere."""
        for uid in [u for u, hold in self.holds.items() if hold.node == node]:
            del self.holds[uid]
