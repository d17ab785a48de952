"""MIG on the node Runtime: which listed instance (or new placement) each planned MIG instance of a container gets.

Rules of :func:`plan_mig` (used by :class:`domain.runtime.book.AllocationBook`; nothing here has side effects):

* The parent GPU's UUID is authoritative and must name a GPU of this node in MIG mode (a GPU not in MIG mode
  refuses MIG grants, as a MIG GPU refuses time-sharing ones); the planned index must equal its index.
* An instance is exclusive to one pod. It may be named again by another container of the *same* pod (kubelet
  hands an init container's devices on to the app containers), never by another pod.
* By MIG UUID: that instance, which must be usable (it has a compute instance) and match the planned profile and
  start when given. By profile and start: a free instance of that profile starting there; without start, the
  free instance of that profile with the lowest start (never one a sibling container holds).
* ``create`` (dynamic strategy only, :class:`PlacementMode`): when no instance of the profile starts there, a new
  one is placed at ``start`` if it fits (a placement of the profile, free memory and compute slices, below the
  profile's instance limit; checked with :class:`domain.mig.gpu.MigGpu` when the listing matches the model's
  table, else by memory slices only and the driver decides). A free instance of the profile already there is
  taken over instead; either way the instance is marked ``created`` and destroyed at Release, matching the
  scheduler's books (:mod:`domain.mig.ledger`). A static Runtime refuses ``create``.

Errors: :class:`InvalidAllocationError` naming the container and the planned instance, before anything is created.
Geometry source: NVIDIA MIG user guide (see :mod:`domain.mig.profiles`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.errors import MigPlacementError, UnknownMigModelError, UnknownMigProfileError
from domain.mig.gpu import MigGpu, MigInstance, MigOwner, PlacementMode
from domain.mig.profiles import MigGpuModel, MigProfile, mig_model, normalise_profile_name, resolve_profile
from domain.runtime.errors import InvalidAllocationError
from domain.runtime.types import (
    ContainerAllocation,
    ContainerAllocationRequest,
    DeviceInfo,
    MigInstanceInfo,
    PlannedMig,
)

MigKey = tuple[GpuUuid, int, int | None]
"""``MigInstanceInfo.key``: (parent GPU UUID, GPU instance id, compute instance id)."""


class MigDriver(Protocol):
    """The driver interface Allocate needs to change a node's MIG layout (dynamic strategy). Every
    :class:`ports.gpu_backend.GpuBackend` is one; its errors are the backend's (``GpuBackendError``)."""

    def create_mig_instance(self, gpu: GpuUuid, profile: MigProfile, start: int) -> MigInstanceInfo:
        """Create a GPU instance of ``profile`` at memory slice ``start`` on GPU ``gpu`` and one compute instance
        spanning it; returns it as listed (ids, ``MIG-…`` UUID, memory in bytes; owner None). All or nothing.
        Raises the backend's error naming the GPU, profile and start (not in MIG mode, slices taken, driver
        refusal)."""
        ...

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        """Destroy ``instance``'s compute instance, then its GPU instance. An instance already gone (or a GPU
        instance at that id now placed elsewhere) is not an error. Raises the backend's error when the driver
        refuses (e.g. still in use)."""
        ...


@attrs.frozen
class MigNode:
    """What Allocate needs to grant MIG instances on a node: the ``instances`` listed now, the strategy ``mode``
    and the ``driver`` that creates and destroys instances (None: this node creates nothing)."""

    instances: tuple[MigInstanceInfo, ...] = ()
    mode: PlacementMode = PlacementMode.STATIC
    driver: MigDriver | None = None


@attrs.frozen
class MigStep:
    """One planned instance resolved: take ``existing``, or (``existing`` None) create ``profile`` at ``start``
    on ``gpu``; ``created`` marks an instance destroyed at Release."""

    gpu: Gpu
    start: int
    existing: MigInstanceInfo | None = None
    profile: MigProfile | None = None
    created: bool = False


def mig_table(gpu: Gpu) -> MigGpuModel | None:
    """The profile table of ``gpu``'s model (:func:`domain.mig.profiles.mig_model`), or None without one."""
    try:
        return mig_model(gpu.model, memory_bytes=gpu.memory_bytes)
    except UnknownMigModelError:
        return None


