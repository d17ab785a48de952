"""A Node in the ledger's terms (:func:`read_node`): its inventory annotation, allocatable quantities, and why it
must not take GPU pods (missing, malformed, stale, future-dated or foreign-protocol inventory, a device plugin not
registered with kubelet). Invariant: :func:`inventory_reason` re-evaluates the time-dependent part of that reason
without decoding the annotation again.
"""


from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.dra.inventory import SliceInventory
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, NodeInventory, NodeName
from domain.kube.annotations import (
    InventoryRecord,
    MigInstanceRecord,
    decode_inventory,
)
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.quantity import parse_bytes, parse_count, parse_cpu_milli
from domain.units import MAX_NODE_QUANTITY


@attrs.frozen
class InventoryReading:
    """What a Node says about itself.

    ``counted``: the inventory the ledger books against — the annotation's GPUs whenever it decodes (even when
    stale or from another protocol, so running pods stay counted), no GPUs when it is missing or malformed (the
    ledger may keep the GPUs the node last published instead: :class:`~domain.scheduling.sync.LedgerSync`), and
    always the node's allocatable CPU (milli-cores), memory (bytes) and pods. ``reason``: empty when the node
    may take new GPU pods, else why not. ``heartbeat``: the annotation's epoch seconds, when it decodes (None
    means missing or malformed). ``steady_reason``: the part of ``reason`` that does not depend on the time
    (everything but the heartbeat's age), so the reason at a later time is :func:`inventory_reason` of
    ``heartbeat`` and ``steady_reason`` without decoding the annotation again. ``mig``/``mig_strategy``: the MIG
    layout (GPU index → instances) and strategy of the annotation, when it decodes, or of the slices
    (:class:`~domain.dra.inventory.SliceInventory`); empty otherwise.
    ``from_slices``: the GPUs are those our DRA driver's ResourceSlices publish (a node without a fresh
    annotation, :func:`read_node`'s ``slices``); such a reading has no heartbeat and :attr:`decoded` tells whether
    they read.
    """

    counted: NodeInventory
    reason: str = ""
    heartbeat: float | None = None
    steady_reason: str = ""
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = attrs.field(factory=dict)
    mig_strategy: str = ""
    from_slices: bool = False
    slices_read: bool = False

    @property
    def decoded(self) -> bool:
        """True when the GPUs were read (the annotation decoded, or the slices were complete and well formed):
        otherwise the ledger may keep the GPUs the node last published."""
        return self.heartbeat is not None or self.slices_read

    @property
    def inventory(self) -> NodeInventory | None:
        """The inventory when the node may take GPU pods, else None (see :attr:`reason`)."""
        return None if self.reason else self.counted


def _allocatable(node: NodeObject) -> tuple[tuple[int, int, int], list[str]]:
    values, problems = [], []
    for resource, parse in (("cpu", parse_cpu_milli), ("memory", parse_bytes), ("pods", parse_count)):
        text = node.allocatable.get(resource)
        field = f"node[{node.name}].allocatable.{resource}"
        try:
            value = 0 if text is None else parse(field, text)
            if value > MAX_NODE_QUANTITY:
                raise InvalidRequestError(field, text, f"must be at most {MAX_NODE_QUANTITY} in base units: no node "
                                          "has that much")
            values.append(value)
        except InvalidRequestError as error:
            values.append(0)
            problems.append(str(error))
    cpu, memory, pods = values
    return (cpu, memory, pods), problems


def heartbeat_problem(heartbeat: float | None, protocol: ProtocolConstants, *, now: float) -> str:
    """Why an inventory heartbeat (epoch seconds; None = no readable inventory) is not fresh at ``now``: older
    than ``protocol.inventory_stale_seconds``, or that far in the *future* (a device plugin whose clock runs
    ahead would otherwise stay fresh long after it stopped); empty when fresh."""
    if heartbeat is None:
        return ""
    age, limit = now - heartbeat, protocol.inventory_stale_seconds
    if age > limit:
        return f"stale GPU inventory: heartbeat {age:.0f} s old (limit {limit} s)"
    if -age > limit:
        return f"GPU inventory heartbeat {-age:.0f} s in the future (clock skew beyond the {limit} s limit)"
    return ""


def inventory_reason(heartbeat: float | None, steady_reason: str, protocol: ProtocolConstants, *, now: float) -> str:
    """The gate reason at ``now`` of a node read earlier (:class:`InventoryReading` fields): the heartbeat's
    problem first, then the steady part."""
    return "; ".join(p for p in (heartbeat_problem(heartbeat, protocol, now=now), steady_reason) if p)


PROTOCOL_PUBLISHERS = ("device-plugin", "exporter")
"""Node components that publish the fingerprint of their protocol on the Node (:func:`protocol_mismatches`)."""


