"""Versioned JSON codecs for the two annotations the components exchange through the API server.

The node GPU inventory (published by the device plugin) and the pod GPU plan (written by the scheduler before it
binds); their layouts, versions and field meanings are in ``docs/annotations.md``. Invariants: decoding an encoded
value gives it back (container order kept, failure case B04); ``coreMilli`` is authoritative and ``corePercent`` must
equal ``ceil(coreMilli / 10)``; a plan names its pod's UID and writer, and version 1 plans are refused; a decoded GPU
UUID must be in the node's current inventory, whose index wins. A plan is pod-written data (failure case B07): it is
trusted only on a bound pod or during this scheduler's own reservation, and :mod:`domain.kube.translate` checks it.

Errors: :class:`InvalidRequestError` whose field is ``<annotation key>.<json path>``, for unknown versions, malformed
JSON, missing fields and wrong types, and from encoders for a GPU index the node lacks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.units import MAX_GPU_MEMORY_BYTES, MILLI_PER_GPU, MILLI_PER_PERCENT

INVENTORY_VERSION = 2
"""Schema version of the node inventory annotation (2 added the MIG layout; written only for nodes with a GPU in
MIG mode, version 1 otherwise)."""

INVENTORY_VERSIONS_READ = (1, 2)
"""Inventory versions :func:`decode_inventory` accepts."""

MIG_STRATEGIES = ("static", "dynamic")
"""Values of the inventory's ``migStrategy`` (:class:`domain.mig.gpu.PlacementMode` values)."""

PLAN_VERSION = 2
"""Schema version of the pod plan annotation (2 added ``podUID`` and ``writer``; 1 is refused)."""

PLAN_WRITER = "lj-runtimekit-scheduler"
"""Default ``writer`` of :func:`encode_plan` (the scheduler's name in the default protocol)."""

MAX_ANNOTATION_BYTES = 256 * 1024
"""Kubernetes caps all annotations of an object at 256 KiB together; anything longer is not ours."""


@attrs.frozen
class MigInstanceRecord:
    """One MIG instance of the inventory annotation (module docstring): ``gpu_instance_id`` (NVML GI id),
    ``compute_instance_id`` (NVML CI id; None without compute instance), ``profile`` (canonical name), ``start``
    (memory slice), ``uuid`` (``MIG-…``; empty without compute instance), ``free`` (no container holds it)."""

    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    start: int
    uuid: str
    free: bool

    @property
    def usable(self) -> bool:
        """True when the instance can be handed to a container (a compute instance and a MIG UUID)."""
        return self.compute_instance_id is not None and bool(self.uuid)


def _mig_map(value: Mapping[int, Sequence[MigInstanceRecord]]) -> dict[int, tuple[MigInstanceRecord, ...]]:
    return {index: tuple(sorted(items, key=lambda i: i.start)) for index, items in value.items() if items}


@attrs.frozen
class InventoryRecord:
    """A decoded inventory annotation: ``gpus`` (dense indexes 0..n-1, in index order), ``heartbeat`` (epoch
    seconds when the device plugin last wrote it), ``protocol`` (the writer's protocol fingerprint), ``mig`` (GPU
    index → its MIG instances by start; GPUs without instances absent) and ``mig_strategy`` (``static``,
    ``dynamic``, or empty when not published) and ``kubelet_registered`` (False: the device plugin said kubelet
    would refuse GPU pods now)."""

    gpus: tuple[Gpu, ...]
    heartbeat: float
    protocol: str
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = attrs.field(factory=dict, converter=_mig_map)
    mig_strategy: str = ""
    kubelet_registered: bool = True


# ---------------------------------------------------------------------------------------------- helpers
def _load(key: str, text: object) -> dict[str, object]:
    if not isinstance(text, str):
        raise InvalidRequestError(key, text, "annotation value must be a string")
    if len(text) > MAX_ANNOTATION_BYTES:
        raise InvalidRequestError(key, f"<{len(text)} characters>", "longer than the 256 KiB annotation limit")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidRequestError(key, text[:80], f"malformed JSON: {error}") from None
    return _object(key, data)


