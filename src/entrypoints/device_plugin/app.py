"""``ljrk device-plugin`` settings and the serving loop: per-resource plugin servers, kubelet (re-)registration,
the health follower, the inventory heartbeat, the allocated-mark writer and the release reconciler.

Registration (kubelet's ``pkg/kubelet/cm/devicemanager``; Kubernetes docs "Device Plugins"): each resource's server is
started on ``<device-plugin-dir>/ljrk-<kind>.sock`` *before* its Register call, because kubelet dials back before it
answers. Kubelet restarts are detected by polling every ``poll_s`` seconds (failure case B18): when ``kubelet.sock`` has
a new inode, one of our sockets is gone or kubelet ended a ListAndWatch stream, every resource is stopped (its worker
threads joined, its socket removed), served again and re-registered; a failed registration is retried at the next poll.
Sockets are made only once ``kubelet.sock`` accepts connections: a starting kubelet deletes every file in the folder
before it listens, so a socket made beside a dead kubelet's file would vanish under kubelet's dial-back; Register is
sent only while ``kubelet.sock`` is still the one seen and every socket of ours exists. Until ``kubelet.sock`` exists
nothing is served (kubelet would delete our sockets when it starts anyway).

MIG resources (``<prefix>/mig-<profile>``, :meth:`DevicePluginService.mig_resources`) get one server and one
registration each, beside the three time-sharing ones (socket ``ljrk-mig-<profile>.sock``). Every poll compares the
MIG resources the node serves with those registered: a resource that appeared (instances created in static mode,
seen after a Runtime restart or at the next inventory heartbeat) is served and registered, one that disappeared is
stopped (kubelet then stops offering it); the others keep their servers.

Inventory: published at start, every ``heartbeat_s`` seconds and right after every health change, so the
scheduler sees an unhealthy GPU within one API round trip (B14); failures are logged and retried. It also says
whether the plugin is registered with the kubelet now listening (:meth:`DevicePluginApp.ready`), published again
as soon as a ListAndWatch stream ends and after each registration: the scheduler keeps GPU pods off the node
while kubelet would refuse them (a kubelet restart, found under a real kubelet).

CDI (``cdi``, a :class:`~services.device_plugin.cdi.CdiPublisher`; ``--cdi``, on by default): the node's CDI spec
is written before anything is served, refreshed at every poll and after every health or inventory change, and
kept when the app stops (kubelet restarts running pods' containers with the names it checkpointed); Allocate names
only what the written spec resolves.

Allocated marks (:mod:`.marks`) are written on their own thread, so kubelet's Allocate never waits on the API
server. With a :class:`~.reconciler.RecordReconciler`, a release pass runs at start and every ``--release-interval``
seconds on its own thread, releasing the Runtime records of pods that left the node or ended; its count is in
:meth:`DevicePluginApp.status`.
"""

from __future__ import annotations

import argparse
import logging
import stat
import threading
from pathlib import Path

import attrs

from adapters.cdifiles import DEFAULT_CDI_DIR
from adapters.grpc import DEFAULT_PLUGIN_DIR, KUBELET_SOCKET, KubeletPluginServer, KubeletRegistrationError, register
from adapters.grpc.sockets import answers
from domain.device_plugin.device_list import (
    DeviceListStrategies,
    DeviceListStrategy,
    default_strategies,
    parse_strategies,
)
from domain.device_plugin.devices import ResourceKey, ResourceKind
from domain.device_plugin.pods import resource_names
from domain.device_plugin.response_guard import ResponseAllowList
from domain.device_plugin.status import DevicePluginStatus
from domain.errors import InvalidRequestError
from entrypoints._shared.command import SettingsError as SettingsError
from entrypoints._shared.enforcement import allow_list, check_enforcement_paths
from entrypoints._shared.httpserver import parse_listen
from ports.cluster import ClusterError
from services.device_plugin.cdi import CdiPublisher
from services.device_plugin.reconciler import DEFAULT_INTERVAL_S, RecordReconciler
from services.device_plugin.service import DevicePluginService

log = logging.getLogger(__name__)


