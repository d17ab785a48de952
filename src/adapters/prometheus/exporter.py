"""The exporter's Prometheus collector: renders ``domain.exporter.metrics.build_families`` at every scrape.

A custom collector (no client-library instruments), so the page holds exactly what the current snapshot holds:
no stale label sets after a pod goes (failure case B20), every GPU each time (B22). The snapshot comes from a
callable that must not block (the exporter's background collector hands over its last snapshot, B23).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domain.exporter.metrics import Family, build_families
from domain.exporter.snapshot import Snapshot

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


class _SnapshotCollector(Collector):
    def __init__(self, source: Callable[[], Snapshot], node: str, clock: Callable[[], float]) -> None:
        self._source = source
        self._node = node
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        for family in build_families(self._source(), node=self._node, now=self._clock()):
            yield _render(family)


class PrometheusExporterMetrics:
    """The exporter's series for node ``node`` from ``source`` on its own registry (or ``registry``);
    ``clock`` gives epoch seconds (data age)."""

    def __init__(
        self, source: Callable[[], Snapshot], *, node: str, clock: Callable[[], float] = time.time,
        registry: prometheus_client.CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry()
        self.registry.register(_SnapshotCollector(source, node, clock))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format 0.0.4."""
        return prometheus_client.generate_latest(self.registry)
