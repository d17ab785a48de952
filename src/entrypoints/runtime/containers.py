"""Composition root of ``ljrk runtime``: which adapter implements each port.

Every provider is annotated with its port type, so mypy checks conformance. Settings enter as a validated object
(a ``Dependency``). The backend is chosen by :func:`app.select_backend` (NVML, simulated, or auto with fallback);
the state store is a JSON file in the settings' state directory; the gRPC server serves the one
:class:`RuntimeService` as both the Runtime and the config service. ``logging`` is a Resource: ``main`` calls
``init_resources()`` / ``shutdown_resources()``.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from adapters.grpc import GrpcRuntimeServer
from adapters.statefile import JsonRuntimeStateStore
from domain.runtime.edits import ContainerEdits
from ports.gpu_backend import GpuBackend
from ports.node_config import NodeConfig
from ports.runtime import NodeRuntime
from ports.runtime_state import RuntimeStateStore
from services._shared.logs import configure_logging
from services.runtime.service import RuntimeService

from .app import RuntimeApp, RuntimeSettings, build_edits, select_backend


def _as_runtime(service: RuntimeService) -> NodeRuntime:
    return service  # mypy checks that the service conforms to the port


def _as_config(service: RuntimeService) -> NodeConfig:
    return service


class RuntimeContainer(containers.DeclarativeContainer):
    """``settings`` (required) → backend, state store, service, server, app."""

    settings: providers.Dependency[RuntimeSettings] = providers.Dependency(instance_of=RuntimeSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    backend: providers.Provider[GpuBackend] = providers.Singleton(select_backend, settings=settings)
    store: providers.Provider[RuntimeStateStore] = providers.Singleton(
        JsonRuntimeStateStore.in_dir, settings.provided.state_directory
    )
    edits: providers.Provider[ContainerEdits] = providers.Singleton(build_edits, settings=settings)
    service: providers.Provider[RuntimeService] = providers.Singleton(
        RuntimeService, backend=backend, store=store, initial_state=settings.provided.initial_state, edits=edits,
        mig_mode=settings.provided.mig_strategy, health_hold_s=settings.provided.health_hold_s,
    )
    runtime: providers.Provider[NodeRuntime] = providers.Callable(_as_runtime, service)
    config: providers.Provider[NodeConfig] = providers.Callable(_as_config, service)
    server: providers.Provider[GrpcRuntimeServer] = providers.Singleton(
        GrpcRuntimeServer, socket_path=settings.provided.socket, runtime=runtime, config=config
    )
    app: providers.Provider[RuntimeApp] = providers.Singleton(
        RuntimeApp, service=service, server=server, backend=backend
    )
