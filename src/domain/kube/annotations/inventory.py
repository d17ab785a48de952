"""The node GPU inventory annotation (the device plugin publishes it): :func:`encode_inventory`,
:func:`decode_inventory`. Invariant: decoding an encoded inventory gives it back; unknown versions, malformed JSON,
non-finite heartbeats and wrong types are refused naming the field (``docs/annotations.md``).
"""


from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.annotations.fields import (
    _bool,
    _dump,
    _get,
    _int,
    _list,
    _load,
    _object,
    _str,
    _version,
)
from domain.kube.annotations.records import (
    INVENTORY_VERSION,
    INVENTORY_VERSIONS_READ,
    MIG_STRATEGIES,
    InventoryRecord,
    MigInstanceRecord,
    _mig_map,
)
from domain.kube.annotations.topology import read_topology, topology_json
from domain.topology import NodeTopology, node_topology
from domain.units import MAX_GPU_MEMORY_BYTES


def _mig_instance_json(instance: MigInstanceRecord) -> dict[str, object]:
    return {"gi": instance.gpu_instance_id, "ci": instance.compute_instance_id, "profile": instance.profile,
            "start": instance.start, "uuid": instance.uuid, "free": instance.free}


def encode_inventory(
    gpus: Sequence[Gpu],
    *,
    heartbeat: float,
    protocol: str,
    mig: Mapping[int, Sequence[MigInstanceRecord]] | None = None,
    mig_strategy: str = "",
    kubelet_registered: bool = True,
    topology: NodeTopology | None = None,
) -> str:
    """Render the node inventory annotation (module docstring) for ``gpus`` at ``heartbeat`` (epoch seconds),
    stamped with the writer's protocol fingerprint; ``mig``: GPU index → MIG instances of that GPU (GPUs in MIG
    mode only); ``mig_strategy``: ``static``/``dynamic`` (empty: not published); ``kubelet_registered``: False
    writes ``"kubeletRegistered": false``; ``topology``: each listed GPU's ``topology`` object
    (:mod:`domain.kube.annotations.topology`; None: none written). Version 2 when a GPU is in MIG
    mode, else version 1 (the same text as before MIG). Raises :class:`InvalidRequestError` for a non-finite
    heartbeat, an unknown strategy, or instances on a GPU that is absent or not in MIG mode."""
    if not math.isfinite(heartbeat):
        raise InvalidRequestError("heartbeat", heartbeat, "must be a finite number of epoch seconds")
    if mig_strategy and mig_strategy not in MIG_STRATEGIES:
        raise InvalidRequestError("migStrategy", mig_strategy, f"must be one of {', '.join(MIG_STRATEGIES)}")
    layouts = _mig_map(mig or {})
    by_index = {g.index: g for g in gpus}
    for index in layouts:
        gpu = by_index.get(index)
        if gpu is None or gpu.mig_mode is not MigMode.ENABLED:
            raise InvalidRequestError(f"gpus[{index}].migInstances", len(layouts[index]),
                                      "only a listed GPU in MIG mode has MIG instances")
    with_mig = any(g.mig_mode is MigMode.ENABLED for g in gpus)
    entries: list[dict[str, object]] = []
    for g in sorted(gpus, key=lambda g: g.index):
        entry: dict[str, object] = {"index": g.index, "uuid": g.uuid, "model": g.model, "memoryBytes": g.memory_bytes,
                                    "health": g.health.value, "migMode": g.mig_mode.value}
        if g.mig_mode is MigMode.ENABLED:
            entry["migInstances"] = [_mig_instance_json(i) for i in layouts.get(g.index, ())]
        place = None if topology is None else topology.gpus.get(g.index)
        if place is not None:
            entry["topology"] = topology_json(place)
        entries.append(entry)
    data: dict[str, object] = {
        "version": INVENTORY_VERSION if with_mig else 1,
        "heartbeat": float(heartbeat),
        "protocol": protocol,
    }
    if with_mig and mig_strategy:
        data["migStrategy"] = mig_strategy
    if not kubelet_registered:
        data["kubeletRegistered"] = False
    data["gpus"] = entries
    return _dump(data)


_E = TypeVar("_E", Health, MigMode)


def _enum_value(field: str, data: Mapping[str, object], name: str, kind: type[_E]) -> _E:
    text = _str(field, data, name)
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidRequestError(f"{field}.{name}", text, f"must be one of {allowed}") from None


