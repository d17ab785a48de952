"""``SimulatedGpuBackend``: deterministic fake GPUs behind the GPU backend port.

The default backend when NVML is absent, used by tests, the local cluster and demos. Usage model (fixed, so a
test can predict every number): a container granted ``c`` % core and ``m`` bytes on a GPU uses
``c × utilization_factor`` % of it and ``floor(m × memory_factor)`` bytes; a GPU's utilization is the sum over its
containers capped at 100 %, its memory used the sum capped at its memory; temperature is
``idle_celsius + 0.4 × utilization`` °C and power ``idle_watts + (max_watts − idle_watts) × utilization / 100`` W.

MIG (GPUs whose spec says ``migMode: enabled``, layouts checked against ``domain.mig.profiles``): instances live in
a :class:`adapters.simulated.miglayout.MigLayouts` (deterministic ids and ``MIG-…`` UUIDs), created and destroyed by
:meth:`SimulatedGpuBackend.create_mig_instance` / :meth:`destroy_mig_instance` for the dynamic strategy. An instance
held by a record uses ``utilization_factor × 100`` % and ``floor(memory × memory_factor)`` bytes of its memory, a
free one nothing. A MIG GPU's own sample has no utilization (NVML reports NotSupported in MIG mode), memory used
is the sum over its instances, and temperature and power follow the compute-slice-weighted instance utilization.

Topology (Runtime 1.2.0): ``topology`` (a :class:`domain.topology.NodeTopology` of every GPU index, or a machine name
of ``domain.topology.machines`` through ``from_spec``/``from_file``) is reported per GPU by :meth:`devices`; without
it (the default, machine ``none``) no GPU has a topology, as before.

Health: :meth:`SimulatedGpuBackend.inject_health` and :meth:`inject_xid` change it (through the same
``HealthTracker`` as NVML, so the ``ignored_xids``, default the application XIDs, are ignored here too);
:meth:`poll_health` hands the changes to the Runtime at once, and applies timed recovery when a ``quiet_period_s``
is set.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from adapters.simulated.miglayout import MigLayouts
from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health
from domain.mig.profiles import MigProfile
from domain.runtime.health import APPLICATION_XIDS, HealthTracker
from domain.runtime.mig import mig_table
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
from domain.topology import NodeTopology
from domain.topology.machines import machine_topology
from domain.units import MILLI_PER_PERCENT
from ports.gpu_backend import GpuBackendError

from .spec import GpuGroup, SpecError, build_inventory, load_file, mig_layouts, parse_spec


class SimulatedGpuBackend:
    """Simulated GPUs (module docstring). Thread-safe. ``mig_layouts``: initial MIG instances per GPU index,
    ``(profile, start)`` pairs. Raises ValueError for no GPUs and the MIG domain errors (``domain.mig.errors``,
    all ``DomainError``) for a MIG GPU without table or a bad layout."""

    name = "simulated"

    def __init__(
        self,
        gpus: Sequence[Gpu],
        *,
        mig_layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None,
        clock: Callable[[], float] = time.time,
        quiet_period_s: float | None = None,
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
        topology: NodeTopology | None = None,
        utilization_factor: float = 0.8,
        memory_factor: float = 0.5,
        idle_celsius: float = 30.0,
        idle_watts: float = 50.0,
        max_watts: float = 300.0,
    ) -> None:
        if not gpus:
            raise ValueError("a simulated node needs at least one GPU")
        self._gpus = tuple(gpus)
        if topology is not None and set(topology.gpus) != {g.index for g in self._gpus}:
            raise ValueError(f"simulated topology describes GPUs {sorted(topology.gpus)}, the node has "
                             f"{[g.index for g in self._gpus]}")
        self._topology = topology
        self._mig = MigLayouts(self._gpus, mig_layouts)
        self._clock = clock
        self._tracker = HealthTracker(self._gpus, quiet_period_s=quiet_period_s, ignored_xids=ignored_xids)
        self._pending: list[HealthChange] = []
        self._changed = threading.Condition()
        self._utilization_factor = utilization_factor
        self._memory_factor = memory_factor
        self._idle_celsius = idle_celsius
        self._idle_watts = idle_watts
        self._max_watts = max_watts

    @classmethod
    def from_spec(
        cls,
        text: str,
        *,
        seed: str = "ljrk",
        quiet_period_s: float | None = None,
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
        clock: Callable[[], float] = time.time,
        topology: str = "none",
    ) -> SimulatedGpuBackend:
        """GPUs from ``2x16Gi:A100``-style text (``adapters.simulated.spec``), on machine ``topology``
        (``domain.topology.machines``). Raises SpecError."""
        return cls._built(parse_spec(text), text, seed=seed, quiet_period_s=quiet_period_s, ignored_xids=ignored_xids,
                          clock=clock, topology=topology)

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        seed: str = "ljrk",
        quiet_period_s: float | None = None,
        ignored_xids: frozenset[int] = APPLICATION_XIDS,
        clock: Callable[[], float] = time.time,
        topology: str = "none",
    ) -> SimulatedGpuBackend:
        """GPUs from a YAML file (``adapters.simulated.spec``), on machine ``topology``. Raises SpecError."""
        return cls._built(load_file(path), str(path), seed=seed, quiet_period_s=quiet_period_s,
                          ignored_xids=ignored_xids, clock=clock, topology=topology)

    @classmethod
    def _built(
        cls, groups: Sequence[GpuGroup], where: str, *, seed: str, quiet_period_s: float | None,
        ignored_xids: frozenset[int], clock: Callable[[], float], topology: str = "none",
    ) -> SimulatedGpuBackend:
        gpus = build_inventory(groups, seed=seed)
        try:
            machine = machine_topology(topology, len(gpus))
        except InvalidRequestError as error:
            raise SpecError(f"simulated GPUs {where!r}: {error}") from None
        try:
            return cls(gpus, mig_layouts=mig_layouts(groups), quiet_period_s=quiet_period_s,
                       ignored_xids=ignored_xids, clock=clock, topology=machine)
        except DomainError as error:
            raise SpecError(f"simulated GPUs {where!r}: MIG: {error}") from None

    def device_minors(self) -> Mapping[GpuUuid, int]:
        """The index of each GPU (what a real node without gaps in its minor numbers has)."""
        with self._changed:
            return {g.uuid: g.index for g, _, _ in self._tracker.current()}

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Every GPU with its current health."""
        with self._changed:
            current = self._tracker.current()
        return tuple(
            DeviceInfo(Gpu(g.index, g.uuid, g.model, g.memory_bytes, health, g.mig_mode), reason,
                       self._mig.instances(g.uuid), None if self._topology is None else self._topology.gpus[g.index])
            for g, health, reason in current
        )

    def create_mig_instance(self, gpu: GpuUuid, profile: MigProfile, start: int) -> MigInstanceInfo:
        """Create an instance in memory (module docstring). Raises :class:`GpuBackendError` when the GPU is not a
        MIG GPU here or the placement does not fit."""
        try:
            return self._mig.create_mig_instance(gpu, profile, start)
        except DomainError as error:
            what = f"simulated GPU {gpu}: cannot create {profile.name} at start {start}"
            raise GpuBackendError(f"{what}: {error}") from error

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        """Destroy an instance in memory; one already gone is fine."""
        self._mig.destroy_mig_instance(instance)

    def _mig_sample(
        self, allocations: Sequence[ContainerAllocation]
    ) -> tuple[tuple[MigSample, ...], dict[GpuUuid, tuple[int, float]]]:
        held = {i.key for record in allocations for i in record.mig}
        samples = []
        per_gpu: dict[GpuUuid, tuple[int, float]] = {}
        for instance in self._mig.instances():
            busy = instance.key in held
            used = math.floor(instance.memory_bytes * self._memory_factor) if busy else 0
            utilization = 100.0 * self._utilization_factor if busy else 0.0
            samples.append(MigSample(instance.uuid, used, utilization))
            memory, weighted = per_gpu.get(instance.gpu_uuid, (0, 0.0))
            per_gpu[instance.gpu_uuid] = (memory + used, weighted + utilization * instance.compute_slices)
        return tuple(samples), per_gpu

    def sample(self, allocations: Sequence[ContainerAllocation]) -> UsageSample:
        """The usage model applied to ``allocations`` (module docstring)."""
        mig_samples, mig_use = self._mig_sample(allocations)
        per_gpu: dict[GpuUuid, list[tuple[float, int]]] = {g.uuid: [] for g in self._gpus}
        containers = []
        for record in allocations:
            for grant in record.grants:
                utilization = grant.core_milli / MILLI_PER_PERCENT * self._utilization_factor
                memory = math.floor(grant.memory_bytes * self._memory_factor)
                per_gpu.setdefault(grant.uuid, []).append((utilization, memory))
                containers.append(
                    ContainerUsage(record.request.pod_uid, record.request.container, grant.uuid, memory, utilization)
                )
        samples = []
        with self._changed:
            for gpu in self._gpus:
                loads = per_gpu[gpu.uuid]
                utilization = min(100.0, sum(u for u, _ in loads))
                memory = min(gpu.memory_bytes, sum(m for _, m in loads))
                reported: float | None = utilization
                error = ""
                table = mig_table(gpu) if gpu.uuid in self._mig.gpus() else None
                if table is not None:
                    mig_memory, weighted = mig_use.get(gpu.uuid, (0, 0.0))
                    utilization = min(100.0, weighted / table.compute_slots)
                    memory, reported, error = min(gpu.memory_bytes, mig_memory), None, "utilization: Not Supported"
                samples.append(
                    GpuSample(
                        uuid=gpu.uuid,
                        utilization_percent=reported,
                        memory_used_bytes=memory,
                        temperature_celsius=self._idle_celsius + 0.4 * utilization,
                        power_watts=self._idle_watts + (self._max_watts - self._idle_watts) * utilization / 100,
                        xid_counts=self._tracker.xid_counts(gpu.uuid),
                        error=error,
                    )
                )
        return UsageSample(gpus=tuple(samples), containers=tuple(containers), at=self._clock(), mig=mig_samples)

    def poll_health(self, timeout_s: float) -> tuple[HealthChange, ...]:
        """Injected changes (waiting up to ``timeout_s`` for one) plus timed recoveries."""
        with self._changed:
            if not self._pending:
                self._changed.wait(timeout_s)
            changes = [*self._pending, *self._tracker.tick(self._clock())]
            self._pending.clear()
            return tuple(changes)

    def inject_health(self, uuid: str, health: Health, reason: str = "injected") -> tuple[HealthChange, ...]:
        """Set one GPU's health (tests, demos); returns the resulting changes (none when already so). Raises
        KeyError for an unknown UUID."""
        self._check(uuid)
        with self._changed:
            now = self._clock()
            if health is Health.UNHEALTHY:
                changes = self._tracker.fault(GpuUuid(uuid), reason, now=now)
            else:
                changes = self._tracker.reset(GpuUuid(uuid), reason, now=now)
            self._publish(changes)
            return tuple(changes)

    def inject_xid(self, uuid: str | None, xid: int) -> tuple[HealthChange, ...]:
        """An XID event on one GPU (None: no device, so all GPUs), classified as NVML's are."""
        if uuid is not None:
            self._check(uuid)
        with self._changed:
            changes = self._tracker.on_xid(None if uuid is None else GpuUuid(uuid), xid, now=self._clock())
            self._publish(changes)
            return tuple(changes)

    def close(self) -> None:
        """Wake any poller; nothing else to release."""
        with self._changed:
            self._changed.notify_all()

    def _publish(self, changes: list[HealthChange]) -> None:
        if changes:
            self._pending.extend(changes)
            self._changed.notify_all()

    def _check(self, uuid: str) -> None:
        if all(g.uuid != uuid for g in self._gpus):
            raise KeyError(f"no simulated GPU {uuid!r}; GPUs: {', '.join(g.uuid for g in self._gpus)}")
