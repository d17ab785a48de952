"""Composition root of ``ljrk claim-migrate``: which adapter implements each port.

ResourceClaimTemplates are the Kubernetes API (``--kubeconfig``, else in-cluster) over one ``ApiClient``, closed on
shutdown (a ``Resource``). Tests build :class:`~services.claim_migrate.migrator.ClaimMigrator` over the in-memory
adapter directly. Providers are annotated with their port types so mypy checks conformance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dependency_injector import containers, providers

from adapters.kubernetes import from_kubeconfig
from adapters.kubernetes.claimtemplates import KubernetesClaimTemplates
from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.webhook import tls_context
from ports.claim_templates import ClaimTemplatesApi
from services._shared.logs import configure_logging
from services.claim_migrate.migrator import ClaimMigrator

from .app import ClaimMigrateApp, ClaimMigrateEndpoint, ClaimMigrateSettings


def open_templates(settings: ClaimMigrateSettings) -> Iterator[ClaimTemplatesApi]:
    """The API server of ``settings.kubeconfig`` (None: in-cluster); the client is closed on shutdown. Raises the
    client's ConfigException for a bad kubeconfig."""
    api_client = from_kubeconfig(None if settings.kubeconfig is None else str(settings.kubeconfig))
    with contextlib.closing(api_client):
        yield KubernetesClaimTemplates(api_client, request_timeout=5.0)  # within the webhook's 10 s


def make_migrator(protocol: ProtocolConstants, templates: ClaimTemplatesApi) -> ClaimMigrator:
    """The migrator of the protocol's resource and DeviceClass names."""
    return ClaimMigrator(protocol=protocol, templates=templates)


def make_endpoint(settings: ClaimMigrateSettings, migrator: ClaimMigrator) -> ClaimMigrateEndpoint:
    """The HTTPS listener. Raises OSError / ssl.SSLError for unreadable certificates or an address in use."""
    return ClaimMigrateEndpoint(settings.host, settings.port, migrator=migrator,
                                tls=tls_context(settings.tls_cert, settings.tls_key))


class ClaimMigrateContainer(containers.DeclarativeContainer):
    """``settings`` (required) → protocol, templates, migrator, endpoint, app."""

    settings: providers.Dependency[ClaimMigrateSettings] = providers.Dependency(instance_of=ClaimMigrateSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(load_protocol,
                                                                         settings.provided.protocol_file)
    templates: providers.Provider[ClaimTemplatesApi] = providers.Resource(open_templates, settings)
    migrator: providers.Provider[ClaimMigrator] = providers.Singleton(make_migrator, protocol, templates)
    endpoint: providers.Provider[ClaimMigrateEndpoint] = providers.Singleton(make_endpoint, settings, migrator)
    app: providers.Provider[ClaimMigrateApp] = providers.Singleton(ClaimMigrateApp, endpoint)
