"""Container Device Interface (CDI) names and the node's CDI spec: what containerd 2 (or CRI-O, or containerd 1.7
with ``enable_cdi``) injects for the names the device plugin returns in ``ContainerAllocateResponse.cdi_devices``.

Names: one CDI device per physical GPU of the node, ``lj-runtimekit.io/gpu=<gpu uuid>`` (:data:`CDI_KIND`,
:func:`qualified_name`). The device is the *planned* GPU, never kubelet's device ID: IDs give only the count
(failure case B17), so a container gets the names of the GPUs of its plan (:func:`container_devices`), a MIG
container those of its instances' parent GPUs. The kind is ours (the ``lj-runtimekit.io`` domain of the protocol's
annotation keys) but not a protocol constant: only the device plugin and the container runtime of the same node
read it, and a new protocol key would change every component's fingerprint.

Spec (CDI spec ``cdiVersion`` :data:`CDI_VERSION`, SPEC.md of tags.cncf.io/container-device-interface): per GPU,
an env edit ``LJRK_CDI_DEVICE_<index>=<uuid>`` (so a test, or a simulated node's workload, sees that injection
happened and which GPUs it got) and, for a GPU the host's NVIDIA driver lists (:class:`HostGpuNodes`), the device
node ``/dev/nvidia<minor>``; spec-wide edits add the control nodes the host has (``/dev/nvidiactl``,
``/dev/nvidia-uvm``, ...), applied once whenever any device of the spec is injected. A simulated GPU (no driver
entry) gets the env edit only. Every device node has permissions ``rw`` and the same path on host and in the
container. 0.6.0 is enough for every field used (``hostPath`` needs 0.5.0) and is read by every CDI-enabled
containerd (1.7 and 2.x).

Pure: the host facts come in as :class:`HostGpuNodes` (``ports.cdi.HostGpuDevices``), the file is written by
``ports.cdi.CdiSpecStore``; nothing here reads or writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid
from domain.runtime.types import ContainerAllocationRequest, Mount

CDI_VERSION = "0.6.0"
"""``cdiVersion`` of the spec written (module docstring)."""

CDI_VENDOR = "lj-runtimekit.io"
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
"""The spec's ``kind`` and the prefix of every name we return."""

ENV_PREFIX = "LJRK_CDI_DEVICE_"
"""Env edit of each device: ``LJRK_CDI_DEVICE_<gpu index>=<gpu uuid>``."""

_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
"""CDI device name rule (container-device-interface ``parser.ValidateDeviceName``)."""


def qualified_name(uuid: GpuUuid) -> str:
    """``lj-runtimekit.io/gpu=<uuid>``. Raises :class:`InvalidRequestError` when ``uuid`` is no valid CDI device
    name (letters, digits, ``_.:-``, alphanumeric at both ends)."""
    if not _DEVICE_NAME.match(uuid):
        raise InvalidRequestError("cdi.device", uuid, "not a valid CDI device name (letters, digits, _ . : -)")
    return f"{CDI_KIND}={uuid}"


def container_devices(request: ContainerAllocationRequest) -> tuple[str, ...]:
    """The qualified names of one container's planned GPUs (a MIG container: its instances' parent GPUs), in the
    plan's order, each once. Raises :class:`InvalidRequestError` as :func:`qualified_name`."""
    uuids = [g.uuid for g in request.gpus] + [m.uuid for m in request.mig]
    return tuple(qualified_name(uuid) for uuid in dict.fromkeys(uuids))


def _minors(value: Mapping[GpuUuid, int]) -> dict[GpuUuid, int]:
    return dict(value)


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class HostGpuNodes:
    """What the host's NVIDIA driver offers: ``minors`` (GPU UUID -> device minor, ``/dev/nvidia<minor>``; empty on a
    node without the driver, e.g. simulated GPUs) and ``control_nodes`` (names under ``/dev`` that exist, e.g.
    ``nvidiactl``, ``nvidia-uvm``)."""

    minors: Mapping[GpuUuid, int] = attrs.field(factory=dict, converter=_minors)
    control_nodes: tuple[str, ...] = attrs.field(default=(), converter=_names)


@attrs.frozen
class CdiDeviceNode:
    """A device node edit: ``path`` (host and container), ``permissions`` (subset of ``rwm``)."""

    path: str
    permissions: str = "rw"


@attrs.frozen
class CdiDevice:
    """One spec device: its ``name`` (unqualified), ``env`` (``(key, value)`` pairs in order) and
    ``device_nodes``."""

    name: str
    env: tuple[tuple[str, str], ...] = ()
    device_nodes: tuple[CdiDeviceNode, ...] = ()


@attrs.frozen
class CdiSpec:
    """A CDI spec: ``kind``, ``devices`` (by GPU index), spec-wide ``device_nodes``, ``version`` (``cdiVersion``),
    spec-wide ``env`` (``(key, value)`` pairs) and spec-wide ``mounts`` (bind mounts, host path → container path,
    read-only or not), both applied once whenever any device of the spec is injected: the DRA plugin's per-claim
    limits and enforcement mounts (HAMi-core's library and preload list, or the MPS pipe directory), none in the
    device plugin's spec (it hands mounts to kubelet in its Allocate answer)."""

    kind: str
    devices: tuple[CdiDevice, ...]
    device_nodes: tuple[CdiDeviceNode, ...] = ()
    version: str = CDI_VERSION
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()

    def qualified_names(self) -> tuple[str, ...]:
        """``kind=name`` of every device."""
        return tuple(f"{self.kind}={d.name}" for d in self.devices)


def build_spec(gpus: Iterable[Gpu], host: HostGpuNodes) -> CdiSpec:
    """The node's spec (module docstring) for ``gpus`` whatever their health (kubelet keeps unhealthy GPUs' pods
    running; only new allocations avoid them). Control nodes are added only when the driver lists one of ``gpus``.
    Raises :class:`InvalidRequestError` for a UUID that is no valid CDI device name."""
    devices = []
    real = False
    for gpu in sorted(gpus, key=lambda g: g.index):
        qualified_name(gpu.uuid)  # validates
        minor = host.minors.get(gpu.uuid)
        nodes = () if minor is None else (CdiDeviceNode(f"/dev/nvidia{minor}"),)
        real = real or minor is not None
        devices.append(CdiDevice(gpu.uuid, env=((f"{ENV_PREFIX}{gpu.index}", gpu.uuid),), device_nodes=nodes))
    control = tuple(CdiDeviceNode(f"/dev/{name}") for name in host.control_nodes) if real else ()
    return CdiSpec(CDI_KIND, tuple(devices), device_nodes=control)
