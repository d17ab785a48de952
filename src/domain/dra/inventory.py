"""A node's GPUs as our driver's ResourceSlices publish them: the scheduler's inventory of a node that runs the DRA
driver and no device plugin (:func:`slice_inventory`).

The slices are read the way ``domain.dra.build`` writes them and kube-scheduler reads a pool: only the slices of
the pool's newest generation count, and the pool is complete when that generation has ``resourceSliceCount``
slices (kube-scheduler allocates nothing from an incomplete pool: it is being rewritten).

* A whole GPU is a device with attribute ``type`` = ``gpu``: ``index``, ``uuid``, ``productName`` and
  ``memoryBytes`` make the :class:`~domain.gpu.Gpu`.
* A MIG GPU is the parent (``parentIndex``, ``parentUUID``, ``productName``) of devices with ``type`` = ``mig``;
  it is booked as a GPU in MIG mode, whose memory is ``parentMemoryBytes`` (it picks the GPU's profile table where
  the product name does not tell 40 from 80 GB), or, from a driver that does not publish it, the largest nominal
  ``memory`` capacity of its published instances (the time-sharing books never place on a MIG GPU). Its MIG
  layout (:attr:`SliceInventory.mig`, what the MIG books are built from, :mod:`domain.scheduling.mig.books`)
  follows the devices: devices carrying a ``uuid`` are the instances a static-MIG Runtime lists (strategy
  ``static``: each one a free instance at ``migStart`` of its ``profile``); devices without one are the
  placements a dynamic-MIG Runtime creates on demand (strategy ``dynamic``, no instance listed). A node
  publishing both kinds is malformed. The slices carry no NVML instance ids: a listed instance's
  ``gpu_instance_id`` and ``compute_instance_id`` read :data:`UNPUBLISHED_ID` (they name instances only in classic
  pods' plans, which such a node never takes).
* A device with a ``NoSchedule`` or ``NoExecute`` taint makes its GPU unhealthy (its running pods stay counted,
  nothing new goes there).
* A GPU the slices do not publish (withdrawn as unhealthy with ``--unhealthy withdraw``, a MIG GPU without
  placeable instances or profile table) keeps its index, unhealthy: taken from ``known`` (the node's GPUs as last
  read) up to the highest index published or known, else, below the highest published index, as a placeholder
  (UUID ``unpublished-<node>-gpu-<index>``, model ``unpublished``, 1 byte) that nothing is placed on. So the other
  GPUs keep their indexes, and a GPU physically removed stays counted, unhealthy, until the scheduler restarts.

Pure: the caller lists the slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.annotations import MigInstanceRecord, MigLayout

from .slices import AttributeValue, Device, ResourceSlice, TaintEffect

_BLOCKING = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
UNPUBLISHED_ID = -1
"""NVML instance id of a MIG instance read from slices, which do not publish it (module docstring)."""


@attrs.frozen
class SliceInventory:
    """The GPUs a node's slices publish (module docstring): ``gpus`` (indexes 0..n-1) and ``problem`` (empty when
    the GPUs are complete and usable; otherwise why the node takes no new GPU pods, with ``gpus`` empty);
    ``mig`` and ``mig_strategy``: the MIG layout and strategy the MIG devices show (module docstring; empty and ""
    without MIG devices)."""

    gpus: tuple[Gpu, ...] = ()
    problem: str = ""
    mig: MigLayout = attrs.field(factory=dict)
    mig_strategy: str = ""


def _int(device: Device, name: str) -> int:
    value: AttributeValue | None = device.attributes.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"device[{device.name}].attributes.{name}", value, "must be an int attribute")
    return value


def _str(device: Device, name: str) -> str:
    value: AttributeValue | None = device.attributes.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"device[{device.name}].attributes.{name}", value, "must be a non-empty string")
    return value


def _health(device: Device) -> Health:
    return Health.UNHEALTHY if any(t.effect in _BLOCKING for t in device.taints) else Health.HEALTHY


def _newest_pool(slices: Sequence[ResourceSlice]) -> tuple[list[ResourceSlice], str]:
    """The slices of the newest generation, and why the pool is incomplete ("" when complete)."""
    newest = max(s.generation for s in slices)
    current = [s for s in slices if s.generation == newest]
    expected = max(s.slice_count for s in current)
    if len(current) < expected:
        return current, f"pool generation {newest} has {len(current)} of its {expected} slices (being rewritten)"
    return current, ""


def _gpus(devices: Iterable[Device]) -> dict[int, Gpu]:
    whole: dict[int, Gpu] = {}
    mig: dict[int, tuple[str, str, int, Health]] = {}  # parent index → uuid, model, memory, health
    for device in devices:
        kind = device.attributes.get("type")
        if kind == "gpu":
            index = _int(device, "index")
            whole[index] = Gpu(index, GpuUuid(_str(device, "uuid")), _str(device, "productName"),
                               _int(device, "memoryBytes"), health=_health(device))
        elif kind == "mig":
            index = _int(device, "parentIndex")
            capacity = device.capacity.get("memory")
            memory = (_int(device, "parentMemoryBytes") if "parentMemoryBytes" in device.attributes
                      else 0 if capacity is None else capacity.value)
            uuid, model, largest, health = mig.get(index, (_str(device, "parentUUID"), _str(device, "productName"), 0,
                                                           Health.HEALTHY))
            worse = Health.UNHEALTHY if _health(device) is Health.UNHEALTHY else health
            mig[index] = (uuid, model, max(largest, memory), worse)
    for index, (uuid, model, memory, health) in mig.items():
        if index in whole:
            raise InvalidRequestError(f"gpu[{index}]", "whole and MIG devices", "a GPU is published one way")
        whole[index] = Gpu(index, GpuUuid(uuid), model, memory, health=health, mig_mode=MigMode.ENABLED)
    return whole


def _layout(devices: Iterable[Device]) -> tuple[MigLayout, str]:
    """The MIG layout and strategy of the MIG devices among ``devices`` (module docstring)."""
    listed: dict[int, list[MigInstanceRecord]] = {}
    kinds: dict[bool, str] = {}  # with a uuid or not → the first such device's name
    for device in devices:
        if device.attributes.get("type") != "mig":
            continue
        uuid = device.attributes.get("uuid")
        kinds.setdefault(uuid is not None, device.name)
        if uuid is None:
            continue
        if not isinstance(uuid, str) or not uuid:
            raise InvalidRequestError(f"device[{device.name}].attributes.uuid", uuid, "must be a non-empty string")
        listed.setdefault(_int(device, "parentIndex"), []).append(MigInstanceRecord(
            UNPUBLISHED_ID, UNPUBLISHED_ID, _str(device, "profile"), _int(device, "migStart"), uuid, free=True))
    if len(kinds) > 1:
        raise InvalidRequestError(f"device[{kinds[False]}].attributes.uuid", None,
                                  f"missing while device {kinds[True]} has one: a node's MIG devices are all listed "
                                  "instances (static, with a uuid) or all placements (dynamic, without)")
    if not kinds:
        return {}, ""
    layout = {index: tuple(sorted(items, key=lambda i: i.start)) for index, items in sorted(listed.items())}
    return layout, "static" if True in kinds else "dynamic"


def slice_inventory(slices: Iterable[ResourceSlice], *, driver: str, node: str,
                    known: Sequence[Gpu] = ()) -> SliceInventory | None:
    """The GPUs ``driver``'s slices publish for ``node`` (module docstring); None when no slice of ``driver``
    names ``node``. ``known``: the node's GPUs as last read, which fill the indexes of withdrawn GPUs. Never
    raises for bad slice content: it becomes the :attr:`SliceInventory.problem`, naming the device and field."""
    ours = [s for s in slices if s.driver == driver and s.node == node]
    if not ours:
        return None
    current, incomplete = _newest_pool(ours)
    if incomplete:
        return SliceInventory(problem=f"ResourceSlices of {driver}: {incomplete}")
    try:
        devices = [d for s in current for d in s.content.devices]
        found = _gpus(devices)
        layout, strategy = _layout(devices)
        remembered = {g.index: g for g in known}
        top = max([*found, *remembered], default=-1)
        for index in (i for i in range(top + 1) if i not in found):
            found[index] = (attrs.evolve(remembered[index], health=Health.UNHEALTHY) if index in remembered else
                            Gpu(index, GpuUuid(f"unpublished-{node}-gpu-{index}"), "unpublished", 1,
                                health=Health.UNHEALTHY))
        gpus = tuple(found[i] for i in range(top + 1))
        uuids = [g.uuid for g in gpus]
        if len(set(uuids)) != len(uuids):
            raise InvalidRequestError("gpu.uuid", uuids, "must be unique")
    except InvalidRequestError as error:
        return SliceInventory(problem=f"malformed ResourceSlices of {driver}: {error}")
    return SliceInventory(gpus, mig=layout, mig_strategy=strategy)
