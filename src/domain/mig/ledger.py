"""Placement-aware MIG books: which slices of each GPU are taken by which GPU instance, and who holds it.

Two levels (the first in :mod:`domain.mig.gpu`, re-exported here):

* :class:`MigGpu` — one GPU in MIG mode, an immutable value: its model table, placement mode and instances
  (profile, start, owner). Every constructor call checks the geometry, so an invalid GPU state cannot exist:
  starts are placements of the profile, no two instances share a memory or compute slice, no profile exceeds
  its instance limit, profiles belong to the GPU's model. Operations return a new value.
* :class:`MigNodeLedger` — one node: the *base* layout per GPU (the instances the Runtime reports, unowned)
  overlaid with the pods' records (:class:`MigPodAllocation`, keyed by pod UID). A record's booking takes the
  existing free instance at its start when there is one with the same profile; otherwise, in dynamic mode, it
  books a new instance that the Runtime creates at Allocate and destroys at release.

Modes (:class:`PlacementMode`): *static* — instances are pre-created (by an operator or mig-manager); pods
only take free ones and release gives them back. *Dynamic* — the scheduler chooses profile and start for new
instances; free instances still listed by the Runtime (e.g. not yet destroyed) occupy their slices and may be
reused by a pod of the same profile.

Invariants of :class:`MigNodeLedger`, as for :class:`domain.ledger.ClusterLedger`: ``reserve`` is
all-or-nothing across the node's GPUs and idempotent for an identical record; ``observe`` (restore from pod
annotations) and ``release`` are idempotent; ``observe`` never refuses a pod that exists. A record that cannot
be placed (its slices are taken by another record, or its static instance is gone) is *parked* in
:attr:`MigNodeLedger.conflicts`; the node then admits no pod until the conflict clears (release or a new
layout), so the books never hold an overlap and never hide one.

Source for the geometry: NVIDIA MIG user guide, "Supported MIG Profiles" and the placement diagrams
(see :mod:`domain.mig.profiles`).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from domain.errors import InvalidRequestError, LedgerCorruptedError
from domain.mig.errors import MigPlacementError, NoMigCapacityError, UnknownMigProfileError
from domain.mig.gpu import MigGpu, MigInstance, MigOwner, PlacementMode
from domain.mig.profiles import resolve_profile

__all__ = [
    "MigBooking",
    "MigGpu",
    "MigInstance",
    "MigNodeLedger",
    "MigOwner",
    "MigPodAllocation",
    "PlacementMode",
]


@attrs.frozen
class MigBooking:
    """One instance of a pod's plan: GPU ``gpu_index``, ``profile`` (canonical name of the GPU's model),
    ``start`` (memory slice), ``container`` and ``create`` (True: the Runtime creates the instance at Allocate,
    dynamic mode; False: an existing instance)."""

    gpu_index: int
    profile: str
    start: int
    container: str
    create: bool = False


@attrs.frozen
class MigPodAllocation:
    """A pod's MIG record on one node: its bookings (what pod annotations carry, for restore by ``observe``)."""

    pod_uid: str
    node: str
    bookings: tuple[MigBooking, ...]

    def __attrs_post_init__(self) -> None:
        places = [(b.gpu_index, b.start) for b in self.bookings]
        if len(set(places)) != len(places):
            raise InvalidRequestError(f"pod[{self.pod_uid}].bookings", places, "two bookings share one instance")


def _apply(gpus: dict[int, MigGpu], allocation: MigPodAllocation) -> None:
    """Apply every booking of ``allocation`` to ``gpus`` (mutated only on success). Raises
    :class:`MigPlacementError` (also for a profile the GPU's model does not have) or :class:`NoMigCapacityError`
    naming the booking."""
    staged = dict(gpus)
    for n, booking in enumerate(allocation.bookings):
        field = f"pod[{allocation.pod_uid}].bookings[{n}]"
        gpu = staged.get(booking.gpu_index)
        if gpu is None:
            raise MigPlacementError(
                f"{field}.gpu_index", booking.gpu_index, f"node {allocation.node} has no such MIG GPU"
            )
        try:
            profile = resolve_profile(gpu.model, booking.profile)
        except UnknownMigProfileError as error:  # a record from outside (restore) naming another model's profile
            raise MigPlacementError(f"{field}.profile", booking.profile, str(error)) from error
        owner = MigOwner(allocation.pod_uid, booking.container)
        existing = gpu.instance_at(booking.start)
        if existing is not None and existing.owner is None and existing.profile == profile:
            staged[booking.gpu_index] = gpu.assign(booking.start, owner, created=booking.create)
        elif gpu.mode is PlacementMode.STATIC or not booking.create:
            raise NoMigCapacityError(
                f"{field}: no free {profile.name} instance at start {booking.start} on gpu {booking.gpu_index}"
            )
        elif not gpu.fits(profile, booking.start):
            raise NoMigCapacityError(
                f"{field}: {profile.name} at start {booking.start} on gpu {booking.gpu_index} overlaps taken slices"
            )
        else:
            staged[booking.gpu_index] = gpu.create(profile, booking.start, owner)
    gpus.update(staged)


