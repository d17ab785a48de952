"""The reference node Runtime: ``NodeRuntime`` and ``NodeConfig`` over a GPU backend and a state store.

What it adds to the domain's allocation book (``domain.runtime.book``): the GPUs come from the backend
(``ports.gpu_backend``), health changes are pumped from the backend by one background thread into a broadcast
that every WatchHealth stream subscribes to, and the config state and allocation records are saved after every
change (``ports.runtime_state``) and restored at start, so a restart keeps both. A failed save rolls the change
back and raises :class:`ports.runtime_state.StateStoreError` (INTERNAL on the wire): the caller retries, and the
Runtime never claims an allocation it could lose.

Health is damped (``domain.runtime.damping``): a GPU turns Unhealthy at once, but Healthy again only after
``health_hold_s`` seconds without a fault, so a flapping GPU does not flip kubelet's device lists, the inventory
and the exporter once per flap; WatchHealth, ListDevices and ExporterGetDataList all say the damped health.

Records naming a GPU the node no longer has are kept (they still describe a running container) and logged; so are
restored records that exceed a GPU's capacity (``domain.runtime.capacity``), and the book then refuses every new
grant on that GPU until enough is released.

MIG (``--mig-strategy``, :class:`domain.mig.gpu.PlacementMode`): instances come from the backend's listing with
owners from the records. With the dynamic strategy, Allocate creates the planned instances through the backend
(all or nothing; a failed save destroys them again) and Release destroys the instances created for the released
records once no record holds them. Release saves first and destroys second: an instance that cannot be destroyed
(in use, driver error) puts its record back, saves again and raises ``GpuBackendError`` (UNAVAILABLE on the wire),
so the caller retries; a crash in between leaves at worst a free instance, never a record without its instance.
Records keep ``created`` per instance, so a restarted Runtime, whatever its strategy, destroys what it created. The
static strategy does not advertise ``mig-dynamic`` and refuses plans that ask to create.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from domain.gpu import GpuUuid
from domain.mig.gpu import PlacementMode
from domain.runtime.book import AllocationBook
from domain.runtime.damping import HealthDamper
from domain.runtime.edits import ContainerEdits
from domain.runtime.enforcement import ENFORCEMENT_FEATURES, node_enforcement
from domain.runtime.exporter import build_exporter_data
from domain.runtime.features import MIG_DYNAMIC, RuntimeInfo, SemVer, features_at
from domain.runtime.mig import MigNode, with_owners
from domain.runtime.types import (
    ConfigStatus,
    ContainerAllocation,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceInfo,
    ExporterData,
    HealthChange,
    MigInstanceInfo,
    RuntimeSnapshot,
    RuntimeState,
)
from ports.gpu_backend import GpuBackend, GpuBackendError
from ports.runtime_state import RuntimeStateStore
from services.runtime.broadcast import HealthBroadcast, HealthSubscription

log = logging.getLogger(__name__)

RUNTIME_NAME = "ljrk-reference-runtime"
RUNTIME_VERSION = SemVer(1, 2, 0)
"""Contract features this Runtime implements (``domain.runtime.features.RUNTIME_FEATURES``)."""

HEALTH_POLL_S = 0.25
"""How long one backend health poll may block, seconds; bounds shutdown time and timed-recovery latency."""

HEALTH_HOLD_S = 30.0
"""Quiet period before an unhealthy GPU is reported healthy again, seconds (``domain.runtime.damping``): long
enough to cover a burst of XIDs and recovery events, short next to the 300 s timed recovery."""


class RuntimeService:
    """The reference Runtime (module docstring). Thread-safe; call :meth:`start` to pump health events and
    :meth:`close` to stop (before closing the backend). Raises StateStoreError from the constructor when the
    saved state cannot be read, ValueError for a negative ``health_hold_s``."""

    def __init__(
        self,
        backend: GpuBackend,
        store: RuntimeStateStore,
        *,
        initial_state: RuntimeState = RuntimeState.ENABLED,
        clock: Callable[[], float] = time.time,
        health_poll_s: float = HEALTH_POLL_S,
        health_hold_s: float = HEALTH_HOLD_S,
        edits: ContainerEdits | None = None,
        mig_mode: PlacementMode = PlacementMode.STATIC,
    ) -> None:
        self._backend = backend
        self._mig_mode = mig_mode
        self._store = store
        self._clock = clock
        self._health_poll_s = health_poll_s
        self._lock = threading.Lock()
        self._book = AllocationBook(edits=edits or ContainerEdits())
        self._broadcast = HealthBroadcast()
        self._damper = HealthDamper(health_hold_s)
        self._health_lock = threading.Lock()
        self._stop = threading.Event()
        self._pump: threading.Thread | None = None
        snapshot = store.load()
        if snapshot is None:
            self._status = ConfigStatus(initial_state)
        else:
            self._status = ConfigStatus(snapshot.state, snapshot.changed_at, snapshot.reason)
            self._book.restore(snapshot.allocations)
            log.info("restored Runtime state %s with %d allocation(s)", snapshot.state.value, len(self._book))
        devices = backend.devices()
        self._damper.seed(devices, now=clock())
        known = {d.gpu.uuid for d in devices}
        listed = {i.key for d in devices for i in d.mig_instances}
        for record in self._book.records():
            missing = [g.uuid for g in record.grants if g.uuid not in known]
            if missing:
                log.warning("allocation %s names GPUs not on this node: %s", record.request.label, missing)
            lost = [i.uuid for i in record.mig if i.key not in listed]
            if lost:
                log.warning("allocation %s names MIG instances not on this node: %s", record.request.label, lost)
        for over in self._book.over_capacity(d.gpu for d in devices):
            log.error("restored allocations exceed GPU %s: %d milli-GPU core and %d bytes granted, capacity 1000 "
                      "milli-GPU and %d bytes; kept, but no new grant on it until enough is released", over.uuid,
                      over.core_milli, over.memory_bytes, over.capacity_bytes)

    @property
    def health_hold_s(self) -> float:
        """The quiet period, in seconds, before an unhealthy GPU is reported healthy again."""
        return self._damper.hold_s

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the health pump thread (idempotent)."""
        if self._pump is None:
            self._pump = threading.Thread(target=self._pump_health, name="ljrk-health", daemon=True)
            self._pump.start()

    def close(self) -> None:
        """Stop the pump and end every health stream; idempotent. The backend stays open (its owner closes it)."""
        self._stop.set()
        if self._pump is not None:
            self._pump.join()
        self._broadcast.close()

    def _pump_health(self) -> None:
        while not self._stop.is_set():
            try:
                self.pump_health(self._health_poll_s)
            except Exception:
                log.exception("health poll failed")
                self._stop.wait(self._health_poll_s)

    def pump_health(self, timeout_s: float) -> tuple[HealthChange, ...]:
        """One round of the health pump: poll the backend for up to ``timeout_s`` seconds, damp its changes, and
        publish the ones to report now to every WatchHealth stream; returns those. The thread :meth:`start`
        starts calls it in a loop; a caller that does not start it (an in-process Runtime in tests) calls it
        after changing the backend's health, so the change is served before it returns. Raises what the
        backend's ``poll_health`` raises."""
        changes = self._backend.poll_health(timeout_s)
        with self._health_lock:
            damped = self._damper.observe(changes)
            damped.extend(self._damper.tick(self._clock()))
        for change in changes:
            if change not in damped:
                log.info("GPU %s (index %d) is %s: %s; held until %g s without a fault", change.uuid,
                         change.index, change.health.value, change.reason, self._damper.hold_s)
        for change in damped:
            log.warning("GPU %s (index %d) is %s: %s", change.uuid, change.index, change.health.value,
                        change.reason)
        if damped:
            self._broadcast.publish(damped)
        return tuple(damped)

    def _devices(self) -> tuple[DeviceInfo, ...]:
        devices = self._backend.devices()
        with self._health_lock:
            return self._damper.apply(devices)

    # ------------------------------------------------------------------ NodeRuntime
    def get_version(self) -> RuntimeInfo:
        """Name, version :data:`RUNTIME_VERSION`, every feature up to it (``mig-dynamic`` only with the dynamic
        MIG strategy; of the ``share-enforcement-*`` features only the node's own mode,
        :func:`domain.runtime.enforcement.node_enforcement` on the GPUs listed now), the backend's name."""
        edits = self._book.edits
        mode = node_enforcement((d.gpu for d in self._backend.devices()), hami_core=edits.hami_core, mps=edits.mps)
        skip = {feature for other, feature in ENFORCEMENT_FEATURES.items() if other is not mode}
        if self._mig_mode is not PlacementMode.DYNAMIC:
            skip.add(MIG_DYNAMIC)
        return RuntimeInfo(RUNTIME_NAME, RUNTIME_VERSION, features_at(RUNTIME_VERSION, exclude=skip),
                           self._backend.name)

    def list_devices(self) -> tuple[DeviceInfo, ...]:
        """The backend's GPUs with current (damped) health, MIG instances with their owners."""
        devices = self._devices()
        with self._lock:
            return with_owners(devices, self._book.mig_holders())

    def _snapshot(self) -> list[HealthChange]:
        now = self._clock()
        return [
            HealthChange(d.gpu.uuid, d.gpu.index, d.gpu.health, d.health_reason, None, now, initial=True)
            for d in self._devices()
        ]

    def watch_health(self) -> HealthSubscription:
        """One initial event per GPU, then every change the pump sees."""
        return self._broadcast.subscribe(self._snapshot)

    def _save(self, status: ConfigStatus) -> None:
        self._store.save(RuntimeSnapshot(status.state, status.changed_at, status.reason, self._book.records()))

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        """Record and answer (``domain.runtime.book`` rules), creating planned MIG instances in dynamic mode;
        saved before it returns."""
        minors = self._backend.device_minors()
        with self._lock:
            devices = self._backend.devices()
            gpus = [d.gpu for d in devices]
            mig = MigNode(tuple(i for d in devices for i in d.mig_instances), self._mig_mode, self._backend)
            enabled = self._status.state is RuntimeState.ENABLED
            record, created = self._book.allocate(request, gpus, now=self._clock(), enabled=enabled, minors=minors,
                                                  mig=mig)
            if created:
                try:
                    self._save(self._status)
                except Exception:
                    removed = self._book.release(request.pod_uid, request.container)
                    self._destroy_quietly(self._book.unreferenced(removed))
                    raise
                log.info("allocated %s: %s", request.label, ", ".join(
                    [f"{g.uuid} core {g.core_milli}m memory {g.memory_bytes}B" for g in record.grants]
                    + [f"MIG {i.profile}@{i.start} {i.uuid}{' (created)' if i.created else ''}" for i in record.mig]))
            return record.response

    def _destroy_quietly(self, instances: tuple[MigInstanceInfo, ...]) -> None:
        for instance in instances:
            try:
                self._backend.destroy_mig_instance(instance)
            except GpuBackendError as error:
                log.error("MIG instance %s left behind: %s", instance.uuid, error)

    def release(self, pod_uid: str, container: str | None = None) -> int:
        """Remove the records and destroy the MIG instances created for them (module docstring); saved before
        it returns. Raises ``StateStoreError`` (nothing changed) or ``GpuBackendError`` (the records whose
        instances could not be destroyed are kept)."""
        with self._lock:
            removed = self._book.release(pod_uid, container)
            if not removed:
                return 0
            try:
                self._save(self._status)
            except Exception:
                self._book.restore([*self._book.records(), *removed])
                raise
            failed = self._destroy_created(removed)
            if failed:
                keep = [r for r in removed if any(i.key in failed for i in r.mig)]
                self._book.restore([*self._book.records(), *keep])
                try:
                    self._save(self._status)
                except Exception:
                    log.exception("could not save the records kept for undestroyed MIG instances")
                raise GpuBackendError("; ".join(failed.values()) + "; their records are kept: release again later")
            log.info("released %s", ", ".join(r.request.label for r in removed))
            return len(removed)

    def _destroy_created(self, removed: tuple[ContainerAllocation, ...]) -> dict[tuple[GpuUuid, int, int | None], str]:
        failed = {}
        for instance in self._book.unreferenced(removed):
            try:
                self._backend.destroy_mig_instance(instance)
            except GpuBackendError as error:
                failed[instance.key] = f"MIG instance {instance.uuid}: {error}"
        return failed

    def exporter_data(self) -> ExporterData:
        """Backend sample joined with the records; one row per MIG instance with its owner."""
        with self._lock:
            records = self._book.records()
            allocated: dict[GpuUuid, tuple[int, int]] = self._book.allocated_per_gpu()
            holders = self._book.mig_holders()
        sample = self._backend.sample(records)
        devices = with_owners(self._devices(), holders)
        return build_exporter_data(devices, records, sample, allocated=allocated)

    # ------------------------------------------------------------------ NodeConfig
    def _set_state(self, state: RuntimeState, reason: str) -> ConfigStatus:
        with self._lock:
            if self._status.state is not state:
                previous = self._status
                self._status = ConfigStatus(state, self._clock(), reason)
                try:
                    self._save(self._status)
                except Exception:
                    self._status = previous
                    raise
                log.info("Runtime %s: %s", state.value, reason or "(no reason given)")
            return self._current()

    def _current(self) -> ConfigStatus:
        return ConfigStatus(self._status.state, self._status.changed_at, self._status.reason, len(self._book))

    def enable(self, reason: str = "") -> ConfigStatus:
        """Take new allocations; idempotent; persisted."""
        return self._set_state(RuntimeState.ENABLED, reason)

    def disable(self, reason: str = "") -> ConfigStatus:
        """Refuse new allocations (existing ones stay); idempotent; persisted."""
        return self._set_state(RuntimeState.DISABLED, reason)

    def status(self) -> ConfigStatus:
        """Current state and record count."""
        with self._lock:
            return self._current()
