"""``NvmlGpuBackend``: real GPUs through NVML (``pynvml`` from the ``nvidia-ml-py`` distribution).

The ``pynvml`` module is injected (``NvmlGpuBackend(nvml=module)``), so tests pass a fake module and nothing is
monkey-patched; :meth:`NvmlGpuBackend.open` imports the real one. Calls used (NVML API reference; ``nvidia-ml-py``):
nvmlInit / nvmlShutdown; nvmlDeviceGetCount, …GetHandleByIndex, …GetUUID, …GetName, …GetMemoryInfo (bytes), …GetMigMode;
nvmlDeviceGetUtilizationRates (%), …GetTemperature(NVML_TEMPERATURE_GPU) (°C), …GetPowerUsage (mW, reported in W),
…GetComputeRunningProcesses (per-process bytes); nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
nvmlDeviceRegisterEvents, nvmlEventSetWait (ms; NVML_ERROR_TIMEOUT when idle), nvmlEventSetFree.

Errors: an NVML library or driver that is missing (or any nvmlInit failure) raises
:class:`GpuBackendUnavailableError` from the constructor, so the entrypoint can fall back to simulated GPUs. A
metric a GPU does not support (NotSupported) is None with the reason in ``GpuSample.error``; a lost GPU
(NVML_ERROR_GPU_IS_LOST while sampling) is marked unhealthy.

Health (``domain.runtime.health``): critical XID events mark a GPU unhealthy, the ``ignored_xids`` (default the
application XIDs 13, 31, 43, 45, 68, 109) do not; an XID event without a device marks every GPU. A GPU recovers
after ``quiet_period_s`` without a fault, on :meth:`NvmlGpuBackend.reset_health`, or on an NVML recovery-action
event whose action is NONE; a recovery-action event asking for any other action (GPU reset, reboot, …) marks the GPU
unhealthy. A GPU that supports no health events is logged and left healthy (NVIDIA's plugin would mark it unhealthy
for good).

MIG (``adapters.nvml.mig``): GPUs whose ``nvmlDeviceGetMigMode`` current mode is NVML_DEVICE_MIG_ENABLE are listed
with their instances at every :meth:`NvmlGpuBackend.devices` call (a listing that fails is logged and leaves that
GPU's instances empty); :meth:`create_mig_instance` / :meth:`destroy_mig_instance` change the layout, one at a
time. The MIG mode is read at start (changing it needs a GPU reset, and so a Runtime restart).

Topology (``adapters.nvml.topology``; Runtime 1.2.0): each GPU's NUMA node, PCIe root and NVLink peers are read
once at start (they change only with the hardware) from NVML and ``sysfs`` (default ``/sys``) and listed by
:meth:`NvmlGpuBackend.devices`; what cannot be read is reported unknown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.profiles import MigProfile
from domain.runtime.health import APPLICATION_XIDS, HealthTracker
from domain.runtime.types import (
    ContainerAllocation,
    ContainerUsage,
    DeviceInfo,
    GpuSample,
    HealthChange,
    MigInstanceInfo,
    MigSample,
    UsageSample,
)
from ports.gpu_backend import GpuBackendError, GpuBackendUnavailableError

from .mig import NvmlMig
from .procfs import container_of_pid, pod_uid_of_pid
from .topology import TopologyReader

log = logging.getLogger(__name__)

# NVML constants (nvml.h; the same values pynvml defines). Read from the module when it has them.
_EVENT_XID = 0x8
_EVENT_RECOVERY_ACTION = 0x8000
_ERROR_NOT_SUPPORTED = 3
_ERROR_TIMEOUT = 10
_ERROR_GPU_IS_LOST = 15
_RECOVERY_NONE = 0
_RECOVERY_NAMES = {1: "GPU reset", 2: "node reboot", 3: "drain P2P", 4: "drain and reset",
                   5: "recover IMEX domain", 6: "bus reset", 7: "system reboot"}


def _code(error: BaseException) -> int | None:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlGpuBackend:
    """GPUs through NVML (module docstring). Thread-safe: sampling and health polling may run concurrently."""

    name = "nvml"

    def __init__(
        self,
        nvml: ModuleType,
        *,
        quiet_period_s: float | None = 300.0,
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        pod_uid_of: Callable[[int], str | None] = pod_uid_of_pid,
        container_of: Callable[[int], str | None] = container_of_pid,
        sysfs: Path = Path("/sys"),
    ) -> None:
        self._nvml: Any = nvml
        self._clock = clock
        self._sleep = sleep
        self._pod_uid_of = pod_uid_of
        self._container_of = container_of
        self._lock = threading.Lock()
        self._pending: list[HealthChange] = []
        self._closed = False
        self._minors: dict[GpuUuid, int] = {}
        self._mig = NvmlMig(nvml, self._const)
        self._mig_lock = threading.Lock()
        self._mig_gpus: dict[GpuUuid, Gpu] = {}
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            raise GpuBackendUnavailableError(f"NVML is unavailable on this node: nvmlInit failed: {error}") from error
        try:
            self._handles, gpus = self._discover()
            self._topology = TopologyReader(nvml, sysfs).read({g.index: self._handles[g.uuid] for g in gpus})
            self._tracker = HealthTracker(gpus, quiet_period_s=quiet_period_s, ignored_xids=ignored_xids)
            self._events = self._register_events()
        except nvml.NVMLError as error:
            nvml.nvmlShutdown()
            raise GpuBackendError(f"NVML device discovery failed: {error}") from error
        log.info("NVML backend: %d GPU(s)", len(gpus))

    @classmethod
    def open(cls, **options: Any) -> NvmlGpuBackend:
        """Import the real ``pynvml`` and start. Raises :class:`GpuBackendUnavailableError` when the module,
        the library or the driver is missing."""
        try:
            import pynvml  # only here: tests inject a fake module instead
        except ImportError as error:
            raise GpuBackendUnavailableError(f"the nvidia-ml-py package is not installed: {error}") from error
        return cls(pynvml, **options)

    def _const(self, name: str, default: int) -> int:
        value = getattr(self._nvml, name, default)
        return value if isinstance(value, int) else default

    def _discover(self) -> tuple[dict[GpuUuid, object], tuple[Gpu, ...]]:
        nvml = self._nvml
        handles: dict[GpuUuid, object] = {}
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = GpuUuid(_text(nvml.nvmlDeviceGetUUID(handle)))
            mig = MigMode.DISABLED
            try:
                current = nvml.nvmlDeviceGetMigMode(handle)[0]
                if current == self._const("NVML_DEVICE_MIG_ENABLE", 1):
                    mig = MigMode.ENABLED
            except nvml.NVMLError:
                pass  # NotSupported: a GPU without MIG
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            gpus.append(Gpu(index, uuid, _text(nvml.nvmlDeviceGetName(handle)), memory, Health.HEALTHY, mig))
            handles[uuid] = handle
            if mig is MigMode.ENABLED:
                self._mig_gpus[uuid] = gpus[-1]
            try:
                self._minors[uuid] = int(nvml.nvmlDeviceGetMinorNumber(handle))
            except (nvml.NVMLError, AttributeError) as error:
                log.warning("GPU %s: no device minor number (%s); device specs unavailable for it", uuid, error)
        return handles, tuple(gpus)

    def _register_events(self) -> object | None:
        nvml = self._nvml
        wanted = self._const("nvmlEventTypeXidCriticalError", _EVENT_XID) | self._const(
            "nvmlEventTypeGpuRecoveryAction", _EVENT_RECOVERY_ACTION
        )
        event_set: object = nvml.nvmlEventSetCreate()
        registered = 0
        for uuid, handle in self._handles.items():
            try:
                mask = int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & wanted
                if mask:
                    nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                    registered += 1
                    continue
            except nvml.NVMLError as error:
                log.warning("GPU %s: health events unavailable (%s); health not monitored", uuid, error)
                continue
            log.warning("GPU %s supports no XID events; health not monitored", uuid)
        if registered:
            return event_set
        nvml.nvmlEventSetFree(event_set)
        return None

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Every GPU with its current health; MIG GPUs with their instances (module docstring)."""
        with self._lock:
            current = self._tracker.current()
        return tuple(
            DeviceInfo(Gpu(g.index, g.uuid, g.model, g.memory_bytes, health, g.mig_mode), reason,
                       self._mig_instances(g.uuid), self._topology.get(g.index))
            for g, health, reason in current
        )

    def _mig_instances(self, uuid: GpuUuid) -> tuple[MigInstanceInfo, ...]:
        gpu = self._mig_gpus.get(uuid)
        if gpu is None:
            return ()
        try:
            with self._mig_lock:
                return self._mig.instances(gpu, self._handles[uuid])
        except self._nvml.NVMLError as error:
            log.warning("GPU %s: listing MIG instances failed: %s", uuid, error)
            return ()

    def _mig_gpu(self, uuid: GpuUuid, profile: str, start: int) -> Gpu:
        gpu = self._mig_gpus.get(uuid)
        if gpu is None:
            raise GpuBackendError(f"GPU {uuid}: MIG {profile} at start {start}: not a GPU in MIG mode on this node")
        return gpu

    def create_mig_instance(self, gpu: GpuUuid, profile: MigProfile, start: int) -> MigInstanceInfo:
        """A GPU instance of ``profile`` at ``start`` plus one compute instance (``adapters.nvml.mig``); all or
        nothing. Raises :class:`GpuBackendError`."""
        found = self._mig_gpu(gpu, profile.name, start)
        with self._mig_lock:
            instance = self._mig.create(found, self._handles[gpu], profile, start)
        log.info("created MIG %s at start %d on %s: %s", profile.name, start, gpu, instance.uuid)
        return instance

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        """Destroy the instance's compute instance and GPU instance; gone already is fine. Raises
        :class:`GpuBackendError`."""
        self._mig_gpu(instance.gpu_uuid, instance.profile, instance.start)
        with self._mig_lock:
            self._mig.destroy(self._handles[instance.gpu_uuid], instance)
        log.info("destroyed MIG %s at start %d on %s", instance.profile, instance.start, instance.gpu_uuid)

    def device_minors(self) -> Mapping[GpuUuid, int]:
        """``nvmlDeviceGetMinorNumber`` per GPU, read at discovery (GPUs where it failed are absent)."""
        return dict(self._minors)

    def reset_health(self, uuid: str | None, reason: str = "reset by operator") -> tuple[HealthChange, ...]:
        """Explicit recovery of one GPU (None: all); the changes also reach the next :meth:`poll_health`."""
        with self._lock:
            changes = self._tracker.reset(None if uuid is None else GpuUuid(uuid), reason, now=self._clock())
            self._pending.extend(changes)
            return tuple(changes)

    def poll_health(self, timeout_s: float) -> tuple[HealthChange, ...]:
        """Wait up to ``timeout_s`` for one NVML event; return the changes it and the quiet-period clock caused."""
        nvml = self._nvml
        event = None
        if self._events is None or self._closed:
            self._sleep(timeout_s)
        else:
            try:
                event = nvml.nvmlEventSetWait(self._events, max(0, int(timeout_s * 1000)))
            except nvml.NVMLError as error:
                if _code(error) != self._const("NVML_ERROR_TIMEOUT", _ERROR_TIMEOUT):
                    log.warning("nvmlEventSetWait failed: %s", error)
                    self._sleep(timeout_s)  # never spin on a persistent error
        with self._lock:
            now = self._clock()
            changes, self._pending = self._pending, []
            if event is not None:
                changes.extend(self._on_event(event, now))
            changes.extend(self._tracker.tick(now))
            return tuple(changes)

    def _event_uuid(self, event: Any) -> GpuUuid | None:
        if not getattr(event, "device", None):
            return None
        try:
            uuid = GpuUuid(_text(self._nvml.nvmlDeviceGetUUID(event.device)))
        except self._nvml.NVMLError:
            return None
        return uuid if uuid in self._handles else None

    def _on_event(self, event: Any, now: float) -> list[HealthChange]:
        uuid = self._event_uuid(event)
        kind, data = int(event.eventType), int(event.eventData)
        if kind & self._const("nvmlEventTypeXidCriticalError", _EVENT_XID):
            log.warning("XID %d on %s", data, uuid or "all GPUs")
            return self._tracker.on_xid(uuid, data, now=now)
        if kind & self._const("nvmlEventTypeGpuRecoveryAction", _EVENT_RECOVERY_ACTION):
            if data == self._const("NVML_GPU_RECOVERY_ACTION_NONE", _RECOVERY_NONE):
                return self._tracker.reset(uuid, "NVML: no recovery action needed", now=now)
            action = _RECOVERY_NAMES.get(data, f"action {data}")
            return self._tracker.fault(uuid, f"NVML: recovery action required: {action}", now=now)
        return []

    def sample(self, allocations: Sequence[ContainerAllocation]) -> UsageSample:
        """Measure every GPU; per-container memory from the running processes (attributed through ``/proc``);
        memory in use of every MIG device."""
        samples = []
        usage: dict[tuple[str, str, GpuUuid], int] = {}
        for uuid, handle in self._handles.items():
            samples.append(self._sample_gpu(uuid, handle, allocations, usage))
        containers = tuple(ContainerUsage(pod, ctr, uuid, used) for (pod, ctr, uuid), used in sorted(usage.items()))
        mig: list[MigSample] = []
        for uuid in self._mig_gpus:
            try:
                with self._mig_lock:
                    mig.extend(self._mig.samples(self._handles[uuid]))
            except self._nvml.NVMLError as error:
                log.warning("GPU %s: sampling MIG devices failed: %s", uuid, error)
        return UsageSample(gpus=tuple(samples), containers=containers, at=self._clock(), mig=tuple(mig))

    def _sample_gpu(
        self,
        uuid: GpuUuid,
        handle: object,
        allocations: Sequence[ContainerAllocation],
        usage: dict[tuple[str, str, GpuUuid], int],
    ) -> GpuSample:
        nvml = self._nvml
        errors: list[str] = []

        def read(label: str, call: Callable[[], Any]) -> Any:
            try:
                return call()
            except nvml.NVMLError as error:
                errors.append(f"{label}: {error}")
                if _code(error) == self._const("NVML_ERROR_GPU_IS_LOST", _ERROR_GPU_IS_LOST):
                    with self._lock:
                        self._pending.extend(self._tracker.fault(uuid, "NVML: GPU is lost", now=self._clock()))
                return None

        rates = read("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = read("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        temperature = read("temperature", lambda: nvml.nvmlDeviceGetTemperature(
            handle, self._const("NVML_TEMPERATURE_GPU", 0)))
        power = read("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        processes = read("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
        self._attribute(uuid, processes, allocations, usage)
        with self._lock:
            xids = self._tracker.xid_counts(uuid)
        return GpuSample(
            uuid=uuid,
            utilization_percent=None if rates is None else float(rates.gpu),
            memory_used_bytes=None if memory is None else int(memory.used),
            temperature_celsius=None if temperature is None else float(temperature),
            power_watts=None if power is None else float(power) / 1000.0,
            xid_counts=xids,
            error="; ".join(errors),
        )

    def _attribute(
        self,
        uuid: GpuUuid,
        processes: Sequence[Any],
        allocations: Sequence[ContainerAllocation],
        usage: dict[tuple[str, str, GpuUuid], int],
    ) -> None:
        holders: dict[str, list[str]] = {}
        for record in allocations:
            if any(g.uuid == uuid for g in record.grants):
                holders.setdefault(record.request.pod_uid, []).append(record.request.container)
        for process in processes:
            used = getattr(process, "usedGpuMemory", None)
            pod = self._pod_uid_of(int(process.pid))
            if not isinstance(used, int) or pod not in holders:
                continue
            containers = holders[pod]
            container = containers[0] if len(containers) == 1 else self._container_of(int(process.pid))
            if container in containers:
                key = (pod, container, uuid)
                usage[key] = usage.get(key, 0) + used

    def close(self) -> None:
        """Free the event set and shut NVML down; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._events is not None:
            try:
                self._nvml.nvmlEventSetFree(self._events)
            except self._nvml.NVMLError as error:
                log.warning("nvmlEventSetFree failed: %s", error)
        self._nvml.nvmlShutdown()
