"""What a scrape serves: the last good Runtime data, already attributed, plus the collector's health.

A scrape never waits on the Runtime (failure case B23): a background collector replaces the snapshot after each
pull; a failed pull keeps the last good data and marks it ``stale``.
"""

from __future__ import annotations

import attrs

from domain.runtime.types import ExporterData


@attrs.frozen
class EventCounts:
    """Kubernetes Events on the node since start: ``sent`` (reason → Events the API server accepted, sorted by
    reason) and ``errors`` (Events lost: refused, unreachable API server, or dropped from a full queue)."""

    sent: tuple[tuple[str, int], ...] = ()
    errors: int = 0


@attrs.frozen
class Snapshot:
    """``data`` (the last good pull, attributed; empty before the first), ``pulled_at`` (epoch s of that pull,
    0 = never), ``runtime_up`` (the latest pull succeeded), ``pod_resources_up`` (the latest pod-resources
    List succeeded, or none is configured), error counters since start, ``last_error`` (empty when the
    latest pull succeeded), ``attribution_mismatches`` (container rows of the last good pull dropped by the GPU
    cross-check, ``domain.exporter.attribution``), ``pod_api_errors`` (failed list or watch requests of the node's
    pods in the Kubernetes API, ``domain.exporter.liveness``; None = no API), ``events`` (None = Events disabled) and
    ``enforcement`` (what enforces a share on the node, ``domain.runtime.enforcement.Enforcement`` value, as the
    Runtime announced it at the last good pull; empty before the first)."""

    data: ExporterData = attrs.field(factory=ExporterData)
    pulled_at: float = 0.0
    runtime_up: bool = False
    pod_resources_up: bool = True
    runtime_errors: int = 0
    pod_resources_errors: int = 0
    last_error: str = ""
    attribution_mismatches: int = 0
    pod_api_errors: int | None = None
    events: EventCounts | None = None
    enforcement: str = ""

    @property
    def stale(self) -> bool:
        """True when the data is not from the latest pull attempt (or there is none yet)."""
        return not self.runtime_up

    def age_s(self, now: float) -> float | None:
        """Seconds since the data was pulled, or None before the first good pull."""
        return None if self.pulled_at <= 0 else max(0.0, now - self.pulled_at)
