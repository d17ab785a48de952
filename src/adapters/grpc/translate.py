"""Domain ↔ protobuf translation for ``ljrk.runtime.v1`` and ``ljrk.config.v1`` (both directions, one place).

Wire conventions (``proto/ljrk/runtime/v1/runtime.proto``): proto3 zero means "omitted" for a planned GPU's core
and memory (→ None here); ``core_milli`` is authoritative and ``core_percent`` must then equal
``ceil(core_milli / 10)``; a request with only ``core_percent`` gets ``core_milli = core_percent × 10``. Optional
measurements use proto3 ``optional`` presence (absent → None). Times are epoch seconds here and
``google.protobuf.Timestamp`` on the wire (nanosecond resolution). ``HEALTH_UNSPECIFIED`` reads as unhealthy,
as kubelet treats anything but exactly "Healthy". Malformed requests raise
:class:`domain.runtime.errors.InvalidAllocationError`.

MIG: a listed instance's compute instance id and a planned instance's placement start use proto3 ``optional``
presence (absent → None); an absent ``owner`` message means free; empty strings stand for "not given" (profile,
MIG UUID).
"""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.gpu import MigOwner
from domain.runtime.errors import InvalidAllocationError
from domain.runtime.features import RuntimeInfo, SemVer
from domain.runtime.types import (
    ConfigStatus,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    ContainerData,
    ContainerGpuData,
    DeviceInfo,
    DeviceSpec,
    ExporterData,
    GpuData,
    GpuSample,
    HealthChange,
    MigInstanceData,
    MigInstanceInfo,
    Mount,
    PlannedGpu,
    PlannedMig,
    RuntimeState,
)
from domain.topology import GpuTopology, NvLinkPeer
from domain.units import MILLI_PER_PERCENT

from ._pb.ljrk.config.v1 import config_service_pb2 as cpb
from ._pb.ljrk.runtime.v1 import runtime_pb2 as pb

_HEALTH_TO_PB = {Health.HEALTHY: pb.HEALTH_HEALTHY, Health.UNHEALTHY: pb.HEALTH_UNHEALTHY}
_MIG_TO_PB = {MigMode.DISABLED: pb.MIG_MODE_DISABLED, MigMode.ENABLED: pb.MIG_MODE_ENABLED}
_STATE_TO_PB = {RuntimeState.ENABLED: cpb.STATE_ENABLED, RuntimeState.DISABLED: cpb.STATE_DISABLED}


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    """Epoch seconds → Timestamp."""
    result = timestamp_pb2.Timestamp()
    result.FromNanoseconds(round(seconds * 1e9))
    return result


def seconds(value: timestamp_pb2.Timestamp) -> float:
    """Timestamp → epoch seconds."""
    return value.ToNanoseconds() / 1e9


def mig_instance_to_pb(instance: MigInstanceInfo) -> pb.MigInstance:
    """MigInstanceInfo → MigInstance (compute instance id None → absent; owner None → absent)."""
    message = pb.MigInstance(
        gpu_index=instance.gpu_index, gpu_uuid=instance.gpu_uuid, gpu_instance_id=instance.gpu_instance_id,
        profile=instance.profile, placement_start=instance.start, placement_size=instance.size,
        compute_slices=instance.compute_slices, memory_bytes=instance.memory_bytes, uuid=instance.uuid,
        created_by_runtime=instance.created,
    )
    if instance.compute_instance_id is not None:
        message.compute_instance_id = instance.compute_instance_id
    if instance.owner is not None:
        message.owner.CopyFrom(pb.MigOwner(pod_uid=instance.owner.pod_uid, container_name=instance.owner.container))
    return message


def mig_instance_from_pb(message: pb.MigInstance) -> MigInstanceInfo:
    """MigInstance → MigInstanceInfo."""
    owner = MigOwner(message.owner.pod_uid, message.owner.container_name) if message.HasField("owner") else None
    compute = message.compute_instance_id if message.HasField("compute_instance_id") else None
    return MigInstanceInfo(
        gpu_index=message.gpu_index, gpu_uuid=GpuUuid(message.gpu_uuid), gpu_instance_id=message.gpu_instance_id,
        compute_instance_id=compute, profile=message.profile, start=message.placement_start,
        size=message.placement_size, compute_slices=message.compute_slices, memory_bytes=message.memory_bytes,
        uuid=message.uuid, owner=owner, created=message.created_by_runtime,
    )


