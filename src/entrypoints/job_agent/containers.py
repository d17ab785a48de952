"""Composition root of ``ljrk job-agent``: which adapter performs the node operation.

The node operation is the customisation point of the job agent. It is any implementation of the port
``ports.node_config.NodeConfig`` (``enable(reason)``, ``disable(reason)``, ``status()``, each returning a
``domain.runtime.types.ConfigStatus``; ``ports.runtime.RuntimeUnavailableError`` for transient failures, anything
else is final), reached through an ``app.OperationConnector``. :data:`OPERATIONS` maps the ``--operation`` name
to a factory ``(settings) -> OperationConnector``; the default ``grpc`` speaks ``ljrk.config.v1.ConfigService``
(``proto/ljrk/config/v1/config_service.proto``, served by ``ljrk runtime``) on ``--config-daemon-socket``.

To plug in another node daemon (another vendor's Runtime, a systemd unit, a file flag):

1. write the adapter under ``src/adapters/<technology>/`` implementing ``NodeConfig`` (translate its transient
   failures to ``RuntimeUnavailableError``);
2. add a factory here, e.g. ``def vendor_operation(settings): return lambda timeout_s:
   contextlib.nullcontext(VendorNodeConfig(settings.config_daemon_socket, timeout_s))``;
3. register it: ``OPERATIONS["vendor"] = vendor_operation``; ``--operation vendor`` then selects it (argparse
   offers the keys of :data:`OPERATIONS`).

The agent's retry, deadline and verification logic (``app.JobAgent``) is the same for every operation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from dependency_injector import containers, providers

from adapters.grpc import GrpcNodeConfig
from ports.node_config import NodeConfig
from ports.runtime import RuntimeUnavailableError
from services._shared.logs import configure_logging

from .app import JobAgent, JobAgentSettings, OperationConnector, SettingsError


def grpc_operation(settings: JobAgentSettings) -> OperationConnector:
    """Connector to the config service on ``settings.config_daemon_socket``: a fresh gRPC channel per call (closed
    after it), each call with a ``timeout_s``-second deadline. A socket that does not exist yet raises
    ``RuntimeUnavailableError`` (transient), which is how the agent waits for it to appear."""
    socket_path = settings.config_daemon_socket

    @contextlib.contextmanager
    def connect(timeout_s: float) -> Iterator[NodeConfig]:
        if not socket_path.exists():
            raise RuntimeUnavailableError(f"socket {socket_path} does not exist (yet)")
        with GrpcNodeConfig.connect(socket_path, timeout_s=timeout_s) as client:
            yield client

    return connect


OPERATIONS: dict[str, Callable[[JobAgentSettings], OperationConnector]] = {"grpc": grpc_operation}
"""``--operation`` name → connector factory (module docstring: how to add one)."""


def select_operation(settings: JobAgentSettings) -> OperationConnector:
    """The connector ``settings.operation`` names. Raises :class:`SettingsError` for an unknown name."""
    try:
        factory = OPERATIONS[settings.operation]
    except KeyError:
        raise SettingsError(f"--operation {settings.operation!r}: choose one of {', '.join(OPERATIONS)}") from None
    return factory(settings)


class JobAgentContainer(containers.DeclarativeContainer):
    """``settings`` (required) → operation (the connector), agent."""

    settings: providers.Dependency[JobAgentSettings] = providers.Dependency(instance_of=JobAgentSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    operation: providers.Provider[OperationConnector] = providers.Singleton(select_operation, settings)
    agent: providers.Provider[JobAgent] = providers.Factory(
        JobAgent, operation, call_timeout_s=settings.provided.call_timeout_s
    )
