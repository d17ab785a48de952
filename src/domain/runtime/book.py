"""The Runtime's allocation records: resolve a plan against the node's GPUs, idempotently, per container.

Rules (the device plugin's "up to three per-resource Allocate calls become one"):

* The key is (pod UID, container). Allocating a key again with an identical request returns the recorded
  allocation unchanged (same response, same ``allocated_at``); a different request for the key raises
  :class:`AllocationConflictError` — release first.
* The GPU UUID is authoritative and must name a GPU of this node; the planned index must equal that GPU's index.
  A GPU in MIG mode takes no time-sharing allocation.
* Core and memory follow the ledger's default rule, :func:`domain.request.resolve_share` on the GPU's real
  memory (failure case B09: never "0 = unlimited"); a resolved memory above the GPU's memory is refused.
* Capacity (:mod:`domain.runtime.capacity`): a new grant that would take a GPU beyond 1000 milli-GPU core or its
  memory bytes, counting every pod's grants by the ledger's effective per-pod rule, raises
  :class:`CapacityExceededError` and records nothing. A whole-GPU grant (1000 milli) shares its GPU with no other
  pod. Identical repeats are answered before the check, so restored over-capacity records still answer.
* Device specs and mounts come from the node's :class:`ContainerEdits` (``domain.runtime.edits``; none by
  default), built when the record is created, so a repeat answers what the first call answered.
* While the Runtime is disabled, identical repeats still succeed (a restarting container keeps its GPUs) but a
  new key raises :class:`RuntimeDisabledError`.
* MIG (``request.mig``; :mod:`domain.runtime.mig` for which instance a plan gets): the container receives the
  instances' ``MIG-…`` UUIDs (``domain.runtime.limits.mig_envs``), the parent GPUs' device nodes when device specs
  are on, and no HAMi-core mounts (MIG isolates in hardware). Instances to create are created through the node's
  driver only after every check passed, all or nothing; the record keeps each instance with its owner and
  ``created`` flag, so Release (and a restarted Runtime, from its saved records) knows what to destroy
  (:meth:`AllocationBook.unreferenced`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.gpu import MigOwner
from domain.request import resolve_share
from domain.runtime.capacity import GpuOvercommit, check_capacity, over_capacity, usage_per_gpu
from domain.runtime.edits import ContainerEdits
from domain.runtime.errors import AllocationConflictError, InvalidAllocationError, RuntimeDisabledError
from domain.runtime.limits import ALLOCATION_ANNOTATION, limit_envs, mig_envs
from domain.runtime.mig import MigKey, MigNode, holders, plan_mig, realize
from domain.runtime.mig import unreferenced as _unreferenced
from domain.runtime.mps import mps_envs
from domain.runtime.types import (
    ContainerAllocation,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceSpec,
    GrantedGpu,
    MigInstanceInfo,
    PlannedGpu,
)


def resolve_grant(planned: PlannedGpu, gpu: Gpu, *, label: str) -> GrantedGpu:
    """Resolve one planned GPU on ``gpu`` (see module docstring). Raises :class:`InvalidAllocationError`."""
    if planned.index != gpu.index:
        raise InvalidAllocationError(
            f"{label}: GPU {planned.uuid} has index {gpu.index} on this node, the plan says {planned.index}"
        )
    if gpu.mig_mode is MigMode.ENABLED:
        raise InvalidAllocationError(f"{label}: GPU {gpu.uuid} is in MIG mode and takes no time-sharing allocation")
    try:
        core, memory = resolve_share(
            core_milli=planned.core_milli, memory_bytes=planned.memory_bytes, gpu_memory_bytes=gpu.memory_bytes
        )
    except InvalidRequestError as error:
        raise InvalidAllocationError(f"{label}: GPU {gpu.uuid}: {error}") from error
    if memory > gpu.memory_bytes:
        raise InvalidAllocationError(
            f"{label}: GPU {gpu.uuid}: memory {memory} bytes exceeds the GPU's {gpu.memory_bytes} bytes"
        )
    return GrantedGpu(index=gpu.index, uuid=gpu.uuid, core_milli=core, memory_bytes=memory)


@attrs.define
class AllocationBook:
    """Allocation records keyed by (pod UID, container), answered with the node's ``edits`` (device specs and
    mounts; none by default); not thread-safe (callers hold a lock)."""

    edits: ContainerEdits = attrs.field(factory=ContainerEdits)
    _records: dict[tuple[str, str], ContainerAllocation] = attrs.field(factory=dict)

    def allocate(
        self,
        request: ContainerAllocationRequest,
        gpus: Iterable[Gpu],
        *,
        now: float,
        enabled: bool = True,
        minors: Mapping[GpuUuid, int] | None = None,
        mig: MigNode | None = None,
    ) -> tuple[ContainerAllocation, bool]:
        """Record ``request`` against the node's ``gpus``; returns ``(record, created)`` where ``created`` is False
        for an identical repeat. ``minors``: device minor number per GPU UUID (needed only when ``edits`` adds
        device nodes). ``mig``: the node's MIG instances, strategy and driver calls (None: no instance listed,
        static). Raises :class:`InvalidAllocationError` (also for a missing minor number),
        :class:`CapacityExceededError`, :class:`AllocationConflictError` or, when ``enabled`` is False and the key
        is new, :class:`RuntimeDisabledError`; a failing MIG creation raises the driver's error, with nothing created
        left behind and nothing recorded."""
        existing = self._records.get(request.key)
        if existing is not None:
            if existing.request == request:
                return existing, False
            raise AllocationConflictError(
                f"{request.label}: pod UID {request.pod_uid} container {request.container!r} already holds "
                f"{[g.uuid for g in existing.grants]} under a different plan; release it first"
            )
        if not enabled:
            raise RuntimeDisabledError(
                f"{request.label}: the node Runtime is disabled (config service) and takes no new allocation"
            )
        by_uuid: Mapping[GpuUuid, Gpu] = {gpu.uuid: gpu for gpu in gpus}
        if request.mig:
            return self._allocate_mig(request, by_uuid, now=now, minors=minors or {}, node=mig or MigNode()), True
        grants = []
        for planned in request.gpus:
            gpu = by_uuid.get(planned.uuid)
            if gpu is None:
                raise InvalidAllocationError(
                    f"{request.label}: GPU {planned.uuid} is not on this node (GPUs: {', '.join(sorted(by_uuid))})"
                )
            grants.append(resolve_grant(planned, gpu, label=request.label))
        response = ContainerAllocationResponse(
            envs={**limit_envs(pod_uid=request.pod_uid, container=request.container, grants=grants),
                  **(mps_envs(grants) if self.edits.mps else {})},
            mounts=self.edits.mounts(),
            devices=self._devices(request, grants, minors or {}),
            annotations={ALLOCATION_ANNOTATION: f"{request.pod_uid}/{request.container}"},
        )
        record = ContainerAllocation(request=request, grants=tuple(grants), response=response, allocated_at=now)
        check_capacity(record, self._records.values(), by_uuid)
        self._records[request.key] = record
        return record, True

    def _allocate_mig(
        self, request: ContainerAllocationRequest, gpus: Mapping[GpuUuid, Gpu], *, now: float,
        minors: Mapping[GpuUuid, int], node: MigNode,
    ) -> ContainerAllocation:
        steps = plan_mig(request, gpus, node, self.mig_holders())
        parents = tuple(dict.fromkeys(step.gpu.uuid for step in steps))
        try:
            devices = self.edits.devices_for(parents, minors)
        except InvalidAllocationError as error:
            raise InvalidAllocationError(f"{request.label}: {error}") from error
        granted = realize(steps, node, MigOwner(request.pod_uid, request.container))
        response = ContainerAllocationResponse(
            envs=mig_envs(pod_uid=request.pod_uid, container=request.container, instances=granted),
            devices=devices,
            annotations={ALLOCATION_ANNOTATION: f"{request.pod_uid}/{request.container}"},
        )
        record = ContainerAllocation(request=request, grants=(), response=response, allocated_at=now, mig=granted)
        self._records[request.key] = record
        return record

    def _devices(
        self, request: ContainerAllocationRequest, grants: list[GrantedGpu], minors: Mapping[GpuUuid, int]
    ) -> tuple[DeviceSpec, ...]:
        try:
            return self.edits.devices(grants, minors)
        except InvalidAllocationError as error:
            raise InvalidAllocationError(f"{request.label}: {error}") from error

    def mig_holders(self) -> dict[MigKey, MigInstanceInfo]:
        """MIG instances held by the records, by ``MigInstanceInfo.key``, with owner and ``created``."""
        return holders(self.records())

    def unreferenced(self, removed: Iterable[ContainerAllocation]) -> tuple[MigInstanceInfo, ...]:
        """Instances the Runtime created for the ``removed`` records (just released) that no remaining record
        holds: the ones to destroy."""
        return _unreferenced(removed, self._records.values())

    def release(self, pod_uid: str, container: str | None = None) -> tuple[ContainerAllocation, ...]:
        """Remove the pod's records (one container's when ``container`` is given); returns what was removed."""
        keys = [k for k in self._records if k[0] == pod_uid and (container is None or k[1] == container)]
        return tuple(self._records.pop(k) for k in keys)

    def restore(self, records: Iterable[ContainerAllocation]) -> None:
        """Replace every record with ``records`` (loaded from persisted state). Records are taken as they are, even
        when they exceed a GPU (they describe running containers): :meth:`over_capacity` reports such GPUs and
        :meth:`allocate` refuses every new grant on them."""
        self._records = {record.key: record for record in records}

    def records(self) -> tuple[ContainerAllocation, ...]:
        """Every record, oldest first (ties by key)."""
        return tuple(sorted(self._records.values(), key=lambda r: (r.allocated_at, r.key)))

    def __len__(self) -> int:
        return len(self._records)

    def allocated_per_gpu(self) -> dict[GpuUuid, tuple[int, int]]:
        """``{uuid: (core_milli, memory_bytes)}`` granted on each GPU, per pod by the ledger's effective rule
        (:meth:`PodAllocation.per_gpu_usage`: ``max(Σ app, max init)``), summed over pods
        (:func:`domain.runtime.capacity.usage_per_gpu`)."""
        return usage_per_gpu(self._records.values())

    def over_capacity(self, gpus: Iterable[Gpu]) -> tuple[GpuOvercommit, ...]:
        """The GPUs of ``gpus`` the records exceed (possible only after :meth:`restore`); empty when all fit."""
        return over_capacity(self._records.values(), gpus)