def same_profile(listed: str, wanted: str, table: MigGpuModel | None) -> bool:
    """True when the listed profile name and a requested spelling denote the same profile."""
    if table is not None:
        first, second = table.lookup(listed), table.lookup(wanted)
        if first is not None or second is not None:
            return first == second
    return normalise_profile_name(listed) == normalise_profile_name(wanted)


def _layout_gpu(gpu: Gpu, table: MigGpuModel, instances: Iterable[tuple[str, int]]) -> MigGpu | None:
    """The listed layout as a geometry-checked :class:`MigGpu`, or None when it does not match the table."""
    try:
        placed = {start: MigInstance(resolve_profile(table, name), start) for name, start in instances}
        return MigGpu(gpu.index, gpu.uuid, table, PlacementMode.DYNAMIC, tuple(placed.values()))
    except (MigPlacementError, UnknownMigProfileError):
        return None


def _fit_problem(
    gpu: Gpu, table: MigGpuModel, profile: MigProfile, start: int, occupied: Sequence[tuple[str, int, int]]
) -> str | None:
    """Why ``profile`` cannot be placed at ``start`` given ``occupied`` (name, start, size), or None."""
    if start not in profile.placements:
        return f"start {start} is not a placement of {profile.name} {profile.placements}"
    layout = _layout_gpu(gpu, table, [(name, s) for name, s, _ in occupied])
    if layout is not None:
        if layout.fits(profile, start):
            return None
        return f"{profile.name} at start {start} overlaps taken slices or exceeds {profile.max_instances} instances"
    wanted = profile.memory_mask(start)
    for name, other, size in occupied:
        if wanted & (((1 << size) - 1) << other):
            return f"{profile.name} at start {start} overlaps the {name} instance at start {other}"
    return None


def _canonical(table: MigGpuModel | None, name: str, where: str) -> MigProfile | None:
    if table is None or not name:
        return None
    try:
        return resolve_profile(table, name)
    except UnknownMigProfileError as error:
        raise InvalidAllocationError(f"{where}: {error}") from error


