"""Value types of the node Runtime contract, independent of the wire (``proto/ljrk/runtime/v1/runtime.proto``).

Units: memory in bytes, compute in milli-GPU (``domain.units``: 1000 = one GPU, 10 = 1 %), utilization in percent
0..100, temperature in °C, power in W, times in epoch seconds (float, UTC). ``None`` means "not known" (a metric
the GPU does not support, a usage nobody measured), never zero.

Invariants enforced at construction (raising :class:`domain.runtime.errors.InvalidAllocationError` for the
request types, whose values come from outside): non-empty pod UID and container; at least one planned GPU or MIG
instance, never both kinds in one container; distinct GPU UUIDs and indexes; core 1..1000 milli-GPU and memory
≥ 1 byte when given; a planned MIG instance names a profile or an existing instance, and creating one needs a
profile and a placement start.

MIG (Runtime 1.1.0, features ``mig-inventory``, ``mig-allocate``, ``mig-dynamic``, ``mig-exporter-data``): a GPU in
MIG mode is listed with its instances (:class:`MigInstanceInfo`, one per GPU instance + compute instance, with
NVML's ids, the placement in memory slices and the ``MIG-…`` UUID); a container plans instances
(:class:`PlannedMig`) instead of GPU shares, and its record holds the granted instances. Profile names are the
canonical names of :mod:`domain.mig.profiles`.

Parts: :mod:`.devices`, :mod:`.allocation`, :mod:`.state`; this package re-exports their public names.
"""

from domain.runtime.types.allocation import (
    ContainerAllocation,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceSpec,
    GrantedGpu,
    Mount,
    PlannedGpu,
    PlannedMig,
)
from domain.runtime.types.devices import DeviceInfo, HealthChange, MigInstanceInfo
from domain.runtime.types.state import (
    ConfigStatus,
    ContainerData,
    ContainerGpuData,
    ContainerUsage,
    ExporterData,
    GpuData,
    GpuSample,
    MigInstanceData,
    MigSample,
    RuntimeSnapshot,
    RuntimeState,
    UsageSample,
)

__all__ = [
    "ConfigStatus",
    "ContainerAllocation",
    "ContainerAllocationRequest",
    "ContainerAllocationResponse",
    "ContainerData",
    "ContainerGpuData",
    "ContainerUsage",
    "DeviceInfo",
    "DeviceSpec",
    "ExporterData",
    "GpuData",
    "GpuSample",
    "GrantedGpu",
    "HealthChange",
    "MigInstanceData",
    "MigInstanceInfo",
    "MigSample",
    "Mount",
    "PlannedGpu",
    "PlannedMig",
    "RuntimeSnapshot",
    "RuntimeState",
    "UsageSample",
]
