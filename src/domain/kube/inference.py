"""Checking a decoded plan against the pod, and inferring the placement of pods that carry no usable plan.

**Plan check** (:func:`check_plan`). A plan is pod-written data (anyone who may edit the pod may write it): even on a
bound pod it is only used when it matches the pod's own requests exactly — every GPU container has an entry with the
same init flag; whole-GPU containers hold exactly ``gpus`` whole GPUs; a share holds one GPU with the grant the default
rule gives on that GPU (:func:`domain.request.resolve_share`); no extra containers. So a plan can only ever tell *which*
GPU, never *how much*.

**Inference** (:func:`infer_allocation`, failure case B08). A pod bound by another scheduler (or whose plan was
refused) still runs on its node, so its usage must be counted even though its GPUs are unknown:

* whole-GPU containers take the first GPUs by index that are completely free in the books, preferring
  schedulable ones; when too few are free they take the least-used GPUs (the node becomes over-committed on
  them rather than under-counted), so each whole GPU is removed from capacity whatever happens;
* shares go best-fit (least free core that still fits, lowest index on ties) among schedulable GPUs; when
  nothing fits, the GPU with the most free core takes it (least over-commit);
* app containers are placed one after another; init containers against the node as it was before the pod,
  since the pod holds ``max(app, init)`` per GPU.

The result depends on what else the books hold, so :class:`domain.scheduling.sync.LedgerSync` re-infers every
plan-less pod of a node, in UID order, after each change of the node's planned pods: live and rebuilt books
then agree whatever the event order.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError, UnknownNodeError
from domain.gpu import Gpu
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuKind, PodRequest, resolve_share
from domain.units import MILLI_PER_GPU


def _need(container: ContainerRequest, gpu: Gpu) -> tuple[int, int]:
    return resolve_share(
        core_milli=container.core_milli,
        memory_bytes=container.memory_bytes,
        memory_milli=container.memory_milli,
        gpu_memory_bytes=gpu.memory_bytes,
    )


def check_plan(plan: PodAllocation, request: PodRequest, node_gpus: Sequence[Gpu], *, key: str) -> None:
    """Refuse a decoded plan that does not match ``request`` on ``node_gpus`` (module docstring).

    Raises :class:`InvalidRequestError` whose field is ``<key>.containers.<name>``.
    """
    by_index = {g.index: g for g in node_gpus}
    planned = {c.container: c for c in plan.containers}
    for container in request.gpu_containers:
        field = f"{key}.containers.{container.name}"
        grant = planned.pop(container.name, None)
        if grant is None:
            raise InvalidRequestError(field, None, "the container asks for GPU resources but the plan has no entry")
        if grant.init is not container.init:
            raise InvalidRequestError(f"{field}.init", grant.init, "disagrees with the pod spec")
        if container.kind is GpuKind.WHOLE:
            if not grant.whole or len(grant.grants) != container.gpus:
                wanted = f"the container asks for {container.gpus} whole GPUs"
                raise InvalidRequestError(field, len(grant.grants), wanted)
            continue
        if grant.whole or len(grant.grants) != 1:
            raise InvalidRequestError(field, len(grant.grants), "a share holds exactly one GPU, not as a whole GPU")
        held = grant.grants[0]
        expected = _need(container, by_index[held.gpu_index])
        if (held.core_milli, held.memory_bytes) != expected:
            raise InvalidRequestError(
                field, (held.core_milli, held.memory_bytes), f"the request resolves to {expected} on that GPU"
            )
    if planned:
        raise InvalidRequestError(f"{key}.containers", sorted(planned), "containers that ask for no GPU resources")


@attrs.define
class _Books:
    """Working copy of one node's per-GPU free core (milli-GPU) and memory (bytes), may go negative."""

    core: list[int]
    memory: list[int]
    untouched: list[bool]

    def copy(self) -> _Books:
        return _Books(list(self.core), list(self.memory), list(self.untouched))


