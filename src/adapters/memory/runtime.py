"""In-memory node Runtime (``ports.runtime.NodeRuntime`` and ``ports.node_config.NodeConfig``) and state store.

``InMemoryNodeRuntime`` serves a fixed GPU list with the contract's exact semantics (it shares the domain's
allocation book, env-var rules, health broadcast and exporter assembly with the reference Runtime), measures
nothing (every usage is unknown) and changes health only through :meth:`InMemoryNodeRuntime.set_health`. It is
the fast fake for unit tests and a dry-run profile, and one side of the contract suite.

MIG: GPUs in MIG mode keep their instances in a :class:`domain.runtime.miglayout.MigLayouts` (initial layouts per
GPU index, deterministic ids and ``MIG-…`` UUIDs). With ``mig_mode`` dynamic, Allocate creates planned instances
and Release destroys them, exactly as the reference Runtime does over a backend; static mode does not advertise
``mig-dynamic``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from domain.gpu import Gpu, GpuUuid, Health
from domain.mig.gpu import PlacementMode
from domain.runtime.book import AllocationBook
from domain.runtime.broadcast import HealthBroadcast, HealthSubscription
from domain.runtime.edits import ContainerEdits
from domain.runtime.exporter import build_exporter_data
from domain.runtime.features import MIG_DYNAMIC, RuntimeInfo, SemVer, features_at
from domain.runtime.mig import MigNode, with_owners
from domain.runtime.miglayout import MigLayouts
from domain.runtime.types import (
    ConfigStatus,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceInfo,
    ExporterData,
    HealthChange,
    RuntimeSnapshot,
    RuntimeState,
    UsageSample,
)

MEMORY_RUNTIME_VERSION = SemVer(1, 1, 0)


class InMemoryNodeRuntime:
    """A Runtime over ``gpus`` (module docstring). ``version`` and ``capabilities`` (default: every feature up to
    the version, less ``mig-dynamic`` in static mode) shape GetVersion; ``clock`` gives epoch seconds;
    ``mig_layouts`` (initial MIG instances per GPU index, ``(profile, start)``) and ``mig_mode`` (the MIG
    strategy) shape MIG. Thread-safe. Raises the MIG domain errors for a bad layout."""

    def __init__(
        self,
        gpus: Sequence[Gpu],
        *,
        version: SemVer = MEMORY_RUNTIME_VERSION,
        capabilities: Iterable[str] | None = None,
        state: RuntimeState = RuntimeState.ENABLED,
        clock: Callable[[], float] = time.time,
        edits: ContainerEdits | None = None,
        mig_layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None,
        mig_mode: PlacementMode = PlacementMode.STATIC,
    ) -> None:
        self._devices = {g.uuid: DeviceInfo(g) for g in gpus}
        self._mig = MigLayouts(gpus, mig_layouts)
        self._mig_mode = mig_mode
        skip = () if mig_mode is PlacementMode.DYNAMIC else (MIG_DYNAMIC,)
        self._info = RuntimeInfo(
            name="ljrk-memory-runtime",
            version=version,
            capabilities=frozenset(capabilities) if capabilities is not None else features_at(version, exclude=skip),
            backend="memory",
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._book = AllocationBook(edits=edits or ContainerEdits())
        self._state = ConfigStatus(state)
        self._broadcast = HealthBroadcast()

    def get_version(self) -> RuntimeInfo:
        """Name ``ljrk-memory-runtime``, the configured version and capabilities, backend ``memory``."""
        return self._info

    def list_devices(self) -> tuple[DeviceInfo, ...]:
        """The GPUs in index order with current health and MIG instances (with owners)."""
        with self._lock:
            return self._listed()

    def _listed(self) -> tuple[DeviceInfo, ...]:
        devices = [
            DeviceInfo(d.gpu, d.health_reason, self._mig.instances(d.gpu.uuid))
            for d in sorted(self._devices.values(), key=lambda d: d.gpu.index)
        ]
        return with_owners(devices, self._book.mig_holders())

    def _snapshot(self) -> list[HealthChange]:
        now = self._clock()
        return [
            HealthChange(d.gpu.uuid, d.gpu.index, d.gpu.health, d.health_reason, None, now, initial=True)
            for d in self.list_devices()
        ]

    def watch_health(self) -> HealthSubscription:
        """Snapshot then changes (``ports.runtime.HealthStream``)."""
        return self._broadcast.subscribe(self._snapshot)

    def set_health(self, uuid: str, health: Health, reason: str = "") -> None:
        """Change one GPU's health and notify watchers (no event when unchanged). Raises KeyError."""
        with self._lock:
            device = self._devices[GpuUuid(uuid)]
            if device.gpu.health is health:
                return
            gpu = device.gpu
            self._devices[gpu.uuid] = DeviceInfo(
                Gpu(gpu.index, gpu.uuid, gpu.model, gpu.memory_bytes, health, gpu.mig_mode),
                reason if health is Health.UNHEALTHY else "",
            )
        self._broadcast.publish([HealthChange(gpu.uuid, gpu.index, health, reason, None, self._clock())])

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        """See ``ports.runtime``; raises the contract errors."""
        with self._lock:
            gpus = [d.gpu for d in self._devices.values()]
            enabled = self._state.state is RuntimeState.ENABLED
            minors = {uuid: d.gpu.index for uuid, d in self._devices.items()}  # as on a node without gaps
            mig = MigNode(self._mig.instances(), self._mig_mode, self._mig.create_mig_instance,
                          self._mig.destroy_mig_instance)
            record, _ = self._book.allocate(request, gpus, now=self._clock(), enabled=enabled, minors=minors, mig=mig)
            return record.response

    def release(self, pod_uid: str, container: str | None = None) -> int:
        """Number of records removed; MIG instances created for them and held by no other record are destroyed."""
        with self._lock:
            removed = self._book.release(pod_uid, container)
            for instance in self._book.unreferenced(removed):
                self._mig.destroy_mig_instance(instance)
            return len(removed)

    def exporter_data(self) -> ExporterData:
        """Every GPU and MIG instance with unknown measurements, every record with unknown use."""
        with self._lock:
            devices = self._listed()
            records = self._book.records()
            allocated = self._book.allocated_per_gpu()
        return build_exporter_data(devices, records, UsageSample(at=self._clock()), allocated=allocated)

    def _set_state(self, state: RuntimeState, reason: str) -> ConfigStatus:
        with self._lock:
            if self._state.state is not state:
                self._state = ConfigStatus(state, self._clock(), reason)
            return self._status()

    def _status(self) -> ConfigStatus:
        return ConfigStatus(self._state.state, self._state.changed_at, self._state.reason, len(self._book))

    def enable(self, reason: str = "") -> ConfigStatus:
        """Take new allocations; idempotent."""
        return self._set_state(RuntimeState.ENABLED, reason)

    def disable(self, reason: str = "") -> ConfigStatus:
        """Refuse new allocations; idempotent."""
        return self._set_state(RuntimeState.DISABLED, reason)

    def status(self) -> ConfigStatus:
        """Current state and record count."""
        with self._lock:
            return self._status()

    def close(self) -> None:
        """End every health stream."""
        self._broadcast.close()


class InMemoryRuntimeStateStore:
    """``ports.runtime_state.RuntimeStateStore`` in memory; ``saves`` counts writes (for tests)."""

    def __init__(self, snapshot: RuntimeSnapshot | None = None) -> None:
        self._snapshot = snapshot
        self.saves = 0

    def load(self) -> RuntimeSnapshot | None:
        """The last saved snapshot."""
        return self._snapshot

    def save(self, snapshot: RuntimeSnapshot) -> None:
        """Keep ``snapshot``."""
        self._snapshot = snapshot
        self.saves += 1
