"""Hysteresis on GPU health: a flapping GPU reports one Unhealthy and one Healthy per quiet period.

A backend reports every fault and every recovery (``domain.runtime.health``); a GPU whose XIDs come and go, or
whose NVML recovery events say "none" right after each fault, would flip kubelet's device lists, the node
inventory, the exporter's ``gpu_healthy`` and its Events once per flip (10 ListAndWatch updates per
resource for five flaps in 10 s). The Runtime passes the backend's changes through :class:`HealthDamper`, and
everything it serves (WatchHealth, ListDevices, ExporterGetDataList) says the damped health:

* Unhealthy is reported at once (a fault is never hidden);
* a GPU reported Unhealthy turns Healthy only once ``hold_s`` seconds have passed since its last fault and the
  backend still says Healthy; a recovery the backend reports sooner is held, and :meth:`HealthDamper.tick`
  releases it when the quiet period is over. Any two Healthy reports of one GPU are therefore more than
  ``hold_s`` apart, with an Unhealthy between them.

``hold_s=0`` passes every change through. Times are epoch seconds from the caller (no clock here); not
thread-safe (the Runtime holds a lock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from domain.gpu import GpuUuid, Health
from domain.runtime.types import DeviceInfo, HealthChange


@attrs.define
class _State:
    index: int
    reported: Health
    reason: str
    backend: Health
    backend_reason: str
    last_fault_at: float


@attrs.define
class HealthDamper:
    """Damped health per GPU (module docstring). ``hold_s``: the quiet period in seconds (≥ 0, finite). Raises
    ValueError naming ``hold_s`` for a negative or non-finite value."""

    hold_s: float = 30.0
    _gpus: dict[GpuUuid, _State] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.hold_s < float("inf"):
            raise ValueError(f"hold_s={self.hold_s!r}: must be a finite number of seconds >= 0")

    def seed(self, devices: Iterable[DeviceInfo], *, now: float) -> None:
        """Start from the backend's listing; a GPU unhealthy at start counts as faulted at ``now``."""
        for device in devices:
            gpu = device.gpu
            self._gpus[gpu.uuid] = _State(gpu.index, gpu.health, device.health_reason, gpu.health,
                                          device.health_reason, now)

    def observe(self, changes: Iterable[HealthChange]) -> list[HealthChange]:
        """Feed the backend's changes (in order, each at its own ``at``); returns those to report now."""
        out = []
        for change in changes:
            state = self._gpus.get(change.uuid)
            if state is None:
                state = self._gpus[change.uuid] = _State(change.index, change.health, change.reason,
                                                         change.health, change.reason, change.at)
                if change.health is Health.UNHEALTHY:
                    out.append(change)
                continue
            state.backend, state.backend_reason = change.health, change.reason
            if change.health is Health.UNHEALTHY:
                state.last_fault_at = change.at
                if state.reported is Health.HEALTHY:
                    state.reported, state.reason = Health.UNHEALTHY, change.reason
                    out.append(change)
            elif state.reported is Health.UNHEALTHY and change.at - state.last_fault_at >= self.hold_s:
                state.reported, state.reason = Health.HEALTHY, change.reason
                out.append(change)
        return out

    def tick(self, now: float) -> list[HealthChange]:
        """Release held recoveries whose quiet period has passed at ``now``; returns the Healthy changes."""
        out = []
        for uuid, state in self._gpus.items():
            if (state.reported is Health.UNHEALTHY and state.backend is Health.HEALTHY
                    and now - state.last_fault_at >= self.hold_s):
                reason = f"{state.backend_reason or 'recovered'} (no fault for {self.hold_s:g} s)"
                state.reported, state.reason = Health.HEALTHY, reason
                out.append(HealthChange(uuid, state.index, Health.HEALTHY, reason, None, now))
        return out

    def apply(self, devices: Sequence[DeviceInfo]) -> tuple[DeviceInfo, ...]:
        """``devices`` (a backend listing) with held recoveries shown as Unhealthy, reason kept. A GPU the
        backend lists as Unhealthy stays so even before its change was observed (faults are never hidden)."""
        out = []
        for device in devices:
            state = self._gpus.get(device.gpu.uuid)
            if (state is not None and state.reported is Health.UNHEALTHY
                    and device.gpu.health is Health.HEALTHY):
                reason = f"{state.reason} (healthy again; held until {self.hold_s:g} s without a fault)"
                device = attrs.evolve(device, gpu=attrs.evolve(device.gpu, health=Health.UNHEALTHY),
                                      health_reason=reason)
            out.append(device)
        return tuple(out)