def protocol_mismatches(node: NodeObject, protocol: ProtocolConstants) -> dict[str, str]:
    """``{component: fingerprint}`` for each node component (:data:`PROTOCOL_PUBLISHERS`) whose published
    protocol fingerprint (annotations ``node_protocol`` for the device plugin, ``node_exporter_protocol`` for the
    exporter) differs from ``protocol``'s. A component that published nothing is not a mismatch (not deployed,
    or not started yet: the device plugin's missing inventory gates the node anyway)."""
    keys = protocol.annotations
    ours = protocol.fingerprint()
    published = {"device-plugin": node.annotations.get(keys.node_protocol),
                 "exporter": node.annotations.get(keys.node_exporter_protocol)}
    return {c: f for c, f in published.items() if f is not None and f != ours}


KUBELET_UNREGISTERED = "device plugin not registered with kubelet (kubelet restarting?); kubelet would refuse GPU pods"
"""Gate reason of a node whose inventory says ``kubeletRegistered: false``: a pod bound there now would fail
kubelet's admission (``UnexpectedAdmissionError``), so it waits until the plugin has registered again."""


def _decoded(text: str | None, key: str) -> tuple[InventoryRecord | None, str]:
    """The inventory annotation's record (None when absent or malformed) and, when malformed, why."""
    if text is None:
        return None, ""
    try:
        return decode_inventory(text, key=key), ""
    except InvalidRequestError as error:
        return None, str(error)


def read_node(node: NodeObject, protocol: ProtocolConstants, *, now: float,
              slices: SliceInventory | None = None) -> InventoryReading:
    """Read ``node``'s inventory annotation and allocatable quantities at ``now`` (epoch seconds). ``slices``: the
    GPUs our DRA driver's ResourceSlices publish for the node (None: none), which count unless the node's
    inventory annotation is fresh (a node runs the device plugin or the DRA driver; where a live device plugin
    publishes too, its annotation wins; one left stale or malformed by a device plugin gone, e.g. after switching
    the node to DRA, does not); their problem, if any, is the reason.

    The reason is set when the annotation is missing or malformed, its heartbeat is more than
    ``protocol.inventory_stale_seconds`` old or in the future, it is stamped with another protocol fingerprint,
    the node's device plugin or exporter publishes another protocol fingerprint (:func:`protocol_mismatches`),
    the device plugin says it is not registered with kubelet (:data:`KUBELET_UNREGISTERED`), or when allocatable
    cannot be parsed. Never raises for bad node content.
    """
    (cpu, memory, pods), problems = _allocatable(node)
    key = protocol.annotations.node_inventory
    text = node.annotations.get(key)
    gpus: tuple[Gpu, ...] = ()
    heartbeat: float | None = None
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = {}
    strategy = ""
    topology = None
    record, malformed = _decoded(text, key)
    fresh = record is not None and not heartbeat_problem(record.heartbeat, protocol, now=now)
    from_slices = slices is not None and not fresh
    if from_slices and slices is not None:
        gpus, mig, strategy = slices.gpus, slices.mig, slices.mig_strategy
        if slices.problem:
            problems.insert(0, slices.problem)
    elif record is None:
        problems.insert(0, f"malformed GPU inventory: {malformed}" if text is not None
                        else f"no GPU inventory annotation {key}")
    else:
        gpus, heartbeat, mig, strategy = record.gpus, record.heartbeat, record.mig, record.mig_strategy
        topology = record.topology
        if record.protocol != protocol.fingerprint():
            problems.insert(0, f"protocol mismatch: device plugin speaks {record.protocol}, "
                               f"scheduler {protocol.fingerprint()}")
        if not record.kubelet_registered:
            problems.insert(0, KUBELET_UNREGISTERED)
    known = any(p.startswith("protocol mismatch") for p in problems)  # the inventory's own stamp, above
    for component, fingerprint in protocol_mismatches(node, protocol).items():
        if component != "device-plugin" or not known:
            problems.insert(0, f"protocol mismatch: {component.replace('-', ' ')} speaks {fingerprint}, "
                               f"scheduler {protocol.fingerprint()}")
    counted = NodeInventory(NodeName(node.name), gpus, cpu_milli=cpu, memory_bytes=memory, max_pods=pods,
                            topology=topology)
    steady = "; ".join(problems)
    return InventoryReading(counted, inventory_reason(heartbeat, steady, protocol, now=now), heartbeat, steady,
                            dict(mig), strategy, from_slices=from_slices,
                            slices_read=from_slices and slices is not None and not slices.problem)


def node_inventory(node: NodeObject, protocol: ProtocolConstants, *, now: float) -> NodeInventory | None:
    """The node's inventory when it may take GPU pods, else None; :func:`read_node` gives the reason."""
    return read_node(node, protocol, now=now).inventory