@attrs.frozen
class DevicePluginSettings:
    """Validated settings of ``ljrk device-plugin`` (flags in ``__main__``). Times in seconds
    (``release_interval_s``: between release passes, ``--release-interval``). ``cdi``: return CDI device names and
    keep the node's CDI spec in ``cdi_dir`` (``--cdi``/``--no-cdi``, ``--cdi-dir``). ``hami_core_library``,
    ``hami_preload_file``, ``dev_root``: the host paths the Runtime's answers may mount and whose ``/dev/nvidia*``
    nodes they may name (``domain.device_plugin.response_guard``). ``device_list_strategy``: the names given to
    ``--device-list-strategy`` or ``$DEVICE_LIST_STRATEGY`` (None: ``envvar``, plus ``cdi-cri`` with ``cdi``;
    :func:`device_list`). Raises :class:`SettingsError` for an empty node name, non-positive intervals, relative
    paths, only one of the two HAMi-core paths, or an unknown strategy, or ``cdi-cri`` with ``--no-cdi``."""

    node_name: str
    runtime_socket: Path
    device_plugin_dir: Path = DEFAULT_PLUGIN_DIR
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    memory_unit: str | None = None
    in_memory: bool = False
    heartbeat_s: float = 10.0
    poll_s: float = 0.5
    runtime_wait_s: float = 30.0
    release_interval_s: float = DEFAULT_INTERVAL_S
    listen: str | None = None
    log_level: str = "INFO"
    cdi: bool = True
    cdi_dir: Path = DEFAULT_CDI_DIR
    hami_core_library: Path | None = None
    hami_preload_file: Path | None = None
    mps_pipe_dir: Path | None = None
    dev_root: Path = Path("/dev")
    device_list_strategy: tuple[str, ...] | None = None

    def __attrs_post_init__(self) -> None:
        if not self.node_name:
            raise SettingsError("--node-name must not be empty")
        try:
            strategies = device_list(self)
        except InvalidRequestError as error:
            raise SettingsError(f"{error} (from the flag or $DEVICE_LIST_STRATEGY)") from error
        if strategies.includes(DeviceListStrategy.CDI_CRI) and not self.cdi:
            raise SettingsError(f"--device-list-strategy {strategies}: cdi-cri needs --cdi (the node's CDI spec the "
                                "names refer to); drop cdi-cri or --no-cdi")
        check_enforcement_paths(self.hami_core_library, self.hami_preload_file, self.mps_pipe_dir, self.dev_root)
        if self.listen is not None:
            try:
                parse_listen(self.listen)
            except argparse.ArgumentTypeError as error:
                raise SettingsError(f"--listen: {error}") from error
        for name in ("heartbeat_s", "poll_s", "runtime_wait_s", "release_interval_s"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be > 0")


def device_list(settings: DevicePluginSettings) -> DeviceListStrategies:
    """The device-list strategies of ``settings``: those named, else the default for ``--cdi``
    (``domain.device_plugin.device_list``). Raises ``domain.errors.InvalidRequestError`` for a bad name."""
    if settings.device_list_strategy is None:
        return default_strategies(cdi=settings.cdi)
    return parse_strategies(settings.device_list_strategy)


def allowed_answers(settings: DevicePluginSettings) -> ResponseAllowList:
    """What the Runtime's Allocate answers may mount and name as device nodes (the HAMi-core and dev-root flags)."""
    return allow_list(settings.hami_core_library, settings.hami_preload_file, settings.mps_pipe_dir,
                      settings.dev_root)


def socket_name(kind: ResourceKey) -> str:
    """The plugin socket's file name for ``kind`` (the RegisterRequest endpoint): ``ljrk-<kind>.sock``, e.g.
    ``ljrk-core.sock`` or ``ljrk-mig-1g.10gb.sock``."""
    return f"ljrk-{kind.value}.sock"


def _inode(path: Path) -> int | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino if stat.S_ISSOCK(info.st_mode) else None


class DevicePluginApp:
    """Serves every resource of ``service`` to kubelet in ``plugin_dir`` (module docstring).

    ``names``: the time-sharing kinds' resource names (MIG names come from the service). ``reconciler``: the release
    reconciler to run (None: no release loop). ``cdi``: the CDI spec publisher (None: no spec). ``registrations``
    counts successful Register calls, ``reregistrations`` completed re-serve rounds and ``resource_changes`` rounds
    that added or removed MIG resources (for tests and logs). Times in seconds.
    """

    def __init__(
        self, service: DevicePluginService, *, plugin_dir: Path, names: dict[ResourceKind, str],
        heartbeat_s: float = 10.0, poll_s: float = 0.5, register_timeout_s: float = 5.0,
        reconciler: RecordReconciler | None = None, cdi: CdiPublisher | None = None,
    ) -> None:
        self.service = service
        self.reconciler = reconciler
        self.cdi = cdi
        self.plugin_dir = plugin_dir
        self._names = names
        self._heartbeat_s = heartbeat_s
        self._poll_s = poll_s
        self._register_timeout_s = register_timeout_s
        self._servers: dict[ResourceKey, KubeletPluginServer] = {}
        self._registered: dict[ResourceKey, str] = {}
        self._registered_inode: int | None = None
        self._publish_now = threading.Event()
        self._stream_lost = threading.Event()
        self.registrations = 0
        self.reregistrations = 0
        self.resource_changes = 0
        self._threads: list[threading.Thread] = []
        self._running = False

    @classmethod
    def from_service(
        cls, service: DevicePluginService, settings: DevicePluginSettings, reconciler: RecordReconciler | None = None,
        cdi: CdiPublisher | None = None,
    ) -> DevicePluginApp:
        """The app for ``settings`` (resource names from the service's protocol) running ``reconciler`` and ``cdi``."""
        return cls(service, plugin_dir=settings.device_plugin_dir, names=resource_names(service.protocol),
                   heartbeat_s=settings.heartbeat_s, poll_s=settings.poll_s, reconciler=reconciler, cdi=cdi)

    @property
    def kubelet_socket(self) -> Path:
        """``<plugin_dir>/kubelet.sock``."""
        return self.plugin_dir / KUBELET_SOCKET

    def _sockets_present(self) -> bool:
        return bool(self._servers) and all(_inode(s.socket_path) is not None for s in self._servers.values())

    def stop_servers(self) -> None:
        """Stop every plugin server (threads joined, sockets removed)."""
        servers, self._servers = self._servers, {}
        for server in servers.values():
            server.stop()
        self._registered = {}
        self._registered_inode = None

    def wanted(self) -> dict[ResourceKey, str]:
        """Every resource to serve now and its name: the three time-sharing kinds, then the node's MIG resources
        (:meth:`DevicePluginService.mig_resources`)."""
        wanted: dict[ResourceKey, str] = {kind: self._names[kind] for kind in ResourceKind}
        for kind, name in self.service.mig_resources().items():
            wanted[kind] = name
        return wanted

    @property
    def registered(self) -> dict[ResourceKey, str]:
        """Resources registered with the current kubelet and their names (a copy)."""
        return dict(self._registered)

    def _serve(self, kind: ResourceKey) -> KubeletPluginServer:
        server = KubeletPluginServer(self.plugin_dir / socket_name(kind), self.service, kind,
                                     on_stream_lost=lambda _: self._lost_stream())
        server.start()
        self._servers[kind] = server
        return server

    def _lost_stream(self) -> None:
        self._stream_lost.set()
        self._publish_now.set()

    def _register(self, kinds: dict[ResourceKey, str]) -> bool:
        try:
            for kind, name in kinds.items():
                register(self.kubelet_socket, endpoint=self._servers[kind].socket_path.name, resource_name=name,
                         timeout_s=self._register_timeout_s)
                self._registered[kind] = name
                self.registrations += 1
        except KubeletRegistrationError as error:
            log.warning("kubelet registration failed: %s; retrying", error)
            return False
        return True

    def _reconcile(self, wanted: dict[ResourceKey, str]) -> bool:
        """Serve and register MIG resources that appeared, stop those that disappeared (module docstring)."""
        for kind in [k for k in self._servers if k not in wanted]:
            self._servers.pop(kind).stop()
            self._registered.pop(kind, None)
            log.info("stopped serving %s: the node no longer has it", kind.value)
        added = {k: n for k, n in wanted.items() if k not in self._registered}
        for kind in added:
            if kind not in self._servers:
                self._serve(kind)
        self.resource_changes += 1
        if not self._register(added):
            return False
        log.info("registered %s with kubelet (%s)", ", ".join(added.values()) or "nothing new", self.kubelet_socket)
        return True

    def ensure_registered(self) -> bool:
        """One poll (module docstring): re-serve and re-register when kubelet restarted or a socket vanished, and
        follow the node's MIG resources. Returns True when every resource is registered with the current kubelet.
        Raises OSError when a socket cannot be bound."""
        inode = _inode(self.kubelet_socket)
        if inode is None:
            return False
        if inode == self._registered_inode and self._sockets_present() and not self._stream_lost.is_set():
            wanted = self.wanted()
            return True if wanted == self._registered else self._reconcile(wanted)
        if not answers(self.kubelet_socket):
            return False  # a dead kubelet's file: the next kubelet wipes the folder before it listens
        self._stream_lost.clear()
        first = not self._servers and self.registrations == 0
        self.stop_servers()
        wanted = self.wanted()
        for kind in wanted:
            self._serve(kind)
        if _inode(self.kubelet_socket) != inode or not self._sockets_present():
            log.info("kubelet restarted while our sockets were made; serving again at the next poll")
            return False
        if not self._register(wanted):
            return False
        self._registered_inode = inode
        self._publish_now.set()
        if not first:
            self.reregistrations += 1
        log.info("registered %s with kubelet (%s)", ", ".join(wanted.values()), self.kubelet_socket)
        return True

    # ------------------------------------------------------------------ probes and status (--listen)
    def status(self) -> DevicePluginStatus:
        """The plugin's status now (for ``/metrics``): every served resource and whether it is registered with
        the current kubelet, counters (Runtime records released included), GPUs by health."""
        registered = {name: self._registered.get(kind) == name for kind, name in self.wanted().items()}
        gpus: dict[str, int] = {}
        for gpu in self.service.gpus():
            gpus[gpu.health.value] = gpus.get(gpu.health.value, 0) + 1
        released = 0 if self.reconciler is None else self.reconciler.released
        return DevicePluginStatus(registered, self.registrations, self.reregistrations,
                                  self.service.runtime_allocate_calls, gpus, released_records=released,
                                  preferred_allocations=self.service.preferred_calls)

    def health(self) -> tuple[bool, str]:
        """Liveness: the serving loop and its health, inventory, mark and release threads run."""
        if not self._running:
            return False, "not running"
        dead = [t.name for t in self._threads if not t.is_alive()]
        return (False, f"thread(s) stopped: {', '.join(dead)}") if dead else (True, "ok")

    def ready(self) -> tuple[bool, str]:
        """Readiness: every served resource is registered with the kubelet now listening on ``kubelet.sock``, and
        no ListAndWatch stream has ended since (a stopped kubelet's socket file stays until the next one starts)."""
        registered, served = dict(self._registered), tuple(self._servers)  # copies: the poll thread changes them
        if not registered or self._registered_inode != _inode(self.kubelet_socket):
            return False, "not registered with the current kubelet"
        if self._stream_lost.is_set():
            return False, "kubelet ended a ListAndWatch stream; registering again"
        missing = [k for k in served if k not in registered]
        return (False, f"{len(missing)} resource(s) not registered yet") if missing else (True, "ok")

    def _publish_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._publish_now.clear()
            try:
                self.service.publish_inventory(kubelet_registered=self.ready()[0])
            except ClusterError as error:
                log.warning("cannot publish the GPU inventory of node %s: %s", self.service.node, error)
            except Exception:  # a bug must not end the heartbeat (the node would be gated as stale)
                log.exception("cannot publish the GPU inventory of node %s", self.service.node)
            self._publish_now.wait(self._heartbeat_s)

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then stop every thread and server. Raises OSError when a socket cannot
        be bound."""
        self._refresh_cdi()
        threads = [
            threading.Thread(target=self.service.follow_health, args=(stop, self._changed),
                             name="ljrk-dp-health", daemon=True),
            threading.Thread(target=self._publish_loop, args=(stop,), name="ljrk-dp-inventory", daemon=True),
            threading.Thread(target=self.service.marker.run, args=(stop,), name="ljrk-dp-marks", daemon=True),
        ]
        if self.reconciler is not None:
            threads.append(threading.Thread(target=self.reconciler.run, args=(stop,), name="ljrk-dp-releases",
                                            daemon=True))
        for thread in threads:
            thread.start()
        self._threads, self._running = threads, True
        try:
            while not stop.is_set():
                self.ensure_registered()
                self._refresh_cdi()
                stop.wait(self._poll_s)
        finally:
            self._running = False
            stop.set()
            self._publish_now.set()
            self.service.marker.wake()
            self.service.close_health()
            self.stop_servers()
            for thread in threads:
                thread.join(timeout=5)

    def _changed(self) -> None:
        """A health or inventory change: publish the inventory now and follow the GPU set in the CDI spec."""
        self._publish_now.set()
        self._refresh_cdi()

    def _refresh_cdi(self) -> None:
        if self.cdi is not None:
            self.cdi.refresh(self.service.gpus())
