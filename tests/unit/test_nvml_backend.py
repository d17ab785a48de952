"""NVML backend (``adapters.nvml``) through an injected fake ``pynvml`` module, plus ``/proc`` attribution.

Behaviours covered:
- the fake only uses names the real ``pynvml`` (nvidia-ml-py) has, with the same constant values;
- a missing NVML library (nvmlInit → LibraryNotFound) or driver raises GpuBackendUnavailableError; on this
  machine the real module does the same unless a GPU is present;
- inventory: index, UUID, name, memory, MIG mode (NotSupported → disabled);
- health: a critical XID marks its GPU unhealthy; application XIDs 13, 31, 43, 45, 68, 109 do not but are
  counted; an XID without a device marks every GPU; recovery after the quiet period, by ``reset_health`` and by
  a recovery-action-NONE event; a recovery action required marks unhealthy; a GPU without event support stays
  healthy and polling then sleeps instead of spinning; an unexpected event-wait error sleeps too;
- sampling: utilization, memory, temperature, power in W; NotSupported metrics are None with the reason; a lost
  GPU turns unhealthy at the next poll; per-container memory from processes attributed by pod UID (cgroup) and,
  within one pod, by ``LJRK_CONTAINER_NAME``;
- close frees the event set and shuts NVML down once;
- MIG: listing GPU instances × compute instances (ids, canonical profile from the NVML name, placement, memory,
  MIG UUID; a GPU instance without compute instance; a listing error leaves the GPU's instances empty), creation
  with placement + compute instance, destruction (also of an instance already gone), an NVML error mid-creation
  (compute instance, or the lookup after it) destroying what was made, overlap and in-use refusals, per-instance
  memory samples;
- ``/proc`` parsing for cgroupfs and systemd pod cgroups and the process environment;
- real NVML, only with ``LJRK_GPU_TESTS=1`` (marker ``gpu``): inventory (MIG instances read, never changed) and one
  sample.
"""

from __future__ import annotations

import ctypes
import logging
import os
import types
from pathlib import Path
from typing import Any

import pytest

from adapters.nvml import NvmlGpuBackend, container_of_pid, pod_uid_of_pid
from domain.gpu import GpuUuid, Health, MigMode
from domain.mig.profiles import resolve_profile
from domain.runtime.book import AllocationBook
from domain.runtime.types import ContainerAllocationRequest, MigInstanceInfo, PlannedGpu
from domain.units import GiB, MiB
from ports.gpu_backend import GpuBackendError, GpuBackendUnavailableError

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


