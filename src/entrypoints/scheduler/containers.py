"""Composition root of ``ljrk scheduler``: which adapter implements each port.

Providers are annotated with their port type so mypy checks each adapter against its port (house rule 5).
Settings enter as a validated object (a ``Dependency``). Resources with a shutdown — the JSON log handler and
the Kubernetes API client — are ``Resource`` providers: ``init_resources()`` opens them,
``shutdown_resources()`` closes them. ``--in-memory`` swaps the API server for an empty
:class:`~adapters.memory.cluster.InMemoryCluster` (development only).

The service's commits (plan write, binding, their re-reads) go through :func:`commit_cluster`: over the API
server, the same client with a request timeout of :data:`COMMIT_TIMEOUT_SHARE` × (``lease_duration`` −
``renew_deadline``), so a binding sent while this replica still leads is answered (or abandoned) before a
standby can take over. The bound is client-side: a request the server already received may still be applied
after the client gave up — the residual window is the server's own processing time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from dependency_injector import containers, providers

from adapters.kubernetes import KubernetesCluster
from adapters.kubernetes.claimwrites import KubernetesClaimWrites
from adapters.kubernetes.disruptionbudgets import KubernetesDisruptionBudgets
from adapters.kubernetes.resourceclaims import KubernetesResourceClaims, serves_resource_v1
from adapters.kubernetes.resourceslices import KubernetesResourceSlices
from adapters.memory.disruption_budgets import InMemoryDisruptionBudgets
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from adapters.prometheus import PrometheusSchedulerMetrics
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.cluster import in_memory_or_api_server
from ports.claim_writes import ClaimWritesApi
from ports.cluster import ClusterApi
from ports.disruption_budgets import DisruptionBudgetsApi
from ports.metrics import SchedulerMetrics
from ports.resource_claims import ResourceClaimsWatch
from ports.resource_slices import ResourceSlicesWatch
from services._shared.leader import LeaderConfig, LeaderElector
from services._shared.logs import configure_logging
from services._shared.publish import ProtocolPublisher, pod_publisher
from services.scheduler.service import SchedulerService, ServiceConfig

from .app import SchedulerApp, SchedulerSettings

LOG = logging.getLogger(__name__)

COMPONENT = "lj-runtimekit-scheduler"
"""``source.component`` of the Events the scheduler writes."""

COMMIT_TIMEOUT_SHARE = 0.8
"""Share of ``lease_duration − renew_deadline`` one commit request may take (module docstring)."""


def open_cluster(settings: SchedulerSettings) -> Iterator[ClusterApi]:
    """The cluster port for ``settings``: in memory, or the API server from the kubeconfig (None = in-cluster
    service account); the API client is closed on shutdown. Raises the client's configuration errors."""
    yield from in_memory_or_api_server(settings.in_memory, settings.kubeconfig, component=COMPONENT)


def commit_timeout(settings: SchedulerSettings) -> float:
    """Request timeout (s) of the commit's API calls: below ``lease_duration − renew_deadline``."""
    return COMMIT_TIMEOUT_SHARE * (settings.lease_duration - settings.renew_deadline)


def commit_cluster(cluster: ClusterApi, settings: SchedulerSettings) -> ClusterApi:
    """The port the service commits through: ``cluster`` itself in memory (no network), else a view of it
    whose requests time out after :func:`commit_timeout` (when shorter than its own)."""
    if isinstance(cluster, KubernetesCluster):
        return cluster.with_request_timeout(min(cluster.request_timeout, commit_timeout(settings)))
    return cluster


DISCOVERY_TIMEOUT = 5.0
"""Seconds per attempt of the start-up discovery request (:func:`dra_watched`): it runs before the health endpoints
listen, so a slow API server must not hold the start past the liveness probe's allowance."""


def dra_watched(cluster: ClusterApi, settings: SchedulerSettings) -> bool:
    """Whether the service watches ResourceClaims and ResourceSlices: ``dra_claims`` on and, against an API server,
    ``resource.k8s.io/v1`` served there when the scheduler starts (one that lacks it, before Kubernetes 1.34, turns
    them off with a warning, as ``--no-dra-claims`` would, until the scheduler restarts; one whose discovery fails
    keeps them on, and their informers retry)."""
    if not settings.dra_claims:
        return False
    if isinstance(cluster, KubernetesCluster) and serves_resource_v1(
            cluster.api_client, request_timeout=min(cluster.request_timeout, DISCOVERY_TIMEOUT)) is False:
        LOG.warning("the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34): ResourceClaims "
                    "and ResourceSlices are not watched, as with --no-dra-claims; restart the scheduler once the "
                    "API server serves it")
        return False
    return True


def resource_claims(cluster: ClusterApi, watched: bool) -> ResourceClaimsWatch | None:
    """The ResourceClaims the service lists and watches: None when not ``watched`` (:func:`dra_watched`), over the
    API server's connection of ``cluster`` (its request timeout), else in memory (empty, development)."""
    if not watched:
        return None
    if isinstance(cluster, KubernetesCluster):
        return KubernetesResourceClaims(cluster.api_client, request_timeout=cluster.request_timeout)
    return InMemoryResourceClaims()


