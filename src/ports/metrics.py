"""The scheduler's metrics port: counters for decisions and drift, and a live view of the ledger.

Series (names and units are the adapter's business; see ``adapters.prometheus``): allocatable and allocated core
(milli-GPU) and memory (bytes) per node and GPU, scheduling decisions by result, failures by reason, drift repairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from domain.ledger import GpuUsage

LedgerView = Callable[[], Iterable[tuple[str, GpuUsage]]]
"""Returns ``(node name, GPU books)`` for every GPU at the time of the call (a scrape)."""


class SchedulerMetrics(Protocol):
    """Where the scheduler reports what it does."""

    def decision(self, *, scheduled: bool, reason: str = "") -> None:
        """Count one scheduling decision; ``reason`` is a short, bounded category for failures
        (``unschedulable``, ``invalid-request``, ``bind-failed``, ``internal``)."""
        ...

    def drift_repaired(self, count: int) -> None:
        """Count ``count`` ledger entries repaired by a resync."""
        ...

    def watch_ledger(self, view: LedgerView) -> None:
        """Read per-GPU allocation from ``view`` at every scrape."""
        ...

    def set_leader(self, leader: bool) -> None:
        """Whether this replica currently leads."""
        ...