def two_gpus() -> list[dict[str, Any]]:
    return [
        {"uuid": "GPU-0000", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GiB, "util": 55, "temp": 61,
         "power_mw": 212_500, "used": 3 * GiB},
        {"uuid": "GPU-1111", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GiB, "mig": 1},
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def make(fake: FakeNvml, clock: Clock | None = None, **options: Any) -> NvmlGpuBackend:
    clock = clock or Clock()
    return NvmlGpuBackend(fake.module, clock=clock, sleep=clock.sleep, **options)


def test_fake_matches_the_real_module() -> None:
    import pynvml

    fake = FakeNvml(two_gpus())
    for name in dir(fake.module):
        if name.startswith(("nvml", "NVML", "c_nvml")):
            assert hasattr(pynvml, name), name
    assert [f for f, _ in Placement._fields_] == [f for f, _ in pynvml.c_nvmlGpuInstancePlacement_t._fields_]
    for name, value in CONSTANTS.items():
        assert getattr(pynvml, name) == value, name


@pytest.mark.parametrize("code", [12, 9])
def test_missing_library_or_driver_is_unavailable(code: int) -> None:
    with pytest.raises(GpuBackendUnavailableError, match="NVML is unavailable"):
        make(FakeNvml(two_gpus(), init_error=code))


def test_real_module_without_a_gpu_is_unavailable() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(GpuBackendUnavailableError, match="nvmlInit failed"):
            NvmlGpuBackend.open()
        return
    pynvml.nvmlShutdown()
    pytest.skip("this machine has NVML; covered by the gpu-marked test")


def test_inventory() -> None:
    fake = FakeNvml(two_gpus())
    fake.errors[("mig", 0)] = 3
    backend = make(fake)
    first, second = (d.gpu for d in backend.devices())
    assert (first.index, first.uuid, first.model, first.memory_bytes) == (0, "GPU-0000", "NVIDIA A100-SXM4-40GB",
                                                                          40 * GiB)
    assert first.mig_mode is MigMode.DISABLED
    assert second.mig_mode is MigMode.ENABLED
    assert backend.name == "nvml"
    assert fake.calls[:3] == ["init", f"register 0 {XID | RECOVERY:#x}", f"register 1 {XID | RECOVERY:#x}"]


def test_device_minor_numbers_come_from_nvml_and_a_failure_leaves_none() -> None:
    gpus = two_gpus()
    gpus[0]["minor"] = 4
    fake = FakeNvml(gpus)
    fake.errors[("minor", 1)] = 3
    assert make(fake).device_minors() == {"GPU-0000": 4}


def test_critical_xid_marks_the_gpu_and_application_xids_do_not() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    for xid in (13, 31, 43, 45, 68, 109):
        fake.event(0, XID, xid)
        assert backend.poll_health(0.1) == ()
    fake.event(0, XID, 79)
    [change] = backend.poll_health(0.1)
    assert (change.uuid, change.health, change.xid, change.reason) == ("GPU-0000", Health.UNHEALTHY, 79, "XID 79")
    assert backend.devices()[0].gpu.health is Health.UNHEALTHY
    assert backend.devices()[1].gpu.health is Health.HEALTHY
    assert backend.sample([]).gpus[0].xid_counts == {13: 1, 31: 1, 43: 1, 45: 1, 68: 1, 109: 1, 79: 1}


def test_xid_without_a_device_marks_every_gpu() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    fake.event(None, XID, 48)
    assert {c.uuid for c in backend.poll_health(0.1)} == {"GPU-0000", "GPU-1111"}


def test_unhealthy_gpu_recovers_after_the_quiet_period() -> None:
    fake, clock = FakeNvml(two_gpus()), Clock()
    backend = make(fake, clock, quiet_period_s=60)
    fake.event(1, XID, 79)
    backend.poll_health(0.1)
    clock.now += 59
    assert backend.poll_health(0.1) == ()
    clock.now += 1
    [recovered] = backend.poll_health(0.1)
    assert (recovered.uuid, recovered.health) == ("GPU-1111", Health.HEALTHY)


def test_explicit_reset_and_recovery_action_events() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake, quiet_period_s=None)
    fake.event(0, RECOVERY, 1)  # GPU reset required
    [fault] = backend.poll_health(0.1)
    assert fault.health is Health.UNHEALTHY
    assert "GPU reset" in fault.reason
    fake.event(0, RECOVERY, 0)  # no action needed any more
    assert backend.poll_health(0.1)[0].health is Health.HEALTHY
    fake.event(0, XID, 79)
    backend.poll_health(0.1)
    [reset] = backend.reset_health("GPU-0000", "operator")
    assert reset.health is Health.HEALTHY
    assert backend.poll_health(0.1) == (reset,)  # also delivered to the health stream


def test_gpu_without_event_support_stays_healthy_and_polling_sleeps() -> None:
    gpus = two_gpus()
    for gpu in gpus:
        gpu["events"] = 0x3  # ECC only
    fake, clock = FakeNvml(gpus), Clock()
    backend = make(fake, clock)
    assert "free" in fake.calls  # no GPU registered: the event set is freed at once
    assert backend.poll_health(0.5) == ()
    assert clock.slept == [0.5]
    assert all(d.gpu.health is Health.HEALTHY for d in backend.devices())


def test_unexpected_wait_error_sleeps_instead_of_spinning() -> None:
    fake, clock = FakeNvml(two_gpus()), Clock()
    backend = make(fake, clock)
    fake.errors[("wait", -1)] = 999
    assert backend.poll_health(0.25) == ()
    assert clock.slept == [0.25]


def test_sample_reads_metrics_and_reports_unsupported_ones() -> None:
    fake = FakeNvml(two_gpus())
    fake.errors[("temperature", 1)] = 3
    fake.errors[("utilization", 1)] = 3
    backend = make(fake)
    sample = backend.sample([])
    first, second = sample.gpus
    assert (first.utilization_percent, first.memory_used_bytes, first.temperature_celsius, first.power_watts) == (
        55.0, 3 * GiB, 61.0, 212.5)
    assert first.error == ""
    assert second.temperature_celsius is None
    assert second.utilization_percent is None
    assert second.error == "utilization: Not Supported; temperature: Not Supported"
    assert sample.at == 1000.0


