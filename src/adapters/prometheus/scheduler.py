"""Scheduler metrics on a prometheus-client registry (Prometheus naming: snake_case, base units, ``_total``).

``lj_runtimekit_scheduler_gpu_{core_allocatable,core_allocated}_milli`` and
``lj_runtimekit_scheduler_gpu_memory_{allocatable,allocated}_bytes`` per ``node``/``gpu_index``/``gpu_uuid``/
``model`` come from the ledger at scrape time through a custom collector (no stale series after a node or pod
goes away); ``lj_runtimekit_scheduler_decisions_total{result}``, ``…_failures_total{reason}``,
``…_drift_repairs_total``, ``…_leader``, ``…_protocol_mismatch_nodes{component}``, ``…_overbooked_nodes`` and
``…_vanished_gpu_pods`` are ordinary instruments;
``lj_runtimekit_protocol_info{component="scheduler",fingerprint}`` is 1 (every component publishes one).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ports.metrics import LedgerView

from .protocol import protocol_info_gauge

PREFIX = "lj_runtimekit_scheduler"


class _LedgerCollector(Collector):
    def __init__(self) -> None:
        self.view: LedgerView | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["node", "gpu_index", "gpu_uuid", "model"]
        families = {
            "core_allocatable": GaugeMetricFamily(
                f"{PREFIX}_gpu_core_allocatable_milli", "Allocatable GPU compute, milli-GPU", labels=labels),
            "core_allocated": GaugeMetricFamily(
                f"{PREFIX}_gpu_core_allocated_milli", "GPU compute booked in the ledger, milli-GPU", labels=labels),
            "mem_allocatable": GaugeMetricFamily(
                f"{PREFIX}_gpu_memory_allocatable_bytes", "Allocatable GPU memory, bytes", labels=labels),
            "mem_allocated": GaugeMetricFamily(
                f"{PREFIX}_gpu_memory_allocated_bytes", "GPU memory booked in the ledger, bytes", labels=labels),
        }
        if self.view is not None:
            for node, gpu in self.view():
                values = [node, str(gpu.index), gpu.uuid, gpu.model]
                families["core_allocatable"].add_metric(values, gpu.core_capacity if gpu.schedulable else 0)
                families["core_allocated"].add_metric(values, gpu.core_used)
                families["mem_allocatable"].add_metric(values, gpu.memory_capacity if gpu.schedulable else 0)
                families["mem_allocated"].add_metric(values, gpu.memory_used)
        yield from families.values()


class PrometheusSchedulerMetrics:
    """:class:`ports.metrics.SchedulerMetrics` on its own :class:`prometheus_client.CollectorRegistry`."""

    def __init__(self, registry: prometheus_client.CollectorRegistry | None = None) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry()
        self._ledger = _LedgerCollector()
        self.registry.register(self._ledger)
        self._decisions = prometheus_client.Counter(
            f"{PREFIX}_decisions", "Scheduling decisions by result", ["result"], registry=self.registry)
        self._failures = prometheus_client.Counter(
            f"{PREFIX}_failures", "Failed scheduling attempts by reason", ["reason"], registry=self.registry)
        self._drift = prometheus_client.Counter(
            f"{PREFIX}_drift_repairs", "Ledger entries repaired by a resync", registry=self.registry)
        self._leader = prometheus_client.Gauge(
            f"{PREFIX}_leader", "1 while this replica leads", registry=self.registry)
        self._protocol = protocol_info_gauge(self.registry)
        self._mismatch = prometheus_client.Gauge(
            f"{PREFIX}_protocol_mismatch_nodes",
            "Nodes whose device plugin or exporter publishes another protocol fingerprint (no GPU pods there)",
            ["component"], registry=self.registry)
        self._overbooked = prometheus_client.Gauge(
            f"{PREFIX}_overbooked_nodes",
            "Nodes quarantined because a GPU is booked beyond its core or memory (impossible books)",
            registry=self.registry)
        self._vanished = prometheus_client.Gauge(
            f"{PREFIX}_vanished_gpu_pods",
            "Bound pods whose plan names a GPU their node's inventory no longer lists", registry=self.registry)

    def decision(self, *, scheduled: bool, reason: str = "") -> None:
        """Count a decision (and its failure reason)."""
        self._decisions.labels(result="scheduled" if scheduled else "unschedulable").inc()
        if not scheduled:
            self._failures.labels(reason=reason or "unschedulable").inc()

    def drift_repaired(self, count: int) -> None:
        """Add ``count`` to the drift-repair counter."""
        if count:
            self._drift.inc(count)

    def watch_ledger(self, view: LedgerView) -> None:
        """Serve per-GPU ledger gauges from ``view`` at scrape time."""
        self._ledger.view = view

    def set_leader(self, leader: bool) -> None:
        """1 while leading, else 0."""
        self._leader.set(1 if leader else 0)

    def set_protocol(self, fingerprint: str) -> None:
        """``lj_runtimekit_protocol_info{component="scheduler",fingerprint}`` = 1."""
        self._protocol.labels(component="scheduler", fingerprint=fingerprint).set(1)

    def set_protocol_mismatches(self, counts: Mapping[str, int]) -> None:
        """Mismatching nodes per component."""
        for component, count in counts.items():
            self._mismatch.labels(component=component).set(count)

    def set_overbooked_nodes(self, count: int) -> None:
        """Nodes quarantined for impossible books."""
        self._overbooked.set(count)

    def set_vanished_gpu_pods(self, count: int) -> None:
        """Bound pods on GPUs gone from their node's inventory."""
        self._vanished.set(count)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (for an HTTP handler)."""
        return prometheus_client.generate_latest(self.registry)