def device_to_pb(device: DeviceInfo) -> pb.Device:
    """DeviceInfo → Device."""
    gpu = device.gpu
    return pb.Device(
        index=gpu.index, uuid=gpu.uuid, model=gpu.model, memory_bytes=gpu.memory_bytes,
        health=_HEALTH_TO_PB[gpu.health], mig_mode=_MIG_TO_PB[gpu.mig_mode], health_reason=device.health_reason,
        mig_instances=[mig_instance_to_pb(i) for i in device.mig_instances],
        topology=None if device.topology is None else topology_to_pb(device.topology),
    )


def topology_to_pb(topology: GpuTopology) -> pb.DeviceTopology:
    """GpuTopology → DeviceTopology (``numa_node`` None → absent)."""
    return pb.DeviceTopology(
        numa_node=topology.numa_node, pcie_root=topology.pcie_root,
        nvlink_peers=[pb.NvLinkPeer(gpu_index=p.index, link_count=p.links) for p in topology.nvlink],
    )


def topology_from_pb(message: pb.DeviceTopology) -> GpuTopology:
    """DeviceTopology → GpuTopology. Raises domain InvalidRequestError naming the field for a malformed PCIe root, a
    peer listed twice or a link count of 0."""
    numa = message.numa_node if message.HasField("numa_node") else None
    return GpuTopology(numa, message.pcie_root,
                       tuple(NvLinkPeer(p.gpu_index, p.link_count) for p in message.nvlink_peers))


def device_from_pb(message: pb.Device) -> DeviceInfo:
    """Device → DeviceInfo. Raises domain InvalidRequestError for an invalid GPU (empty UUID, zero memory) or
    topology (:func:`topology_from_pb`)."""
    gpu = Gpu(message.index, GpuUuid(message.uuid), message.model, message.memory_bytes,
              _health(message.health), _mig(message.mig_mode))
    topology = topology_from_pb(message.topology) if message.HasField("topology") else None
    return DeviceInfo(gpu, message.health_reason, tuple(mig_instance_from_pb(i) for i in message.mig_instances),
                      topology)


def health_event_to_pb(change: HealthChange) -> pb.HealthEvent:
    """HealthChange → HealthEvent (``xid`` None → 0)."""
    return pb.HealthEvent(
        index=change.index, uuid=change.uuid, health=_HEALTH_TO_PB[change.health], reason=change.reason,
        xid=change.xid or 0, time=timestamp(change.at), initial=change.initial,
    )


def health_event_from_pb(message: pb.HealthEvent) -> HealthChange:
    """HealthEvent → HealthChange (``xid`` 0 → None)."""
    return HealthChange(
        GpuUuid(message.uuid), message.index, _health(message.health), message.reason, message.xid or None,
        seconds(message.time), message.initial,
    )


def _health(value: int) -> Health:
    return Health.HEALTHY if value == pb.HEALTH_HEALTHY else Health.UNHEALTHY


def _mig(value: int) -> MigMode:
    return MigMode.ENABLED if value == pb.MIG_MODE_ENABLED else MigMode.DISABLED


