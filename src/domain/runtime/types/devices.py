"""What a node Runtime reports about its devices: GPUs (:class:`DeviceInfo`), MIG instances (:class:`MigInstanceInfo`)
and health changes. Invariant: values are immutable and validated on construction (the gRPC adapter translates
the wire messages into them once).
"""


from __future__ import annotations

import attrs

from domain.gpu import Gpu, GpuUuid, Health
from domain.mig.gpu import MigOwner
from domain.topology import GpuTopology


@attrs.frozen
class MigInstanceInfo:
    """One MIG instance (a GPU instance and one of its compute instances) as the Runtime lists it.

    Fields: ``gpu_index``/``gpu_uuid`` (the parent GPU); ``gpu_instance_id`` (NVML GI id, ``nvmlGpuInstanceGetInfo``
    ``.id``); ``compute_instance_id`` (NVML CI id, ``nvmlComputeInstanceGetInfo`` ``.id``; None for a GPU instance
    without compute instance, which takes slices but cannot be handed out); ``profile`` (canonical GPU instance
    profile name, e.g. ``3g.40gb``; the NVML name without its ``MIG `` prefix when the model has no table);
    ``start`` and ``size`` (placement in memory slices, ``nvmlGpuInstancePlacement_t``); ``compute_slices``
    (``sliceCount`` of the profile); ``memory_bytes`` (the instance's memory, bytes); ``uuid`` (``MIG-…``, from
    ``nvmlDeviceGetUUID`` on the MIG device handle; empty without compute instance); ``owner`` (the pod and
    container holding it; None when free); ``created`` (True: the Runtime created it for its owner at Allocate
    and destroys it at Release, dynamic strategy).
    """

    gpu_index: int
    gpu_uuid: GpuUuid
    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    start: int
    size: int
    compute_slices: int
    memory_bytes: int
    uuid: str
    owner: MigOwner | None = None
    created: bool = False

    @property
    def key(self) -> tuple[GpuUuid, int, int | None]:
        """``(gpu_uuid, gpu_instance_id, compute_instance_id)``: identity on the node (MIG UUIDs of GPU
        instances without compute instance are empty)."""
        return (self.gpu_uuid, self.gpu_instance_id, self.compute_instance_id)

    @property
    def usable(self) -> bool:
        """True when the instance can be handed to a container (it has a compute instance and a MIG UUID)."""
        return self.compute_instance_id is not None and bool(self.uuid)


def _mig_tuple(value: tuple[MigInstanceInfo, ...] | list[MigInstanceInfo]) -> tuple[MigInstanceInfo, ...]:
    return tuple(value)


@attrs.frozen
class DeviceInfo:
    """One GPU as the Runtime reports it: the inventory value ``gpu`` (whose ``health`` is current),
    ``health_reason`` (why it is unhealthy; empty when healthy), for a GPU in MIG mode its ``mig_instances`` (by
    placement start; empty otherwise), and its ``topology`` (NUMA node, PCIe root, NVLink peers; None when the
    backend does not know it; Runtime 1.2.0, feature ``gpu-topology``)."""

    gpu: Gpu
    health_reason: str = ""
    mig_instances: tuple[MigInstanceInfo, ...] = attrs.field(default=(), converter=_mig_tuple)
    topology: GpuTopology | None = None


@attrs.frozen
class HealthChange:
    """A GPU's health at time ``at``: ``reason`` (e.g. ``"XID 79"``), ``xid`` (the causing XID or None) and
    ``initial`` (True for the snapshot events a health stream opens with)."""

    uuid: GpuUuid
    index: int
    health: Health
    reason: str = ""
    xid: int | None = None
    at: float = 0.0
    initial: bool = False
