"""The node's GPUs as the content of its ResourceSlices (one pool per node): a pure function of the Runtime's
device listing.

* **Whole GPUs** (MIG off): one device ``gpu-<index>`` each, attributes ``type`` = ``gpu``, ``uuid``,
  ``productName``, ``index`` (int), ``memoryBytes`` (int), and ``numaNode`` (int) and the standard
  ``resource.kubernetes.io/pcieRoot`` (string) when known (the Runtime's ``DeviceInfo.topology``, Runtime ≥ 1.2.0,
  or the publisher's :class:`GpuTopology` override, which wins), and ``nvlinkIsland`` (int: the GPU's NVLink island,
  numbered by lowest GPU index, :meth:`domain.topology.NodeTopology.islands`; a GPU without NVLink is an island of
  its own) when the Runtime reports a topology, so a claim's ``matchAttribute: gpu.lj-runtimekit.io/nvlinkIsland``
  gets NVLink-connected GPUs; capacity ``cores`` (100, one
  GPU) and ``memory`` (bytes), each with a request policy (cores: 1..100 step 1; memory: steps of the protocol's
  memory unit, or 1 % of the GPU's memory in percent mode, up to the largest multiple not above the GPU's memory; a
  request without an amount takes the maximum, i.e. the whole GPU); ``allowMultipleAllocations: true``, so claims
  of the GPU-share class consume parts of one device (consumable capacity, KEP-5075).
* **MIG GPUs** (partitionable devices, KEP-4815): one counter set ``gpu-<index>`` per GPU, counters
  ``memory-slice-<i>`` and ``compute-slice-<i>`` (1 each) for the model's slices and, for a profile allowing fewer
  instances than it has placements, ``instances-<profile>``; one device ``gpu-<index>-mig-<profile>-<start>`` per
  placeable (profile, placement start) consuming exactly the slices an instance there takes, so the scheduler's
  counter arithmetic is the geometry check of :mod:`domain.mig.gpu`. Placeable: every placement of the model's
  table with a dynamic MIG Runtime; with a static one, the usable instances the Runtime lists. Attributes ``type``
  = ``mig``, ``profile``, ``parentUUID``, ``parentIndex``, ``parentMemoryBytes`` (the GPU's memory, which picks
  its profile table where the product name does not), ``productName``, ``migStart``, ``uuid`` (static only);
  capacity ``memory`` (the profile's nominal bytes). A MIG GPU of a model without a profile table gets no devices.
* **Health**: an unhealthy GPU's devices carry the taint ``<driver>/unhealthy`` (NoSchedule) with
  :attr:`UnhealthyPolicy.TAINT` (DRADeviceTaints, beta 1.36, GA 1.37), or are left out with
  :attr:`UnhealthyPolicy.WITHDRAW` (servers with the gate off drop taints silently).
* **Splitting**: device slices hold at most 128 devices, 64 once any device is tainted or consumes counters;
  counter slices hold at most 8 counter sets (:mod:`.slices`). Order: whole-GPU slices, then MIG device slices,
  then counter slices; devices by GPU index.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TypeVar

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import GpuUuid, Health, MigMode
from domain.kube.protocol import ProtocolConstants, dns_profile
from domain.mig.profiles import MigGpuModel, MigProfile
from domain.runtime.mig import mig_table
from domain.runtime.types import DeviceInfo
from domain.topology import node_topology

from .slices import (
    MAX_COUNTER_SETS,
    MAX_DEVICES,
    MAX_DEVICES_TAINTED,
    AttributeValue,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    RequestPolicy,
    SliceContent,
)

CORES = 100
"""Capacity ``cores`` of one GPU: percent of its compute, as the ``gpu-core.percentage`` resource counts."""
T = TypeVar("T")
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
"""The standard attribute for PCIe alignment (``matchAttribute`` across drivers)."""
NVLINK_ISLAND = "nvlinkIsland"
"""The attribute naming a whole GPU's NVLink island (module docstring)."""


class UnhealthyPolicy(enum.Enum):
    """What happens to an unhealthy GPU's devices (module docstring)."""

    TAINT = "taint"
    WITHDRAW = "withdraw"


@attrs.frozen
class GpuTopology:
    """Where a GPU sits, when known: ``numa_node`` (≥ 0) and ``pcie_root`` (e.g. ``pci0000:00``); the publisher's
    override of what the Runtime reports."""

    numa_node: int | None = None
    pcie_root: str | None = None


def unhealthy_taint_key(protocol: ProtocolConstants) -> str:
    """The taint key of unhealthy devices: ``<driver>/unhealthy``."""
    return f"{protocol.dra.driver}/unhealthy"


