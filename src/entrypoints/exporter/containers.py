"""Composition root of ``ljrk exporter``: which adapter implements each port.

Providers are annotated with their port types so mypy checks conformance. The Runtime is the gRPC client on
``--runtime-socket`` whose per-call deadline is the pull deadline, checked at start for the ``exporter-data``
feature; pod-resources is kubelet's API on ``--pod-resources-socket`` when given (else no attribution filter);
metrics are the prometheus-client adapter over the collector's snapshot. ``logging`` is a Resource.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.prometheus.exporter import PrometheusExporterMetrics
from entrypoints._shared.logs import configure_logging
from ports.pod_resources import PodResourcesLister
from ports.runtime import NodeRuntime

from .app import REQUIRED_FEATURES, ExporterApp, ExporterSettings, parse_listen
from .collector import SnapshotCollector


def connect_runtime(settings: ExporterSettings) -> NodeRuntime:
    """A Runtime client on ``--runtime-socket``, waited for up to ``runtime_wait_s`` s, that advertises every
    feature the exporter uses. Raises ``ports.runtime.RuntimeUnavailableError`` or ``UnsupportedFeatureError``."""
    runtime = GrpcNodeRuntime.connect(settings.runtime_socket, timeout_s=settings.deadline_s)
    try:
        runtime.wait_ready(settings.runtime_wait_s)
        runtime.get_version().require(*REQUIRED_FEATURES)
    except Exception:
        runtime.close()
        raise
    return runtime


def make_pod_resources(settings: ExporterSettings) -> PodResourcesLister | None:
    """Kubelet's pod-resources client, or None without ``--pod-resources-socket``."""
    if settings.pod_resources_socket is None:
        return None
    return GrpcPodResourcesLister.connect(settings.pod_resources_socket, timeout_s=settings.deadline_s)


def make_metrics(collector: SnapshotCollector, settings: ExporterSettings) -> PrometheusExporterMetrics:
    """The Prometheus collector over ``collector``'s snapshot."""
    return PrometheusExporterMetrics(collector.snapshot, node=settings.node_name)


def make_app(
    collector: SnapshotCollector, metrics: PrometheusExporterMetrics, settings: ExporterSettings
) -> ExporterApp:
    """The serving app on ``--listen``."""
    host, port = parse_listen(settings.listen)
    return ExporterApp(collector, metrics.exposition, host=host, port=port)


class ExporterContainer(containers.DeclarativeContainer):
    """``settings`` (required) → runtime, pod_resources, collector, metrics, app."""

    settings: providers.Dependency[ExporterSettings] = providers.Dependency(instance_of=ExporterSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    runtime: providers.Provider[NodeRuntime] = providers.Singleton(connect_runtime, settings=settings)
    pod_resources: providers.Provider[PodResourcesLister | None] = providers.Singleton(make_pod_resources, settings)
    collector: providers.Provider[SnapshotCollector] = providers.Singleton(
        SnapshotCollector, runtime, pod_resources, interval_s=settings.provided.interval_s,
        deadline_s=settings.provided.deadline_s,
    )
    metrics: providers.Provider[PrometheusExporterMetrics] = providers.Singleton(make_metrics, collector, settings)
    app: providers.Provider[ExporterApp] = providers.Singleton(make_app, collector, metrics, settings)