class _Planner:
    """State of one :func:`plan_mig` call: instances already used by the plan and creations pending per GPU."""

    def __init__(
        self, request: ContainerAllocationRequest, gpus: Mapping[GpuUuid, Gpu], node: MigNode,
        held: Mapping[MigKey, MigInstanceInfo],
    ) -> None:
        self.request, self.gpus, self.node, self.held = request, gpus, node, held
        self.used: set[MigKey] = set()
        self.pending: dict[GpuUuid, list[tuple[str, int, int]]] = {}

    def gpu_of(self, planned: PlannedMig, where: str) -> Gpu:
        gpu = self.gpus.get(planned.uuid)
        if gpu is None:
            known = ", ".join(sorted(self.gpus))
            raise InvalidAllocationError(f"{where}: GPU {planned.uuid} is not on this node (GPUs: {known})")
        if planned.index != gpu.index:
            raise InvalidAllocationError(
                f"{where}: GPU {planned.uuid} has index {gpu.index} on this node, the plan says {planned.index}"
            )
        if gpu.mig_mode is not MigMode.ENABLED:
            raise InvalidAllocationError(f"{where}: GPU {gpu.uuid} is not in MIG mode and takes no MIG instance")
        if planned.create and self.node.mode is not PlacementMode.DYNAMIC:
            raise InvalidAllocationError(
                f"{where}: this Runtime runs the static MIG strategy and creates no instance (plan an existing one)"
            )
        return gpu

    def _sibling(self, holder: MigInstanceInfo | None) -> bool:
        return holder is not None and holder.owner is not None and holder.owner.pod_uid == self.request.pod_uid

    def available(self, instance: MigInstanceInfo, *, shared: bool) -> bool:
        """Usable, not yet in this plan, and free (or, when ``shared``, held by a sibling container)."""
        holder = self.held.get(instance.key)
        return instance.usable and instance.key not in self.used and (
            holder is None or (shared and self._sibling(holder)))

    def take(self, gpu: Gpu, instance: MigInstanceInfo, *, create: bool) -> MigStep:
        holder = self.held.get(instance.key)
        self.used.add(instance.key)
        return MigStep(gpu, instance.start, existing=instance, created=holder.created if holder else create)

    def refusal(self, gpu: Gpu, instance: MigInstanceInfo, where: str) -> InvalidAllocationError:
        holder = self.held.get(instance.key)
        if holder is not None and holder.owner is not None and not self._sibling(holder):
            who = f"pod {holder.owner.pod_uid} container {holder.owner.container!r}"
            return InvalidAllocationError(f"{where}: MIG instance {instance.uuid} is held by {who}")
        if not instance.usable:
            return InvalidAllocationError(
                f"{where}: GPU instance {instance.gpu_instance_id} at start {instance.start} on GPU {gpu.uuid} "
                "has no compute instance and cannot be handed out"
            )
        return InvalidAllocationError(f"{where}: MIG instance {instance.uuid} is named twice in this plan")

    def by_uuid(self, gpu: Gpu, planned: PlannedMig, name: str, table: MigGpuModel | None, where: str) -> MigStep:
        match = [i for i in self.node.instances if i.gpu_uuid == gpu.uuid and i.uuid == planned.mig_uuid]
        if not match:
            raise InvalidAllocationError(f"{where}: no MIG instance {planned.mig_uuid} on GPU {gpu.uuid}")
        instance = match[0]
        if name and not same_profile(instance.profile, name, table):
            raise InvalidAllocationError(
                f"{where}: MIG instance {instance.uuid} is a {instance.profile}, the plan says {name}"
            )
        if planned.start is not None and planned.start != instance.start:
            raise InvalidAllocationError(
                f"{where}: MIG instance {instance.uuid} starts at {instance.start}, the plan says {planned.start}"
            )
        if not self.available(instance, shared=True):
            raise self.refusal(gpu, instance, where)
        return self.take(gpu, instance, create=False)

    def step(self, n: int, planned: PlannedMig) -> MigStep:
        where = f"{self.request.label}: mig[{n}]"
        gpu = self.gpu_of(planned, where)
        table = mig_table(gpu)
        profile = _canonical(table, planned.profile, where)
        name = profile.name if profile is not None else planned.profile
        if planned.mig_uuid:
            return self.by_uuid(gpu, planned, name, table, where)
        listed = [i for i in self.node.instances if i.gpu_uuid == gpu.uuid]
        kind = [i for i in listed if same_profile(i.profile, name, table)]
        if planned.start is None:
            free = sorted((i for i in kind if self.available(i, shared=False)), key=lambda i: i.start)
            if not free:
                raise InvalidAllocationError(f"{where}: no free {name} MIG instance on GPU {gpu.uuid}")
            return self.take(gpu, free[0], create=False)
        there = [i for i in kind if i.start == planned.start]
        usable = [i for i in there if self.available(i, shared=True)]
        if usable:
            return self.take(gpu, usable[0], create=planned.create)
        if there:
            raise self.refusal(gpu, there[0], where)
        if not planned.create:
            raise InvalidAllocationError(
                f"{where}: no free {name} MIG instance at start {planned.start} on GPU {gpu.uuid}"
            )
        if self.node.driver is None:
            raise InvalidAllocationError(f"{where}: this node cannot create MIG instances")
        if table is None or profile is None:
            raise InvalidAllocationError(
                f"{where}: GPU {gpu.uuid} ({gpu.model}) has no MIG profile table, so no placement can be checked"
            )
        occupied = [(i.profile, i.start, i.size) for i in listed] + self.pending.get(gpu.uuid, [])
        problem = _fit_problem(gpu, table, profile, planned.start, occupied)
        if problem is not None:
            raise InvalidAllocationError(f"{where}: GPU {gpu.uuid}: {problem}")
        self.pending.setdefault(gpu.uuid, []).append((profile.name, planned.start, profile.memory_slices))
        return MigStep(gpu, planned.start, profile=profile, created=True)


def plan_mig(
    request: ContainerAllocationRequest,
    gpus: Mapping[GpuUuid, Gpu],
    node: MigNode,
    held: Mapping[MigKey, MigInstanceInfo],
) -> tuple[MigStep, ...]:
    """Resolve ``request.mig`` on the node (module docstring). ``held``: instances held by recorded containers,
    with owner and ``created``. Raises :class:`InvalidAllocationError`; nothing is created here."""
    planner = _Planner(request, gpus, node, held)
    return tuple(planner.step(n, planned) for n, planned in enumerate(request.mig))


