"""Assemble ``ExporterGetDataList`` from the inventory, the allocation records and a usage sample.

Every GPU gets a row, idle or not (failure case B22), and a GPU the sample missed still gets one, with its
measurements unknown and ``error`` saying so (one failing GPU never empties the page, B23). Every allocation
record gets a container row with its limits; measured use is filled where the sample attributes it. Every listed
MIG instance gets a row (free ones included) with its profile, ids, memory total and owner (the devices passed in
carry owners already, ``domain.runtime.mig.with_owners``), joined with the sample's per-instance measurements by
MIG UUID; a container row names the MIG instances it holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from domain.gpu import GpuUuid
from domain.runtime.types import (
    ContainerAllocation,
    ContainerData,
    ContainerGpuData,
    DeviceInfo,
    ExporterData,
    GpuData,
    GpuSample,
    MigInstanceData,
    UsageSample,
)


def build_exporter_data(
    devices: Sequence[DeviceInfo],
    records: Sequence[ContainerAllocation],
    sample: UsageSample,
    *,
    allocated: Mapping[GpuUuid, tuple[int, int]],
) -> ExporterData:
    """Rows in inventory order and record order; ``allocated`` is ``{uuid: (core_milli, memory_bytes)}`` as
    :meth:`AllocationBook.allocated_per_gpu` computes it."""
    by_uuid = {s.uuid: s for s in sample.gpus}
    gpus = []
    for device in devices:
        uuid = device.gpu.uuid
        gpu_sample = by_uuid.get(uuid) or GpuSample(uuid=uuid, error="no sample for this GPU")
        core, memory = allocated.get(uuid, (0, 0))
        gpus.append(GpuData(device, gpu_sample, allocated_core_milli=core, allocated_memory_bytes=memory))
    usage = {(u.pod_uid, u.container, u.uuid): u for u in sample.containers}
    containers = []
    for record in records:
        request = record.request
        rows = []
        for grant in record.grants:
            measured = usage.get((request.pod_uid, request.container, grant.uuid))
            rows.append(
                ContainerGpuData(
                    index=grant.index,
                    uuid=grant.uuid,
                    core_milli=grant.core_milli,
                    memory_limit_bytes=grant.memory_bytes,
                    memory_used_bytes=None if measured is None else measured.memory_used_bytes,
                    utilization_percent=None if measured is None else measured.utilization_percent,
                )
            )
        containers.append(
            ContainerData(
                pod_uid=request.pod_uid,
                namespace=request.namespace,
                pod_name=request.pod_name,
                container=request.container,
                init=request.init,
                gpus=tuple(rows),
                allocated_at=record.allocated_at,
                mig_uuids=tuple(i.uuid for i in record.mig),
            )
        )
    by_mig_uuid = {m.uuid: m for m in sample.mig}
    mig = []
    for device in devices:
        for instance in device.mig_instances:
            found = by_mig_uuid.get(instance.uuid) if instance.uuid else None
            if found is None:
                error = "no sample for this MIG instance" if instance.uuid else "no compute instance"
                mig.append(MigInstanceData(instance, error=error))
            else:
                mig.append(MigInstanceData(instance, found.memory_used_bytes, found.utilization_percent, found.error))
    return ExporterData(gpus=tuple(gpus), containers=tuple(containers), sampled_at=sample.at, mig=tuple(mig))
