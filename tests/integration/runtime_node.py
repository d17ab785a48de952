"""A reference Runtime (``ljrk runtime``'s container, simulated GPUs) served on a unix socket in a test's folder,
with gRPC clients of its two services; :func:`start` it, :meth:`RunningRuntime.stop` it. State persists in
``<folder>/state``, so starting again in the same folder restarts the same node."""

from __future__ import annotations

from pathlib import Path

import attrs

from adapters.grpc import GrpcNodeConfig, GrpcNodeRuntime
from adapters.simulated import SimulatedGpuBackend
from domain.mig.gpu import PlacementMode
from entrypoints.runtime.app import RuntimeApp, RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer

SPEC = "2x16Gi:A100"
"""The simulated GPUs by default: two A100 with 16 GiB each."""


@attrs.define
class RunningRuntime:
    """The started Runtime: its container and app, a ``runtime`` and a ``config`` client."""

    container: RuntimeContainer
    app: RuntimeApp
    runtime: GrpcNodeRuntime
    config: GrpcNodeConfig

    @property
    def backend(self) -> SimulatedGpuBackend:
        backend = self.container.backend()
        assert isinstance(backend, SimulatedGpuBackend)
        return backend

    def stop(self) -> None:
        self.runtime.close()
        self.config.close()
        self.app.stop(0.5)


def start(directory: Path, spec: str = SPEC, mig: PlacementMode = PlacementMode.STATIC) -> RunningRuntime:
    """Serve a Runtime on ``<directory>/runtime.sock`` with the simulated GPUs ``spec`` and MIG strategy ``mig``,
    once it answers."""
    settings = RuntimeSettings(socket=directory / "runtime.sock", backend="simulated", simulated_gpus=spec,
                               state_dir=directory / "state", seed="node-1", mig_strategy=mig)
    container = RuntimeContainer(settings=settings)
    app = container.app()
    app.start()
    runtime = GrpcNodeRuntime.connect(settings.socket, timeout_s=5)
    runtime.wait_ready(5)
    return RunningRuntime(container, app, runtime, GrpcNodeConfig.connect(settings.socket, timeout_s=5))
