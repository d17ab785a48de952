"""``MigLayouts``: the driver's MIG state of some GPUs, kept in memory (simulated backend, in-process Runtime).

Each GPU in MIG mode is a :class:`domain.mig.gpu.MigGpu` (geometry checked on every change, NVIDIA MIG user guide
tables of :mod:`domain.mig.profiles`), so a simulated node can never hold an instance real hardware would refuse.
Identities are deterministic, so tests and a restarted simulator see the same values: the GPU instance id is
``start + 1`` (unique while instances cannot share a start slice), the compute instance id is 0 (NVML's first
compute instance in a GPU instance), and the MIG UUID is ``MIG-<uuid5(gpu uuid, profile, start)>``. Memory is the
profile's nominal memory (real NVML reports slightly less).
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.errors import UnknownMigModelError
from domain.mig.gpu import MigGpu, MigInstance, PlacementMode
from domain.mig.profiles import MigProfile
from domain.runtime.types import MigInstanceInfo

_NAMESPACE = uuidlib.UUID("2b1f7a8e-7c55-4a43-9d0e-6c6a726b6d69")  # fixed: "ljrk simulated MIG instances"


def simulated_mig_uuid(gpu: GpuUuid, profile: str, start: int) -> str:
    """``MIG-<uuid5>`` of an instance of ``profile`` at ``start`` on ``gpu`` (module docstring)."""
    return "MIG-" + str(uuidlib.uuid5(_NAMESPACE, f"{gpu}/{profile}/{start}"))


class MigLayouts:
    """MIG instances of the GPUs in MIG mode among ``gpus``, created from ``layouts`` (per GPU index:
    ``(profile, start)`` pairs, any spelling). Thread-safe.

    A MIG GPU whose model has no profile table (:func:`domain.mig.profiles.mig_model`) is kept without instances
    and refuses creation, so fixtures with any model stay valid. Raises :class:`InvalidRequestError` for a layout
    on a GPU that is not in MIG mode or not listed, :class:`domain.mig.errors.UnknownMigModelError` for a layout on
    a GPU without table, and :class:`domain.mig.errors.UnknownMigProfileError` /
    :class:`domain.mig.errors.MigPlacementError` for a bad layout.
    """

    def __init__(self, gpus: Iterable[Gpu], layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None) -> None:
        self._lock = threading.Lock()
        self._gpus: dict[GpuUuid, MigGpu] = {}
        self._untabled: set[GpuUuid] = set()
        layouts = layouts or {}
        listed = {g.index: g for g in gpus}
        for index in layouts:
            gpu = listed.get(index)
            if gpu is None or gpu.mig_mode is not MigMode.ENABLED:
                raise InvalidRequestError(f"gpu[{index}].mig_instances", list(layouts[index]),
                                          "only a listed GPU in MIG mode has MIG instances")
        for gpu in listed.values():
            if gpu.mig_mode is not MigMode.ENABLED:
                continue
            try:
                self._gpus[gpu.uuid] = MigGpu.from_gpu(gpu, mode=PlacementMode.DYNAMIC,
                                                       layout=layouts.get(gpu.index, ()))
            except UnknownMigModelError:
                if gpu.index in layouts:
                    raise
                self._untabled.add(gpu.uuid)

    def gpus(self) -> tuple[GpuUuid, ...]:
        """UUIDs of the GPUs in MIG mode whose model has a profile table."""
        return tuple(self._gpus)

    def instances(self, gpu: GpuUuid | None = None) -> tuple[MigInstanceInfo, ...]:
        """The instances of one GPU (None: all), by GPU then start."""
        with self._lock:
            chosen = [self._gpus[gpu]] if gpu is not None and gpu in self._gpus else (
                [] if gpu is not None else list(self._gpus.values()))
            return tuple(_info(mig, i) for mig in chosen for i in mig.instances)

    def create_mig_instance(self, gpu: GpuUuid, profile: MigProfile, start: int) -> MigInstanceInfo:
        """Create an instance of ``profile`` at memory slice ``start`` on ``gpu``. Raises
        :class:`InvalidRequestError` for a GPU not in MIG mode here and
        :class:`domain.mig.errors.MigPlacementError` when it does not fit."""
        with self._lock:
            mig = self._gpus.get(gpu)
            if mig is None:
                reason = "its model has no MIG profile table" if gpu in self._untabled else "no GPU in MIG mode here"
                raise InvalidRequestError("mig.gpu", gpu, reason)
            mig = mig.with_free(profile, start)
            self._gpus[gpu] = mig
            created = mig.instance_at(start)
            assert created is not None
            return _info(mig, created)

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        """Destroy ``instance`` (matched by GPU, start, GPU instance id and profile); one that is gone already is
        fine (idempotent)."""
        with self._lock:
            mig = self._gpus.get(instance.gpu_uuid)
            listed = None if mig is None else mig.instance_at(instance.start)
            if mig is None or listed is None or listed.profile.name != instance.profile:
                return
            if instance.gpu_instance_id == listed.start + 1:
                self._gpus[instance.gpu_uuid] = mig.without(instance.start)


def _info(mig: MigGpu, instance: MigInstance) -> MigInstanceInfo:
    profile = instance.profile
    return MigInstanceInfo(
        gpu_index=mig.index, gpu_uuid=GpuUuid(mig.uuid), gpu_instance_id=instance.start + 1, compute_instance_id=0,
        profile=profile.name, start=instance.start, size=profile.memory_slices,
        compute_slices=profile.compute_slices, memory_bytes=profile.memory_bytes,
        uuid=simulated_mig_uuid(GpuUuid(mig.uuid), profile.name, instance.start),
    )
