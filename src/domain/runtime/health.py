"""GPU health from XID events, with a recovery path (a GPU is not unhealthy forever).

Classification follows NVIDIA's device plugin (github.com/NVIDIA/k8s-device-plugin, its NVML health check): by
default XIDs 13, 31, 43, 45, 68 and 109 are raised by applications (illegal address, MMU fault of one context, kernel
reset, preemptive cleanup, video processor exception, context-switch timeout) and leave the device healthy (the set is
``ignored_xids``, ``ljrk runtime --ignored-xids``); every other critical XID marks the GPU unhealthy, and an XID
without a device marks every GPU unhealthy. Unlike NVIDIA's plugin and HAMi, where an unhealthy device never
recovers, an unhealthy GPU becomes healthy again either

* after ``quiet_period_s`` seconds without another fault on it (a later fault restarts the clock), or
* on an explicit reset (:meth:`HealthTracker.reset`: an operator, or an NVML "recovery action: none" event).

``quiet_period_s=None`` disables the timed recovery (explicit reset only). Every XID is counted, application
ones included, for the exporter. Times are epoch seconds supplied by the caller (no clock in the domain).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs

from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.types import HealthChange

APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs caused by the application, not the device (NVIDIA device plugin's default skip list plus 109): the
default of ``ignored_xids``."""

MAX_XID = 2**32 - 1
"""XIDs are unsigned 32-bit numbers in NVML's event data."""


def _xid_set(values: Iterable[int]) -> frozenset[int]:
    xids = frozenset(values)
    for xid in sorted(xids, key=repr):
        if isinstance(xid, bool) or not isinstance(xid, int) or not 1 <= xid <= MAX_XID:
            raise ValueError(f"ignored_xids: {xid!r} is not an XID (an integer 1..{MAX_XID})")
    return xids


def _gpu_tuple(gpus: Iterable[Gpu]) -> tuple[Gpu, ...]:
    return tuple(gpus)


@attrs.define
class _Fault:
    reason: str
    xid: int | None
    last_at: float


@attrs.define
class HealthTracker:
    """Per-GPU health state machine (module docstring); not thread-safe (callers hold a lock).

    Built from the node's GPUs, whose own ``health`` is the starting state. ``ignored_xids``: XIDs counted but
    leaving the GPU healthy (default :data:`APPLICATION_XIDS`). Raises ValueError for a negative
    ``quiet_period_s`` or an ignored XID outside 1..:data:`MAX_XID`.
    """

    gpus: tuple[Gpu, ...] = attrs.field(converter=_gpu_tuple)
    quiet_period_s: float | None = 300.0
    ignored_xids: frozenset[int] = attrs.field(default=APPLICATION_XIDS, converter=_xid_set)
    _faults: dict[GpuUuid, _Fault] = attrs.field(init=False, factory=dict)
    _xids: dict[GpuUuid, Counter[int]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.quiet_period_s is not None and self.quiet_period_s < 0:
            raise ValueError(f"quiet_period_s={self.quiet_period_s!r}: must be >= 0 or None")
        for gpu in self.gpus:
            self._xids[gpu.uuid] = Counter()
            if gpu.health is Health.UNHEALTHY:
                self._faults[gpu.uuid] = _Fault("unhealthy at start", None, 0.0)

    def _targets(self, uuid: GpuUuid | None) -> list[Gpu]:
        return [g for g in self.gpus if uuid is None or g.uuid == uuid]

    def health(self, uuid: GpuUuid) -> tuple[Health, str]:
        """Current ``(health, reason)`` of one GPU (reason empty when healthy)."""
        fault = self._faults.get(uuid)
        return (Health.HEALTHY, "") if fault is None else (Health.UNHEALTHY, fault.reason)

    def xid_counts(self, uuid: GpuUuid) -> dict[int, int]:
        """XID → number of events seen on the GPU (application XIDs included)."""
        return dict(self._xids.get(uuid, Counter()))

    def on_xid(self, uuid: GpuUuid | None, xid: int, *, now: float) -> list[HealthChange]:
        """An XID event on ``uuid`` (None: no device named, so every GPU). Counts it; a critical XID marks the
        GPU(s) unhealthy. Returns the resulting changes (empty for ignored XIDs or repeats)."""
        for gpu in self._targets(uuid):
            self._xids[gpu.uuid][xid] += 1
        if xid in self.ignored_xids:
            return []
        return self.fault(uuid, f"XID {xid}", now=now, xid=xid)

    def fault(self, uuid: GpuUuid | None, reason: str, *, now: float, xid: int | None = None) -> list[HealthChange]:
        """Mark ``uuid`` (None: every GPU) unhealthy for ``reason`` (a lost GPU, a required recovery action…).
        An already unhealthy GPU restarts its quiet period without a new change. Returns the changes."""
        changes = []
        for gpu in self._targets(uuid):
            fault = self._faults.get(gpu.uuid)
            if fault is not None:
                fault.last_at = now
                continue
            self._faults[gpu.uuid] = _Fault(reason, xid, now)
            changes.append(HealthChange(gpu.uuid, gpu.index, Health.UNHEALTHY, reason, xid, now))
        return changes

    def reset(self, uuid: GpuUuid | None, reason: str, *, now: float) -> list[HealthChange]:
        """Explicit recovery of ``uuid`` (None: every GPU): unhealthy GPUs become healthy. Returns the changes."""
        changes = []
        for gpu in self._targets(uuid):
            if self._faults.pop(gpu.uuid, None) is not None:
                changes.append(HealthChange(gpu.uuid, gpu.index, Health.HEALTHY, reason, None, now))
        return changes

    def tick(self, now: float) -> list[HealthChange]:
        """Recover every GPU whose last fault is at least ``quiet_period_s`` old. Returns the changes."""
        if self.quiet_period_s is None:
            return []
        changes = []
        for gpu in self.gpus:
            fault = self._faults.get(gpu.uuid)
            if fault is not None and now - fault.last_at >= self.quiet_period_s:
                del self._faults[gpu.uuid]
                reason = f"recovered: no fault for {self.quiet_period_s:g} s (last: {fault.reason})"
                changes.append(HealthChange(gpu.uuid, gpu.index, Health.HEALTHY, reason, None, now))
        return changes

    def current(self) -> Iterable[tuple[Gpu, Health, str]]:
        """``(gpu, health, reason)`` for every GPU, in inventory order."""
        for gpu in self.gpus:
            health, reason = self.health(gpu.uuid)
            yield gpu, health, reason
