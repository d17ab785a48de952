"""The exporter's Prometheus page: ``domain.exporter.metrics.build_families`` in the text format 0.0.4.

Custom collectors (no client-library instruments), so the page holds exactly what the current snapshot holds:
no stale label sets after a pod goes (failure case B20), every GPU each time (B22). The snapshot comes from a
callable that must not block (the exporter's background collector hands over its last snapshot, B23).

Rendering cost: ``prometheus_client.generate_latest`` checks every label of every sample, about 45 ms for a
node of 16 GPUs × 64 containers (bench/exporter_scrape.py). The GPU, MIG instance, container and node families
depend only on the Runtime data of the snapshot, which changes once per pull, so their rendered text is cached per
data object and only the exporter's own health families (data age changes with every scrape) are rendered each
time. Both parts go through ``generate_latest``; the page is their concatenation, in ``build_families`` order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapters.prometheus.protocol import protocol_info_gauge
from domain.exporter.metrics import Family, build_data_families, build_health_families
from domain.exporter.snapshot import Snapshot
from domain.runtime.types import ExporterData

METRICS_CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
"""Content type of :meth:`PrometheusExporterMetrics.exposition`."""


def _render(family: Family) -> Metric:
    metric: GaugeMetricFamily | CounterMetricFamily
    if family.kind == "counter":
        metric = CounterMetricFamily(family.name, family.help, labels=family.labels)
    else:
        metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
    for values, value in family.samples:
        metric.add_metric(list(values), value)
    return metric


class _FamiliesCollector(Collector):
    """Yields the families of one render (set just before ``generate_latest`` runs; the caller holds a lock)."""

    def __init__(self) -> None:
        self.families: list[Family] = []

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield _render(family)


class PrometheusExporterMetrics:
    """The exporter's series for node ``node`` from ``source`` (module docstring), plus
    ``lj_runtimekit_protocol_info{component="exporter",fingerprint}`` when ``protocol_fingerprint`` is given;
    ``clock`` gives epoch seconds (data age). Thread-safe. ``registry`` is the registry the page is rendered
    from (a private one by default); it must hold nothing else."""

    def __init__(
        self, source: Callable[[], Snapshot], *, node: str, clock: Callable[[], float] = time.time,
        registry: prometheus_client.CollectorRegistry | None = None, protocol_fingerprint: str | None = None,
    ) -> None:
        self._source = source
        self._node = node
        self._clock = clock
        self.registry = registry or prometheus_client.CollectorRegistry()
        self._collector = _FamiliesCollector()
        self.registry.register(self._collector)
        self._lock = threading.Lock()
        self._cached: tuple[ExporterData, bytes] | None = None
        self._info = b""
        if protocol_fingerprint is not None:
            info = prometheus_client.CollectorRegistry()
            protocol_info_gauge(info).labels(component="exporter", fingerprint=protocol_fingerprint).set(1)
            self._info = prometheus_client.generate_latest(info)
        self.data_renders = 0
        """How many times the data part was rendered (for tests: once per distinct snapshot data)."""

    def _generate(self, families: list[Family]) -> bytes:
        self._collector.families = families
        try:
            return prometheus_client.generate_latest(self.registry)
        finally:
            self._collector.families = []

    def exposition(self) -> bytes:
        """The page in the Prometheus text format 0.0.4 (module docstring)."""
        snapshot = self._source()
        with self._lock:
            cached = self._cached
            if cached is None or cached[0] is not snapshot.data:
                body = self._generate(list(build_data_families(snapshot.data, node=self._node)))
                cached = self._cached = (snapshot.data, body)
                self.data_renders += 1
            health = self._generate(list(build_health_families(snapshot, node=self._node, now=self._clock())))
        return cached[1] + health + self._info
