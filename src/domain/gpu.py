"""GPU inventory value types: one physical GPU and the GPUs of one node.

Shapes: a :class:`NodeInventory` holds ``gpu_count`` :class:`Gpu` values with dense indexes ``0..gpu_count-1``
(the NVML device index), plus the node's allocatable CPU (milli-cores), host memory (bytes) and pod slots.
"""

from __future__ import annotations

import enum
from typing import NewType

import attrs

from domain.errors import InvalidRequestError
from domain.topology import NodeTopology
from domain.units import MAX_GPU_MEMORY_BYTES, MAX_NODE_QUANTITY

GpuUuid = NewType("GpuUuid", str)
NodeName = NewType("NodeName", str)


class Health(enum.Enum):
    """Device health as the device plugin API reports it (``Healthy``/``Unhealthy``, v1beta1)."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class MigMode(enum.Enum):
    """Whether a GPU is partitioned with Multi-Instance GPU; MIG GPUs never take time-sharing pods."""

    DISABLED = "disabled"
    ENABLED = "enabled"


def _check_non_negative_int(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(field, value, "must be an integer")
    if value < 0:
        raise InvalidRequestError(field, value, "must not be negative")


@attrs.frozen
class Gpu:
    """One physical GPU.

    Fields: ``index`` (NVML index, ≥ 0), ``uuid`` (``GPU-…``), ``model`` (model string matched exactly by pod
    allow-lists), ``memory_bytes`` (total device memory, > 0), ``health``, ``mig_mode``.

    Raises :class:`InvalidRequestError` naming the field for a negative index, an empty UUID or model, or a
    memory size that is not a positive integer (failure case B12f: a GPU reported with 0 memory is refused,
    never booked as "unlimited") or is above ``MAX_GPU_MEMORY_BYTES`` (1 PiB, beyond the ledger's int64 books).
    """

    index: int
    uuid: GpuUuid
    model: str
    memory_bytes: int
    health: Health = Health.HEALTHY
    mig_mode: MigMode = MigMode.DISABLED

    def __attrs_post_init__(self) -> None:
        _check_non_negative_int("gpu.index", self.index)
        if not self.uuid:
            raise InvalidRequestError("gpu.uuid", self.uuid, "must not be empty")
        if not self.model:
            raise InvalidRequestError("gpu.model", self.model, "must not be empty")
        _check_non_negative_int("gpu.memory_bytes", self.memory_bytes)
        if self.memory_bytes == 0:
            raise InvalidRequestError(f"gpu[{self.index}].memory_bytes", 0, "a GPU must report memory > 0")
        if self.memory_bytes > MAX_GPU_MEMORY_BYTES:
            raise InvalidRequestError(f"gpu[{self.index}].memory_bytes", self.memory_bytes,
                                      f"must be at most {MAX_GPU_MEMORY_BYTES} (1 PiB): no GPU has that much")

    @property
    def schedulable(self) -> bool:
        """True when the GPU may receive new time-sharing grants (healthy and not in MIG mode)."""
        return self.health is Health.HEALTHY and self.mig_mode is MigMode.DISABLED


@attrs.frozen
class NodeInventory:
    """A node's allocatable resources and its GPUs.

    Fields: ``name``; ``gpus`` (indexes must be exactly ``0..n-1``, UUIDs unique); ``cpu_milli`` (allocatable
    CPU in milli-cores, ≥ 0); ``memory_bytes`` (allocatable host memory, ≥ 0); ``max_pods`` (pod slots, ≥ 0);
    ``topology`` (NUMA nodes, PCIe roots and NVLink peers of its GPUs, as the device plugin published them from a
    Runtime ≥ 1.2.0; None when unknown; it may describe only GPUs the node has).

    Raises :class:`InvalidRequestError` for duplicate or non-dense GPU indexes, duplicate UUIDs, negative
    quantities or ones above ``MAX_NODE_QUANTITY`` (beyond the ledger's int64 books).
    """

    name: NodeName
    gpus: tuple[Gpu, ...] = ()
    cpu_milli: int = 0
    memory_bytes: int = 0
    max_pods: int = 110
    topology: NodeTopology | None = None

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise InvalidRequestError("node.name", self.name, "must not be empty")
        for field, value in (("cpu_milli", self.cpu_milli), ("memory_bytes", self.memory_bytes),
                             ("max_pods", self.max_pods)):
            _check_non_negative_int(f"node[{self.name}].{field}", value)
            if value > MAX_NODE_QUANTITY:
                raise InvalidRequestError(f"node[{self.name}].{field}", value,
                                          f"must be at most {MAX_NODE_QUANTITY}: no node has that much")
        indexes = [gpu.index for gpu in self.gpus]
        if indexes != list(range(len(self.gpus))):
            raise InvalidRequestError(f"node[{self.name}].gpus.index", indexes, "must be 0..n-1 in order")
        uuids = [gpu.uuid for gpu in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise InvalidRequestError(f"node[{self.name}].gpus.uuid", uuids, "must be unique")
        if self.topology is not None and not set(self.topology.gpus) <= set(indexes):
            raise InvalidRequestError(f"node[{self.name}].topology", sorted(self.topology.gpus),
                                      f"describes GPUs the node lacks (it has {len(indexes)})")

    @property
    def gpu_count(self) -> int:
        """Number of GPUs on the node."""
        return len(self.gpus)
