"""Composition root of ``ljrk controller``: which adapter implements each port.

Providers are annotated with their port type so mypy checks each adapter against its port (house rule 5).
Settings enter as a validated object (a ``Dependency``). The JSON log handler and the Kubernetes API client are
``Resource`` providers (``init_resources()`` opens them, ``shutdown_resources()`` closes them). ``--in-memory``
swaps the API server for an empty :class:`~adapters.memory.cluster.InMemoryCluster` (development only);
``--no-leader-elect`` leaves the elector out (the replica leads at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from dependency_injector import containers, providers

from adapters.prometheus.controller import PrometheusControllerMetrics
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from domain.toggle.jobs import JobTemplate
from domain.toggle.policy import TogglePolicy
from domain.toggle.reconcile import ToggleSettings
from entrypoints._shared.cluster import in_memory_or_api_server
from ports.cluster import ClusterApi
from ports.metrics import ControllerMetrics
from services._shared.leader import LeaderConfig, LeaderElector
from services._shared.logs import configure_logging
from services._shared.publish import ProtocolPublisher, pod_publisher
from services.controller.service import ToggleController

from .app import ControllerApp, ControllerSettings

COMPONENT = "lj-runtimekit-controller"
"""``source.component`` of the Events the controller writes."""


def open_cluster(settings: ControllerSettings) -> Iterator[ClusterApi]:
    """The cluster port for ``settings``: in memory, or the API server from the kubeconfig (None = in-cluster
    service account); the API client is closed on shutdown. Raises the client's configuration errors."""
    yield from in_memory_or_api_server(settings.in_memory, settings.kubeconfig, component=COMPONENT)


def toggle_settings(settings: ControllerSettings, protocol: ProtocolConstants) -> ToggleSettings:
    """Policy, Job template and annotation keys from the settings and the protocol constants. Raises
    :class:`domain.errors.InvalidRequestError` for values the domain refuses."""
    policy = TogglePolicy(max_tries=settings.max_tries, backoff_base=settings.backoff_base,
                          backoff_cap=settings.backoff_cap, failed_job_ttl=settings.failed_job_ttl,
                          job_deadline=settings.job_deadline)
    template = JobTemplate(namespace=settings.namespace, image=settings.job_image,
                           config_daemon_socket=settings.config_daemon_socket, agent_timeout=settings.job_timeout,
                           deadline=settings.job_deadline, ttl=settings.failed_job_ttl,
                           service_account=settings.job_service_account)
    keys = protocol.annotations
    return ToggleSettings(policy, template, state_key=keys.node_state, detail_key=keys.node_toggle)


def enable_label(protocol: ProtocolConstants) -> str:
    """The enable label's key."""
    return protocol.node_label


def leader_config(settings: ControllerSettings) -> LeaderConfig:
    """The Lease and timings of ``settings``."""
    return LeaderConfig(settings.lease_namespace or settings.namespace, settings.lease_name, settings.identity,
                        settings.lease_duration, settings.renew_deadline, settings.retry_period)


def make_elector(cluster: ClusterApi, settings: ControllerSettings) -> LeaderElector | None:
    """The elector, or None with ``--no-leader-elect``."""
    return LeaderElector(cluster, leader_config(settings)) if settings.leader_elect else None


def leader_flag(elector: LeaderElector | None) -> Callable[[], bool]:
    """``elector.is_leader`` as a callable (always True without an elector)."""
    if elector is None:
        return lambda: True
    return lambda: elector.is_leader


def make_publisher(
    cluster: ClusterApi, settings: ControllerSettings, protocol: ProtocolConstants
) -> ProtocolPublisher | None:
    """The fingerprint publisher on this replica's Pod (:func:`services._shared.publish.pod_publisher`)."""
    return pod_publisher(cluster, protocol, pod_name=settings.pod_name, pod_namespace=settings.pod_namespace)


def exposition(metrics: PrometheusControllerMetrics) -> Callable[[], bytes]:
    """The metrics page renderer."""
    return metrics.exposition


class ControllerContainer(containers.DeclarativeContainer):
    """``settings`` (required) → logging, protocol, cluster, metrics, leader election, controller, publisher,
    app."""

    settings: providers.Dependency[ControllerSettings] = providers.Dependency(instance_of=ControllerSettings)
    logging: providers.Provider[object] = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(
        load_protocol, settings.provided.protocol_file)
    toggle: providers.Provider[ToggleSettings] = providers.Singleton(toggle_settings, settings, protocol)
    cluster: providers.Provider[ClusterApi] = providers.Resource(open_cluster, settings)
    metrics: providers.Provider[ControllerMetrics] = providers.Singleton(
        PrometheusControllerMetrics, protocol_fingerprint=providers.Callable(ProtocolConstants.fingerprint, protocol))
    metrics_text: providers.Provider[Callable[[], bytes]] = providers.Callable(exposition, metrics)
    elector: providers.Provider[LeaderElector | None] = providers.Singleton(make_elector, cluster, settings)
    controller: providers.Provider[ToggleController] = providers.Singleton(
        ToggleController, cluster, toggle, metrics, enable_label=providers.Callable(enable_label, protocol),
        is_leader=providers.Callable(leader_flag, elector), retry_seconds=settings.provided.retry_seconds,
        resync_seconds=settings.provided.resync_seconds)
    publisher: providers.Provider[ProtocolPublisher | None] = providers.Singleton(
        make_publisher, cluster, settings, protocol)
    app: providers.Provider[ControllerApp] = providers.Singleton(
        ControllerApp, settings=settings, cluster=cluster, controller=controller, elector=elector,
        metrics_text=metrics_text, publisher=publisher)