def test_lost_gpu_turns_unhealthy() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    fake.errors[("memory", 1)] = 15
    assert "GPU is lost" in backend.sample([]).gpus[1].error
    [change] = backend.poll_health(0.1)
    assert (change.uuid, change.health, change.reason) == ("GPU-1111", Health.UNHEALTHY, "NVML: GPU is lost")


def test_per_container_memory_is_attributed_by_pod_and_container() -> None:
    gpus = two_gpus()
    gpus[0]["procs"] = [(100, 2 * GiB), (101, GiB), (102, 512 * MiB), (103, 7), (104, None)]
    pods = {100: "uid-a", 101: "uid-b", 102: "uid-b", 103: "uid-stranger", 104: "uid-a"}
    containers = {101: "first", 102: "second"}
    fake = FakeNvml(gpus)
    backend = make(fake, pod_uid_of=pods.get, container_of=containers.get)
    [gpu0, gpu1] = (d.gpu for d in backend.devices())
    book = AllocationBook()
    plans = [("uid-a", "main"), ("uid-b", "first"), ("uid-b", "second")]
    for pod, container in plans:
        plan = ContainerAllocationRequest(pod, "ns", pod, container, (PlannedGpu(0, GpuUuid("GPU-0000"), 300),))
        book.allocate(plan, [gpu0, gpu1], now=0)
    usage = {(u.pod_uid, u.container): u.memory_used_bytes for u in backend.sample(book.records()).containers}
    assert usage == {("uid-a", "main"): 2 * GiB, ("uid-b", "first"): GiB, ("uid-b", "second"): 512 * MiB}


def test_close_frees_and_shuts_down_once() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    backend.close()
    backend.close()
    assert fake.calls.count("free") == 1
    assert fake.calls.count("shutdown") == 1


