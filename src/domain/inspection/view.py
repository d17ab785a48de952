"""The scheduler's view of its books, as ``GET /debug/ledger`` serves it and ``ljrk inspect --scheduler`` reads it.

JSON (version 1; keys stable, additive changes only)::

    {"version": 1, "serving": true,
     "nodes": [{"name": "n1", "gate": "", "quarantine": "", "pods": ["<uid>", …], "migPods": ["<uid>", …],
                "gpus": [{"index": 0, "uuid": "GPU-…", "coreUsedMilli": 600, "coreCapacityMilli": 1000,
                          "memoryUsedBytes": 8589934592, "memoryCapacityBytes": 17179869184}]}]}

``serving``: the replica leads and has rebuilt its books this term (a standby's books may lag); ``gate``: why the
node takes no GPU pods (empty: it may); ``quarantine``: why the ledger admits no pod there (empty: none);
``pods``: UIDs counted on the node by the time-sharing ledger, including this replica's reservations not yet bound
(sorted); ``migPods``: UIDs with MIG bookings there (Runtime placeholders left out; sorted); ``gpus``: per GPU the
books in milli-GPU (1000 = one GPU) and bytes. Nodes are sorted by name.

:func:`scheduler_view` reads a :class:`~domain.scheduling.sync.LedgerSync` (the caller holds its lock);
:func:`encode_view` / :func:`decode_view` are the codec. :func:`decode_view` raises
:class:`~domain.errors.InvalidRequestError` whose field is the JSON path (``nodes[2].gpus[0].coreUsedMilli``) for
an unknown version, a missing field or a wrong type.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.scheduling.mig.books import PLACEHOLDER_PREFIX
from domain.scheduling.sync import LedgerSync

VIEW_VERSION = 1
"""Schema version of the scheduler view."""

VIEW_PATH = "/debug/ledger"
"""Route of the scheduler's HTTP listener that serves the view."""


@attrs.frozen
class GpuBooks:
    """One GPU in the scheduler's books: ``index``, ``uuid``, core used and capacity (milli-GPU), memory used and
    capacity (bytes)."""

    index: int
    uuid: str
    core_used_milli: int
    core_capacity_milli: int
    memory_used_bytes: int
    memory_capacity_bytes: int


@attrs.frozen
class NodeBooks:
    """One node in the scheduler's books (module docstring): ``gate``, ``quarantine``, ``pods`` and ``mig_pods``
    (sorted UIDs) and ``gpus`` (by index)."""

    name: str
    gpus: tuple[GpuBooks, ...] = ()
    pods: tuple[str, ...] = ()
    mig_pods: tuple[str, ...] = ()
    gate: str = ""
    quarantine: str = ""


@attrs.frozen
class SchedulerView:
    """The whole view: ``serving`` and ``nodes`` by name."""

    serving: bool
    nodes: Mapping[str, NodeBooks] = attrs.field(factory=dict)


def scheduler_view(sync: LedgerSync, *, serving: bool) -> SchedulerView:
    """The view of ``sync``'s books now (module docstring); ``serving``: the replica's readiness. The caller holds
    the lock that serialises ``sync``'s events."""
    ledger = sync.ledger
    nodes: dict[str, NodeBooks] = {}
    mig_nodes = set(sync.mig.node_names())
    for name in sorted(ledger.node_names()):
        gpus = tuple(GpuBooks(g.index, g.uuid, g.core_used, g.core_capacity, g.memory_used, g.memory_capacity)
                     for g in ledger.gpus(name))
        mig = sorted(uid for uid in sync.mig.node(name).records() if not uid.startswith(PLACEHOLDER_PREFIX)) \
            if name in mig_nodes else []
        nodes[name] = NodeBooks(name, gpus, tuple(ledger.pods_on(name)), tuple(mig), sync.gates.get(name, ""),
                                ledger.quarantine.get(name, ""))
    return SchedulerView(serving, nodes)


