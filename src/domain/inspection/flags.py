"""What ``ljrk inspect`` flags on a node or the cluster: each :class:`Flag` is a stable ``code`` and a message.

Node codes (:func:`node_flags`), each derived from the same readings the scheduler uses
(:mod:`domain.kube.translate`, :mod:`domain.scheduling.sync`):

* ``inventory-missing`` / ``inventory-malformed`` — no readable GPU inventory annotation (the node takes no GPU pod);
* ``inventory-stale`` — its heartbeat is older than the protocol's ``inventory-stale-seconds`` (or as far in the
  future): the device plugin stopped publishing;
* ``protocol-mismatch`` — the device plugin's or exporter's protocol fingerprint differs from the one inspect loaded;
* ``kubelet-unregistered`` — the device plugin says kubelet would refuse GPU pods now;
* ``quarantined`` — the ledger admits no pod there (impossible books: a GPU booked beyond its core or memory);
* ``runtime-disabled`` — the Runtime toggle is not ``enabled`` with the enable label ``true``;
* ``gpu-unhealthy`` — a GPU the inventory lists is not ``Healthy``;
* ``gpu-usage-unknown`` — a bound pod names our GPU resources with a request that cannot be read;
* ``vanished-gpu`` — a bound pod's plan names a GPU the node no longer lists;
* ``mig-gated`` / ``mig-problem`` — the node takes no MIG pod (strategy mismatch, parked records) or some of its MIG
  GPUs are left out of the books;
* ``gated`` — the scheduler would give it no GPU pod for another reason (say, unreadable allocatable).

Cluster codes (:func:`cluster_flags`): ``pod-on-unknown-node`` (a pod bound to a node that does not exist, so its
GPUs are counted nowhere) and ``scheduler-not-serving`` (the ``--scheduler`` replica is a standby or rebuilding: its
books may lag).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, Health
from domain.inspection.view import SchedulerView
from domain.kube.annotations import decode_inventory
from domain.kube.objects import NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import (
    KUBELET_UNREGISTERED,
    AllocationSource,
    heartbeat_problem,
    names_gpu_resources,
    pod_request,
    protocol_mismatches,
)
from domain.scheduling.nodefit import toggle_admits
from domain.scheduling.sync import LedgerSync

INVENTORY_MISSING = "inventory-missing"
INVENTORY_MALFORMED = "inventory-malformed"
INVENTORY_STALE = "inventory-stale"
PROTOCOL_MISMATCH = "protocol-mismatch"
KUBELET_NOT_REGISTERED = "kubelet-unregistered"
QUARANTINED = "quarantined"
RUNTIME_DISABLED = "runtime-disabled"
GPU_UNHEALTHY = "gpu-unhealthy"
GPU_USAGE_UNKNOWN = "gpu-usage-unknown"
VANISHED_GPU = "vanished-gpu"
MIG_GATED = "mig-gated"
MIG_PROBLEM = "mig-problem"
GATED = "gated"
POD_ON_UNKNOWN_NODE = "pod-on-unknown-node"
SCHEDULER_NOT_SERVING = "scheduler-not-serving"

_EXPLAINS_GATE = frozenset({INVENTORY_MISSING, INVENTORY_MALFORMED, INVENTORY_STALE, PROTOCOL_MISMATCH,
                            KUBELET_NOT_REGISTERED, GPU_USAGE_UNKNOWN})
"""Codes that account for a node's gate (the scheduler's reason to give it no GPU pod); ``gated`` covers the rest."""


@attrs.frozen
class Flag:
    """A problem: ``code`` (module docstring) and a ``message`` naming the node, GPU or pod and the values."""

    code: str
    message: str


def _inventory_flags(node: NodeObject, protocol: ProtocolConstants, *, now: float) -> list[Flag]:
    key = protocol.annotations.node_inventory
    text = node.annotations.get(key)
    ours = protocol.fingerprint()
    flags: list[Flag] = []
    device_plugin_known = False
    if text is None:
        flags.append(Flag(INVENTORY_MISSING, f"no GPU inventory annotation {key}: the device plugin has not "
                          "published this node's GPUs"))
    else:
        try:
            record = decode_inventory(text, key=key)
        except InvalidRequestError as error:
            flags.append(Flag(INVENTORY_MALFORMED, f"malformed GPU inventory: {error}"))
        else:
            if record.protocol != ours:
                device_plugin_known = True
                flags.append(Flag(PROTOCOL_MISMATCH, f"device plugin speaks protocol {record.protocol}, this "
                                  f"protocol is {ours}"))
            if not record.kubelet_registered:
                flags.append(Flag(KUBELET_NOT_REGISTERED, KUBELET_UNREGISTERED))
            stale = heartbeat_problem(record.heartbeat, protocol, now=now)
            if stale:
                flags.append(Flag(INVENTORY_STALE, stale))
    for component, fingerprint in protocol_mismatches(node, protocol).items():
        if component != "device-plugin" or not device_plugin_known:
            flags.append(Flag(PROTOCOL_MISMATCH, f"{component.replace('-', ' ')} speaks protocol {fingerprint}, "
                              f"this protocol is {ours}"))
    return flags


def node_flags(node: NodeObject, *, gpus: Sequence[Gpu], pods: Iterable[PodObject], sync: LedgerSync,
               protocol: ProtocolConstants, now: float) -> tuple[Flag, ...]:
    """The flags of ``node`` (module docstring): ``gpus`` its inventory as booked, ``pods`` those bound to it,
    ``sync`` the books of the whole listing (:func:`domain.inspection.report.book`), ``now`` epoch seconds."""
    name = node.name
    flags = _inventory_flags(node, protocol, now=now)
    quarantine = sync.ledger.quarantine.get(name)
    if quarantine:
        flags.append(Flag(QUARANTINED, quarantine))
    keys = protocol.annotations
    if not toggle_admits(node, state_annotation=keys.node_state, enable_label=protocol.node_label):
        state = node.annotations.get(keys.node_state, "")
        label = node.labels.get(protocol.node_label)
        flags.append(Flag(RUNTIME_DISABLED, f"Runtime toggle state {state!r}, label {protocol.node_label}="
                          f"{label!r}: no GPU pod is placed here until it is enabled"))
    for gpu in gpus:
        if gpu.health is not Health.HEALTHY:
            flags.append(Flag(GPU_UNHEALTHY, f"GPU {gpu.index} ({gpu.uuid}) is {gpu.health.value}"))
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.phase.terminal or sync.sources.get(pod.uid) is not AllocationSource.NODE_ONLY:
            continue  # a request that cannot be read is booked node-only: only those are read again
        try:
            pod_request(pod, protocol)
        except InvalidRequestError as error:
            if names_gpu_resources(pod, protocol):
                flags.append(Flag(GPU_USAGE_UNKNOWN, f"pod {pod.key} names GPU resources but its request cannot be "
                                  f"read ({error}): what it holds of the GPUs is unknown"))
    for hold in sorted(sync.vanished.holds.values(), key=lambda h: h.pod_key):
        if hold.node == name:
            flags.append(Flag(VANISHED_GPU, f"pod {hold.pod_key} holds {', '.join(hold.gpu_uuids)}, which the "
                              "node no longer lists"))
    if name in sync.books.gates:
        flags.append(Flag(MIG_GATED, sync.books.gates[name]))
    if name in sync.books.problems:
        flags.append(Flag(MIG_PROBLEM, sync.books.problems[name]))
    gate = sync.gates.get(name)
    if gate and not any(f.code in _EXPLAINS_GATE for f in flags):
        flags.append(Flag(GATED, gate))
    return tuple(flags)


def cluster_flags(pods: Iterable[PodObject], nodes: Collection[str], view: SchedulerView | None) -> tuple[Flag, ...]:
    """Cluster-wide flags (module docstring): ``pods`` and ``nodes`` (names) of the listing, ``view`` the
    scheduler's books when read."""
    flags = [Flag(POD_ON_UNKNOWN_NODE, f"pod {p.key} is bound to node {p.node_name}, which does not exist: its GPUs "
                  "are counted nowhere")
             for p in sorted(pods, key=lambda p: p.key)
             if p.node_name and not p.phase.terminal and p.node_name not in nodes]
    if view is not None and not view.serving:
        flags.append(Flag(SCHEDULER_NOT_SERVING, "the scheduler is not serving (a standby, or rebuilding its "
                          "books): its view may lag"))
    return tuple(flags)
