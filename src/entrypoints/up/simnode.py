"""One simulated node of ``ljrk up`` (:class:`SimNode`): the Runtime, the kubelet emulator, the device plugin (with
``--dra`` the DRA driver, :mod:`.dranode`) and the exporter of that node, each built by its own composition root, in
a host directory laid out like a node's filesystem
(``run/lj-runtimekit/runtime.sock``, ``var/lib/lj-runtimekit``, ``var/lib/kubelet/device-plugins``,
``var/lib/kubelet/pod-resources``). Invariant: components talk over their real protocols only (gRPC on unix
sockets, HTTP); :meth:`SimNode.stop` stops them in reverse order and removes the node's directory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import attrs
from dependency_injector import providers

from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.kubelet_emulator import DraManager, NodeKubelet, PodResourcesServer
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from adapters.simulated import build_inventory, parse_spec
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, MigMode
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ExporterData
from domain.topology.machines import machine_topology
from entrypoints._shared.httpserver import HealthEndpoint
from entrypoints.device_plugin.app import DevicePluginApp, DevicePluginSettings
from entrypoints.device_plugin.containers import DevicePluginContainer
from entrypoints.exporter.app import ExporterApp, ExporterSettings
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.app import MAX_SOCKET_PATH, RuntimeApp, RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from ports.cluster import ClusterApi, ClusterError
from services.scheduler.policies import DEFAULT_POLICY

from .clock import PausableClock
from .cri import ReleasingDeviceManager, RuntimeReleaser
from .dranode import NodeDraDriver
from .jobs import JobMode
from .serving import serve_on_thread

log = logging.getLogger(__name__)

PLUGIN_SOCKET_NAME = "ljrk-memory.sock"
"""Longest socket name under the device-plugin directory (the path-length check uses it)."""

HOSTNAME_LABEL = "kubernetes.io/hostname"


class StackError(Exception):
    """The stack cannot be built or started (bad GPU spec, paths too long, a node name taken, a component that
    does not come up); the message says what and why."""


@attrs.frozen
class StackSettings:
    """What :class:`LocalStack` builds. ``nodes`` simulated nodes named ``<node_prefix>-<i>``, each with the
    simulated GPUs of ``gpus_per_node`` (the Runtime's ``--simulated-gpus`` grammar, no MIG) and allocatable
    ``node_cpu``/``node_memory``/``node_pods`` (Kubernetes quantities); ``speedup``: trace seconds per wall second
    of the pods' emulated durations; ``policy``: the scheduler's default policy; ``namespace``: the Jobs' and Leases'
    namespace; ``work_dir``: where the host directories go (short: unix socket paths have at most 107 bytes);
    ``job_mode``: how toggle Jobs finish (:class:`~.jobs.JobMode`). Times in seconds: ``exporter_interval_s``,
    ``heartbeat_s`` (device plugin inventory), ``registration_wait_s`` (kubelet admission waits that long for
    re-registered plugins), ``watch_timeout_s`` (every watch; bounds shutdown), ``job_timeout_s`` (the toggle
    agent's ``--timeout``). ``log_level`` for the components' loggers (handlers are the caller's). ``topology``: the
    simulated machine every node's Runtime reports (``ljrk runtime --simulated-topology``; ``none``: no topology).
    ``dra``: each node runs the DRA driver instead of the device plugin (:mod:`.dranode`)."""

    nodes: int = 4
    gpus_per_node: str = "2x16Gi:A100"
    node_cpu: str = "64"
    node_memory: str = "256Gi"
    node_pods: str = "110"
    speedup: float = 1.0
    policy: str = DEFAULT_POLICY
    namespace: str = "kube-system"
    node_prefix: str = "ljrk-up-node"
    work_dir: Path = Path("/tmp")
    job_mode: JobMode = JobMode.JOB_STATUS
    exporter_interval_s: float = 0.5
    heartbeat_s: float = 10.0
    registration_wait_s: float = 5.0
    watch_timeout_s: float = 0.5
    job_timeout_s: float = 20.0
    log_level: str = "INFO"
    topology: str = "none"
    dra: bool = False


def node_gpus(spec: str, *, node: str, topology: str = "none") -> tuple[Gpu, ...]:
    """The simulated GPUs ``spec`` gives node ``node`` (same UUIDs as its Runtime). Raises :class:`StackError`
    for a bad spec or MIG GPUs (``ljrk up`` shares GPUs by time slicing only), or a ``topology`` machine that does
    not fit the GPU count (:func:`domain.topology.machines.machine_topology`)."""
    try:
        gpus = build_inventory(parse_spec(spec), seed=node)
    except ValueError as error:  # SpecError, InvalidRequestError
        raise StackError(f"--gpus-per-node {spec!r}: {error}") from error
    if any(g.mig_mode is MigMode.ENABLED for g in gpus):
        raise StackError(f"--gpus-per-node {spec!r}: MIG GPUs are not supported by ljrk up")
    if not gpus:
        raise StackError(f"--gpus-per-node {spec!r}: no GPUs")
    try:
        machine_topology(topology, len(gpus))
    except InvalidRequestError as error:
        raise StackError(f"--topology {topology!r} with --gpus-per-node {spec!r}: {error}") from error
    return gpus


def node_object(name: str, gpus: tuple[Gpu, ...], settings: StackSettings, protocol: ProtocolConstants) -> NodeObject:
    """The Node as its kubelet registers it: the hostname label and the enable label ``true``; allocatable cpu,
    memory, pods and, as kubelet adds them for registered device plugins, our three resources (none with ``dra``:
    the GPUs are in ResourceSlices)."""
    names = protocol.resources
    unit = protocol.memory_unit_bytes
    memory_units = 100 * len(gpus) if unit is None else sum(g.memory_bytes // unit for g in gpus)
    allocatable = {"cpu": settings.node_cpu, "memory": settings.node_memory, "pods": settings.node_pods}
    if not settings.dra:
        allocatable |= {names.gpu: str(len(gpus)), names.core: str(100 * len(gpus)), names.memory: str(memory_units)}
    return NodeObject(name, labels={HOSTNAME_LABEL: name, protocol.node_label: "true"}, allocatable=allocatable)


def _close(client: object) -> None:
    """Close a gRPC client built by a component's container (the port types have no ``close``)."""
    if isinstance(client, GrpcNodeRuntime | GrpcPodResourcesLister):
        client.close()


class SimNode:
    """One simulated node (module docstring): :meth:`start`, :meth:`stop`, and the disturbances the tests and the
    demo use (:meth:`restart_runtime`, :meth:`restart_kubelet`)."""

    def __init__(self, *, name: str, root: Path, cluster: ClusterApi, protocol: ProtocolConstants,
                 settings: StackSettings, clock: PausableClock, claims: InMemoryResourceClaims | None = None,
                 slices: InMemoryResourceSlices | None = None) -> None:
        self.name = name
        self.root = root
        self.cluster = cluster
        self.protocol = protocol
        self.settings = settings
        self.clock = clock
        self.gpus = node_gpus(settings.gpus_per_node, node=name, topology=settings.topology)
        self.runtime_socket = root / "run" / "lj-runtimekit" / "runtime.sock"
        self.state_dir = root / "var" / "lib" / "lj-runtimekit"
        self.plugin_dir = root / "var" / "lib" / "kubelet" / "device-plugins"
        self.pod_resources_dir = root / "var" / "lib" / "kubelet" / "pod-resources"
        self.cdi_dir = root / "var" / "run" / "cdi"
        """The CDI spec directory: the device plugin writes its spec there, the emulated kubelet resolves names."""
        sockets = (self.runtime_socket, self.plugin_dir / PLUGIN_SOCKET_NAME, self.pod_resources_dir / "kubelet.sock")
        for path in sockets:
            if len(str(path).encode()) > MAX_SOCKET_PATH:
                raise StackError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes: use a shorter --work-dir")
        self.runtime_app: RuntimeApp | None = None
        self.runtime_client: GrpcNodeRuntime | None = None
        self.releaser: RuntimeReleaser | None = None
        self.kubelet: NodeKubelet | None = None
        self._dp_container: DevicePluginContainer | None = None
        self.device_plugin: DevicePluginApp | None = None
        self._dp_http: HealthEndpoint | None = None
        self._dp_stop = threading.Event()
        self._dp_thread: threading.Thread | None = None
        self._exporter_container: ExporterContainer | None = None
        self.exporter: ExporterApp | None = None
        self.claims = claims
        self.dra_driver = None if claims is None or slices is None else NodeDraDriver(
            node=name, root=root, runtime_socket=self.runtime_socket, cdi_dir=self.cdi_dir, cluster=cluster,
            slices=slices, claims=claims, log_level=settings.log_level)
        """With ``--dra``, the node's DRA driver in place of its device plugin."""

    # ------------------------------------------------------------------ lifecycle
    def runtime_settings(self) -> RuntimeSettings:
        """The Runtime's settings: simulated GPUs, socket and state directory under the node's root."""
        return RuntimeSettings(socket=self.runtime_socket, backend="simulated",
                               simulated_gpus=self.settings.gpus_per_node, state_dir=self.state_dir, seed=self.name,
                               log_level=self.settings.log_level, simulated_topology=self.settings.topology)

    def start_runtime(self) -> None:
        """Build the Runtime from its container and serve. Raises :class:`StackError`."""
        self.runtime_socket.parent.mkdir(parents=True, exist_ok=True)
        try:
            app = RuntimeContainer(settings=self.runtime_settings()).app()
            app.start()
        except Exception as error:  # SpecError, StateStoreError, OSError: the message says which
            raise StackError(f"node {self.name}: the Runtime did not start: {error}") from error
        self.runtime_app = app

    def stop_runtime(self) -> None:
        """Stop serving the Runtime (socket removed; state kept in the state directory). Idempotent."""
        app, self.runtime_app = self.runtime_app, None
        if app is not None:
            app.stop(grace_s=0.5)

    def restart_runtime(self) -> None:
        """A Runtime restart: stop it, then build and serve a new one on the same socket and state directory
        (allocation records and the enable state persist); returns once the node's own client (releases, reports)
        is connected again — the device plugin and the exporter reconnect on their own. Raises
        :class:`StackError`."""
        self.stop_runtime()
        self.start_runtime()
        if self.runtime_client is not None:
            try:
                self.runtime_client.wait_ready(10.0)
            except Exception as error:
                raise StackError(f"node {self.name}: Runtime not reachable after its restart: {error}") from error

    def restart_kubelet(self) -> None:
        """A kubelet restart: sockets wiped and served again; plugins re-register; running pods keep their devices."""
        assert self.kubelet is not None, "start() first"
        self.kubelet.restart()

    def start(self) -> None:
        """Start the Runtime, the kubelet emulator, the device plugin and the exporter (module docstring). The Node
        object must exist. Raises :class:`StackError`."""
        for directory in (self.state_dir, self.plugin_dir, self.pod_resources_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.start_runtime()
        client = GrpcNodeRuntime.connect(self.runtime_socket)
        self.runtime_client = client
        try:
            client.wait_ready(10.0)
        except Exception as error:
            raise StackError(f"node {self.name}: Runtime not reachable: {error}") from error
        self.releaser = RuntimeReleaser(client, node=self.name)
        self.releaser.start()
        manager = ReleasingDeviceManager(self.plugin_dir, self.releaser, cdi_dir=self.cdi_dir)
        if self.dra_driver is not None and self.claims is not None:
            manager.dra = DraManager(node=self.name, registry_dir=self.dra_driver.registry_dir, claims=self.claims,
                                     cdi_dir=self.cdi_dir, registration_wait_s=self.settings.registration_wait_s)
        self.kubelet = NodeKubelet(
            self.cluster, node=self.name, device_manager=manager,
            pod_resources=PodResourcesServer(self.pod_resources_dir, manager.admitted), clock=self.clock,
            speedup=self.settings.speedup, watch_timeout_s=self.settings.watch_timeout_s,
            registration_wait_s=self.settings.registration_wait_s)
        try:
            self.kubelet.start()
        except OSError as error:
            raise StackError(f"node {self.name}: kubelet emulator: {error}") from error
        if self.dra_driver is None:
            self._start_device_plugin()
        else:
            try:
                self.dra_driver.start()
            except Exception as error:  # Runtime unreachable or too old, unreadable checkpoint
                raise StackError(f"node {self.name}: the DRA driver did not start: {error}") from error
        self._start_exporter()

    def _start_device_plugin(self) -> None:
        settings = DevicePluginSettings(
            node_name=self.name, runtime_socket=self.runtime_socket, device_plugin_dir=self.plugin_dir,
            heartbeat_s=self.settings.heartbeat_s, runtime_wait_s=10.0, listen="127.0.0.1:0",
            log_level=self.settings.log_level, cdi_dir=self.cdi_dir)
        container = DevicePluginContainer(settings=settings)
        container.cluster.override(providers.Object(self.cluster))
        self._dp_container = container
        try:
            app = container.app()
            self._dp_http = container.http()
            if self._dp_http is not None:
                self._dp_http.start()
        except Exception as error:  # Runtime unreachable or too old, listener cannot bind
            raise StackError(f"node {self.name}: the device plugin did not start: {error}") from error
        self.device_plugin = app
        self._dp_thread = serve_on_thread(app.run, self._dp_stop, what="device plugin", node=self.name)

    def _start_exporter(self) -> None:
        settings = ExporterSettings(
            node_name=self.name, runtime_socket=self.runtime_socket, listen="127.0.0.1:0",
            pod_resources_socket=self.pod_resources_dir / "kubelet.sock",
            interval_s=self.settings.exporter_interval_s, deadline_s=2.0, runtime_wait_s=10.0,
            log_level=self.settings.log_level, watch_timeout_s=self.settings.watch_timeout_s)
        container = ExporterContainer(settings=settings)
        container.cluster.override(providers.Object(self.cluster))
        self._exporter_container = container
        try:
            app = container.app()
            app.start()
        except Exception as error:  # Runtime unreachable, listener cannot bind
            raise StackError(f"node {self.name}: the exporter did not start: {error}") from error
        self.exporter = app

    def stop(self) -> None:
        """Stop the exporter, the device plugin, the kubelet emulator, the releaser and the Runtime, in that order,
        and close the gRPC clients. Idempotent; never raises (failures are logged)."""
        steps: list[tuple[str, Callable[[], None]]] = [
            ("exporter", self._stop_exporter), ("device plugin", self._stop_device_plugin),
            ("DRA driver", self.dra_driver.stop if self.dra_driver is not None else lambda: None),
            ("kubelet emulator", self._stop_kubelet), ("Runtime releases", self._stop_releaser),
            ("Runtime", self.stop_runtime)]
        for what, step in steps:
            try:
                step()
            except Exception:  # keep stopping the rest
                log.exception("node %s: stopping the %s failed", self.name, what)

    def _stop_exporter(self) -> None:
        app, self.exporter = self.exporter, None
        if app is not None:
            app.stop()
        container, self._exporter_container = self._exporter_container, None
        if container is not None:
            _close(container.runtime())
            _close(container.pod_resources())

    def _stop_device_plugin(self) -> None:
        http, self._dp_http = self._dp_http, None
        if http is not None:
            http.stop()
        self._dp_stop.set()
        thread, self._dp_thread = self._dp_thread, None
        if thread is not None:
            thread.join(timeout=10)
        container, self._dp_container = self._dp_container, None
        if container is not None and self.device_plugin is not None:
            _close(container.runtime())
        self.device_plugin = None

    def _stop_kubelet(self) -> None:
        kubelet, self.kubelet = self.kubelet, None
        if kubelet is not None:
            kubelet.stop()

    def _stop_releaser(self) -> None:
        releaser, self.releaser = self.releaser, None
        if releaser is not None:
            releaser.stop()
        client, self.runtime_client = self.runtime_client, None
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ state
    @property
    def device_plugin_url(self) -> str:
        """``http://127.0.0.1:<port>/metrics`` of the node's device plugin (empty before :meth:`start`)."""
        if self._dp_http is None:
            return ""
        host, port = self._dp_http.address
        return f"http://{host}:{port}/metrics"

    @property
    def exporter_url(self) -> str:
        """``http://127.0.0.1:<port>/metrics`` of the node's exporter (empty before :meth:`start`)."""
        return "" if self.exporter is None else f"http://127.0.0.1:{self.exporter.port}/metrics"

    def not_ready(self) -> str:
        """Why the node cannot take pods yet (empty when it can): plugins not registered and listed healthy in the
        kubelet emulator, no inventory published, the controller's state not ``enabled``, no exporter pull yet."""
        if self.kubelet is None or self.exporter is None:
            return "not started"
        if why := (self._dra_not_ready() if self.dra_driver is not None else self._plugins_not_ready()):
            return why
        try:
            node = self.cluster.get_node(self.name)
        except ClusterError as error:
            return f"cannot read the node: {error}"
        keys = self.protocol.annotations
        if self.dra_driver is None and keys.node_inventory not in node.annotations:
            return "no GPU inventory published"
        state = node.annotations.get(keys.node_state, "")
        if state != "enabled":
            return f"runtime state {state or 'unset'} (waiting for the controller's enable Job)"
        if not self.exporter.collector.snapshot().runtime_up:
            return "exporter has not pulled the Runtime yet"
        return ""

    def _plugins_not_ready(self) -> str:
        assert self.kubelet is not None
        listed = self.kubelet.device_manager.devices
        missing = [n for n in attrs.astuple(self.protocol.resources) if "Healthy" not in listed.get(n, {}).values()]
        return f"kubelet has no healthy devices of {', '.join(missing)}" if missing else ""

    def _dra_not_ready(self) -> str:
        assert self.kubelet is not None
        assert self.dra_driver is not None
        driver = self.protocol.dra.driver
        dra = self.kubelet.device_manager.dra
        if dra is None or driver not in dra.registered():
            return f"kubelet has not registered the DRA driver {driver}"
        return "" if self.dra_driver.published(driver) else "no ResourceSlices published"

    def runtime_data(self) -> ExporterData:
        """The Runtime's ``ExporterGetDataList`` over gRPC. Raises ``ports.runtime.NodeRuntimeError``."""
        assert self.runtime_client is not None, "start() first"
        return self.runtime_client.exporter_data()
