"""A fake ``pynvml`` module (nvidia-ml-py's names and constant values) for the NVML backend's tests.

:class:`FakeNvml` keeps GPUs as dicts (``uuid``, ``name``, ``memory`` bytes, optional ``util`` %, ``temp`` °C,
``power_mw``, ``used`` bytes, ``mig`` 1 for MIG mode, ``mig_layout`` ``[(GI profile constant, start[, [CI ids]])]``,
``procs`` ``[(pid, bytes)]``, ``events`` mask, ``minor``; topology: ``bus`` NVML bus id, ``numa`` node (absent:
NotSupported), ``nvlinks`` ``[(remote bus id, remote type)]`` per link, type 0 GPU or 2 NVSwitch, absent:
NotSupported); tests steer ``events`` (:meth:`FakeNvml.event`) and
``errors`` (``(function, GPU index) → NVML error code``, ``-1`` for calls without a device). MIG follows the
A100-SXM4-40GB profile table as NVML reports it. ``test_nvml_backend.test_fake_matches_the_real_module`` checks
the names and constants against the real module.
"""

from __future__ import annotations

import ctypes
import types
from typing import Any

from domain.units import MiB

XID, RECOVERY = 0x8, 0x8000
NOT_SUPPORTED, NOT_FOUND, IN_USE, INSUFFICIENT = 3, 6, 19, 23
CONSTANTS = {
    "NVML_ERROR_NOT_SUPPORTED": 3, "NVML_ERROR_DRIVER_NOT_LOADED": 9, "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12, "NVML_ERROR_GPU_IS_LOST": 15, "NVML_TEMPERATURE_GPU": 0,
    "NVML_DEVICE_MIG_ENABLE": 1, "nvmlEventTypeXidCriticalError": XID, "nvmlEventTypeGpuRecoveryAction": RECOVERY,
    "NVML_GPU_RECOVERY_ACTION_NONE": 0,
    "NVML_ERROR_INVALID_ARGUMENT": 2, "NVML_ERROR_NOT_FOUND": NOT_FOUND, "NVML_ERROR_IN_USE": IN_USE,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": INSUFFICIENT, "NVML_GPU_INSTANCE_PROFILE_COUNT": 18,
    "NVML_COMPUTE_INSTANCE_PROFILE_COUNT": 9, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED": 0,
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE": 0, "NVML_GPU_INSTANCE_PROFILE_2_SLICE": 1,
    "NVML_GPU_INSTANCE_PROFILE_3_SLICE": 2, "NVML_GPU_INSTANCE_PROFILE_4_SLICE": 3,
    "NVML_GPU_INSTANCE_PROFILE_7_SLICE": 4, "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1": 7,
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2": 9, "NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE": 0,
    "NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE": 1, "NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE": 2,
    "NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE": 3, "NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE": 4,
    "NVML_NVLINK_MAX_LINKS": 36, "NVML_FEATURE_ENABLED": 1, "NVML_NVLINK_DEVICE_TYPE_SWITCH": 2,
}

# A100-SXM4-40GB GPU instance profiles as NVML reports them (nvidia-smi mig -lgip): profile constant →
# (name, compute slices, memory MiB, max instances, placement size in memory slices).
A100_40GB_PROFILES = {
    0: ("MIG 1g.5gb", 1, 4864, 7, 1), 7: ("MIG 1g.5gb+me", 1, 4864, 1, 1), 9: ("MIG 1g.10gb", 1, 9856, 4, 2),
    1: ("MIG 2g.10gb", 2, 9856, 3, 2), 2: ("MIG 3g.20gb", 3, 19968, 2, 4), 3: ("MIG 4g.20gb", 4, 19968, 1, 4),
    4: ("MIG 7g.40gb", 7, 40192, 1, 8),
}
CI_PROFILE_OF_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


class Placement(ctypes.Structure):
    """Same fields as pynvml's ``c_nvmlGpuInstancePlacement_t``."""

    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class MigHandle:
    """A MIG device handle: parent GPU index, GPU instance id, compute instance id."""

    def __init__(self, index: int, gi: int, ci: int) -> None:
        self.index, self.gi, self.ci = index, gi, ci


