"""Settings and the serving loop of ``ljrk dra-driver``.

:class:`DraDriverApp` runs the ResourceSlice publisher (``services.dra.publisher``) on its own thread and, beside
it, the kubelet DRA plugin (``adapters.grpc.dra_plugin.DraPluginServer`` over ``services.dra.plugin``: the
registration socket ``<plugins_registry>/<driver>-reg.sock`` and the DRA socket ``<plugins>/<driver>/dra.sock``)
until stopped. The publisher owns the pool the kubelet refers to (``pool_name`` = node name, ``device_name`` = the
slice device names of ``domain.dra.build``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import attrs

from domain.device_plugin.response_guard import ResponseAllowList
from domain.dra.build import UnhealthyPolicy
from entrypoints._shared.command import SettingsError
from entrypoints._shared.enforcement import allow_list, check_enforcement_paths
from services.dra.publisher import SlicePublisher

DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
"""The kubelet's plugin registration folder (``--plugins-registry``)."""
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
"""The kubelet's plugins folder (``--plugins-dir``); the plugin's socket and checkpoint go to ``<it>/<driver>/``."""
DEFAULT_CDI_DIR = Path("/var/run/cdi")
"""Where the per-claim CDI specs are written (``--cdi-dir``)."""
DEFAULT_RESYNC_S = 10.0
"""Seconds between two passes that repair the node's slices (``--resync``; the kubelet deletes them when it starts)."""


@attrs.frozen
class DraDriverSettings:
    """Validated settings of ``ljrk dra-driver`` (flags in ``__main__``). ``unhealthy``: ``taint`` or
    ``withdraw`` (:class:`~domain.dra.build.UnhealthyPolicy`); ``withdraw``: delete the node's slices and exit;
    ``runtime_wait_s`` and ``resync_s`` (between two slice repair passes) in seconds; ``hami_core_library``,
    ``hami_preload_file``, ``mps_pipe_dir``, ``dev_root``: the mounts of the Runtime's answers that reach a claim's
    CDI spec (:mod:`entrypoints._shared.enforcement`). Raises :class:`SettingsError` for an empty node name, an
    unknown unhealthy policy, a non-positive wait or resync interval, or enforcement paths that do not go together."""

    node_name: str
    runtime_socket: Path
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    in_memory: bool = False
    runtime_wait_s: float = 30.0
    unhealthy: str = UnhealthyPolicy.TAINT.value
    withdraw: bool = False
    log_level: str = "INFO"
    plugins_registry: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    resync_s: float = DEFAULT_RESYNC_S
    hami_core_library: Path | None = None
    hami_preload_file: Path | None = None
    mps_pipe_dir: Path | None = None
    dev_root: Path = Path("/dev")

    def __attrs_post_init__(self) -> None:
        if not self.node_name:
            raise SettingsError("--node-name must not be empty")
        check_enforcement_paths(self.hami_core_library, self.hami_preload_file, self.mps_pipe_dir, self.dev_root)
        if self.unhealthy not in {p.value for p in UnhealthyPolicy}:
            raise SettingsError(f"--unhealthy {self.unhealthy!r}: must be taint or withdraw")
        if self.runtime_wait_s <= 0:
            raise SettingsError(f"--runtime-wait {self.runtime_wait_s}: must be > 0 seconds")
        if self.resync_s <= 0:
            raise SettingsError(f"--resync {self.resync_s}: must be > 0 seconds")

    @property
    def unhealthy_policy(self) -> UnhealthyPolicy:
        """``unhealthy`` as the domain's policy."""
        return UnhealthyPolicy(self.unhealthy)

    @property
    def allowed_mounts(self) -> ResponseAllowList:
        """The mounts of the Runtime's answers a claim's CDI spec may carry (the enforcement flags)."""
        return allow_list(self.hami_core_library, self.hami_preload_file, self.mps_pipe_dir, self.dev_root)


class Startable(Protocol):
    """A server started and stopped with the app (the kubelet DRA plugin)."""

    def start(self) -> None:
        """Serve; raises OSError when it cannot."""
        ...

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop serving; idempotent."""
        ...


class DraDriverApp:
    """Publishes the node's ResourceSlices and serves the kubelet plugin until stopped (module docstring)."""

    def __init__(self, publisher: SlicePublisher, plugin: Startable, resync_s: float = DEFAULT_RESYNC_S) -> None:
        self.publisher = publisher
        self.plugin = plugin
        self.resync_s = resync_s

    def run(self, stop: threading.Event) -> None:
        """Serve the kubelet plugin, publish and keep the slices current until ``stop`` is set; the slices stay
        (a restart keeps the devices visible) and so do prepared claims (checkpoint). Raises OSError when the
        plugin's sockets cannot be bound. Returns when stopped. A second thread repairs the slices every
        ``resync_s`` seconds (``SlicePublisher.resync``)."""
        self.plugin.start()
        workers = [threading.Thread(target=self.publisher.follow, args=(stop,), name="dra-slices", daemon=True),
                   threading.Thread(target=self.publisher.resync, args=(stop, self.resync_s), name="dra-resync",
                                    daemon=True)]
        for worker in workers:
            worker.start()
        try:
            stop.wait()
        finally:
            self.plugin.stop()
            self.publisher.close()
            for worker in workers:
                worker.join(timeout=10)