def resource_slices(cluster: ClusterApi, watched: bool) -> ResourceSlicesWatch | None:
    """Our DRA driver's ResourceSlices the service lists and watches (the GPUs of nodes without a device plugin):
    None when not ``watched`` (:func:`dra_watched`), over the API server's connection of ``cluster``, else in memory
    (empty)."""
    if not watched:
        return None
    if isinstance(cluster, KubernetesCluster):
        return KubernetesResourceSlices(cluster.api_client, request_timeout=cluster.request_timeout)
    return InMemoryResourceSlices()


def claim_writer(claims: ResourceClaimsWatch | None, cluster: ClusterApi,
                 settings: SchedulerSettings) -> ClaimWritesApi | None:
    """The ResourceClaims the standalone loop allocates (:mod:`services.scheduler.claimcycle`): None when claims
    are not watched, the in-memory claims themselves in memory, else over the API server's connection with the
    commit's request timeout (:func:`commit_timeout`: a write a deposed replica started ends before the lease
    another replica could take)."""
    if claims is None:
        return None
    if isinstance(claims, InMemoryResourceClaims):
        return claims
    if isinstance(cluster, KubernetesCluster):
        return KubernetesClaimWrites(cluster.api_client,
                                     request_timeout=min(cluster.request_timeout, commit_timeout(settings)))
    return None


def disruption_budgets(cluster: ClusterApi) -> DisruptionBudgetsApi:
    """The PodDisruptionBudgets preemption reads: over the API server's connection of ``cluster`` (its request
    timeout), else in memory (none, development)."""
    if isinstance(cluster, KubernetesCluster):
        return KubernetesDisruptionBudgets(cluster.api_client, request_timeout=cluster.request_timeout)
    return InMemoryDisruptionBudgets()


def leader_config(settings: SchedulerSettings) -> LeaderConfig:
    """The Lease and timings of ``settings``."""
    return LeaderConfig(settings.lease_namespace, settings.lease_name, settings.identity,
                        settings.lease_duration, settings.renew_deadline, settings.retry_period)


def service_config(settings: SchedulerSettings) -> ServiceConfig:
    """The service tunables of ``settings``."""
    return ServiceConfig(policy=settings.policy, tie_break=settings.tie_break,
                         assumed_ttl_seconds=settings.assumed_ttl_seconds, mig_strategy=settings.mig_strategy,
                         admission_hold_seconds=settings.admission_hold_seconds,
                         follow_nominations=settings.mode == "extender",
                         topology_first=settings.gpu_topology_first)


def make_publisher(
    cluster: ClusterApi, settings: SchedulerSettings, protocol: ProtocolConstants
) -> ProtocolPublisher | None:
    """The fingerprint publisher on this replica's Pod (:func:`services._shared.publish.pod_publisher`)."""
    return pod_publisher(cluster, protocol, pod_name=settings.pod_name, pod_namespace=settings.pod_namespace)


def leader_flag(elector: LeaderElector) -> Callable[[], bool]:
    """``elector.is_leader`` as a callable."""
    return lambda: elector.is_leader


def exposition(metrics: PrometheusSchedulerMetrics) -> Callable[[], bytes]:
    """The metrics page renderer."""
    return metrics.exposition


def epoch_clock() -> Callable[[], float]:
    """Wall-clock epoch seconds (inventory heartbeats are epoch times)."""
    return time.time


class SchedulerContainer(containers.DeclarativeContainer):
    """``settings`` (required) → logging, protocol, cluster, metrics, leader election, claims, service, publisher,
    app."""

    settings: providers.Dependency[SchedulerSettings] = providers.Dependency(instance_of=SchedulerSettings)
    logging: providers.Provider[object] = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(
        load_protocol, settings.provided.protocol_file)
    cluster: providers.Provider[ClusterApi] = providers.Resource(open_cluster, settings)
    metrics: providers.Provider[SchedulerMetrics] = providers.Singleton(PrometheusSchedulerMetrics)
    metrics_text: providers.Provider[Callable[[], bytes]] = providers.Callable(exposition, metrics)
    elector: providers.Provider[LeaderElector] = providers.Singleton(
        LeaderElector, cluster, providers.Callable(leader_config, settings))
    dra: providers.Provider[bool] = providers.Singleton(dra_watched, cluster, settings)
    claims: providers.Provider[ResourceClaimsWatch | None] = providers.Singleton(resource_claims, cluster, dra)
    slices: providers.Provider[ResourceSlicesWatch | None] = providers.Singleton(resource_slices, cluster, dra)
    service: providers.Provider[SchedulerService] = providers.Singleton(
        SchedulerService, cluster, protocol, metrics, config=providers.Callable(service_config, settings),
        clock=providers.Callable(epoch_clock), is_leader=providers.Callable(leader_flag, elector),
        commit_cluster=providers.Callable(commit_cluster, cluster, settings),
        claims=claims, claim_writes=providers.Callable(claim_writer, claims, cluster, settings),
        budgets=providers.Callable(disruption_budgets, cluster), slices=slices)
    publisher: providers.Provider[ProtocolPublisher | None] = providers.Singleton(
        make_publisher, cluster, settings, protocol)
    app: providers.Provider[SchedulerApp] = providers.Singleton(
        SchedulerApp, settings=settings, cluster=cluster, service=service, elector=elector,
        metrics_text=metrics_text, publisher=publisher)
