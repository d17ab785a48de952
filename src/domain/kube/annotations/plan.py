"""The pod GPU plan annotation (the scheduler writes it before binding): :func:`encode_plan`, :func:`decode_plan`,
:func:`decode_mig_plan`. Invariants: container order is kept (B04); ``coreMilli`` is authoritative and
``corePercent`` equals ``ceil(coreMilli / 10)``; a plan names its pod's UID and writer; version 1 plans are refused;
a decoded GPU UUID must be in the node's current inventory (``docs/annotations.md``, ``docs/failure-cases.md``).
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations.fields import (
    _bool,
    _dump,
    _get,
    _int,
    _list,
    _load,
    _object,
    _plan_version,
    _str,
)
from domain.kube.annotations.records import (
    PLAN_VERSION,
    PLAN_WRITER,
)
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT


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


def _plain_header(data: Mapping[str, object], *, pod_uid: str, node: str) -> bool:
    """True when :func:`_plan_header`'s checks all pass on ``data`` (one lean look; False may still pass them)."""
    version, writer, owner, named = data.get("version"), data.get("writer"), data.get("podUID"), data.get("node")
    return bool(type(version) is int and version == PLAN_VERSION and type(owner) is str and owner and owner == pod_uid
                and type(named) is str and named and named == node and type(writer) is str and writer)


def _plan_header(text: object, *, key: str, pod_uid: str, node: str) -> dict[str, object]:
    """The plan's JSON after the version, ``podUID``, ``writer`` and ``node`` checks of :func:`decode_plan`."""
    data = _load(key, text)
    if _plain_header(data, pod_uid=pod_uid, node=node):
        return data  # every check below passes: skip them (the usual plan)
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


def _plain_grant(entry: object, by_uuid: Mapping[str, Gpu], *, whole: bool) -> GpuGrant | None:
    """:func:`_grant` of a well-formed entry, or None wherever :func:`_grant` might refuse it."""
    if type(entry) is not dict:
        return None
    index, uuid, core = entry.get("index"), entry.get("uuid"), entry.get("coreMilli")
    percent, memory = entry.get("corePercent"), entry.get("memoryBytes")
    if type(index) is not int or type(core) is not int or type(percent) is not int or type(memory) is not int:
        return None
    gpu = by_uuid.get(uuid) if type(uuid) is str and uuid else None
    if gpu is None or not 1 <= core <= MILLI_PER_GPU or percent != core_percent(core) or memory < 1:
        return None
    if whole:
        if core != MILLI_PER_GPU:
            return None
        memory = gpu.memory_bytes
    return GpuGrant(gpu.index, core, memory)


def _plain_containers(containers: object, by_uuid: Mapping[str, Gpu]) -> tuple[ContainerGrant, ...] | None:
    """The container grants :func:`decode_plan` reads from a plan whose every container is well formed and lists
    GPU grants only (the usual plan), in one lean pass; None for anything else (MIG entries, a wrong type, a value
    out of range, duplicates), which the full decoder then reads or refuses with its error. Equal by construction:
    this accepts a subset of what the full decoder accepts and builds the same records from it."""
    if type(containers) is not dict:
        return None
    out: list[ContainerGrant] = []
    for name, body in containers.items():
        if type(body) is not dict or body.get("mig"):
            return None
        init, whole, gpus = body.get("init"), body.get("whole"), body.get("gpus")
        if type(init) is not bool or type(whole) is not bool or type(gpus) is not list or not gpus:
            return None
        grants: list[GpuGrant] = []
        for entry in gpus:
            grant = _plain_grant(entry, by_uuid, whole=whole)
            if grant is None:
                return None
            grants.append(grant)
        if len({g.gpu_index for g in grants}) != len(grants):
            return None
        out.append(ContainerGrant(name, tuple(grants), init=init, whole=whole))
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
    fast = _plain_containers(data.get("containers"), by_uuid)
    if fast is not None:
        return PodAllocation(pod_uid, node, fast, cpu_milli=cpu_milli, memory_bytes=memory_bytes)
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
