"""Composition root of ``ljrk exporter``: which adapter implements each port.

Providers are annotated with their port types so mypy checks conformance. The Runtime is the gRPC client on
``--runtime-socket`` whose per-call deadline is the pull deadline, checked at start for the ``exporter-data``
feature; pod-resources is kubelet's API on ``--pod-resources-socket`` when given (else no attribution filter);
metrics are the prometheus-client adapter over the collector's snapshot. The cluster port (Events on the node) is
the Kubernetes API from ``--kubeconfig`` or the in-cluster config, through the same ``from_kubeconfig`` helper as
the other components; when no config loads it is None and Events are off. With a cluster the collector also learns
which pods of the node ended from a watch of them (:class:`.podphases.EndedPods`, started and stopped with the
collector), so their series leave at the next pull. ``logging``
and ``cluster`` are Resources (the API client is closed at shutdown).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from dependency_injector import containers, providers

from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.kubernetes import KubernetesCluster, from_kubeconfig
from adapters.prometheus.exporter import PrometheusExporterMetrics
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from ports.cluster import ClusterApi
from ports.pod_resources import PodResourcesLister
from ports.runtime import NodeRuntime
from services._shared.logs import configure_logging
from services.exporter.collector import SnapshotCollector
from services.exporter.events import NodeEventRecorder
from services.exporter.podphases import EndedPods
from services.exporter.publish import ProtocolPublisher

from .app import REQUIRED_FEATURES, ExporterApp, ExporterSettings, parse_listen

log = logging.getLogger(__name__)

COMPONENT = "lj-runtimekit-exporter"
"""``source.component`` of the Events the exporter writes."""

EVENT_REQUEST_TIMEOUT = 10.0
"""Client timeout (s) of one Event write (they run on the recorder's own thread)."""


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


def open_cluster(settings: ExporterSettings, _logging: object = None) -> Iterator[ClusterApi | None]:
    """The Kubernetes API from ``--kubeconfig`` (None: the in-cluster config), or None — Events disabled, one
    warning logged — when that config cannot be loaded; the API client is closed on shutdown. Never raises.
    ``_logging`` only orders this Resource after the logging one, so that warning is a JSON line."""
    path = None if settings.kubeconfig is None else str(settings.kubeconfig)
    try:
        api_client = from_kubeconfig(path)
    except Exception as error:  # the client's ConfigException, an unreadable file, bad YAML: all mean "no config"
        log.warning("Kubernetes Events on node %s disabled: %s", settings.node_name, error)
        yield None
        return
    with contextlib.closing(api_client):
        yield KubernetesCluster(api_client, component=COMPONENT, request_timeout=EVENT_REQUEST_TIMEOUT)


def make_events(cluster: ClusterApi | None, settings: ExporterSettings) -> NodeEventRecorder | None:
    """The Event recorder on Node ``--node-name``, or None without a cluster."""
    return None if cluster is None else NodeEventRecorder(cluster, node=settings.node_name)


def make_ended_pods(cluster: ClusterApi | None, settings: ExporterSettings) -> EndedPods | None:
    """Ended pods of Node ``--node-name`` from a list+watch of its pods (the first pull waits up to ``--deadline``
    for the first LIST; each WATCH lasts ``watch_timeout_s``), or None without a cluster."""
    if cluster is None:
        return None
    return EndedPods(cluster, node=settings.node_name, deadline_s=settings.deadline_s,
                     watch_timeout_s=settings.watch_timeout_s)


def make_metrics(
    collector: SnapshotCollector, settings: ExporterSettings, protocol: ProtocolConstants
) -> PrometheusExporterMetrics:
    """The Prometheus collector over ``collector``'s snapshot, with the protocol's fingerprint."""
    return PrometheusExporterMetrics(collector.snapshot, node=settings.node_name,
                                     protocol_fingerprint=protocol.fingerprint())


def make_publisher(
    cluster: ClusterApi | None, settings: ExporterSettings, protocol: ProtocolConstants
) -> ProtocolPublisher | None:
    """Writes the protocol fingerprint on the node, or None without a cluster."""
    if cluster is None:
        return None
    return ProtocolPublisher(cluster, node=settings.node_name, key=protocol.annotations.node_exporter_protocol,
                             fingerprint=protocol.fingerprint())


def make_app(
    collector: SnapshotCollector, metrics: PrometheusExporterMetrics, settings: ExporterSettings,
    publisher: ProtocolPublisher | None,
) -> ExporterApp:
    """The serving app on ``--listen`` (publishing the protocol fingerprint in the background)."""
    host, port = parse_listen(settings.listen)
    return ExporterApp(collector, metrics.exposition, host=host, port=port,
                       tasks=() if publisher is None else (publisher,))


class ExporterContainer(containers.DeclarativeContainer):
    """``settings`` (required) → runtime, pod_resources, cluster, events, ended_pods, collector, protocol, metrics,
    publisher, app."""

    settings: providers.Dependency[ExporterSettings] = providers.Dependency(instance_of=ExporterSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    runtime: providers.Provider[NodeRuntime] = providers.Singleton(connect_runtime, settings=settings)
    pod_resources: providers.Provider[PodResourcesLister | None] = providers.Singleton(make_pod_resources, settings)
    cluster: providers.Provider[ClusterApi | None] = providers.Resource(open_cluster, settings, logging)
    events: providers.Provider[NodeEventRecorder | None] = providers.Singleton(make_events, cluster, settings)
    ended_pods: providers.Provider[EndedPods | None] = providers.Singleton(make_ended_pods, cluster, settings)
    collector: providers.Provider[SnapshotCollector] = providers.Singleton(
        SnapshotCollector, runtime, pod_resources, interval_s=settings.provided.interval_s,
        deadline_s=settings.provided.deadline_s, events=events, ended_pods=ended_pods,
    )
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(
        load_protocol, settings.provided.protocol_file)
    metrics: providers.Provider[PrometheusExporterMetrics] = providers.Singleton(
        make_metrics, collector, settings, protocol)
    publisher: providers.Provider[ProtocolPublisher | None] = providers.Singleton(
        make_publisher, cluster, settings, protocol)
    app: providers.Provider[ExporterApp] = providers.Singleton(make_app, collector, metrics, settings, publisher)
