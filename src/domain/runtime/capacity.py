"""Node-side capacity admission of the Runtime's allocation book: a tenant gets exactly what it was granted.

The scheduler books every GPU share in its ledger, but the Runtime is the last place that sees all grants of its
node together, so it checks them again, whatever the scheduler (or a forged plan annotation) believed.

Rules:

* Usage per GPU (keyed by UUID) follows the ledger's effective rule per pod (:meth:`PodAllocation.per_gpu_usage`):
  on a GPU a pod holds ``max(Σ app-container grants, max init-container grant)``, core and memory separately; pods
  add up. A pod's own init and app containers therefore never count twice.
* A new container grant is admitted only when, with it, every GPU it names stays within capacity: core at most
  :data:`domain.units.MILLI_PER_GPU` (1000 milli-GPU = the whole GPU) and memory at most the GPU's bytes. A
  whole-GPU grant (core 1000) thus shares its GPU with no other pod, and no grant joins a GPU another pod holds
  whole.
* Records restored from persisted state may already exceed a GPU (a crash between versions, a GPU replaced by a
  smaller one): they are kept and reported (:func:`over_capacity`), and every new grant on such a GPU is refused
  until enough is released.

Pure functions over records and GPUs; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.runtime.errors import CapacityExceededError
from domain.runtime.types import ContainerAllocation
from domain.units import MILLI_PER_GPU


@attrs.frozen
class GpuOvercommit:
    """A GPU whose records exceed it: ``uuid``, the granted ``core_milli`` (milli-GPU) and ``memory_bytes``, and
    the GPU's ``capacity_bytes`` (core capacity is always 1000 milli-GPU)."""

    uuid: GpuUuid
    core_milli: int
    memory_bytes: int
    capacity_bytes: int


def _pod_usage(records: Iterable[ContainerAllocation]) -> dict[GpuUuid, tuple[int, int]]:
    """One pod's effective ``{uuid: (core_milli, memory_bytes)}`` by :meth:`PodAllocation.per_gpu_usage`."""
    records = list(records)
    index_of: dict[GpuUuid, int] = {}
    for record in records:
        for grant in record.grants:
            index_of.setdefault(grant.uuid, len(index_of))
    uuid_of = {index: uuid for uuid, index in index_of.items()}
    pod = PodAllocation(
        pod_uid=records[0].request.pod_uid if records else "",
        node="",
        containers=tuple(
            ContainerGrant(
                container=r.request.container,
                grants=tuple(GpuGrant(index_of[g.uuid], g.core_milli, g.memory_bytes) for g in r.grants),
                init=r.request.init,
            )
            for r in records
        ),
    )
    return {uuid_of[index]: usage for index, usage in pod.per_gpu_usage().items()}


def _by_pod(records: Iterable[ContainerAllocation]) -> dict[str, list[ContainerAllocation]]:
    pods: dict[str, list[ContainerAllocation]] = {}
    for record in records:
        pods.setdefault(record.request.pod_uid, []).append(record)
    return pods


def usage_per_gpu(records: Iterable[ContainerAllocation]) -> dict[GpuUuid, tuple[int, int]]:
    """``{uuid: (core_milli, memory_bytes)}`` granted on each GPU by ``records``, per pod by the effective rule
    (module docstring), summed over pods. GPUs without a time-sharing grant are absent."""
    totals: dict[GpuUuid, tuple[int, int]] = {}
    for pod_records in _by_pod(records).values():
        for uuid, (core, memory) in _pod_usage(pod_records).items():
            core_sum, memory_sum = totals.get(uuid, (0, 0))
            totals[uuid] = (core_sum + core, memory_sum + memory)
    return totals


def over_capacity(records: Iterable[ContainerAllocation], gpus: Iterable[Gpu]) -> tuple[GpuOvercommit, ...]:
    """The GPUs of ``gpus`` whose ``records`` exceed them (core above 1000 milli-GPU or memory above the GPU's
    bytes), by UUID; empty when everything fits. GPUs the node no longer has are not reported here."""
    usage = usage_per_gpu(records)
    found = []
    for gpu in sorted(gpus, key=lambda g: g.uuid):
        core, memory = usage.get(gpu.uuid, (0, 0))
        if core > MILLI_PER_GPU or memory > gpu.memory_bytes:
            found.append(GpuOvercommit(gpu.uuid, core, memory, gpu.memory_bytes))
    return tuple(found)


def check_capacity(
    record: ContainerAllocation, records: Iterable[ContainerAllocation], gpus: Mapping[GpuUuid, Gpu]
) -> None:
    """Admit the new ``record`` next to the book's current ``records`` (which must not hold its key) on the node's
    ``gpus``, or raise :class:`CapacityExceededError` naming the pod, container, GPU UUID, what the GPU holds
    already, what the container asks for and the capacity (core in milli-GPU, memory in bytes). Only the GPUs the
    record names are checked; a GPU missing from ``gpus`` is the caller's error to report first."""
    current = list(records)
    pod_uid = record.request.pod_uid
    others = usage_per_gpu(r for r in current if r.request.pod_uid != pod_uid)
    own = [r for r in current if r.request.pod_uid == pod_uid]
    before = _pod_usage(own)
    after = _pod_usage([*own, record])
    for grant in record.grants:
        gpu = gpus[grant.uuid]
        other_core, other_memory = others.get(grant.uuid, (0, 0))
        held_core, held_memory = before.get(grant.uuid, (0, 0))
        new_core, new_memory = after[grant.uuid]
        core_total, memory_total = other_core + new_core, other_memory + new_memory
        if core_total <= MILLI_PER_GPU and memory_total <= gpu.memory_bytes:
            continue
        whole_held = any(g.uuid == grant.uuid and g.core_milli == MILLI_PER_GPU
                         for r in current if r.request.pod_uid != pod_uid for g in r.grants)
        whole = " (a whole GPU is granted to one pod only)" if whole_held or grant.core_milli == MILLI_PER_GPU else ""
        raise CapacityExceededError(
            f"{record.request.label}: pod UID {pod_uid} container {record.request.container!r}: GPU {grant.uuid} "
            f"has {other_core + held_core} milli-GPU core and {other_memory + held_memory} bytes granted already; "
            f"asked for {grant.core_milli} milli-GPU core and {grant.memory_bytes} bytes, which would make "
            f"{core_total} milli-GPU and {memory_total} bytes; capacity {MILLI_PER_GPU} milli-GPU and "
            f"{gpu.memory_bytes} bytes{whole}: refused, whatever the scheduler's plan said"
        )
