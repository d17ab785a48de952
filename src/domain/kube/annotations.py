"""Versioned JSON codecs for the two annotations the components exchange through the API server.

* **Node GPU inventory** (key ``protocol.annotations.node_inventory``), published by the device plugin::

      {"version": 1, "heartbeat": <epoch s, float>, "protocol": "<fingerprint>",
       "gpus": [{"index": 0, "uuid": "GPU-…", "model": "A100", "memoryBytes": 17179869184,
                 "health": "Healthy", "migMode": "disabled"}]}

* **Pod GPU plan** (key ``protocol.annotations.pod_plan``), written by the scheduler before it binds::

      {"version": 2, "podUID": "<uid of the pod>", "writer": "lj-runtimekit-scheduler", "node": "n1",
       "containers": {"main": {"init": false, "whole": false,
                               "gpus": [{"index": 0, "uuid": "GPU-…", "corePercent": 60, "coreMilli": 600,
                                         "memoryBytes": 8589934592}]}}}

  ``podUID`` ties the plan to one pod object: a pod deleted and re-created under the same name (new UID) never
  inherits the old pod's plan. ``writer`` names the scheduler that wrote it, so a scheduler recognises its own
  leftover plan on a pod it is binding again (:func:`plan_owner`). Version 1 plans (no ``podUID``) are refused:
  they cannot be tied to a pod object, so they are never trusted (the pod is counted by inference instead).
  ``coreMilli`` is authoritative; ``corePercent`` is ``ceil(coreMilli / 10)``, for people and tools that read
  percent, and must agree. Container order is preserved (JSON objects keep insertion order), so a decoded plan
  equals the :class:`PodAllocation` it was encoded from (failure case B04 relies on that equality).

Trust (failure case B07, peers.md L1): a pod's annotations can be written by anyone who can edit the pod, and a
plan can be left over from an aborted attempt. The plan is therefore only trusted when the pod is bound
(``spec.nodeName`` set, which only a scheduler can do) or while this scheduler is reserving it; and even then
:mod:`domain.kube.translate` checks it against the pod's own resource requests and the node's inventory. The
GPU's UUID is authoritative: on decode it must name a GPU of the node's current inventory, whose index wins.

Errors: unknown versions, malformed JSON, missing fields and wrong types raise :class:`InvalidRequestError`
whose field is ``<annotation key>.<json path>`` (for example ``lj-runtimekit.io/gpu-plan.containers.main.gpus[0]
.uuid``). Encoders raise it for an allocation naming a GPU index the node lacks.
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
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT

INVENTORY_VERSION = 1
"""Schema version of the node inventory annotation."""

PLAN_VERSION = 2
"""Schema version of the pod plan annotation (2 added ``podUID`` and ``writer``; 1 is refused)."""

PLAN_WRITER = "lj-runtimekit-scheduler"
"""Default ``writer`` of :func:`encode_plan` (the scheduler's name in the default protocol)."""

MAX_ANNOTATION_BYTES = 256 * 1024
"""Kubernetes caps all annotations of an object at 256 KiB together; anything longer is not ours."""


@attrs.frozen
class InventoryRecord:
    """A decoded inventory annotation: ``gpus`` (dense indexes 0..n-1, in index order), ``heartbeat`` (epoch
    seconds when the device plugin last wrote it), ``protocol`` (the writer's protocol fingerprint)."""

    gpus: tuple[Gpu, ...]
    heartbeat: float
    protocol: str


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


def _version(key: str, data: Mapping[str, object], supported: int) -> None:
    version = _int(key, data, "version")
    if version != supported:
        raise InvalidRequestError(f"{key}.version", version, f"unsupported version; this build reads {supported}")


def _plan_version(key: str, data: Mapping[str, object]) -> None:
    version = _int(key, data, "version")
    if version == 1:
        raise InvalidRequestError(f"{key}.version", version, "version 1 plans carry no podUID and are not trusted; "
                                  f"this build reads {PLAN_VERSION}")
    _version(key, data, PLAN_VERSION)


def _dump(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)


# ---------------------------------------------------------------------------------------------- inventory
def encode_inventory(gpus: Sequence[Gpu], *, heartbeat: float, protocol: str) -> str:
    """Render the node inventory annotation (module docstring) for ``gpus`` at ``heartbeat`` (epoch seconds),
    stamped with the writer's protocol fingerprint. Raises :class:`InvalidRequestError` for a non-finite
    heartbeat."""
    if not math.isfinite(heartbeat):
        raise InvalidRequestError("heartbeat", heartbeat, "must be a finite number of epoch seconds")
    return _dump({
        "version": INVENTORY_VERSION,
        "heartbeat": float(heartbeat),
        "protocol": protocol,
        "gpus": [
            {"index": g.index, "uuid": g.uuid, "model": g.model, "memoryBytes": g.memory_bytes,
             "health": g.health.value, "migMode": g.mig_mode.value}
            for g in sorted(gpus, key=lambda g: g.index)
        ],
    })


_E = TypeVar("_E", Health, MigMode)


def _enum_value(field: str, data: Mapping[str, object], name: str, kind: type[_E]) -> _E:
    text = _str(field, data, name)
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidRequestError(f"{field}.{name}", text, f"must be one of {allowed}") from None


def _gpu(field: str, entry: object) -> Gpu:
    data = _object(field, entry)
    index = _int(field, data, "index")
    uuid = _str(field, data, "uuid")
    model = _str(field, data, "model")
    memory = _int(field, data, "memoryBytes")
    if memory <= 0:
        raise InvalidRequestError(f"{field}.memoryBytes", memory, "a GPU must report memory > 0 (failure case B12f)")
    if index < 0:
        raise InvalidRequestError(f"{field}.index", index, "must not be negative")
    health = _enum_value(field, data, "health", Health)
    mig = _enum_value(field, data, "migMode", MigMode)
    return Gpu(index, GpuUuid(uuid), model, memory, health=health, mig_mode=mig)


def decode_inventory(text: object, *, key: str) -> InventoryRecord:
    """Parse the node inventory annotation stored under ``key``.

    Returns the GPUs sorted by index. Raises :class:`InvalidRequestError` naming ``key`` and the field for an
    unknown version, malformed JSON, a missing field, a wrong type, a GPU with memory ≤ 0, duplicate UUIDs, or
    indexes that are not exactly ``0..n-1``.
    """
    data = _load(key, text)
    _version(key, data, INVENTORY_VERSION)
    heartbeat = _get(key, data, "heartbeat")
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or not math.isfinite(heartbeat):
        raise InvalidRequestError(f"{key}.heartbeat", heartbeat, "must be a finite number of epoch seconds")
    protocol = _str(key, data, "protocol")
    gpus = sorted((_gpu(f"{key}.gpus[{i}]", e) for i, e in enumerate(_list(key, data, "gpus"))), key=lambda g: g.index)
    indexes = [g.index for g in gpus]
    if indexes != list(range(len(gpus))):
        raise InvalidRequestError(f"{key}.gpus.index", indexes, "must be exactly 0..n-1, each once")
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise InvalidRequestError(f"{key}.gpus.uuid", uuids, "must be unique")
    return InventoryRecord(tuple(gpus), float(heartbeat), protocol)


# ---------------------------------------------------------------------------------------------- plan
def core_percent(core_milli: int) -> int:
    """Percent shown next to ``coreMilli`` in the plan: ``ceil(core_milli / 10)`` (1..100)."""
    return -(-core_milli // MILLI_PER_PERCENT)


def encode_plan(allocation: PodAllocation, node_gpus: Sequence[Gpu], *, writer: str = PLAN_WRITER) -> str:
    """Render the pod plan annotation (module docstring) of ``allocation`` on a node with ``node_gpus``, for the
    pod ``allocation.pod_uid``, signed ``writer`` (the scheduler's name).

    Raises :class:`InvalidRequestError` when a grant names a GPU index the node does not have, or when the
    allocation has no pod UID or ``writer`` is empty.
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
    or two grants of one container on the same GPU. See the module docstring for when a plan may be trusted at
    all.
    """
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
    by_uuid: dict[str, Gpu] = {g.uuid: g for g in node_gpus}
    containers: list[ContainerGrant] = []
    for name, entry in _object(f"{key}.containers", _get(key, data, "containers")).items():
        field = f"{key}.containers.{name}"
        body = _object(field, entry)
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
