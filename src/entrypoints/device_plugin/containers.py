"""Composition root of ``ljrk device-plugin``: which adapter implements each port.

Providers are annotated with their port types so mypy checks conformance. The cluster is the Kubernetes API
(``--kubeconfig``, else in-cluster) or, with the hidden ``--in-memory`` flag (tests, demos), an
:class:`~adapters.memory.cluster.InMemoryCluster` holding just this node. The Runtime is always the gRPC client
on ``--runtime-socket``. With ``--listen``, ``/healthz``, ``/readyz`` and ``/metrics`` (the shared
``HealthEndpoint``; metrics from ``adapters.prometheus.device_plugin``). The release reconciler reads the same Runtime
and cluster every ``--release-interval`` seconds. With ``--cdi`` (default) the CDI spec goes to a
:class:`~adapters.cdifiles.CdiSpecDirectory` on ``--cdi-dir`` and the host's GPU minors come from
:class:`~adapters.cdifiles.ProcfsGpuDevices`; with ``--no-cdi`` there is no publisher. The service's device-list
strategies are ``--device-list-strategy``'s (``app.device_list``). ``logging`` is a Resource.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import attrs
from dependency_injector import containers, providers

from adapters.cdifiles import CdiSpecDirectory, ProcfsGpuDevices
from adapters.grpc import GrpcNodeRuntime
from adapters.kubernetes import KubernetesCluster, from_kubeconfig
from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.device_plugin import PrometheusDevicePluginMetrics
from adapters.protocolfile import load_protocol
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.httpserver import HealthEndpoint, parse_listen
from ports.cdi import CdiSpecStore, HostGpuDevices
from ports.cluster import ClusterApi
from ports.runtime import NodeRuntime
from services._shared.logs import configure_logging
from services.device_plugin.cdi import CdiPublisher
from services.device_plugin.reconciler import RecordReconciler
from services.device_plugin.service import DevicePluginService

from .app import DevicePluginApp, DevicePluginSettings, allowed_answers, device_list


def make_protocol(settings: DevicePluginSettings) -> ProtocolConstants:
    """``--protocol`` (default constants) with ``--memory-unit`` applied. Raises ProtocolFileError or
    ``domain.errors.InvalidRequestError`` for a bad file or unit."""
    protocol = load_protocol(settings.protocol_file)
    if settings.memory_unit is not None:
        protocol = attrs.evolve(protocol, memory_unit=settings.memory_unit)
    return protocol


def make_cluster(settings: DevicePluginSettings) -> ClusterApi:
    """The cluster adapter (module docstring). Raises the kubernetes client's ConfigException for a bad
    kubeconfig."""
    if settings.in_memory:
        cluster = InMemoryCluster()
        cluster.create_node(NodeObject(settings.node_name))
        return cluster
    path = None if settings.kubeconfig is None else str(settings.kubeconfig)
    return KubernetesCluster(from_kubeconfig(path), component="ljrk-device-plugin")


def connect_runtime(settings: DevicePluginSettings) -> NodeRuntime:
    """A Runtime client on ``--runtime-socket``, waited for up to ``runtime_wait_s`` seconds. Raises
    ``ports.runtime.RuntimeUnavailableError``."""
    runtime = GrpcNodeRuntime.connect(settings.runtime_socket)
    try:
        runtime.wait_ready(settings.runtime_wait_s)
    except Exception:
        runtime.close()
        raise
    return runtime


def make_cdi(settings: DevicePluginSettings, store: CdiSpecStore, host: HostGpuDevices) -> CdiPublisher | None:
    """The CDI spec publisher, or None with ``--no-cdi``."""
    return CdiPublisher(store, host) if settings.cdi else None


def cdi_names(publisher: CdiPublisher | None) -> Callable[[], Collection[str]] | None:
    """What the service asks for the CDI names it may return: the publisher's resolvable names, or None."""
    return publisher.resolvable if publisher is not None else None


def make_metrics(protocol: ProtocolConstants) -> PrometheusDevicePluginMetrics:
    """The metrics registry, publishing the protocol's fingerprint."""
    return PrometheusDevicePluginMetrics(protocol_fingerprint=protocol.fingerprint())


def make_http(
    app: DevicePluginApp, metrics: PrometheusDevicePluginMetrics, settings: DevicePluginSettings
) -> HealthEndpoint | None:
    """``/healthz``, ``/readyz`` and ``/metrics`` on ``--listen`` (not started), or None without the flag.
    Raises OSError when the address cannot be bound."""
    if settings.listen is None:
        return None
    host, port = parse_listen(settings.listen)
    metrics.watch(app.status)
    return HealthEndpoint(host, port, health=app.health, ready=app.ready, metrics=metrics.exposition,
                          name="device-plugin")


class DevicePluginContainer(containers.DeclarativeContainer):
    """``settings`` (required) → protocol, cluster, runtime, CDI store and host, service, reconciler, CDI publisher,
    app, metrics, http."""

    settings: providers.Dependency[DevicePluginSettings] = providers.Dependency(instance_of=DevicePluginSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(make_protocol, settings=settings)
    cluster: providers.Provider[ClusterApi] = providers.Singleton(make_cluster, settings=settings)
    runtime: providers.Provider[NodeRuntime] = providers.Singleton(connect_runtime, settings=settings)
    cdi_store: providers.Provider[CdiSpecStore] = providers.Singleton(CdiSpecDirectory, settings.provided.cdi_dir)
    host_gpus: providers.Provider[HostGpuDevices] = providers.Singleton(ProcfsGpuDevices)
    cdi: providers.Provider[CdiPublisher | None] = providers.Singleton(make_cdi, settings, cdi_store, host_gpus)
    service: providers.Provider[DevicePluginService] = providers.Singleton(
        DevicePluginService, node=settings.provided.node_name, runtime=runtime, cluster=cluster, protocol=protocol,
        cdi=providers.Callable(cdi_names, cdi), allowed=providers.Callable(allowed_answers, settings),
        device_list=providers.Callable(device_list, settings),
    )
    reconciler: providers.Provider[RecordReconciler] = providers.Singleton(
        RecordReconciler, node=settings.provided.node_name, runtime=runtime, cluster=cluster,
        interval_s=settings.provided.release_interval_s,
    )
    app: providers.Provider[DevicePluginApp] = providers.Singleton(
        DevicePluginApp.from_service, service, settings, reconciler, cdi
    )
    metrics: providers.Provider[PrometheusDevicePluginMetrics] = providers.Singleton(make_metrics, protocol)
    http: providers.Provider[HealthEndpoint | None] = providers.Singleton(make_http, app, metrics, settings)