def _books(pod_uid: str, node: str, gpus: Sequence[Gpu], ledger: ClusterLedger | None) -> _Books:
    core = [MILLI_PER_GPU] * len(gpus)
    memory = [g.memory_bytes for g in gpus]
    used_core, used_mem = [0] * len(gpus), [0] * len(gpus)
    if ledger is not None:
        try:
            slot = ledger.slot(node)
        except UnknownNodeError:
            slot = -1
        if slot >= 0:
            width = min(len(gpus), int(ledger.gpu_count[slot]))
            used_core[:width] = [int(v) for v in ledger.core_used[slot, :width]]
            used_mem[:width] = [int(v) for v in ledger.mem_used[slot, :width]]
            own = ledger.record(pod_uid)
            if own is not None and own.node == node:
                for index, (c, m) in own.per_gpu_usage().items():
                    if index < width:
                        used_core[index] -= c
                        used_mem[index] -= m
    return _Books(
        [c - u for c, u in zip(core, used_core, strict=True)],
        [m - u for m, u in zip(memory, used_mem, strict=True)],
        [u == 0 and v == 0 for u, v in zip(used_core, used_mem, strict=True)],
    )


def _place(container: ContainerRequest, gpus: Sequence[Gpu], books: _Books) -> ContainerGrant:
    indexes = range(len(gpus))
    if container.kind is GpuKind.WHOLE:
        order = sorted(
            indexes, key=lambda i: (not books.untouched[i], not gpus[i].schedulable, -books.core[i], i)
        )
        chosen = sorted(order[: container.gpus])
        for i in chosen:
            books.core[i] -= MILLI_PER_GPU
            books.memory[i] -= gpus[i].memory_bytes
            books.untouched[i] = False
        grants = tuple(GpuGrant(i, MILLI_PER_GPU, gpus[i].memory_bytes) for i in chosen)
        return ContainerGrant(container.name, grants, init=container.init, whole=True)
    needs = [_need(container, g) for g in gpus]
    fits = [i for i in indexes if gpus[i].schedulable and books.core[i] >= needs[i][0]
            and books.memory[i] >= needs[i][1]]
    if fits:
        index = min(fits, key=lambda i: (books.core[i], i))
    else:
        index = min(indexes, key=lambda i: (-books.core[i], -books.memory[i], i))
    core, memory = needs[index]
    books.core[index] -= core
    books.memory[index] -= memory
    books.untouched[index] = False
    return ContainerGrant(container.name, (GpuGrant(index, core, memory),), init=container.init)


def infer_allocation(
    request: PodRequest, node: str, node_gpus: Sequence[Gpu], ledger: ClusterLedger | None
) -> tuple[PodAllocation, str]:
    """Infer where ``request`` runs on ``node`` (module docstring); returns the allocation and a note.

    ``node_gpus``: the node's current GPUs; ``ledger``: the books to read free GPUs from (None = an idle node);
    the pod's own record there is discounted. The note is non-empty when some GPU container could not be
    placed at all (the node reports no GPUs, or fewer than a whole-GPU container asks for).
    """
    base = _books(request.uid, node, node_gpus, ledger)
    working = base.copy()
    grants: list[ContainerGrant] = []
    notes: list[str] = []
    containers = [c for c in request.gpu_containers if not c.init] + [c for c in request.gpu_containers if c.init]
    for container in containers:
        if not node_gpus:
            notes.append(f"container {container.name}: node {node} reports no GPUs")
            continue
        if container.kind is GpuKind.WHOLE and container.gpus > len(node_gpus):
            notes.append(f"container {container.name}: asks for {container.gpus} GPUs, node has {len(node_gpus)}")
        grants.append(_place(container, node_gpus, base.copy() if container.init else working))
    allocation = PodAllocation(
        request.uid, node, tuple(grants), cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes
    )
    return allocation, "; ".join(notes)