class MigNodeLedger:
    """The MIG books of one node (see module docstring for the invariants).

    ``gpus``: the node's MIG GPUs with their base layout (free instances only; owners come from records).
    """

    def __init__(self, name: str, gpus: Iterable[MigGpu] = ()) -> None:
        if not name:
            raise InvalidRequestError("node.name", name, "must not be empty")
        self.name = name
        self._base: dict[int, MigGpu] = {}
        self._live: dict[int, MigGpu] = {}
        self._records: dict[str, MigPodAllocation] = {}
        self.conflicts: dict[str, str] = {}
        """Records that could not be placed, by pod UID, with the reason; non-empty → the node admits nothing."""
        self.version = 0
        """Incremented on every change of the books."""
        self.update_gpus(gpus)

    # ------------------------------------------------------------------ views
    @property
    def admitting(self) -> bool:
        """True when no record is parked (the node may take new MIG pods)."""
        return not self.conflicts

    def gpus(self) -> tuple[MigGpu, ...]:
        """The live GPU states (base layout plus records), by index."""
        return tuple(self._live[i] for i in sorted(self._live))

    def gpu(self, index: int) -> MigGpu:
        """The live state of GPU ``index``. Raises :class:`KeyError`."""
        return self._live[index]

    def records(self) -> dict[str, MigPodAllocation]:
        """Records by pod UID (a copy), parked ones included."""
        return dict(self._records)

    def record(self, pod_uid: str) -> MigPodAllocation | None:
        """The record of one pod, or None."""
        return self._records.get(pod_uid)

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._records

    # ------------------------------------------------------------------ changes
    def update_gpus(self, gpus: Iterable[MigGpu]) -> None:
        """Replace the base layout (the Runtime's listing, health); records are re-applied, never dropped.

        Owners in the given GPUs are ignored (only records own instances); a created instance listed again by
        the Runtime is matched by its booking's start and profile. Records that no longer fit are parked.
        Raises :class:`InvalidRequestError` for duplicate GPU indexes.
        """
        base = {}
        for gpu in gpus:
            if gpu.index in base:
                raise InvalidRequestError(f"node[{self.name}].gpus.index", gpu.index, "must be unique")
            base[gpu.index] = gpu.unowned()
        self._base = base
        self._rederive()

    def _rederive(self) -> None:
        live = dict(self._base)
        conflicts: dict[str, str] = {}
        for uid, allocation in self._records.items():
            try:
                _apply(live, allocation)
            except (MigPlacementError, NoMigCapacityError) as error:
                conflicts[uid] = str(error)
        self._live, self.conflicts = live, conflicts
        self.version += 1

    def reserve(self, allocation: MigPodAllocation) -> None:
        """Book ``allocation`` if and only if every booking fits; idempotent for an identical record.

        Raises :class:`NoMigCapacityError` or :class:`MigPlacementError` (nothing changed) when a booking does
        not fit, :class:`InvalidRequestError` when the pod is booked differently or the record names another
        node, and :class:`LedgerCorruptedError` while records are parked.
        """
        if allocation.node != self.name:
            raise InvalidRequestError(f"pod[{allocation.pod_uid}].node", allocation.node, f"this is {self.name}")
        existing = self._records.get(allocation.pod_uid)
        if existing is not None:
            if existing == allocation:
                return
            raise InvalidRequestError(
                f"pod[{allocation.pod_uid}]", existing.node, "already booked with a different plan; release first"
            )
        if self.conflicts:
            raise LedgerCorruptedError(f"node={self.name!r}: parked MIG records: {sorted(self.conflicts)}")
        _apply(self._live, allocation)
        self._records[allocation.pod_uid] = allocation
        self.version += 1

    def observe(self, allocation: MigPodAllocation) -> bool:
        """Count a pod seen in the cluster (restore from its annotations): idempotent, never refused.

        A changed record replaces the old one. A record that does not fit is kept and parked (see
        :attr:`conflicts`). Returns True when the books changed. Raises :class:`InvalidRequestError` when the
        record names another node.
        """
        if allocation.node != self.name:
            raise InvalidRequestError(f"pod[{allocation.pod_uid}].node", allocation.node, f"this is {self.name}")
        existing = self._records.get(allocation.pod_uid)
        if existing == allocation:
            return False
        if existing is not None:
            self.release(allocation.pod_uid)
        self._records[allocation.pod_uid] = allocation
        try:
            _apply(self._live, allocation)
        except (MigPlacementError, NoMigCapacityError) as error:
            self.conflicts[allocation.pod_uid] = str(error)
        self.version += 1
        return True

    def release(self, pod_uid: str) -> MigPodAllocation | None:
        """Remove a pod's record and give its instances back (created ones are dropped from the base layout
        too: the Runtime destroys them); idempotent. Returns the removed record."""
        allocation = self._records.pop(pod_uid, None)
        if allocation is None:
            return None
        parked = self.conflicts.pop(pod_uid, None) is not None
        for booking in () if parked else allocation.bookings:
            live = self._live[booking.gpu_index].instance_at(booking.start)
            base = self._base.get(booking.gpu_index)
            if live is None or not live.created or base is None:
                continue
            listed = base.instance_at(booking.start)
            if listed is not None and listed.profile == live.profile:
                self._base[booking.gpu_index] = base.without(booking.start)
        if parked or self.conflicts:
            self._rederive()
            return allocation
        for index in {b.gpu_index for b in allocation.bookings}:
            if index in self._live:
                self._live[index] = self._live[index].release(pod_uid)
        self.version += 1
        return allocation

    def verify(self) -> list[str]:
        """Re-derive the live books from base layout plus records; returns the differences (empty when
        consistent). The live books are never changed here."""
        live = dict(self._base)
        problems = []
        for uid, allocation in self._records.items():
            if uid in self.conflicts:
                continue
            try:
                _apply(live, allocation)
            except (MigPlacementError, NoMigCapacityError) as error:
                problems.append(f"record {uid} no longer applies: {error}")
        for index in sorted(set(live) | set(self._live)):
            if live.get(index) != self._live.get(index):
                problems.append(f"gpu {index}: live instances differ from base layout plus records")
        return problems