def encode_view(view: SchedulerView) -> dict[str, object]:
    """The JSON value of ``view`` (module docstring), ready for ``json.dumps``."""
    return {
        "version": VIEW_VERSION,
        "serving": view.serving,
        "nodes": [{"name": n.name, "gate": n.gate, "quarantine": n.quarantine, "pods": list(n.pods),
                   "migPods": list(n.mig_pods),
                   "gpus": [{"index": g.index, "uuid": g.uuid, "coreUsedMilli": g.core_used_milli,
                             "coreCapacityMilli": g.core_capacity_milli, "memoryUsedBytes": g.memory_used_bytes,
                             "memoryCapacityBytes": g.memory_capacity_bytes} for g in n.gpus]}
                  for n in sorted(view.nodes.values(), key=lambda n: n.name)],
    }


def _field(where: str, data: object, name: str, kind: type | tuple[type, ...]) -> object:
    if not isinstance(data, dict):
        raise InvalidRequestError(where or "view", data, "must be a JSON object")
    path = f"{where}.{name}" if where else name
    if name not in data:
        raise InvalidRequestError(path, None, "missing")
    value = data[name]
    if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InvalidRequestError(path, value, f"must be {names}")
    return value


def _int(where: str, data: object, name: str) -> int:
    value = _field(where, data, name, int)
    assert isinstance(value, int)
    if value < 0:
        raise InvalidRequestError(f"{where}.{name}", value, "must not be negative")
    return value


def _str(where: str, data: object, name: str) -> str:
    value = _field(where, data, name, str)
    assert isinstance(value, str)
    return value


def _strings(where: str, data: object, name: str) -> tuple[str, ...]:
    value = _field(where, data, name, list)
    assert isinstance(value, list)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidRequestError(f"{where}.{name}[{i}]", item, "must be a string")
    return tuple(value)


def decode_view(data: object) -> SchedulerView:
    """Parse the JSON value of a view (module docstring). Raises :class:`InvalidRequestError` naming the JSON path
    for an unknown version, a missing field, a wrong type or a negative amount."""
    version = _field("", data, "version", int)
    if version != VIEW_VERSION:
        raise InvalidRequestError("version", version, f"unsupported scheduler view version; this build reads "
                                  f"{VIEW_VERSION}")
    serving = _field("", data, "serving", bool)
    raw_nodes = _field("", data, "nodes", list)
    assert isinstance(raw_nodes, list)
    nodes: dict[str, NodeBooks] = {}
    for n, raw in enumerate(raw_nodes):
        where = f"nodes[{n}]"
        raw_gpus = _field(where, raw, "gpus", list)
        assert isinstance(raw_gpus, list)
        gpus = tuple(
            GpuBooks(_int(f"{where}.gpus[{i}]", g, "index"), _str(f"{where}.gpus[{i}]", g, "uuid"),
                     _int(f"{where}.gpus[{i}]", g, "coreUsedMilli"), _int(f"{where}.gpus[{i}]", g, "coreCapacityMilli"),
                     _int(f"{where}.gpus[{i}]", g, "memoryUsedBytes"),
                     _int(f"{where}.gpus[{i}]", g, "memoryCapacityBytes"))
            for i, g in enumerate(raw_gpus))
        name = _str(where, raw, "name")
        if name in nodes:
            raise InvalidRequestError(f"{where}.name", name, "listed twice")
        nodes[name] = NodeBooks(name, gpus, _strings(where, raw, "pods"), _strings(where, raw, "migPods"),
                                _str(where, raw, "gate"), _str(where, raw, "quarantine"))
    return SchedulerView(bool(serving), nodes)


def only(view: SchedulerView, names: Collection[str]) -> SchedulerView:
    """``view`` restricted to the nodes ``names`` (``ljrk inspect NODE`` compares one node)."""
    return SchedulerView(view.serving, {n: b for n, b in view.nodes.items() if n in names})
