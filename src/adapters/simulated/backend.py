"""``SimulatedGpuBackend``: deterministic fake GPUs behind the GPU backend port.

The default backend when NVML is absent, used by tests, the local cluster and demos. Usage model (fixed, so a
test can predict every number): a container granted ``c`` % core and ``m`` bytes on a GPU uses
``c × utilization_factor`` % of it and ``floor(m × memory_factor)`` bytes; a GPU's utilization is the sum over its
containers capped at 100 %, its memory used the sum capped at its memory; temperature is
``idle_celsius + 0.4 × utilization`` °C and power ``idle_watts + (max_watts − idle_watts) × utilization / 100`` W.

Health: :meth:`SimulatedGpuBackend.inject_health` and :meth:`inject_xid` change it (through the same
``HealthTracker`` as NVML, so application XIDs are ignored here too); :meth:`poll_health` hands the changes to the
Runtime at once, and applies timed recovery when a ``quiet_period_s`` is set.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.health import HealthTracker
from domain.runtime.types import ContainerAllocation, ContainerUsage, DeviceInfo, GpuSample, HealthChange, UsageSample
from domain.units import MILLI_PER_PERCENT

from .spec import build_inventory, load_file, parse_spec


class SimulatedGpuBackend:
    """Simulated GPUs (module docstring). Thread-safe."""

    name = "simulated"

    def __init__(
        self,
        gpus: Sequence[Gpu],
        *,
        clock: Callable[[], float] = time.time,
        quiet_period_s: float | None = None,
        utilization_factor: float = 0.8,
        memory_factor: float = 0.5,
        idle_celsius: float = 30.0,
        idle_watts: float = 50.0,
        max_watts: float = 300.0,
    ) -> None:
        if not gpus:
            raise ValueError("a simulated node needs at least one GPU")
        self._gpus = tuple(gpus)
        self._clock = clock
        self._tracker = HealthTracker(self._gpus, quiet_period_s=quiet_period_s)
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
        clock: Callable[[], float] = time.time,
    ) -> SimulatedGpuBackend:
        """GPUs from ``2x16Gi:A100``-style text (``adapters.simulated.spec``). Raises SpecError."""
        return cls(build_inventory(parse_spec(text), seed=seed), quiet_period_s=quiet_period_s, clock=clock)

    @classmethod
    def from_file(
        cls,
        path: Path,
        *,
        seed: str = "ljrk",
        quiet_period_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> SimulatedGpuBackend:
        """GPUs from a YAML file (``adapters.simulated.spec``). Raises SpecError."""
        return cls(build_inventory(load_file(path), seed=seed), quiet_period_s=quiet_period_s, clock=clock)

    def device_minors(self) -> Mapping[GpuUuid, int]:
        """The index of each GPU (what a real node without gaps in its minor numbers has)."""
        with self._changed:
            return {g.uuid: g.index for g, _, _ in self._tracker.current()}

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Every GPU with its current health."""
        with self._changed:
            return tuple(
                DeviceInfo(Gpu(g.index, g.uuid, g.model, g.memory_bytes, health, g.mig_mode), reason)
                for g, health, reason in self._tracker.current()
            )

    def sample(self, allocations: Sequence[ContainerAllocation]) -> UsageSample:
        """The usage model applied to ``allocations`` (module docstring)."""
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
                samples.append(
                    GpuSample(
                        uuid=gpu.uuid,
                        utilization_percent=utilization,
                        memory_used_bytes=min(gpu.memory_bytes, sum(m for _, m in loads)),
                        temperature_celsius=self._idle_celsius + 0.4 * utilization,
                        power_watts=self._idle_watts + (self._max_watts - self._idle_watts) * utilization / 100,
                        xid_counts=self._tracker.xid_counts(gpu.uuid),
                    )
                )
        return UsageSample(gpus=tuple(samples), containers=tuple(containers), at=self._clock())

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