class Handle:
    """A device handle (truthy, like a non-NULL ctypes pointer)."""

    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """A fake ``pynvml``: ``module`` is what the backend gets; tests steer ``gpus``, ``events`` and ``errors``."""

    def __init__(self, gpus: list[dict[str, Any]], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.events: list[types.SimpleNamespace] = []
        self.errors: dict[tuple[str, int], int] = {}  # (function, gpu index) → NVML error code
        self.calls: list[str] = []
        self.init_error = init_error
        # MIG state: gpu index → GI id → {"profile", "start", "size", "cis": {ci id: used bytes}}
        self.mig: dict[int, dict[int, dict[str, Any]]] = {}
        self.handles: dict[int, tuple[int, ...]] = {}  # ctypes handle value → (gpu, gi) or (gpu, gi, ci)
        for index, gpu in enumerate(gpus):
            for profile, start, *cis in gpu.get("mig_layout", []):
                self._add_gi(index, profile, start, cis[0] if cis else [0])

        class NVMLError(Exception):
            def __init__(self, value: int) -> None:
                super().__init__(value)
                self.value = value

            def __str__(self) -> str:
                return {3: "Not Supported", 10: "Timeout", 12: "NVML Shared Library Not Found",
                        15: "GPU is lost"}.get(self.value, f"NVML error {self.value}")

        self.error = NVMLError
        module = types.ModuleType("pynvml")
        for name, value in CONSTANTS.items():
            setattr(module, name, value)
        module.NVMLError = NVMLError  # type: ignore[attr-defined]
        module.c_nvmlGpuInstance_t = ctypes.c_void_p  # type: ignore[attr-defined]
        module.c_nvmlComputeInstance_t = ctypes.c_void_p  # type: ignore[attr-defined]
        module.c_nvmlGpuInstancePlacement_t = Placement  # type: ignore[attr-defined]
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(module, name, getattr(self, name))
        self.module = module

    def _check(self, function: str, handle: Handle | None = None) -> None:
        code = self.errors.get((function, -1 if handle is None else handle.index))
        if code is not None:
            raise self.error(code)

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")
        if self.init_error is not None:
            raise self.error(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:  # noqa: N802
        return Handle(index)

    def nvmlDeviceGetUUID(self, handle: Handle | MigHandle) -> str:  # noqa: N802
        if isinstance(handle, MigHandle):
            return f"MIG-{handle.index}{handle.gi:03d}{handle.ci:03d}-0000-4000-8000-000000000000"
        return str(self.gpus[handle.index]["uuid"])

    def nvmlDeviceGetName(self, handle: Handle) -> str:  # noqa: N802
        return str(self.gpus[handle.index]["name"])

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:  # noqa: N802
        self._check("minor", handle)
        return int(self.gpus[handle.index].get("minor", handle.index))

    def nvmlDeviceGetMemoryInfo(self, handle: Handle | MigHandle) -> types.SimpleNamespace:  # noqa: N802
        if isinstance(handle, MigHandle):
            self._check("mig_memory", Handle(handle.index))
            gi = self.mig[handle.index][handle.gi]
            total = A100_40GB_PROFILES[gi["profile"]][2] * MiB
            return types.SimpleNamespace(total=total, used=gi["cis"][handle.ci], free=total)
        self._check("memory", handle)
        gpu = self.gpus[handle.index]
        return types.SimpleNamespace(total=gpu["memory"], used=gpu.get("used", 0), free=gpu["memory"])

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:  # noqa: N802
        self._check("mig", handle)
        return [self.gpus[handle.index].get("mig", 0), 0]

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> types.SimpleNamespace:  # noqa: N802
        bus = self.gpus[handle.index].get("bus")
        if bus is None:
            raise self.error(NOT_SUPPORTED)
        return types.SimpleNamespace(busId=str(bus).encode())

    def nvmlDeviceGetNumaNodeId(self, handle: Handle) -> int:  # noqa: N802
        numa = self.gpus[handle.index].get("numa")
        if numa is None:
            raise self.error(NOT_SUPPORTED)
        return int(numa)

    def _link(self, handle: Handle, link: int) -> tuple[str, int]:
        links = self.gpus[handle.index].get("nvlinks")
        if links is None:
            raise self.error(NOT_SUPPORTED)
        if link >= len(links):
            raise self.error(2)  # NVML_ERROR_INVALID_ARGUMENT: past the GPU's links
        return links[link]  # type: ignore[no-any-return]

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:  # noqa: N802
        self._link(handle, link)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Handle, link: int) -> types.SimpleNamespace:  # noqa: N802
        return types.SimpleNamespace(busId=self._link(handle, link)[0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Handle, link: int) -> int:  # noqa: N802
        return self._link(handle, link)[1]

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, handle: Handle) -> int:  # noqa: N802
        self._check("supported", handle)
        return int(self.gpus[handle.index].get("events", XID | RECOVERY | 0x3))

    def nvmlDeviceRegisterEvents(self, handle: Handle, mask: int, event_set: str) -> None:  # noqa: N802
        self.calls.append(f"register {handle.index} {mask:#x}")

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> types.SimpleNamespace:  # noqa: N802
        self._check("wait")
        if not self.events:
            raise self.error(10)
        return self.events.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:  # noqa: N802
        self.calls.append("free")

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> types.SimpleNamespace:  # noqa: N802
        self._check("utilization", handle)
        return types.SimpleNamespace(gpu=self.gpus[handle.index].get("util", 0), memory=0)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:  # noqa: N802
        self._check("temperature", handle)
        return int(self.gpus[handle.index].get("temp", 40))

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:  # noqa: N802
        self._check("power", handle)
        return int(self.gpus[handle.index].get("power_mw", 100_000))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[types.SimpleNamespace]:  # noqa: N802
        self._check("processes", handle)
        processes = self.gpus[handle.index].get("procs", [])
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]

    # ------------------------------------------------------------------ MIG
    def _handle(self, *key: int) -> int:
        value = 1000 + len(self.handles)
        self.handles[value] = key
        return value

    def _add_gi(self, index: int, profile: int, start: int, cis: list[int]) -> int:
        gis = self.mig.setdefault(index, {})
        gi = min(set(range(1, 15)) - set(gis))
        gis[gi] = {"profile": profile, "start": start, "size": A100_40GB_PROFILES[profile][4],
                   "cis": dict.fromkeys(cis, 0)}
        return gi

    def _gi(self, handle: int) -> tuple[int, int, dict[str, Any]]:
        index, gi = self.handles[handle][:2]
        if gi not in self.mig.get(index, {}):
            raise self.error(NOT_FOUND)
        return index, gi, self.mig[index][gi]

    @staticmethod
    def _set_count(count_ref: Any, value: int) -> None:
        count_ref._obj.value = value  # ctypes.byref(c_uint()) → the c_uint

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, profile: int) -> types.SimpleNamespace:  # noqa: N802
        self._check("profiles", handle)
        if profile not in A100_40GB_PROFILES:
            raise self.error(NOT_SUPPORTED)
        name, slices, memory, count, _ = A100_40GB_PROFILES[profile]
        return types.SimpleNamespace(id=profile, name=name.encode(), sliceCount=slices, memorySizeMB=memory,
                                     instanceCount=count)

    def nvmlDeviceGetGpuInstances(self, handle: Handle, profile: int, array: Any, count_ref: Any) -> int:  # noqa: N802
        self._check("list", handle)
        found = [gi for gi, state in sorted(self.mig.get(handle.index, {}).items()) if state["profile"] == profile]
        for position, gi in enumerate(found):
            array[position] = self._handle(handle.index, gi)
        self._set_count(count_ref, len(found))
        return 0

    def nvmlGpuInstanceGetInfo(self, gi_handle: int) -> types.SimpleNamespace:  # noqa: N802
        _, gi, state = self._gi(gi_handle)
        placement = types.SimpleNamespace(start=state["start"], size=state["size"])
        return types.SimpleNamespace(id=gi, profileId=state["profile"], placement=placement)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(  # noqa: N802
        self, gi_handle: int, profile: int, engine: int
    ) -> types.SimpleNamespace:
        _, _, state = self._gi(gi_handle)
        slices = A100_40GB_PROFILES[state["profile"]][1]
        if profile != CI_PROFILE_OF_SLICES[slices]:  # only the compute instance spanning the GPU instance
            raise self.error(NOT_SUPPORTED)
        return types.SimpleNamespace(id=profile, sliceCount=slices, instanceCount=1)

    def nvmlGpuInstanceGetComputeInstances(  # noqa: N802
        self, gi_handle: int, profile: int, array: Any, count_ref: Any
    ) -> int:
        index, gi, state = self._gi(gi_handle)
        for position, ci in enumerate(sorted(state["cis"])):
            array[position] = self._handle(index, gi, ci)
        self._set_count(count_ref, len(state["cis"]))
        return 0

    def nvmlComputeInstanceGetInfo(self, ci_handle: int) -> types.SimpleNamespace:  # noqa: N802
        index, _, ci = self.handles[ci_handle]
        self._check("ci_info", Handle(index))
        return types.SimpleNamespace(id=ci)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:  # noqa: N802
        return 7

    def _mig_devices(self, index: int) -> list[MigHandle]:
        return [MigHandle(index, gi, ci) for gi, state in sorted(self.mig.get(index, {}).items())
                for ci in sorted(state["cis"])]

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, position: int) -> MigHandle:  # noqa: N802
        devices = self._mig_devices(handle.index)
        if position >= len(devices):
            raise self.error(NOT_FOUND)
        return devices[position]

    def nvmlDeviceGetGpuInstanceId(self, handle: MigHandle) -> int:  # noqa: N802
        return handle.gi

    def nvmlDeviceGetComputeInstanceId(self, handle: MigHandle) -> int:  # noqa: N802
        return handle.ci

    def nvmlDeviceCreateGpuInstanceWithPlacement(  # noqa: N802
        self, handle: Handle, profile: int, placement_ref: Any
    ) -> int:
        self._check("create_gi", handle)
        placement = placement_ref._obj  # ctypes.byref(structure) → the structure
        taken = 0
        for state in self.mig.get(handle.index, {}).values():
            taken |= ((1 << state["size"]) - 1) << state["start"]
        wanted = ((1 << A100_40GB_PROFILES[profile][4]) - 1) << placement.start
        if taken & wanted or placement.size != A100_40GB_PROFILES[profile][4]:
            raise self.error(INSUFFICIENT)
        gi = self._add_gi(handle.index, profile, placement.start, [])
        self.calls.append(f"create gi {gi}")
        return self._handle(handle.index, gi)

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: int, profile: int) -> int:  # noqa: N802
        index, gi, state = self._gi(gi_handle)
        self._check("create_ci", Handle(index))
        ci = min(set(range(8)) - set(state["cis"]))
        state["cis"][ci] = 0
        self.calls.append(f"create ci {gi}/{ci}")
        return self._handle(index, gi, ci)

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, gi: int) -> int:  # noqa: N802
        if gi not in self.mig.get(handle.index, {}):
            raise self.error(NOT_FOUND)
        return self._handle(handle.index, gi)

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle: int, ci: int) -> int:  # noqa: N802
        index, gi, state = self._gi(gi_handle)
        if ci not in state["cis"]:
            raise self.error(NOT_FOUND)
        return self._handle(index, gi, ci)

    def nvmlComputeInstanceDestroy(self, ci_handle: int) -> int:  # noqa: N802
        index, gi, ci = self.handles[ci_handle]
        self._check("destroy_ci", Handle(index))
        del self.mig[index][gi]["cis"][ci]
        self.calls.append(f"destroy ci {gi}/{ci}")
        return 0

    def nvmlGpuInstanceDestroy(self, gi_handle: int) -> int:  # noqa: N802
        index, gi, state = self._gi(gi_handle)
        self._check("destroy_gi", Handle(index))
        if state["cis"]:
            raise self.error(IN_USE)
        del self.mig[index][gi]
        self.calls.append(f"destroy gi {gi}")
        return 0

    def event(self, index: int | None, kind: int, data: int) -> None:
        device = None if index is None else Handle(index)
        self.events.append(types.SimpleNamespace(device=device, eventType=kind, eventData=data))
