"""Composition root of ``ljrk claim-quota``: which adapter implements each port.

Namespaces, ResourceClaims and ResourceSlices are the Kubernetes API (``--kubeconfig``, else in-cluster) over one
``ApiClient``, closed on shutdown (a ``Resource``). Tests build :class:`~services.claim_quota.gate.ClaimQuotaGate`
over in-memory adapters directly. Providers are annotated with their port types so mypy checks conformance.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import attrs
from dependency_injector import containers, providers

from adapters.kubernetes import from_kubeconfig
from adapters.kubernetes.namespaces import KubernetesNamespaces
from adapters.kubernetes.resourceclaims import KubernetesResourceClaims
from adapters.kubernetes.resourceslices import KubernetesResourceSlices
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.webhook import tls_context
from ports.namespaces import NamespacesApi
from ports.resource_claims import NamespaceClaimsApi
from ports.resource_slices import ResourceSlicesApi
from services._shared.logs import configure_logging
from services.claim_quota.gate import ClaimQuotaGate

from .app import ClaimQuotaApp, ClaimQuotaEndpoint, ClaimQuotaSettings


@attrs.frozen
class ApiAccess:
    """What the webhook reads, over one ``ApiClient``: Namespaces, claims and slices."""

    namespaces: NamespacesApi
    claims: NamespaceClaimsApi
    slices: ResourceSlicesApi


def open_api(settings: ClaimQuotaSettings) -> Iterator[ApiAccess]:
    """The API server of ``settings.kubeconfig`` (None: in-cluster); the client is closed on shutdown. Raises the
    client's ConfigException for a bad kubeconfig."""
    api_client = from_kubeconfig(None if settings.kubeconfig is None else str(settings.kubeconfig))
    with contextlib.closing(api_client):
        yield ApiAccess(KubernetesNamespaces(api_client, request_timeout=10.0),
                        KubernetesResourceClaims(api_client, request_timeout=10.0),
                        KubernetesResourceSlices(api_client, request_timeout=10.0))


def make_gate(settings: ClaimQuotaSettings, protocol: ProtocolConstants, api: ApiAccess) -> ClaimQuotaGate:
    """The quota gate of the protocol's driver and quota labels."""
    return ClaimQuotaGate(names=protocol.dra, namespaces=api.namespaces, claims=api.claims, slices=api.slices,
                          clock=time.monotonic, pending_ttl_s=settings.pending_ttl_s)


def make_endpoint(settings: ClaimQuotaSettings, gate: ClaimQuotaGate) -> ClaimQuotaEndpoint:
    """The HTTPS listener. Raises OSError / ssl.SSLError for unreadable certificates or an address in use."""
    return ClaimQuotaEndpoint(settings.host, settings.port, gate=gate,
                              tls=tls_context(settings.tls_cert, settings.tls_key))


class ClaimQuotaContainer(containers.DeclarativeContainer):
    """``settings`` (required) → protocol, API access, gate, endpoint, app."""

    settings: providers.Dependency[ClaimQuotaSettings] = providers.Dependency(instance_of=ClaimQuotaSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(load_protocol,
                                                                         settings.provided.protocol_file)
    api: providers.Provider[ApiAccess] = providers.Resource(open_api, settings)
    gate: providers.Provider[ClaimQuotaGate] = providers.Singleton(make_gate, settings, protocol, api)
    endpoint: providers.Provider[ClaimQuotaEndpoint] = providers.Singleton(make_endpoint, settings, gate)
    app: providers.Provider[ClaimQuotaApp] = providers.Singleton(ClaimQuotaApp, endpoint)
