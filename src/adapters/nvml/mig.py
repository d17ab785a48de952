"""MIG through NVML: list, create and destroy GPU instances (GI) and compute instances (CI) of one GPU.

NVML API reference ("Multi Instance GPU Management"), calls as ``pynvml`` (nvidia-ml-py) exposes them:

* Profiles: ``nvmlDeviceGetGpuInstanceProfileInfo(device, NVML_GPU_INSTANCE_PROFILE_*)`` (v2: ``id``,
  ``sliceCount`` compute slices, ``instanceCount``, ``memorySizeMB``, ``name`` such as ``"MIG 3g.40gb"``) for
  every profile constant below ``NVML_GPU_INSTANCE_PROFILE_COUNT``; unsupported ones raise and are skipped. The
  name resolves to the canonical name of :mod:`domain.mig.profiles` when the model has a table.
* Listing: ``nvmlDeviceGetGpuInstances(device, profileId, array, byref(count))`` per profile,
  ``nvmlGpuInstanceGetInfo`` (``id``, ``placement.start`` / ``placement.size`` in memory slices),
  ``nvmlGpuInstanceGetComputeInstanceProfileInfo`` + ``nvmlGpuInstanceGetComputeInstances`` +
  ``nvmlComputeInstanceGetInfo`` (CI ``id``), and the MIG devices ``nvmlDeviceGetMaxMigDeviceCount`` /
  ``nvmlDeviceGetMigDeviceHandleByIndex`` with ``nvmlDeviceGetGpuInstanceId``, ``nvmlDeviceGetComputeInstanceId``
  and ``nvmlDeviceGetUUID`` (the ``MIG-…`` UUID) and ``nvmlDeviceGetMemoryInfo`` (bytes; per-instance use).
* Creation: ``nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, byref(placement))``, then one CI spanning
  the GI: ``nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE,
  NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)`` with ``n`` the profile's compute slices and
  ``nvmlGpuInstanceCreateComputeInstance`` (what ``nvidia-smi mig -cgi <profile> -C`` does). If anything after
  the GI fails, the CI (if made) and the GI are destroyed before the error is raised: no half-created instance.
* Destruction: ``nvmlDeviceGetGpuInstanceById``, ``nvmlGpuInstanceGetComputeInstanceById``,
  ``nvmlComputeInstanceDestroy``, ``nvmlGpuInstanceDestroy``. A GI that is gone (NVML_ERROR_NOT_FOUND or
  INVALID_ARGUMENT) or whose id now sits at another start is treated as destroyed.

NVML has no per-instance utilization (``nvmlDeviceGetUtilizationRates`` is NotSupported on MIG devices), so MIG
samples carry memory only. Creating and destroying needs root (NVML_ERROR_NO_PERMISSION otherwise).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

import attrs

from domain.gpu import Gpu
from domain.mig.profiles import MigProfile, normalise_profile_name
from domain.runtime.mig import mig_table
from domain.runtime.types import MigInstanceInfo, MigSample
from domain.units import MiB
from ports.gpu_backend import GpuBackendError

log = logging.getLogger(__name__)

# nvml.h values (the same as pynvml's); read from the module when it has them.
_GI_PROFILE_COUNT = 18
_CI_PROFILE_COUNT = 9
_ENGINE_SHARED = 0
_ERROR_INVALID_ARGUMENT = 2
_ERROR_NOT_FOUND = 6
_CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
"""Compute slices → ``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE``."""


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@attrs.frozen
class GiProfile:
    """One GPU instance profile NVML reports for a GPU: ``id`` (profileId), ``name`` (canonical when the model has
    a table), ``slices`` (compute), ``memory_bytes``, ``instance_count`` (max per GPU)."""

    id: int
    name: str
    slices: int
    memory_bytes: int
    instance_count: int


class NvmlMig:
    """MIG calls on the injected ``pynvml`` module (module docstring); ``const(name, default)`` reads an NVML
    constant. Callers serialise creation and destruction."""

    def __init__(self, nvml: Any, const: Callable[[str, int], int]) -> None:
        self._nvml = nvml
        self._const = const
        self._profiles: dict[str, dict[int, GiProfile]] = {}

    def _code(self, error: BaseException) -> int | None:
        value = getattr(error, "value", None)
        return value if isinstance(value, int) else None

    # ------------------------------------------------------------------ profiles
    def profiles(self, gpu: Gpu, handle: object) -> dict[int, GiProfile]:
        """The GPU's GI profiles by profileId (read once per GPU)."""
        if gpu.uuid in self._profiles:
            return self._profiles[gpu.uuid]
        nvml, table = self._nvml, mig_table(gpu)
        found: dict[int, GiProfile] = {}
        for constant in range(self._const("NVML_GPU_INSTANCE_PROFILE_COUNT", _GI_PROFILE_COUNT)):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
            except nvml.NVMLError:
                continue  # not supported on this GPU
            slices, memory = int(info.sliceCount), int(info.memorySizeMB) * MiB
            raw = _text(getattr(info, "name", b"")) or f"{slices}g.{round(memory / 1024 / MiB)}gb"
            known = table.lookup(raw) if table is not None else None
            name = known.name if known is not None else normalise_profile_name(raw)
            found[int(info.id)] = GiProfile(int(info.id), name, slices, memory, int(info.instanceCount))
        self._profiles[gpu.uuid] = found
        return found

    # ------------------------------------------------------------------ listing
    def mig_devices(self, handle: object) -> dict[tuple[int, int], tuple[str, object]]:
        """``{(GI id, CI id): (MIG UUID, MIG device handle)}`` of the GPU's MIG devices."""
        nvml = self._nvml
        found: dict[tuple[int, int], tuple[str, object]] = {}
        for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except nvml.NVMLError:
                continue  # NotFound: no MIG device at this index
            key = (int(nvml.nvmlDeviceGetGpuInstanceId(device)), int(nvml.nvmlDeviceGetComputeInstanceId(device)))
            found[key] = (_text(nvml.nvmlDeviceGetUUID(device)), device)
        return found

    def _gpu_instances(self, handle: object, profile: GiProfile) -> list[object]:
        nvml = self._nvml
        array = (nvml.c_nvmlGpuInstance_t * max(1, profile.instance_count))()
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetGpuInstances(handle, profile.id, array, ctypes.byref(count))
        return [array[i] for i in range(count.value)]

    def _compute_instances(self, gpu_instance: object) -> list[int]:
        nvml = self._nvml
        ids: set[int] = set()
        for constant in range(self._const("NVML_COMPUTE_INSTANCE_PROFILE_COUNT", _CI_PROFILE_COUNT)):
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, constant, self._const("NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", _ENGINE_SHARED))
            except nvml.NVMLError:
                continue
            array = (nvml.c_nvmlComputeInstance_t * max(1, int(info.instanceCount)))()
            count = ctypes.c_uint(0)
            nvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, int(info.id), array, ctypes.byref(count))
            ids.update(int(nvml.nvmlComputeInstanceGetInfo(array[i]).id) for i in range(count.value))
        return sorted(ids)

    def instances(self, gpu: Gpu, handle: object) -> tuple[MigInstanceInfo, ...]:
        """Every GI × CI of the GPU by start (a GI without CI once, with ``compute_instance_id`` None). Raises
        ``NVMLError``."""
        nvml = self._nvml
        devices = self.mig_devices(handle)
        found = []
        for profile in self.profiles(gpu, handle).values():
            for gpu_instance in self._gpu_instances(handle, profile):
                info = nvml.nvmlGpuInstanceGetInfo(gpu_instance)
                gi, start, size = int(info.id), int(info.placement.start), int(info.placement.size)
                computes: list[int | None] = [*self._compute_instances(gpu_instance)] or [None]
                for ci in computes:
                    uuid = devices[(gi, ci)][0] if ci is not None and (gi, ci) in devices else ""
                    found.append(MigInstanceInfo(gpu.index, gpu.uuid, gi, ci, profile.name, start, size,
                                                 profile.slices, profile.memory_bytes, uuid))
        return tuple(sorted(found, key=lambda i: (i.start, i.gpu_instance_id, i.compute_instance_id or 0)))

    def samples(self, handle: object) -> tuple[MigSample, ...]:
        """Memory in use of every MIG device (bytes); a failed read is None with the reason."""
        nvml = self._nvml
        result = []
        for uuid, device in self.mig_devices(handle).values():
            try:
                result.append(MigSample(uuid, int(nvml.nvmlDeviceGetMemoryInfo(device).used)))
            except nvml.NVMLError as error:
                result.append(MigSample(uuid, error=f"memory: {error}"))
        return tuple(result)

    # ------------------------------------------------------------------ changes
    def create(self, gpu: Gpu, handle: object, profile: MigProfile, start: int) -> MigInstanceInfo:
        """GI of ``profile`` at ``start`` plus a CI spanning it (module docstring). Raises :class:`GpuBackendError`
        naming the GPU, the profile, the start and the failing call."""
        nvml = self._nvml
        what = f"GPU {gpu.uuid}: MIG {profile.name} at start {start}"
        matches = [p for p in self.profiles(gpu, handle).values() if p.name == profile.name]
        if not matches:
            raise GpuBackendError(f"{what}: NVML reports no such GPU instance profile on this GPU")
        gi_profile = matches[0]
        placement = nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, profile.memory_slices
        try:
            gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, gi_profile.id, ctypes.byref(placement))
        except nvml.NVMLError as error:
            raise GpuBackendError(f"{what}: nvmlDeviceCreateGpuInstanceWithPlacement failed: {error}") from error
        compute_instance = None
        step = "nvmlGpuInstanceGetComputeInstanceProfileInfo"
        try:
            slices = profile.compute_slices
            default = _CI_PROFILE_BY_SLICES.get(slices, 0)
            constant = self._const(f"NVML_COMPUTE_INSTANCE_PROFILE_{slices}_SLICE", default)
            engine = self._const("NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", _ENGINE_SHARED)
            ci_profile = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gpu_instance, constant, engine)
            step = "nvmlGpuInstanceCreateComputeInstance"
            compute_instance = nvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, int(ci_profile.id))
            step = "nvmlGpuInstanceGetInfo"
            info = nvml.nvmlGpuInstanceGetInfo(gpu_instance)
            step = "nvmlComputeInstanceGetInfo"
            gi, ci = int(info.id), int(nvml.nvmlComputeInstanceGetInfo(compute_instance).id)
            step = "nvmlDeviceGetMigDeviceHandleByIndex"
            uuid = self.mig_devices(handle).get((gi, ci), ("", None))[0]
            if not uuid:
                raise GpuBackendError(f"{what}: no MIG device for GPU instance {gi} compute instance {ci}")
        except (nvml.NVMLError, GpuBackendError) as error:
            self._roll_back(what, gpu_instance, compute_instance)
            if isinstance(error, GpuBackendError):
                raise
            raise GpuBackendError(f"{what}: {step} failed: {error}; the GPU instance was destroyed again") from error
        return MigInstanceInfo(gpu.index, gpu.uuid, gi, ci, profile.name, int(info.placement.start),
                               int(info.placement.size), gi_profile.slices, gi_profile.memory_bytes, uuid)

    def _roll_back(self, what: str, gpu_instance: object, compute_instance: object | None) -> None:
        nvml = self._nvml
        if compute_instance is not None:
            try:
                nvml.nvmlComputeInstanceDestroy(compute_instance)
            except nvml.NVMLError as error:
                log.error("%s: roll back: nvmlComputeInstanceDestroy failed: %s", what, error)
        try:
            nvml.nvmlGpuInstanceDestroy(gpu_instance)
        except nvml.NVMLError as error:
            log.error("%s: roll back: nvmlGpuInstanceDestroy failed: %s; destroy it by hand", what, error)

    def destroy(self, handle: object, instance: MigInstanceInfo) -> None:
        """Destroy ``instance``'s CI then GI (module docstring). Raises :class:`GpuBackendError` (e.g. in use)."""
        nvml = self._nvml
        what = f"GPU {instance.gpu_uuid}: MIG {instance.profile} GPU instance {instance.gpu_instance_id}"
        gone = (self._const("NVML_ERROR_NOT_FOUND", _ERROR_NOT_FOUND),
                self._const("NVML_ERROR_INVALID_ARGUMENT", _ERROR_INVALID_ARGUMENT))
        try:
            gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(handle, instance.gpu_instance_id)
            if int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).placement.start) != instance.start:
                log.warning("%s now starts elsewhere; the instance to destroy is gone", what)
                return
        except nvml.NVMLError as error:
            if self._code(error) in gone:
                return
            raise GpuBackendError(f"{what}: nvmlDeviceGetGpuInstanceById failed: {error}") from error
        if instance.compute_instance_id is not None:
            try:
                compute = nvml.nvmlGpuInstanceGetComputeInstanceById(gpu_instance, instance.compute_instance_id)
                nvml.nvmlComputeInstanceDestroy(compute)
            except nvml.NVMLError as error:
                if self._code(error) not in gone:
                    raise GpuBackendError(f"{what}: destroying compute instance failed: {error}") from error
        try:
            nvml.nvmlGpuInstanceDestroy(gpu_instance)
        except nvml.NVMLError as error:
            raise GpuBackendError(f"{what}: nvmlGpuInstanceDestroy failed: {error}") from error