def _object(field: str, value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InvalidRequestError(field, value, "must be a JSON object")
    return value


def _get(field: str, data: Mapping[str, object], name: str) -> object:
    if name not in data:
        raise InvalidRequestError(f"{field}.{name}", None, "missing")
    return data[name]


def _int(field: str, data: Mapping[str, object], name: str) -> int:
    value = _get(field, data, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{field}.{name}", value, "must be an integer")
    return value


def _str(field: str, data: Mapping[str, object], name: str) -> str:
    value = _get(field, data, name)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{field}.{name}", value, "must be a non-empty string")
    return value


def _bool(field: str, data: Mapping[str, object], name: str) -> bool:
    value = _get(field, data, name)
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{field}.{name}", value, "must be true or false")
    return value


def _list(field: str, data: Mapping[str, object], name: str) -> list[object]:
    value = _get(field, data, name)
    if not isinstance(value, list):
        raise InvalidRequestError(f"{field}.{name}", value, "must be a JSON array")
    return value


def _version(key: str, data: Mapping[str, object], supported: int | tuple[int, ...]) -> int:
    version = _int(key, data, "version")
    accepted = supported if isinstance(supported, tuple) else (supported,)
    if version not in accepted:
        reads = " and ".join(str(v) for v in accepted)
        raise InvalidRequestError(f"{key}.version", version, f"unsupported version; this build reads {reads}")
    return version


def _plan_version(key: str, data: Mapping[str, object]) -> None:
    version = _int(key, data, "version")
    if version == 1:
        raise InvalidRequestError(f"{key}.version", version, "version 1 plans carry no podUID and are not trusted; "
                                  f"this build reads {PLAN_VERSION}")
    _version(key, data, PLAN_VERSION)


def _dump(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


# ---------------------------------------------------------------------------------------------- inventory
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
) -> str:
    """Render the node inventory annotation (module docstring) for ``gpus`` at ``heartbeat`` (epoch seconds),
    stamped with the writer's protocol fingerprint; ``mig``: GPU index → MIG instances of that GPU (GPUs in MIG
    mode only); ``mig_strategy``: ``static``/``dynamic`` (empty: not published); ``kubelet_registered``: False
    writes ``"kubeletRegistered": false``. Version 2 when a GPU is in MIG
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


def decode_inventory(text: object, *, key: str) -> InventoryRecord:
    """Parse the node inventory annotation stored under ``key``.

    Returns the GPUs sorted by index, with the MIG layout and strategy of a version 2 text. Raises
    :class:`InvalidRequestError` naming ``key`` and the field for an unknown version, malformed JSON, a missing
    field, a wrong type, a heartbeat that is no finite number, a GPU with memory ≤ 0 or above 1 PiB, duplicate
    UUIDs, indexes that are not exactly ``0..n-1``, MIG instances on a GPU not in MIG mode or sharing a start, an
    unknown ``migStrategy``, or a ``kubeletRegistered`` that is not a boolean.
    """
    data = _load(key, text)
    version = _version(key, data, INVENTORY_VERSIONS_READ)
    heartbeat = _get(key, data, "heartbeat")
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or not _finite(heartbeat):
        raise InvalidRequestError(f"{key}.heartbeat", heartbeat, "must be a finite number of epoch seconds")
    protocol = _str(key, data, "protocol")
    entries = _list(key, data, "gpus")
    parsed = [(f"{key}.gpus[{i}]", e, _gpu(f"{key}.gpus[{i}]", e)) for i, e in enumerate(entries)]
    layouts: dict[int, tuple[MigInstanceRecord, ...]] = {}
    strategy = ""
    if version >= 2:
        for field, entry, gpu in parsed:
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
    return InventoryRecord(tuple(gpus), float(heartbeat), protocol, layouts, strategy, registered)


# ---------------------------------------------------------------------------------------------- plan
def core_percent(core_milli: int) -> int:
    """Percent shown next to ``coreMilli`` in the plan: ``ceil(core_milli / 10)`` (1..100)."""
    return -(-core_milli // MILLI_PER_PERCENT)


@attrs.frozen
class PlannedInstance:
    """One MIG instance a planned container receives (module docstring): on the GPU ``gpu_index``/``gpu_uuid``
    (UUID authoritative), ``profile`` (canonical name), ``start`` (memory slice), ``create`` (the Runtime creates
    it at Allocate) and ``instance_id`` (NVML GPU instance id of an existing instance, informational; None when
    created or unknown)."""

    gpu_index: int
    gpu_uuid: GpuUuid
    profile: str
    start: int
    create: bool = False
    instance_id: str | None = None


@attrs.frozen
class MigContainerPlan:
    """A planned container's MIG instances: ``container`` name, ``init`` (init container) and ``instances`` (at
    least one, distinct ``(gpu_index, start)``, in the order the container sees them). Raises
    :class:`InvalidRequestError` for none or duplicates."""

    container: str
    init: bool
    instances: tuple[PlannedInstance, ...]

    def __attrs_post_init__(self) -> None:
        places = [(i.gpu_index, i.start) for i in self.instances]
        if not places:
            raise InvalidRequestError(f"containers.{self.container}.mig", [], "a MIG container holds an instance")
        if len(set(places)) != len(places):
            raise InvalidRequestError(f"containers.{self.container}.mig", places, "instances must be distinct")


def _mig_entry_json(instance: PlannedInstance) -> dict[str, object]:
    return {"index": instance.gpu_index, "uuid": instance.gpu_uuid, "profile": instance.profile,
            "start": instance.start, "create": instance.create,
            "instanceId": None if instance.create else instance.instance_id}


def encode_plan(
    allocation: PodAllocation,
    node_gpus: Sequence[Gpu],
    *,
    writer: str = PLAN_WRITER,
    mig: Sequence[MigContainerPlan] = (),
) -> str:
    """Render the pod plan annotation (module docstring) of ``allocation`` on a node with ``node_gpus``, for the
    pod ``allocation.pod_uid``, signed ``writer`` (the scheduler's name); ``mig``: the containers that receive
    MIG instances (for a MIG pod ``allocation`` holds no container grants: node CPU and memory only).

    Raises :class:`InvalidRequestError` when a grant or instance names a GPU index the node does not have (or an
    instance's UUID disagrees with the node's GPU at that index), when a container is both granted GPUs and MIG
    instances, or when the allocation has no pod UID or ``writer`` is empty.
    """
    if not allocation.pod_uid:
        raise InvalidRequestError("podUID", allocation.pod_uid, "a plan must name the pod's UID")
    if not writer:
        raise InvalidRequestError("writer", writer, "must be a non-empty string")
    by_index = {g.index: g for g in node_gpus}
    containers: dict[str, object] = {}
    for container in allocation.containers:
        gpus = []
        for grant in container.grants:
            gpu = by_index.get(grant.gpu_index)
            if gpu is None:
                raise InvalidRequestError(
                    f"pod[{allocation.pod_uid}].containers.{container.container}.gpu_index",
                    grant.gpu_index,
                    f"node {allocation.node} has no such GPU",
                )
            gpus.append({"index": grant.gpu_index, "uuid": gpu.uuid, "corePercent": core_percent(grant.core_milli),
                         "coreMilli": grant.core_milli, "memoryBytes": grant.memory_bytes})
        containers[container.container] = {"init": container.init, "whole": container.whole, "gpus": gpus}
    for planned in mig:
        field = f"pod[{allocation.pod_uid}].containers.{planned.container}"
        if planned.container in containers:
            raise InvalidRequestError(field, planned.container, "a container takes either GPUs or MIG instances")
        for instance in planned.instances:
            gpu = by_index.get(instance.gpu_index)
            if gpu is None or gpu.uuid != instance.gpu_uuid:
                raise InvalidRequestError(f"{field}.mig.index", instance.gpu_index,
                                          f"node {allocation.node} has no such GPU with UUID {instance.gpu_uuid}")
        containers[planned.container] = {"init": planned.init, "whole": False, "gpus": [],
                                         "mig": [_mig_entry_json(i) for i in planned.instances]}
    return _dump({"version": PLAN_VERSION, "podUID": allocation.pod_uid, "writer": writer, "node": allocation.node,
                  "containers": containers})


def plan_node(text: object, *, key: str) -> str:
    """The node a plan annotation names (cheap pre-check before a full decode). Raises
    :class:`InvalidRequestError` like :func:`decode_plan`."""
    data = _load(key, text)
    _plan_version(key, data)
    return _str(key, data, "node")


def plan_owner(text: object, *, key: str) -> tuple[str, str]:
    """``(podUID, writer)`` of a plan annotation: which pod object it was written for, and by whom. Raises
    :class:`InvalidRequestError` like :func:`decode_plan` (version 1 plans have no owner)."""
    data = _load(key, text)
    _plan_version(key, data)
    return _str(key, data, "podUID"), _str(key, data, "writer")


def plan_gpu_uuids(text: object, *, key: str, pod_uid: str, node: str) -> tuple[str, ...]:
    """The GPU UUIDs a plan annotation of pod ``pod_uid`` on ``node`` names (time-sharing grants and MIG parents),
    sorted and distinct, whatever the node's inventory lists now. Raises :class:`InvalidRequestError` like
    :func:`decode_plan` for the version, ``podUID``, ``node`` and JSON shape of what it reads."""
    data = _plan_header(text, key=key, pod_uid=pod_uid, node=node)
    uuids: set[str] = set()
    for name, entry in _object(f"{key}.containers", _get(key, data, "containers")).items():
        field = f"{key}.containers.{name}"
        body = _object(field, entry)
        for part in ("gpus", "mig"):
            for i, item in enumerate(_list(field, body, part) if body.get(part) else ()):
                uuids.add(_str(f"{field}.{part}[{i}]", _object(f"{field}.{part}[{i}]", item), "uuid"))
    return tuple(sorted(uuids))


def _grant(field: str, entry: object, by_uuid: Mapping[str, Gpu], *, whole: bool) -> GpuGrant:
    data = _object(field, entry)
    _int(field, data, "index")  # informational: the UUID decides (GPU indexes can change across reboots)
    uuid = _str(field, data, "uuid")
    gpu = by_uuid.get(uuid)
    if gpu is None:
        raise InvalidRequestError(f"{field}.uuid", uuid, "names no GPU in the node's current inventory")
    core = _int(field, data, "coreMilli")
    percent = _int(field, data, "corePercent")
    memory = _int(field, data, "memoryBytes")
    if not 1 <= core <= MILLI_PER_GPU:
        raise InvalidRequestError(f"{field}.coreMilli", core, "must be 1..1000 milli-GPU")
    if percent != core_percent(core):
        raise InvalidRequestError(f"{field}.corePercent", percent, f"disagrees with coreMilli={core}")
    if memory < 1:
        raise InvalidRequestError(f"{field}.memoryBytes", memory, "must be at least 1 byte")
    if whole:
        if core != MILLI_PER_GPU:
            raise InvalidRequestError(f"{field}.coreMilli", core, "a whole-GPU grant holds 1000 milli-GPU")
        memory = gpu.memory_bytes  # a whole GPU takes all of its memory, whatever the inventory says now
    return GpuGrant(gpu.index, core, memory)


def _plan_header(text: object, *, key: str, pod_uid: str, node: str) -> dict[str, object]:
    """The plan's JSON after the version, ``podUID``, ``writer`` and ``node`` checks of :func:`decode_plan`."""
    data = _load(key, text)
    _plan_version(key, data)
    owner = _str(key, data, "podUID")
    if owner != pod_uid:
        raise InvalidRequestError(f"{key}.podUID", owner, f"the plan was written for another pod object (this pod's "
                                  f"UID is {pod_uid!r})")
    _str(key, data, "writer")
    named = _str(key, data, "node")
    if named != node:
        raise InvalidRequestError(f"{key}.node", named, f"the pod is on node {node!r}")
    return data


def _mig_listed(field: str, body: Mapping[str, object]) -> bool:
    """True when a plan container lists MIG instances; such a container must list no GPU grants."""
    if not body.get("mig"):
        return False
    if _list(field, body, "mig") and body.get("gpus"):
        raise InvalidRequestError(f"{field}.gpus", body.get("gpus"), "a container takes either GPUs or MIG instances")
    return True


def _planned_instance(field: str, entry: object, by_uuid: Mapping[str, Gpu]) -> PlannedInstance:
    data = _object(field, entry)
    _int(field, data, "index")  # informational: the UUID decides
    uuid = _str(field, data, "uuid")
    gpu = by_uuid.get(uuid)
    if gpu is None:
        raise InvalidRequestError(f"{field}.uuid", uuid, "names no GPU in the node's current inventory")
    if gpu.mig_mode is not MigMode.ENABLED:
        raise InvalidRequestError(f"{field}.uuid", uuid, "names a GPU that is not in MIG mode")
    start = _int(field, data, "start")
    if start < 0:
        raise InvalidRequestError(f"{field}.start", start, "must be a memory slice >= 0")
    create = _bool(field, data, "create")
    ident = data.get("instanceId")
    if ident is not None and not isinstance(ident, str):
        raise InvalidRequestError(f"{field}.instanceId", ident, "must be a string or null")
    return PlannedInstance(gpu.index, gpu.uuid, _str(field, data, "profile"), start, create,
                           None if create else ident)


def decode_mig_plan(
    text: object, *, key: str, pod_uid: str, node: str, node_gpus: Sequence[Gpu]
) -> tuple[MigContainerPlan, ...]:
    """The MIG containers of the plan annotation stored under ``key`` of pod ``pod_uid`` (module docstring), in
    plan order; empty when the plan lists no MIG instance.

    The same checks as :func:`decode_plan` for the version, ``podUID``, ``node`` and JSON shape; each instance's
    UUID must name a GPU of ``node_gpus`` in MIG mode (its index is taken from the inventory). Raises
    :class:`InvalidRequestError` naming ``key`` and the field, also for a container with both GPUs and MIG
    instances, a negative start, or two entries of one container on the same instance.
    """
    data = _plan_header(text, key=key, pod_uid=pod_uid, node=node)
    by_uuid: dict[str, Gpu] = {g.uuid: g for g in node_gpus}
    out: list[MigContainerPlan] = []
    for name, entry in _object(f"{key}.containers", _get(key, data, "containers")).items():
        field = f"{key}.containers.{name}"
        body = _object(field, entry)
        if not _mig_listed(field, body):
            continue
        instances = tuple(_planned_instance(f"{field}.mig[{i}]", e, by_uuid)
                          for i, e in enumerate(_list(field, body, "mig")))
        places = [(i.gpu_index, i.start) for i in instances]
        if len(set(places)) != len(places):
            raise InvalidRequestError(f"{field}.mig", places, "instances must be distinct")
        out.append(MigContainerPlan(name, _bool(field, body, "init"), instances))
    return tuple(out)


def decode_plan(
    text: object,
    *,
    key: str,
    pod_uid: str,
    node: str,
    node_gpus: Sequence[Gpu],
    cpu_milli: int = 0,
    memory_bytes: int = 0,
) -> PodAllocation:
    """Parse the plan annotation stored under ``key`` of pod ``pod_uid`` into a :class:`PodAllocation`.

    ``pod_uid``: the plan's ``podUID`` must equal it (a plan written for another pod object — one deleted and
    re-created under the same name — is refused). ``node``/``node_gpus``: the node the caller believes the pod
    is on and that node's current GPUs; the plan must name the same node and each grant's UUID must be one of
    ``node_gpus`` (its index is taken from the inventory). ``cpu_milli``/``memory_bytes`` (milli-cores, bytes)
    come from the pod's requests: the plan does not carry them. Raises :class:`InvalidRequestError` naming
    ``key`` and the field for an unknown version (version 1 included: it carries no ``podUID``), malformed
    JSON, a missing field, a wrong type, another pod's UID, another node, an unknown UUID, a grant out of range,
    or two grants of one container on the same GPU. Containers that list MIG instances are left out (read them
    with :func:`decode_mig_plan`). See the module docstring for when a plan may be trusted at all.
    """
    data = _plan_header(text, key=key, pod_uid=pod_uid, node=node)
    by_uuid: dict[str, Gpu] = {g.uuid: g for g in node_gpus}
    containers: list[ContainerGrant] = []
    for name, entry in _object(f"{key}.containers", _get(key, data, "containers")).items():
        field = f"{key}.containers.{name}"
        body = _object(field, entry)
        if _mig_listed(field, body):
            continue  # a MIG container: decode_mig_plan reads it
        init = _bool(field, body, "init")
        whole = _bool(field, body, "whole")
        grants = tuple(
            _grant(f"{field}.gpus[{i}]", g, by_uuid, whole=whole) for i, g in enumerate(_list(field, body, "gpus"))
        )
        if not grants:
            raise InvalidRequestError(f"{field}.gpus", [], "a planned container holds at least one GPU")
        if len({g.gpu_index for g in grants}) != len(grants):
            raise InvalidRequestError(f"{field}.gpus", [g.gpu_index for g in grants], "GPUs must be distinct")
        containers.append(ContainerGrant(name, grants, init=init, whole=whole))
    return PodAllocation(pod_uid, node, tuple(containers), cpu_milli=cpu_milli, memory_bytes=memory_bytes)