def planned_to_pb(planned: PlannedGpu) -> pb.PlannedGpu:
    """PlannedGpu → wire (None → 0; ``core_percent = ceil(core_milli / 10)``)."""
    core = planned.core_milli or 0
    return pb.PlannedGpu(
        index=planned.index, uuid=planned.uuid, core_milli=core, core_percent=-(-core // MILLI_PER_PERCENT),
        memory_bytes=planned.memory_bytes or 0,
    )


def planned_from_pb(message: pb.PlannedGpu) -> PlannedGpu:
    """Wire → PlannedGpu (module docstring). Raises InvalidAllocationError."""
    core: int | None = message.core_milli or None
    if core is not None and message.core_percent and message.core_percent != -(-core // MILLI_PER_PERCENT):
        raise InvalidAllocationError(
            f"gpu[{message.uuid}]: core_percent={message.core_percent} disagrees with core_milli={core} "
            f"(must be ceil(core_milli / 10) = {-(-core // MILLI_PER_PERCENT)})"
        )
    if core is None and message.core_percent:
        core = message.core_percent * MILLI_PER_PERCENT
    return PlannedGpu(message.index, GpuUuid(message.uuid), core, message.memory_bytes or None)


def planned_mig_to_pb(planned: PlannedMig) -> pb.PlannedMigInstance:
    """PlannedMig → PlannedMigInstance (start None → absent)."""
    message = pb.PlannedMigInstance(index=planned.index, uuid=planned.uuid, profile=planned.profile,
                                    create=planned.create, mig_uuid=planned.mig_uuid)
    if planned.start is not None:
        message.placement_start = planned.start
    return message


def planned_mig_from_pb(message: pb.PlannedMigInstance) -> PlannedMig:
    """PlannedMigInstance → PlannedMig. Raises InvalidAllocationError."""
    start = message.placement_start if message.HasField("placement_start") else None
    return PlannedMig(message.index, GpuUuid(message.uuid), message.profile, start, message.create, message.mig_uuid)


def request_to_pb(request: ContainerAllocationRequest) -> pb.AllocateRequest:
    """ContainerAllocationRequest → AllocateRequest."""
    return pb.AllocateRequest(
        pod_uid=request.pod_uid, pod_namespace=request.namespace, pod_name=request.pod_name,
        container_name=request.container, gpus=[planned_to_pb(g) for g in request.gpus],
        init_container=request.init, mig_instances=[planned_mig_to_pb(m) for m in request.mig],
    )


def request_from_pb(message: pb.AllocateRequest) -> ContainerAllocationRequest:
    """AllocateRequest → ContainerAllocationRequest. Raises InvalidAllocationError."""
    return ContainerAllocationRequest(
        pod_uid=message.pod_uid, namespace=message.pod_namespace, pod_name=message.pod_name,
        container=message.container_name, gpus=tuple(planned_from_pb(g) for g in message.gpus),
        init=message.init_container, mig=tuple(planned_mig_from_pb(m) for m in message.mig_instances),
    )


def response_to_pb(response: ContainerAllocationResponse) -> pb.AllocateResponse:
    """ContainerAllocationResponse → AllocateResponse."""
    return pb.AllocateResponse(
        envs=dict(response.envs),
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in response.mounts],
        devices=[pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in response.devices],
        annotations=dict(response.annotations),
    )


def response_from_pb(message: pb.AllocateResponse) -> ContainerAllocationResponse:
    """AllocateResponse → ContainerAllocationResponse."""
    return ContainerAllocationResponse(
        envs=dict(message.envs),
        mounts=tuple(Mount(m.container_path, m.host_path, m.read_only) for m in message.mounts),
        devices=tuple(DeviceSpec(d.container_path, d.host_path, d.permissions) for d in message.devices),
        annotations=dict(message.annotations),
    )


def info_to_pb(info: RuntimeInfo) -> pb.GetVersionResponse:
    """RuntimeInfo → GetVersionResponse (capabilities sorted)."""
    return pb.GetVersionResponse(
        runtime_name=info.name, version=str(info.version), capabilities=sorted(info.capabilities),
        backend=info.backend,
    )


def info_from_pb(message: pb.GetVersionResponse) -> RuntimeInfo:
    """GetVersionResponse → RuntimeInfo. Raises domain InvalidRequestError for a version that is not SemVer."""
    return RuntimeInfo(message.runtime_name, SemVer.parse(message.version), frozenset(message.capabilities),
                       message.backend)


def _optional(message: pb.GpuData | pb.ContainerGpuData | pb.MigInstanceData, field: str) -> float | None:
    return float(getattr(message, field)) if message.HasField(field) else None  # type: ignore[arg-type]


def exporter_to_pb(data: ExporterData) -> pb.ExporterGetDataListResponse:
    """ExporterData → ExporterGetDataListResponse (None measurements left unset)."""
    gpus = []
    for row in data.gpus:
        gpu, sample = row.device.gpu, row.sample
        message = pb.GpuData(
            index=gpu.index, uuid=gpu.uuid, model=gpu.model, memory_total_bytes=gpu.memory_bytes,
            health=_HEALTH_TO_PB[gpu.health], health_reason=row.device.health_reason,
            xid_counts=dict(sample.xid_counts), sample_error=sample.error,
            allocated_core_milli=row.allocated_core_milli, allocated_memory_bytes=row.allocated_memory_bytes,
            mig_mode=_MIG_TO_PB[gpu.mig_mode],
            topology=None if row.device.topology is None else topology_to_pb(row.device.topology),
        )
        if sample.utilization_percent is not None:
            message.utilization_percent = sample.utilization_percent
        if sample.memory_used_bytes is not None:
            message.memory_used_bytes = sample.memory_used_bytes
        if sample.temperature_celsius is not None:
            message.temperature_celsius = sample.temperature_celsius
        if sample.power_watts is not None:
            message.power_watts = sample.power_watts
        gpus.append(message)
    containers = []
    for container in data.containers:
        rows = []
        for used in container.gpus:
            row_pb = pb.ContainerGpuData(index=used.index, uuid=used.uuid, core_milli=used.core_milli,
                                         memory_limit_bytes=used.memory_limit_bytes)
            if used.memory_used_bytes is not None:
                row_pb.memory_used_bytes = used.memory_used_bytes
            if used.utilization_percent is not None:
                row_pb.utilization_percent = used.utilization_percent
            rows.append(row_pb)
        containers.append(pb.ContainerData(
            pod_uid=container.pod_uid, pod_namespace=container.namespace, pod_name=container.pod_name,
            container_name=container.container, init_container=container.init, gpus=rows,
            allocated_at=timestamp(container.allocated_at), mig_uuids=list(container.mig_uuids),
        ))
    mig = []
    for item in data.mig:
        mig_pb = pb.MigInstanceData(instance=mig_instance_to_pb(item.instance), sample_error=item.error)
        if item.memory_used_bytes is not None:
            mig_pb.memory_used_bytes = item.memory_used_bytes
        if item.utilization_percent is not None:
            mig_pb.utilization_percent = item.utilization_percent
        mig.append(mig_pb)
    return pb.ExporterGetDataListResponse(gpus=gpus, containers=containers, sampled_at=timestamp(data.sampled_at),
                                          mig_instances=mig)


def exporter_from_pb(message: pb.ExporterGetDataListResponse) -> ExporterData:
    """ExporterGetDataListResponse → ExporterData."""
    gpus = []
    for row in message.gpus:
        device = DeviceInfo(
            Gpu(row.index, GpuUuid(row.uuid), row.model, row.memory_total_bytes, _health(row.health),
                _mig(row.mig_mode)),
            row.health_reason,
            topology=topology_from_pb(row.topology) if row.HasField("topology") else None,
        )
        memory_used = int(row.memory_used_bytes) if row.HasField("memory_used_bytes") else None
        sample = GpuSample(
            uuid=GpuUuid(row.uuid), utilization_percent=_optional(row, "utilization_percent"),
            memory_used_bytes=memory_used, temperature_celsius=_optional(row, "temperature_celsius"),
            power_watts=_optional(row, "power_watts"), xid_counts=dict(row.xid_counts), error=row.sample_error,
        )
        gpus.append(GpuData(device, sample, row.allocated_core_milli, row.allocated_memory_bytes))
    containers = []
    for container in message.containers:
        rows = tuple(
            ContainerGpuData(
                index=g.index, uuid=GpuUuid(g.uuid), core_milli=g.core_milli, memory_limit_bytes=g.memory_limit_bytes,
                memory_used_bytes=int(g.memory_used_bytes) if g.HasField("memory_used_bytes") else None,
                utilization_percent=_optional(g, "utilization_percent"),
            )
            for g in container.gpus
        )
        containers.append(ContainerData(
            pod_uid=container.pod_uid, namespace=container.pod_namespace, pod_name=container.pod_name,
            container=container.container_name, init=container.init_container, gpus=rows,
            allocated_at=seconds(container.allocated_at), mig_uuids=tuple(container.mig_uuids),
        ))
    mig = tuple(
        MigInstanceData(
            mig_instance_from_pb(item.instance),
            memory_used_bytes=int(item.memory_used_bytes) if item.HasField("memory_used_bytes") else None,
            utilization_percent=_optional(item, "utilization_percent"), error=item.sample_error,
        )
        for item in message.mig_instances
    )
    return ExporterData(gpus=tuple(gpus), containers=tuple(containers), sampled_at=seconds(message.sampled_at),
                        mig=mig)


def status_to_pb(status: ConfigStatus) -> cpb.Status:
    """ConfigStatus → Status."""
    return cpb.Status(state=_STATE_TO_PB[status.state], changed_at=timestamp(status.changed_at),
                      reason=status.reason, active_allocations=status.active_allocations)


def status_from_pb(message: cpb.Status) -> ConfigStatus:
    """Status → ConfigStatus (anything but STATE_ENABLED reads as disabled)."""
    state = RuntimeState.ENABLED if message.state == cpb.STATE_ENABLED else RuntimeState.DISABLED
    return ConfigStatus(state, seconds(message.changed_at), message.reason, message.active_allocations)
