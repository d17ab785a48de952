"""One GPU in MIG mode as an immutable value: its profile table, placement mode and GPU instances.

Every :class:`MigGpu` construction checks the geometry (NVIDIA MIG user guide, "Supported MIG Profiles" and the
placement diagrams; see :mod:`domain.mig.profiles`): starts are placements of their profile, no two instances
share a memory or compute slice, no profile exceeds its instance limit, profiles belong to the GPU's model. So an
invalid GPU state cannot exist; operations return new values. The node-level books are :mod:`domain.mig.ledger`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, Health, MigMode
from domain.mig.errors import MigPlacementError
from domain.mig.profiles import MigGpuModel, MigProfile, mig_model, resolve_profile


class PlacementMode(enum.Enum):
    """How instances come to exist on a MIG GPU (see module docstring)."""

    STATIC = "static"
    DYNAMIC = "dynamic"


@attrs.frozen
class MigOwner:
    """The holder of an instance: pod UID and the container the device plugin hands it to."""

    pod_uid: str
    container: str


@attrs.frozen
class MigInstance:
    """One GPU instance: ``profile``, ``start`` (memory slice), ``owner`` (None: free), ``instance_id`` (the
    Runtime's id, e.g. the NVML GPU instance id, when known) and ``created`` (True: made for its owner, so it
    disappears at release; False: pre-existing, it turns free at release)."""

    profile: MigProfile
    start: int
    owner: MigOwner | None = None
    instance_id: str | None = None
    created: bool = False


def _by_start(instances: Iterable[MigInstance]) -> tuple[MigInstance, ...]:
    return tuple(sorted(instances, key=lambda i: i.start))


@attrs.frozen
class MigGpu:
    """One GPU in MIG mode and its instances (immutable; see module docstring for the checks).

    Fields: ``index`` (NVML index), ``uuid``, ``model`` (profile table), ``mode``, ``instances`` (sorted by
    start), ``healthy``. Derived: ``memory_used`` and ``compute_used``, bit masks of taken slices (bit ``i`` =
    slice ``i``). Raises :class:`MigPlacementError` (field ``gpu[<index>].instance[<start>]``) for a start that is
    not a placement of its profile, a profile of another model, an overlap, too many instances of a profile, a
    created instance without owner, or a created instance on a static GPU.
    """

    index: int
    uuid: str
    model: MigGpuModel
    mode: PlacementMode
    instances: tuple[MigInstance, ...] = attrs.field(default=(), converter=_by_start)
    healthy: bool = True
    memory_used: int = attrs.field(init=False, eq=False)
    compute_used: int = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        memory = compute = 0
        counts: dict[str, int] = {}
        for instance in self.instances:
            profile, start = instance.profile, instance.start
            field = f"gpu[{self.index}].instance[{start}]"
            if self.model.lookup(profile.name) != profile:
                raise MigPlacementError(field, profile.name, f"not a profile of {self.model.key}")
            if start not in profile.placements:
                raise MigPlacementError(
                    field, profile.name, f"start {start} is not a placement of {profile.name} {profile.placements}"
                )
            if memory & profile.memory_mask(start) or compute & profile.compute_mask(start):
                raise MigPlacementError(field, profile.name, "overlaps another instance's slices")
            counts[profile.name] = counts.get(profile.name, 0) + 1
            if counts[profile.name] > profile.max_instances:
                raise MigPlacementError(field, profile.name, f"more than {profile.max_instances} instances")
            if instance.created and instance.owner is None:
                raise MigPlacementError(field, profile.name, "a created instance needs an owner")
            if instance.created and self.mode is PlacementMode.STATIC:
                raise MigPlacementError(field, profile.name, "a static GPU only has pre-created instances")
            memory |= profile.memory_mask(start)
            compute |= profile.compute_mask(start)
        object.__setattr__(self, "memory_used", memory)
        object.__setattr__(self, "compute_used", compute)

    @classmethod
    def from_layout(
        cls,
        index: int,
        uuid: str,
        model: MigGpuModel | str,
        *,
        mode: PlacementMode,
        layout: Sequence[tuple[str, int]] = (),
        healthy: bool = True,
    ) -> MigGpu:
        """A GPU with free pre-created instances given as ``(profile name, start)`` pairs (any spelling).

        Raises :class:`UnknownMigProfileError` for an unknown name and :class:`MigPlacementError` for a bad
        layout.
        """
        table = model if isinstance(model, MigGpuModel) else mig_model(model)
        instances = tuple(MigInstance(resolve_profile(table, name), start) for name, start in layout)
        return cls(index, uuid, table, mode, instances, healthy)

    @classmethod
    def from_gpu(
        cls, gpu: Gpu, *, mode: PlacementMode, layout: Sequence[tuple[str, int]] = ()
    ) -> MigGpu:
        """The MIG view of an inventory :class:`Gpu`; its model is matched by name and memory.

        Raises :class:`InvalidRequestError` (field ``gpu[<index>].mig_mode``) when the GPU is not in MIG mode: a
        time-sharing GPU never receives MIG pods. Raises :class:`UnknownMigModelError` for a model without table.
        """
        if gpu.mig_mode is not MigMode.ENABLED:
            raise InvalidRequestError(
                f"gpu[{gpu.index}].mig_mode", gpu.mig_mode.value, "only GPUs in MIG mode take MIG instances"
            )
        table = mig_model(gpu.model, memory_bytes=gpu.memory_bytes)
        healthy = gpu.health is Health.HEALTHY
        return cls.from_layout(gpu.index, gpu.uuid, table, mode=mode, layout=layout, healthy=healthy)

    # ------------------------------------------------------------------ views
    def instance_at(self, start: int) -> MigInstance | None:
        """The instance starting at memory slice ``start``, or None."""
        for instance in self.instances:
            if instance.start == start:
                return instance
        return None

    def count(self, profile: MigProfile) -> int:
        """Instances of ``profile`` on the GPU, free or owned."""
        return sum(1 for i in self.instances if i.profile is profile or i.profile == profile)

    def free_instances(self, profile: MigProfile) -> tuple[MigInstance, ...]:
        """Unowned instances of ``profile``, by start."""
        return tuple(i for i in self.instances if i.owner is None and (i.profile is profile or i.profile == profile))

    def owned_by(self, pod_uid: str) -> tuple[MigInstance, ...]:
        """Instances held by pod ``pod_uid``, by start."""
        return tuple(i for i in self.instances if i.owner is not None and i.owner.pod_uid == pod_uid)

    def fits(self, profile: MigProfile, start: int) -> bool:
        """True when a new instance of ``profile`` may be placed at ``start`` (valid start, slices free, below
        the instance limit)."""
        return (
            start in profile.placements
            and not self.memory_used & profile.memory_mask(start)
            and not self.compute_used & profile.compute_mask(start)
            and self.count(profile) < profile.max_instances
        )

    def free_starts(self, profile: MigProfile) -> tuple[int, ...]:
        """Starts where a new instance of ``profile`` fits (see :meth:`fits`), ascending."""
        return tuple(s for s in profile.placements if self.fits(profile, s))

    # ------------------------------------------------------------------ changes (return new values)
    def _replace(self, instances: Iterable[MigInstance]) -> MigGpu:
        return MigGpu(self.index, self.uuid, self.model, self.mode, tuple(instances), self.healthy)

    def with_free(self, profile: MigProfile, start: int, *, instance_id: str | None = None) -> MigGpu:
        """Add a free pre-created instance (the Runtime listed it). Raises :class:`MigPlacementError`."""
        return self._replace((*self.instances, MigInstance(profile, start, None, instance_id)))

    def assign(self, start: int, owner: MigOwner, *, created: bool = False) -> MigGpu:
        """Give the free instance at ``start`` to ``owner``; ``created`` marks it as made for the owner (it then
        disappears at release). Raises :class:`MigPlacementError` when there is no instance at ``start``, it is
        owned, or ``created`` is set on a static GPU."""
        instance = self.instance_at(start)
        field = f"gpu[{self.index}].instance[{start}]"
        if instance is None:
            raise MigPlacementError(field, None, "no instance starts here")
        if instance.owner is not None:
            raise MigPlacementError(field, instance.profile.name, f"already held by pod {instance.owner.pod_uid}")
        taken = attrs.evolve(instance, owner=owner, created=created)
        return self._replace(taken if i is instance else i for i in self.instances)

    def create(self, profile: MigProfile, start: int, owner: MigOwner) -> MigGpu:
        """Book a new instance of ``profile`` at ``start`` for ``owner`` (dynamic mode only).

        Raises :class:`MigPlacementError` on a static GPU, a start that is not a placement, taken slices or the
        instance limit.
        """
        if self.mode is not PlacementMode.DYNAMIC:
            raise MigPlacementError(
                f"gpu[{self.index}].mode", self.mode.value, "instances are created only in dynamic mode"
            )
        return self._replace((*self.instances, MigInstance(profile, start, owner, None, created=True)))

    def release(self, pod_uid: str) -> MigGpu:
        """Give back every instance of ``pod_uid``: created ones disappear, pre-created ones turn free."""
        kept = []
        for instance in self.instances:
            if instance.owner is None or instance.owner.pod_uid != pod_uid:
                kept.append(instance)
            elif not instance.created:
                kept.append(attrs.evolve(instance, owner=None))
        return self._replace(kept)

    def without(self, start: int) -> MigGpu:
        """Drop the free instance at ``start`` (the Runtime destroyed it). Raises :class:`MigPlacementError`
        when it is held by a pod or absent."""
        instance = self.instance_at(start)
        field = f"gpu[{self.index}].instance[{start}]"
        if instance is None:
            raise MigPlacementError(field, start, "no instance starts here")
        if instance.owner is not None:
            raise MigPlacementError(field, start, f"held by pod {instance.owner.pod_uid}")
        return self._replace(i for i in self.instances if i is not instance)

    def unowned(self) -> MigGpu:
        """The base layout: created instances removed, pre-created ones free."""
        return self._replace(attrs.evolve(i, owner=None) for i in self.instances if not i.created)
