"""Kubelet device IDs for the three extended resources, and the device lists ListAndWatch advertises.

A device ID is a token ``<gpu uuid>::<kind>::<n>`` (``kind`` = ``gpu``, ``core`` or ``memory``; ``n`` counts from
0 per GPU). Embedding the UUID lets pod-resources attribution name the physical GPU, but IDs never decide
placement: the scheduler's plan does (failure case B17). Counts per GPU: ``gpu`` 1; ``core`` 100 (one ID per
percent of compute); ``memory`` ``memory_bytes // memory_unit_bytes`` (floored, so the node never advertises
memory it lacks), or 100 in percent mode (one ID per percent of the GPU's memory).

Health: every ID of a GPU carries that GPU's health (``Healthy``/``Unhealthy``, the v1beta1 constants), so an
unhealthy GPU drops all of its IDs from kubelet's allocatable at once (B14).

MIG resources (:class:`MigResource`, one per ``<prefix>/mig-<profile>`` name of the shared table
:mod:`domain.kube.migresources`): IDs ``<gpu uuid>::mig-<profile>::<n>`` with the profile spelled as in the resource
name (``+me`` → ``.me``). Static strategy: one ID per usable listed instance, ``n`` = its NVML GPU instance id.
Dynamic strategy: per GPU in MIG mode and per profile of its model's table, ``max_instances`` IDs ``n`` = 0..k-1,
so kubelet's count never blocks a pod; the scheduler's MIG books are the real constraint (a GPU never holds more
than ``max_instances`` of a profile, and the books refuse placements that do not fit). The three time-sharing kinds
advertise no IDs on GPUs in MIG mode (MIG GPUs take no time-sharing pods).

Source: k8s.io/kubelet ``pkg/apis/deviceplugin/v1beta1``: ``api.proto`` (``Device``: ID ≤ 63 characters, health
string) and ``constants.go``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.migresources import RESOURCE_STEM
from domain.mig.profiles import normalise_profile_name
from domain.units import PERCENT_PER_GPU

ID_SEPARATOR = "::"
MAX_DEVICE_ID_LENGTH = 63
"""The device plugin API documents device IDs of at most 63 characters."""


class ResourceKind(enum.Enum):
    """Which of our extended resources a plugin server serves; the value is the ``<kind>`` part of its IDs."""

    GPU = "gpu"
    CORE = "core"
    MEMORY = "memory"


@attrs.frozen
class MigResource:
    """A MIG resource a plugin server serves: instances of ``profile`` (canonical name, e.g. ``1g.10gb+me``).
    ``value`` is the ``<kind>`` part of its IDs and socket name: ``mig-<profile>`` with ``+`` written ``.``."""

    profile: str

    @property
    def value(self) -> str:
        """``mig-<profile as in the resource name>``."""
        return RESOURCE_STEM + self.profile.replace("+", ".")


ResourceKey = ResourceKind | MigResource
"""What one plugin server serves: one of the three time-sharing kinds or one MIG profile."""


@attrs.frozen
class PluginDevice:
    """One advertised device: ``id`` (``<uuid>::<kind>::<n>``), ``health`` and ``numa_node`` (its GPU's NUMA node,
    kubelet's topology hint for the Topology Manager; None when unknown)."""

    id: str
    health: Health
    numa_node: int | None = None


@attrs.frozen
class DeviceId:
    """A decoded device ID: the GPU ``uuid``, the resource ``kind`` and the replica number ``n`` (≥ 0; for a
    static MIG ID the NVML GPU instance id)."""

    uuid: GpuUuid
    kind: ResourceKey
    n: int

    def __str__(self) -> str:
        return f"{self.uuid}{ID_SEPARATOR}{self.kind.value}{ID_SEPARATOR}{self.n}"


def parse_device_id(text: str) -> DeviceId:
    """Decode ``<uuid>::<kind>::<n>`` (``kind``: ``gpu``, ``core``, ``memory`` or ``mig-<profile>``). Raises
    :class:`InvalidRequestError` (field ``device_id``) when malformed."""
    parts = text.rsplit(ID_SEPARATOR, 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        raise InvalidRequestError("device_id", text, "must look like <gpu uuid>::<kind>::<n>")
    kind: ResourceKey
    if parts[1].startswith(RESOURCE_STEM) and len(parts[1]) > len(RESOURCE_STEM):
        kind = MigResource(normalise_profile_name(parts[1]))
    else:
        try:
            kind = ResourceKind(parts[1])
        except ValueError:
            raise InvalidRequestError("device_id", text, "kind must be gpu, core, memory or mig-<profile>") from None
    return DeviceId(GpuUuid(parts[0]), kind, int(parts[2]))


def units_per_gpu(kind: ResourceKind, gpu: Gpu, *, memory_unit_bytes: int | None) -> int:
    """How many IDs of ``kind`` one GPU advertises (module docstring); ``memory_unit_bytes`` None = percent mode.
    Raises :class:`InvalidRequestError` for a memory unit ≤ 0."""
    if kind is ResourceKind.GPU:
        return 1
    if kind is ResourceKind.CORE or memory_unit_bytes is None:
        return PERCENT_PER_GPU
    if memory_unit_bytes <= 0:
        raise InvalidRequestError("memory_unit", memory_unit_bytes, "must be > 0 bytes")
    return gpu.memory_bytes // memory_unit_bytes


def device_list(kind: ResourceKind, gpus: Iterable[Gpu], *, memory_unit_bytes: int | None,
                numa: Mapping[int, int] | None = None) -> tuple[PluginDevice, ...]:
    """The complete list ListAndWatch sends for ``kind`` over ``gpus`` (index order; GPUs in MIG mode are left
    out, see module docstring), each ID with its GPU's health and NUMA node (``numa``: GPU index → NUMA node, GPUs
    absent when unknown). Raises :class:`InvalidRequestError` when an ID
    would exceed 63 characters (an absurd UUID)."""
    devices: list[PluginDevice] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        if gpu.mig_mode is MigMode.ENABLED:
            continue
        for n in range(units_per_gpu(kind, gpu, memory_unit_bytes=memory_unit_bytes)):
            devices.append(PluginDevice(_checked(DeviceId(gpu.uuid, kind, n)), gpu.health, (numa or {}).get(gpu.index)))
    return tuple(devices)


def _checked(device: DeviceId) -> str:
    ident = str(device)
    if len(ident) > MAX_DEVICE_ID_LENGTH:
        raise InvalidRequestError("device_id", ident, f"longer than {MAX_DEVICE_ID_LENGTH} characters")
    return ident


@attrs.frozen
class MigSlot:
    """One MIG device ID's source: the parent GPU (``gpu``, whose health the ID carries) and ``n`` (static: the
    instance's NVML GPU instance id; dynamic: 0..max_instances-1)."""

    gpu: Gpu
    n: int


def mig_device_list(resource: MigResource, slots: Iterable[MigSlot]) -> tuple[PluginDevice, ...]:
    """The complete list ListAndWatch sends for a MIG ``resource`` (module docstring): one ID per slot, ordered by
    GPU index then ``n``. Raises :class:`InvalidRequestError` when an ID would exceed 63 characters."""
    ordered = sorted(slots, key=lambda s: (s.gpu.index, s.n))
    return tuple(PluginDevice(_checked(DeviceId(s.gpu.uuid, resource, s.n)), s.gpu.health) for s in ordered)


def preferred_ids(
    available: Sequence[str], must_include: Sequence[str], size: int, planned: Sequence[GpuUuid],
    *, exact: Sequence[str] = (),
) -> tuple[str, ...]:
    """GetPreferredAllocation's answer: ``must_include`` first, then the ``exact`` IDs kubelet offers (the planned
    MIG instances' own IDs, static strategy), then available IDs of the ``planned`` GPUs (in plan order, at most one
    per GPU while several GPUs are planned, as for whole GPUs), then any other available IDs, ``size`` in all
    (fewer when kubelet offered fewer). Malformed IDs are skipped as preferences, never raised."""
    chosen = list(dict.fromkeys(must_include))
    offered_set = set(available)
    for ident in dict.fromkeys(exact):
        if len(chosen) < size and ident in offered_set and ident not in chosen:
            chosen.append(ident)
    offered = [a for a in dict.fromkeys(available) if a not in chosen]
    by_uuid: dict[str, list[str]] = {}
    for ident in offered:
        try:
            by_uuid.setdefault(parse_device_id(ident).uuid, []).append(ident)
        except InvalidRequestError:
            continue
    plan = list(dict.fromkeys(planned))
    while len(chosen) < size and any(by_uuid.get(u) for u in plan):
        for uuid in plan:
            ids = by_uuid.get(uuid)
            if ids and len(chosen) < size:
                chosen.append(ids.pop(0))
    for ident in offered:
        if len(chosen) >= size:
            break
        if ident not in chosen:
            chosen.append(ident)
    return tuple(chosen[:max(size, len(must_include))])
