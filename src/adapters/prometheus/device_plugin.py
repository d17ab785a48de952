"""Device plugin metrics on a prometheus-client registry, read at scrape time from a status view.

Series (prefix ``lj_runtimekit_device_plugin_``): ``resource_registered{resource}`` (1 while registered with the
current kubelet), ``registrations_total``, ``reregistrations_total``, ``runtime_allocates_total`` (one per
container), ``preferred_allocations_total`` (GetPreferredAllocation container requests), ``gpus{health}``,
``released_records_total`` (Runtime records of ended pods released by the release reconciler); plus
``lj_runtimekit_protocol_info{component="device-plugin",fingerprint}`` = 1 when a fingerprint is given (every
component publishes the protocol it loaded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domain.device_plugin.status import DevicePluginStatus

from .protocol import protocol_info_gauge

PREFIX = "lj_runtimekit_device_plugin"

DevicePluginView = Callable[[], DevicePluginStatus]
"""Returns the device plugin's status at the time of the call (a scrape)."""


class _StatusCollector(Collector):
    def __init__(self) -> None:
        self.view: DevicePluginView | None = None

    def collect(self) -> Iterator[Metric]:
        registered = GaugeMetricFamily(f"{PREFIX}_resource_registered",
                                       "1 while the resource is registered with the current kubelet",
                                       labels=["resource"])
        registrations = CounterMetricFamily(f"{PREFIX}_registrations", "Successful kubelet Register calls")
        rounds = CounterMetricFamily(f"{PREFIX}_reregistrations",
                                     "Re-serve rounds after a kubelet restart or a lost ListAndWatch stream")
        allocates = CounterMetricFamily(f"{PREFIX}_runtime_allocates", "Runtime Allocate calls (one per container)")
        preferred = CounterMetricFamily(f"{PREFIX}_preferred_allocations",
                                        "GetPreferredAllocation container requests kubelet made")
        gpus = GaugeMetricFamily(f"{PREFIX}_gpus", "GPUs of the node by health", labels=["health"])
        released = CounterMetricFamily(f"{PREFIX}_released_records",
                                       "Runtime allocation records of ended or departed pods released")
        if self.view is not None:
            status = self.view()
            for resource, flag in sorted(status.registered.items()):
                registered.add_metric([resource], 1 if flag else 0)
            registrations.add_metric([], status.registrations)
            rounds.add_metric([], status.reregistrations)
            allocates.add_metric([], status.runtime_allocates)
            preferred.add_metric([], status.preferred_allocations)
            for health, count in sorted(status.gpus.items()):
                gpus.add_metric([health], count)
            released.add_metric([], status.released_records)
        yield from (registered, registrations, rounds, allocates, preferred, gpus, released)


class PrometheusDevicePluginMetrics:
    """The device plugin's series on their own registry, read from the view given to :meth:`watch` (module
    docstring). No port: only the wiring (``entrypoints.device_plugin``) connects it to the app's status."""

    def __init__(self, *, protocol_fingerprint: str | None = None) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self._status = _StatusCollector()
        self.registry.register(self._status)
        if protocol_fingerprint is not None:
            info = protocol_info_gauge(self.registry)
            info.labels(component="device-plugin", fingerprint=protocol_fingerprint).set(1)

    def watch(self, view: DevicePluginView) -> None:
        """Read the status from ``view`` at every scrape."""
        self._status.view = view

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format 0.0.4."""
        return prometheus_client.generate_latest(self.registry)