def _optional_int(field: str, data: Mapping[str, object], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{field}.{name}", value, "must be an integer or null")
    return value


def _mig_instances(field: str, data: Mapping[str, object], gpu: Gpu) -> tuple[MigInstanceRecord, ...]:
    """The ``migInstances`` of one GPU entry (absent: none). Raises :class:`InvalidRequestError`."""
    if "migInstances" not in data:
        return ()
    if gpu.mig_mode is not MigMode.ENABLED:
        raise InvalidRequestError(f"{field}.migInstances", data["migInstances"], "only a GPU in MIG mode has them")
    out: list[MigInstanceRecord] = []
    for n, raw in enumerate(_list(field, data, "migInstances")):
        where = f"{field}.migInstances[{n}]"
        item = _object(where, raw)
        gi, start = _int(where, item, "gi"), _int(where, item, "start")
        ci = _optional_int(where, item, "ci")
        if gi < 0 or start < 0 or (ci is not None and ci < 0):
            raise InvalidRequestError(where, {"gi": gi, "ci": ci, "start": start}, "ids and start must be >= 0")
        uuid = _get(where, item, "uuid")
        if not isinstance(uuid, str):
            raise InvalidRequestError(f"{where}.uuid", uuid, "must be a string (empty without compute instance)")
        out.append(MigInstanceRecord(gi, ci, _str(where, item, "profile"), start, uuid, _bool(where, item, "free")))
    starts = [i.start for i in out]
    if len(set(starts)) != len(starts):
        raise InvalidRequestError(f"{field}.migInstances.start", starts, "two instances share a start")
    return tuple(out)


def _finite(number: float) -> bool:
    """True for a number that is a finite float (an integer beyond float range is not: ``math.isfinite`` would
    raise ``OverflowError`` on it)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _gpu(field: str, entry: object) -> Gpu:
    data = _object(field, entry)
    index = _int(field, data, "index")
    uuid = _str(field, data, "uuid")
    model = _str(field, data, "model")
    memory = _int(field, data, "memoryBytes")
    if memory <= 0:
        raise InvalidRequestError(f"{field}.memoryBytes", memory, "a GPU must report memory > 0 (failure case B12f)")
    if memory > MAX_GPU_MEMORY_BYTES:
        raise InvalidRequestError(f"{field}.memoryBytes", memory, f"must be at most {MAX_GPU_MEMORY_BYTES} (1 PiB): no "
                                  "GPU has that much")
    if index < 0:
        raise InvalidRequestError(f"{field}.index", index, "must not be negative")
    health = _enum_value(field, data, "health", Health)
    mig = _enum_value(field, data, "migMode", MigMode)
    return Gpu(index, GpuUuid(uuid), model, memory, health=health, mig_mode=mig)


_HEALTH = {member.value: member for member in Health}
_MIG_MODE = {member.value: member for member in MigMode}


def _plain_gpu(entry: object) -> Gpu | None:
    """:func:`_gpu` of a well-formed entry in one lean pass, or None wherever :func:`_gpu` might refuse it (the
    full reader then gives the error): it accepts a subset of what :func:`_gpu` accepts and builds the same GPU."""
    if type(entry) is not dict:
        return None
    index, uuid, model, memory = entry.get("index"), entry.get("uuid"), entry.get("model"), entry.get("memoryBytes")
    health, mig = entry.get("health"), entry.get("migMode")
    if type(index) is not int or type(memory) is not int or index < 0 or not 0 < memory <= MAX_GPU_MEMORY_BYTES:
        return None
    if type(uuid) is not str or type(model) is not str or type(health) is not str or type(mig) is not str:
        return None
    if not uuid or not model or health not in _HEALTH or mig not in _MIG_MODE:
        return None
    return Gpu(index, GpuUuid(uuid), model, memory, health=_HEALTH[health], mig_mode=_MIG_MODE[mig])


def decode_inventory(text: object, *, key: str) -> InventoryRecord:
    """Parse the node inventory annotation stored under ``key``.

    Returns the GPUs sorted by index, with the MIG layout and strategy of a version 2 text. Raises
    :class:`InvalidRequestError` naming ``key`` and the field for an unknown version, malformed JSON, a missing
    field, a wrong type, a heartbeat that is no finite number, a GPU with memory ≤ 0 or above 1 PiB, duplicate
    UUIDs, indexes that are not exactly ``0..n-1``, MIG instances on a GPU not in MIG mode or sharing a start, an
    unknown ``migStrategy``, a ``kubeletRegistered`` that is not a boolean, or a malformed ``topology`` (one naming a
    peer the node lacks included).
    """
    data = _load(key, text)
    version = _version(key, data, INVENTORY_VERSIONS_READ)
    heartbeat = _get(key, data, "heartbeat")
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or not _finite(heartbeat):
        raise InvalidRequestError(f"{key}.heartbeat", heartbeat, "must be a finite number of epoch seconds")
    protocol = _str(key, data, "protocol")
    entries = _list(key, data, "gpus")
    parsed = [(i, e, _plain_gpu(e) or _gpu(f"{key}.gpus[{i}]", e)) for i, e in enumerate(entries)]
    layouts: dict[int, tuple[MigInstanceRecord, ...]] = {}
    strategy = ""
    if version >= 2:
        for i, entry, gpu in parsed:
            if isinstance(entry, dict) and "migInstances" not in entry:
                continue  # no instances listed: nothing to read
            field = f"{key}.gpus[{i}]"
            instances = _mig_instances(field, _object(field, entry), gpu)
            if instances:
                layouts[gpu.index] = instances
        if "migStrategy" in data:
            strategy = _str(key, data, "migStrategy")
            if strategy not in MIG_STRATEGIES:
                raise InvalidRequestError(f"{key}.migStrategy", strategy, f"must be one of {', '.join(MIG_STRATEGIES)}")
    gpus = sorted((gpu for _, _, gpu in parsed), key=lambda g: g.index)
    indexes = [g.index for g in gpus]
    if indexes != list(range(len(gpus))):
        raise InvalidRequestError(f"{key}.gpus.index", indexes, "must be exactly 0..n-1, each once")
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise InvalidRequestError(f"{key}.gpus.uuid", uuids, "must be unique")
    registered = _bool(key, data, "kubeletRegistered") if "kubeletRegistered" in data else True
    places = [(gpu.index, read_topology(f"{key}.gpus[{i}]", entry) if isinstance(entry, dict) else None)
              for i, entry, gpu in parsed]
    try:
        topology = node_topology(places)
    except InvalidRequestError as error:
        raise InvalidRequestError(f"{key}.gpus.{error.field}", error.value, error.reason) from None
    return InventoryRecord(tuple(gpus), float(heartbeat), protocol, layouts, strategy, registered, topology)
