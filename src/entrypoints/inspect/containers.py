"""Composition root of ``ljrk inspect``: which adapter implements each port.

The API server comes from the kubeconfig (None: the in-cluster service account) through
:class:`~adapters.kubernetes.KubernetesCluster`, its client closed on shutdown (a ``Resource``); the scheduler's view,
when a URL is given, from :class:`~adapters.httpjson.HttpSchedulerView`; ResourceClaims, Namespaces and ResourceSlices
over the same client. Tests override ``cluster`` with an
in-memory cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from dependency_injector import containers, providers

from adapters.httpjson import HttpSchedulerView
from adapters.kubernetes import KubernetesCluster
from adapters.kubernetes.namespaces import KubernetesNamespaces
from adapters.kubernetes.resourceclaims import KubernetesResourceClaims
from adapters.kubernetes.resourceslices import KubernetesResourceSlices
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.cluster import api_server
from ports.cluster import ClusterApi
from ports.namespaces import NamespacesApi
from ports.resource_claims import ResourceClaimsWatch
from ports.resource_slices import ResourceSlicesApi
from ports.scheduler_view import SchedulerViewSource

from .app import InspectApp, InspectSettings

COMPONENT = "lj-runtimekit-inspect"
"""``source.component`` of the Kubernetes client (inspect writes nothing)."""


def open_cluster(settings: InspectSettings) -> Iterator[ClusterApi]:
    """The API server of ``settings.kubeconfig`` with request timeout ``settings.timeout_s``; the client is closed
    on shutdown. Raises the client's configuration errors."""
    yield from api_server(settings.kubeconfig, component=COMPONENT, request_timeout=settings.timeout_s)


def scheduler_view(settings: InspectSettings) -> SchedulerViewSource | None:
    """The scheduler's view at ``settings.scheduler``, or None without one. Raises
    :class:`~ports.scheduler_view.SchedulerViewError` for a malformed URL."""
    return HttpSchedulerView(settings.scheduler, timeout_s=settings.timeout_s) if settings.scheduler else None


def resource_claims(cluster: ClusterApi) -> ResourceClaimsWatch | None:
    """The ResourceClaims over ``cluster``'s API server connection (None for any other cluster port)."""
    if isinstance(cluster, KubernetesCluster):
        return KubernetesResourceClaims(cluster.api_client, request_timeout=cluster.request_timeout)
    return None


def namespaces(cluster: ClusterApi) -> NamespacesApi | None:
    """The Namespaces over ``cluster``'s API server connection (None for any other cluster port)."""
    if isinstance(cluster, KubernetesCluster):
        return KubernetesNamespaces(cluster.api_client, request_timeout=cluster.request_timeout)
    return None


def resource_slices(cluster: ClusterApi) -> ResourceSlicesApi | None:
    """The ResourceSlices over ``cluster``'s API server connection (None for any other cluster port)."""
    if isinstance(cluster, KubernetesCluster):
        return KubernetesResourceSlices(cluster.api_client, request_timeout=cluster.request_timeout)
    return None


def epoch_clock() -> Callable[[], float]:
    """Wall-clock epoch seconds (inventory heartbeats are epoch times)."""
    return time.time


class InspectContainer(containers.DeclarativeContainer):
    """``settings`` (required) → protocol, cluster, scheduler view, app."""

    settings: providers.Dependency[InspectSettings] = providers.Dependency(instance_of=InspectSettings)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(
        load_protocol, settings.provided.protocol_file)
    cluster: providers.Provider[ClusterApi] = providers.Resource(open_cluster, settings)
    view: providers.Provider[SchedulerViewSource | None] = providers.Singleton(scheduler_view, settings)
    app: providers.Provider[InspectApp] = providers.Singleton(
        InspectApp, settings=settings, cluster=cluster, protocol=protocol, view=view,
        clock=providers.Callable(epoch_clock), claims=providers.Callable(resource_claims, cluster),
        namespaces=providers.Callable(namespaces, cluster), slices=providers.Callable(resource_slices, cluster))
