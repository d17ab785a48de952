"""Metrics ports: the scheduler's (decisions, drift, a live view of the ledger) and the node controller's
(toggle transitions, Jobs, failures, API writes, nodes per state, the failed nodes by name): the services report
through them. The device plugin has none: its service reports nothing as it goes; its ``/metrics`` is its app's
status read at scrape time, which only its wiring connects to ``adapters.prometheus.device_plugin``.

Series (names and units are the adapter's business; see ``adapters.prometheus``): allocatable and allocated core
(milli-GPU) and memory (bytes) per node and GPU, scheduling decisions by result, failures by reason, drift repairs,
nodes quarantined for impossible books, pods on vanished GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from domain.ledger import GpuUsage
from domain.toggle.states import Action, ToggleState

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

    def set_protocol(self, fingerprint: str) -> None:
        """The fingerprint of the protocol this scheduler loaded (``ProtocolConstants.fingerprint``)."""
        ...

    def set_protocol_mismatches(self, counts: Mapping[str, int]) -> None:
        """How many nodes have a node component (``device-plugin``, ``exporter``) publishing another protocol
        fingerprint than the scheduler's, per component (the full map every time)."""
        ...

    def set_overbooked_nodes(self, count: int) -> None:
        """How many nodes are quarantined because their books are impossible (a GPU booked beyond its core or
        memory; :mod:`domain.scheduling.sync.overbooking`)."""
        ...

    def set_vanished_gpu_pods(self, count: int) -> None:
        """How many bound pods hold a GPU their node's inventory no longer lists
        (:mod:`domain.scheduling.sync.vanished`)."""
        ...


StateView = Callable[[], Mapping[ToggleState, int]]
"""Returns how many managed nodes are in each toggle state at the time of the call (a scrape)."""

FailedView = Callable[[], Mapping[str, Action | None]]
"""Returns the managed nodes in the ``failed`` state at the time of the call (a scrape): node name → the target
whose tries all failed (None when the record names none)."""


class ControllerMetrics(Protocol):
    """Where the node controller reports what it does (``ljrk controller``; series in ``adapters.prometheus``)."""

    def transition(self, previous: ToggleState, new: ToggleState) -> None:
        """Count one toggle state change of one node."""
        ...

    def job_created(self, action: Action) -> None:
        """Count one Job created."""
        ...

    def job_deleted(self, reason: str) -> None:
        """Count one Job deleted; ``reason`` is one of the bounded set of
        :class:`domain.toggle.reconcile.DeleteJob` reasons."""
        ...

    def job_failed(self, action: Action) -> None:
        """Count one failed try (a Job that failed, got stuck or vanished)."""
        ...

    def api_write(self, verb: str, *, ok: bool) -> None:
        """Count one write to the API server: ``verb`` is ``create_job``, ``delete_job``, ``patch_node`` or
        ``create_event``; ``ok`` False when it raised."""
        ...

    def watch_states(self, view: StateView) -> None:
        """Read the number of nodes per state from ``view`` at every scrape."""
        ...

    def watch_failed_nodes(self, view: FailedView) -> None:
        """Read the names of the nodes in the ``failed`` state (and their targets) from ``view`` at every scrape."""
        ...

    def set_leader(self, leader: bool) -> None:
        """Whether this replica currently leads."""
        ...
