"""The DRA driver of one simulated node of ``ljrk up --dra`` (:class:`NodeDraDriver`), in place of its device plugin.

Built by its own composition root (``entrypoints.dra_driver.containers.DraDriverContainer``) with the run's
cluster, ResourceSlices and ResourceClaims (the in-memory API) in place of its API access; it publishes the node's
slices and serves the kubelet DRA plugin on the node's ``var/lib/kubelet/plugins_registry`` and
``var/lib/kubelet/plugins`` directories, writing per-claim CDI specs into the node's CDI directory, and talks to the
node's Runtime over gRPC. Invariant: :meth:`NodeDraDriver.stop` stops serving and closes the Runtime client; the
slices stay (as a restarting driver leaves them), the stack deletes nothing of them.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from dependency_injector import providers

from adapters.grpc import GrpcNodeRuntime
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from entrypoints.dra_driver.app import DraDriverApp, DraDriverSettings
from entrypoints.dra_driver.containers import ApiAccess, DraDriverContainer
from ports.cluster import ClusterApi

from .serving import serve_on_thread

log = logging.getLogger(__name__)


def _close(runtime: object) -> None:
    """Close the container's Runtime client (the port type has no ``close``)."""
    if isinstance(runtime, GrpcNodeRuntime):
        runtime.close()


class NodeDraDriver:
    """``ljrk dra-driver`` of node ``node`` under host directory ``root`` (module docstring)."""

    def __init__(self, *, node: str, root: Path, runtime_socket: Path, cdi_dir: Path, cluster: ClusterApi,
                 slices: InMemoryResourceSlices, claims: InMemoryResourceClaims, log_level: str = "INFO") -> None:
        self.node = node
        self.registry_dir = root / "var" / "lib" / "kubelet" / "plugins_registry"
        self.plugins_dir = root / "var" / "lib" / "kubelet" / "plugins"
        self.settings = DraDriverSettings(
            node_name=node, runtime_socket=runtime_socket, runtime_wait_s=10.0, log_level=log_level,
            plugins_registry=self.registry_dir, plugins_dir=self.plugins_dir, cdi_dir=cdi_dir)
        self.api = ApiAccess(cluster, slices, claims)
        self.slices = slices
        self.app: DraDriverApp | None = None
        self._container: DraDriverContainer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Build the driver and serve it on a thread of its own. Raises what its container raises (the Runtime
        unreachable or too old, an unreadable checkpoint). A no-op while it serves."""
        if self._thread is not None:
            return
        for directory in (self.registry_dir, self.plugins_dir, self.settings.cdi_dir):
            directory.mkdir(parents=True, exist_ok=True)
        container = DraDriverContainer(settings=self.settings)
        container.api.override(providers.Object(self.api))
        runtime = container.runtime()  # connected first, so a later failure can close it
        try:
            app = container.app()
        except Exception:  # an unreadable checkpoint, a Runtime too old
            _close(runtime)
            raise
        self._container, self.app = container, app
        self._stop = threading.Event()
        self._thread = serve_on_thread(app.run, self._stop, what="DRA driver", node=self.node)

    def stop(self) -> None:
        """Stop serving and close the Runtime client. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        container, self._container = self._container, None
        if container is not None:
            _close(container.runtime())
        self.app = None

    def published(self, driver: str) -> bool:
        """Whether the node's ResourceSlices of ``driver`` are there (at least one device)."""
        return any(s.content.devices for s in self.slices.list_resource_slices(driver=driver, node=self.node))