def test_proc_attribution(tmp_path: Path) -> None:
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    cgroupfs, systemd, plain = tmp_path / "10", tmp_path / "11", tmp_path / "12"
    for directory in (cgroupfs, systemd, plain):
        directory.mkdir()
    (cgroupfs / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid}/abc123\n")
    (systemd / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri\n"
    )
    (plain / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    (cgroupfs / "environ").write_bytes(b"PATH=/bin\0LJRK_CONTAINER_NAME=trainer\0HOME=/\0")
    (systemd / "environ").write_bytes(b"PATH=/bin\0")
    assert pod_uid_of_pid(10, proc=tmp_path) == uid
    assert pod_uid_of_pid(11, proc=tmp_path) == uid
    assert pod_uid_of_pid(12, proc=tmp_path) is None
    assert pod_uid_of_pid(99, proc=tmp_path) is None
    assert container_of_pid(10, proc=tmp_path) == "trainer"
    assert container_of_pid(11, proc=tmp_path) is None
    assert container_of_pid(99, proc=tmp_path) is None


def mig_gpus() -> list[dict[str, Any]]:
    """GPU 1 in MIG mode: 3g.20gb at 0 and 1g.5gb at 4 (each with a compute instance), 1g.5gb at 5 without."""
    gpus = two_gpus()
    gpus[1]["mig_layout"] = [(2, 0), (0, 4), (0, 5, [])]
    return gpus


def test_mig_instances_are_listed_with_ids_placement_and_uuids() -> None:
    fake = FakeNvml(mig_gpus())
    fake.mig[1][1]["cis"][0] = 3 * GiB
    backend = make(fake)
    whole, mig = backend.devices()
    assert whole.mig_instances == ()
    uuid = GpuUuid("GPU-1111")
    assert mig.mig_instances == (
        MigInstanceInfo(1, uuid, 1, 0, "3g.20gb", 0, 4, 3, 19968 * MiB, "MIG-1001000-0000-4000-8000-000000000000"),
        MigInstanceInfo(1, uuid, 2, 0, "1g.5gb", 4, 1, 1, 4864 * MiB, "MIG-1002000-0000-4000-8000-000000000000"),
        MigInstanceInfo(1, uuid, 3, None, "1g.5gb", 5, 1, 1, 4864 * MiB, ""),
    )
    assert [i.usable for i in mig.mig_instances] == [True, True, False]
    samples = {m.uuid: m.memory_used_bytes for m in backend.sample([]).mig}
    assert samples == {"MIG-1001000-0000-4000-8000-000000000000": 3 * GiB,
                       "MIG-1002000-0000-4000-8000-000000000000": 0}


def test_mig_listing_errors_leave_the_gpu_without_instances(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    fake.errors[("list", 1)] = 999
    with caplog.at_level(logging.WARNING):
        assert backend.devices()[1].mig_instances == ()
    assert "listing MIG instances failed" in caplog.text
    fake.errors[("mig_memory", 1)] = NOT_SUPPORTED
    del fake.errors[("list", 1)]
    assert all(m.memory_used_bytes is None and "memory: Not Supported" in m.error for m in backend.sample([]).mig)


def _profile(name: str) -> Any:
    return resolve_profile("A100-40GB", name)


def test_mig_create_places_a_gpu_instance_and_a_compute_instance_then_destroy_removes_both() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    created = backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("1g.5gb"), 6)
    assert (created.gpu_instance_id, created.compute_instance_id, created.profile, created.start, created.size) == (
        4, 0, "1g.5gb", 6, 1)
    assert created.uuid.startswith("MIG-1004000")
    assert created in backend.devices()[1].mig_instances
    assert fake.calls[-2:] == ["create gi 4", "create ci 4/0"]
    backend.destroy_mig_instance(created)
    assert fake.calls[-2:] == ["destroy ci 4/0", "destroy gi 4"]
    assert created not in backend.devices()[1].mig_instances
    backend.destroy_mig_instance(created)  # gone already: fine
    assert fake.calls[-1] == "destroy gi 4"


@pytest.mark.parametrize(("failing", "call"), [("create_ci", "nvmlGpuInstanceCreateComputeInstance"),
                                               ("ci_info", "nvmlComputeInstanceGetInfo")])
def test_an_nvml_error_mid_creation_destroys_what_was_made(failing: str, call: str) -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    before = backend.devices()[1].mig_instances
    fake.errors[(failing, 1)] = 999
    with pytest.raises(GpuBackendError, match=rf"1g\.5gb at start 6: {call} failed.*destroyed again"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("1g.5gb"), 6)
    del fake.errors[(failing, 1)]
    assert backend.devices()[1].mig_instances == before
    assert "destroy gi 4" in fake.calls


def test_mig_create_refusals_name_the_gpu_profile_and_call() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    with pytest.raises(GpuBackendError, match=r"3g\.20gb at start 4: nvmlDeviceCreateGpuInstanceWithPlacement failed"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("3g.20gb"), 4)  # 1g.5gb instances sit there
    with pytest.raises(GpuBackendError, match="not a GPU in MIG mode"):
        backend.create_mig_instance(GpuUuid("GPU-0000"), _profile("1g.5gb"), 0)
    with pytest.raises(GpuBackendError, match="no such GPU instance profile"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), resolve_profile("H100-80GB", "1g.20gb"), 6)


def test_mig_destroy_in_use_raises_and_keeps_the_instance() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    first = backend.devices()[1].mig_instances[0]
    fake.errors[("destroy_ci", 1)] = IN_USE
    with pytest.raises(GpuBackendError, match="destroying compute instance failed"):
        backend.destroy_mig_instance(first)
    assert first in backend.devices()[1].mig_instances


gpu_only = pytest.mark.skipif(os.environ.get("LJRK_GPU_TESTS") != "1", reason="needs LJRK_GPU_TESTS=1 and a GPU")


@pytest.mark.gpu
@gpu_only
def test_real_nvml_inventory_and_sample() -> None:
    backend = NvmlGpuBackend.open(quiet_period_s=60)
    try:
        devices = backend.devices()
        assert devices
        for device in devices:
            assert device.gpu.uuid.startswith(("GPU-", "MIG-"))
            assert device.gpu.memory_bytes > 0
            if device.gpu.mig_mode is not MigMode.ENABLED:
                assert device.mig_instances == ()
            for instance in device.mig_instances:  # read-only: this test never changes the MIG layout
                assert instance.profile
                assert instance.size > 0
                assert instance.memory_bytes > 0
                assert instance.uuid.startswith("MIG-") or not instance.usable
        sample = backend.sample([])
        assert [s.uuid for s in sample.gpus] == [d.gpu.uuid for d in devices]
        assert all(s.memory_used_bytes is not None for s in sample.gpus)
        backend.poll_health(0.1)
    finally:
        backend.close()