def realize(steps: Sequence[MigStep], node: MigNode, owner: MigOwner) -> tuple[MigInstanceInfo, ...]:
    """Create what ``steps`` need through ``node.driver`` and return the granted instances in step order, each
    with ``owner`` and its ``created`` flag. All or nothing: when a creation fails, the instances created so far
    are destroyed through the driver and the creation's error is raised, with a note naming any instance whose
    destruction failed too."""
    driver = node.driver
    created: list[MigInstanceInfo] = []
    granted: list[MigInstanceInfo] = []
    try:
        for step in steps:
            instance = step.existing
            if instance is None:
                if driver is None or step.profile is None:
                    raise InvalidAllocationError(f"GPU {step.gpu.uuid}: this node cannot create MIG instances")
                instance = driver.create_mig_instance(step.gpu.uuid, step.profile, step.start)
                created.append(instance)
            granted.append(attrs.evolve(instance, owner=owner, created=step.created))
    except Exception as error:
        for instance in reversed(created):
            try:
                if driver is not None:
                    driver.destroy_mig_instance(instance)
            except Exception as cleanup:  # the original error stays the one raised
                error.add_note(f"rollback: could not destroy MIG instance {instance.uuid}: {cleanup}")
        raise
    return tuple(granted)


def holders(records: Iterable[ContainerAllocation]) -> dict[MigKey, MigInstanceInfo]:
    """Instances held by ``records`` (oldest record first wins), as granted: with owner and ``created``."""
    held: dict[MigKey, MigInstanceInfo] = {}
    for record in records:
        for instance in record.mig:
            held.setdefault(instance.key, instance)
    return held


def with_owners(devices: Sequence[DeviceInfo], held: Mapping[MigKey, MigInstanceInfo]) -> tuple[DeviceInfo, ...]:
    """``devices`` with each listed MIG instance's ``owner`` and ``created`` taken from ``held`` (free: None)."""
    result = []
    for device in devices:
        instances = tuple(
            attrs.evolve(i, owner=held[i.key].owner, created=held[i.key].created) if i.key in held
            else attrs.evolve(i, owner=None, created=False)
            for i in device.mig_instances
        )
        result.append(attrs.evolve(device, mig_instances=instances))
    return tuple(result)


def unreferenced(
    removed: Iterable[ContainerAllocation], remaining: Iterable[ContainerAllocation]
) -> tuple[MigInstanceInfo, ...]:
    """Instances the Runtime created for ``removed`` records that no ``remaining`` record holds: what Release
    destroys (an instance shared by an init container and an app container goes with the last of them)."""
    kept = set(holders(remaining))
    doomed: dict[MigKey, MigInstanceInfo] = {}
    for record in removed:
        for instance in record.mig:
            if instance.created and instance.key not in kept:
                doomed.setdefault(instance.key, instance)
    return tuple(doomed.values())


def mig_gpu_of(device: DeviceInfo, *, mode: PlacementMode) -> MigGpu:
    """The scheduler's view (:class:`domain.mig.gpu.MigGpu`) of a listed GPU in MIG mode: one instance per GPU
    instance at its start (``instance_id`` = the NVML GPU instance id as text), owned ones assigned to their pod and
    container (``created`` only in dynamic mode).

    Raises :class:`domain.errors.InvalidRequestError` for a GPU not in MIG mode,
    :class:`UnknownMigModelError` for a model without table, and :class:`UnknownMigProfileError` /
    :class:`MigPlacementError` when the listing does not match the table.
    """
    seen: dict[int, MigInstanceInfo] = {}
    for instance in device.mig_instances:
        first = seen.setdefault(instance.gpu_instance_id, instance)
        if first.owner is None and instance.owner is not None:
            seen[instance.gpu_instance_id] = instance
    gpu = MigGpu.from_gpu(device.gpu, mode=mode)
    for instance in sorted(seen.values(), key=lambda i: i.start):
        profile = resolve_profile(gpu.model, instance.profile)
        gpu = gpu.with_free(profile, instance.start, instance_id=str(instance.gpu_instance_id))
    for instance in seen.values():
        if instance.owner is not None:
            created = instance.created and mode is PlacementMode.DYNAMIC
            gpu = gpu.assign(instance.start, instance.owner, created=created)
    return gpu
