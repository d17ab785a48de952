"""Node controller metrics on a prometheus-client registry (Prometheus naming: snake_case, ``_total`` counters).

* ``lj_runtimekit_controller_transitions_total{from,to}`` — toggle state changes;
* ``lj_runtimekit_controller_jobs_created_total{action}`` and ``…_jobs_deleted_total{reason}``;
* ``lj_runtimekit_controller_job_failures_total{action}`` — failed tries (failed, stuck or vanished Jobs);
* ``lj_runtimekit_controller_api_writes_total{verb,result}`` — every write to the API server (``ok``/``error``);
* ``lj_runtimekit_controller_nodes{state}`` — managed nodes per state, read at scrape time through a collector
  (every state always present, so a state that empties reads 0 rather than vanishing);
* ``lj_runtimekit_controller_node_failed{node,target}`` — 1 per managed node in the ``failed`` state (every try
  for ``target``, ``enable`` or ``disable``, failed), read at scrape time, so an alert can name the node; a node
  that leaves ``failed`` leaves the page;
* ``lj_runtimekit_controller_leader`` — 1 while this replica leads.
"""

from __future__ import annotations

from collections.abc import Iterator

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from adapters.prometheus.protocol import protocol_info_gauge
from domain.toggle.states import Action, ToggleState
from ports.metrics import FailedView, StateView

PREFIX = "lj_runtimekit_controller"


class _StateCollector(Collector):
    def __init__(self) -> None:
        self.view: StateView | None = None
        self.failed: FailedView | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(f"{PREFIX}_nodes", "Managed nodes per Runtime toggle state", labels=["state"])
        counts = self.view() if self.view is not None else {}
        for state in ToggleState:
            family.add_metric([state.value], counts.get(state, 0))
        yield family
        failed = GaugeMetricFamily(f"{PREFIX}_node_failed", "1 for a managed node whose every toggle try for "
                                   "target failed (state failed)", labels=["node", "target"])
        for node, target in sorted((self.failed() if self.failed is not None else {}).items()):
            failed.add_metric([node, "" if target is None else target.value], 1)
        yield failed


class PrometheusControllerMetrics:
    """:class:`ports.metrics.ControllerMetrics` on its own :class:`prometheus_client.CollectorRegistry`, plus
    ``lj_runtimekit_protocol_info{component="controller",fingerprint}`` when ``protocol_fingerprint`` is given."""

    def __init__(
        self, registry: prometheus_client.CollectorRegistry | None = None, *, protocol_fingerprint: str | None = None,
    ) -> None:
        self.registry = registry or prometheus_client.CollectorRegistry()
        if protocol_fingerprint is not None:
            protocol_info_gauge(self.registry).labels(component="controller", fingerprint=protocol_fingerprint).set(1)
        self._states = _StateCollector()
        self.registry.register(self._states)
        self._transitions = prometheus_client.Counter(
            f"{PREFIX}_transitions", "Runtime toggle state changes", ["from", "to"], registry=self.registry)
        self._created = prometheus_client.Counter(
            f"{PREFIX}_jobs_created", "Toggle Jobs created", ["action"], registry=self.registry)
        self._deleted = prometheus_client.Counter(
            f"{PREFIX}_jobs_deleted", "Toggle Jobs deleted, by reason", ["reason"], registry=self.registry)
        self._failures = prometheus_client.Counter(
            f"{PREFIX}_job_failures", "Failed toggle tries (failed, stuck or vanished Jobs)", ["action"],
            registry=self.registry)
        self._writes = prometheus_client.Counter(
            f"{PREFIX}_api_writes", "Writes to the API server", ["verb", "result"], registry=self.registry)
        self._leader = prometheus_client.Gauge(
            f"{PREFIX}_leader", "1 while this replica leads", registry=self.registry)

    def transition(self, previous: ToggleState, new: ToggleState) -> None:
        """Count a state change."""
        self._transitions.labels(previous.value, new.value).inc()

    def job_created(self, action: Action) -> None:
        """Count a created Job."""
        self._created.labels(action.value).inc()

    def job_deleted(self, reason: str) -> None:
        """Count a deleted Job."""
        self._deleted.labels(reason).inc()

    def job_failed(self, action: Action) -> None:
        """Count a failed try."""
        self._failures.labels(action.value).inc()

    def api_write(self, verb: str, *, ok: bool) -> None:
        """Count an API write and its result."""
        self._writes.labels(verb, "ok" if ok else "error").inc()

    def watch_states(self, view: StateView) -> None:
        """Serve the per-state node gauge from ``view`` at scrape time."""
        self._states.view = view

    def watch_failed_nodes(self, view: FailedView) -> None:
        """Serve ``…_node_failed{node,target}`` from ``view`` at scrape time."""
        self._states.failed = view

    def set_leader(self, leader: bool) -> None:
        """1 while leading, else 0."""
        self._leader.set(1 if leader else 0)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (for an HTTP handler)."""
        return prometheus_client.generate_latest(self.registry)