def desired_content(
    devices: Sequence[DeviceInfo], *, protocol: ProtocolConstants, mig_dynamic: bool = False,
    topology: Mapping[GpuUuid, GpuTopology] | None = None, unhealthy: UnhealthyPolicy = UnhealthyPolicy.TAINT,
) -> tuple[SliceContent, ...]:
    """The slices' content for the Runtime's listing ``devices`` (module docstring); ``mig_dynamic``: the Runtime
    creates MIG instances (else only its listed instances are placeable). Deterministic: the same input gives an
    equal result. Raises :class:`~domain.errors.InvalidRequestError` only for input the domain types already
    refuse (a slice limit cannot be exceeded: the content is split)."""
    topology = topology or {}
    try:
        node = node_topology((d.gpu.index, d.topology) for d in devices)
    except InvalidRequestError:  # peers naming a GPU the listing lacks: no islands rather than wrong ones
        node = None
    islands = {} if node is None else node.island_of()
    whole: list[Device] = []
    mig: list[Device] = []
    counters: list[CounterSet] = []
    taint = DeviceTaint(unhealthy_taint_key(protocol))
    for info in sorted(devices, key=lambda d: d.gpu.index):
        gpu = info.gpu
        sick = gpu.health is not Health.HEALTHY
        if sick and unhealthy is UnhealthyPolicy.WITHDRAW:
            continue
        taints = (taint,) if sick else ()
        if gpu.mig_mode is MigMode.ENABLED:
            table = mig_table(gpu)
            if table is None:
                continue
            counter_set = _counter_set(gpu.index, table)
            placeable = _placeable(info, table, dynamic=mig_dynamic)
            if placeable:
                counters.append(counter_set)
                mig.extend(_mig_device(info, table, profile, start, uuid, counter_set.name, taints)
                           for profile, start, uuid in placeable)
            continue
        whole.append(_gpu_device(info, protocol, topology.get(gpu.uuid) or _reported(info), islands.get(gpu.index),
                                 taints))
    out = [SliceContent(devices=chunk) for chunk in _chunks(whole, _limit(whole))]
    out += [SliceContent(devices=chunk) for chunk in _chunks(mig, MAX_DEVICES_TAINTED)]
    out += [SliceContent(shared_counters=chunk) for chunk in _chunks(counters, MAX_COUNTER_SETS)]
    return tuple(out)


def _limit(devices: Sequence[Device]) -> int:
    return MAX_DEVICES_TAINTED if any(d.limited for d in devices) else MAX_DEVICES


def _chunks(items: Sequence[T], size: int) -> list[tuple[T, ...]]:
    return [tuple(items[i:i + size]) for i in range(0, len(items), size)]


def memory_step(memory_bytes: int, protocol: ProtocolConstants) -> int:
    """Bytes per step of a GPU's ``memory`` capacity: the protocol's memory unit, or in percent mode 1 % of
    ``memory_bytes`` (at least 1 byte)."""
    unit = protocol.memory_unit_bytes
    return max(1, memory_bytes // 100) if unit is None else unit


def _reported(info: DeviceInfo) -> GpuTopology:
    reported = info.topology
    if reported is None:
        return GpuTopology()
    return GpuTopology(reported.numa_node, reported.pcie_root or None)


def _gpu_device(info: DeviceInfo, protocol: ProtocolConstants, where: GpuTopology, island: int | None,
                taints: tuple[DeviceTaint, ...]) -> Device:
    gpu = info.gpu
    attributes: dict[str, AttributeValue] = {
        "type": "gpu", "uuid": gpu.uuid, "productName": gpu.model[:64], "index": gpu.index,
        "memoryBytes": gpu.memory_bytes,
    }
    if where.numa_node is not None:
        attributes["numaNode"] = where.numa_node
    if where.pcie_root is not None:
        attributes[PCIE_ROOT] = where.pcie_root
    if island is not None:
        attributes[NVLINK_ISLAND] = island
    step = memory_step(gpu.memory_bytes, protocol)
    top = gpu.memory_bytes // step * step
    memory = Capacity(gpu.memory_bytes, RequestPolicy(default=top, minimum=step, maximum=top, step=step)
                      if top >= 2 * step else None)  # the API wants min + step <= value
    cores = Capacity(CORES, RequestPolicy(default=CORES, minimum=1, maximum=CORES, step=1))
    return Device(name=f"gpu-{gpu.index}", attributes=attributes, capacity={"cores": cores, "memory": memory},
                  allow_multiple_allocations=True, taints=taints)


def _counter_set(index: int, table: MigGpuModel) -> CounterSet:
    counters = {f"memory-slice-{i}": 1 for i in range(table.memory_slots)}
    counters.update({f"compute-slice-{i}": 1 for i in range(table.compute_slots)})
    counters.update({_instances(p): p.max_instances for p in table.profiles if p.max_instances < len(p.placements)})
    return CounterSet(name=f"gpu-{index}", counters=counters)


def _instances(profile: MigProfile) -> str:
    return f"instances-{dns_profile(profile.name)}"


def _placeable(info: DeviceInfo, table: MigGpuModel, *, dynamic: bool) -> list[tuple[MigProfile, int, str]]:
    """``(profile, start, MIG uuid or "")`` of each placeable instance (module docstring)."""
    if dynamic:
        return [(p, start, "") for p in table.profiles for start in p.placements]
    out: list[tuple[MigProfile, int, str]] = []
    for instance in sorted(info.mig_instances, key=lambda i: (i.start, i.profile)):
        profile = table.lookup(instance.profile)
        if instance.usable and profile is not None:
            out.append((profile, instance.start, instance.uuid))
    return out


def _mig_device(info: DeviceInfo, table: MigGpuModel, profile: MigProfile, start: int, uuid: str,
                counter_set: str, taints: tuple[DeviceTaint, ...]) -> Device:
    gpu = info.gpu
    used = {f"memory-slice-{i}": 1 for i in range(start, start + profile.memory_slices)}
    used.update({f"compute-slice-{i}": 1 for i in range(start, start + profile.compute_slices)})
    if profile.max_instances < len(profile.placements):
        used[_instances(profile)] = 1
    attributes: dict[str, AttributeValue] = {
        "type": "mig", "profile": profile.name, "parentUUID": gpu.uuid, "parentIndex": gpu.index,
        "parentMemoryBytes": gpu.memory_bytes, "productName": gpu.model[:64], "migStart": start,
    }
    if uuid:
        attributes["uuid"] = uuid
    return Device(name=f"gpu-{gpu.index}-mig-{dns_profile(profile.name)}-{start}", attributes=attributes,
                  capacity={"memory": Capacity(profile.memory_bytes)},
                  consumes_counters=(CounterConsumption(counter_set, used),), taints=taints)
