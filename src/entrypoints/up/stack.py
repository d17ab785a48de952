"""The whole stack on one machine: every component built by its own container, as in production, over one cluster.

Per simulated node (:class:`SimNode`), in its own host directory ``<root>/n<i>`` laid out like a node's
filesystem (``run/lj-runtimekit/runtime.sock``, ``var/lib/lj-runtimekit`` for the Runtime's state,
``var/lib/kubelet/device-plugins``, ``var/lib/kubelet/pod-resources``):

* the reference Runtime (``entrypoints.runtime``: ``RuntimeContainer`` with simulated GPUs, seeded by the node name
  so UUIDs differ between nodes) serving its gRPC contract and the config service on the unix socket;
* the kubelet emulator (``adapters.grpc.kubelet_emulator.NodeKubelet``): device-plugin Registration, pod admission
  through GetPreferredAllocation and Allocate, pod-resources, pod phases, emulated durations on a
  :class:`~.clock.PausableClock`; its device manager is the emulated container runtime's
  (:class:`~.cri.ReleasingDeviceManager`: a pod torn down releases its Runtime records over gRPC);
* the device plugin (``entrypoints.device_plugin``: ``DevicePluginContainer``) talking to the kubelet emulator and
  to the Runtime over gRPC, publishing the node's GPU inventory, its probes and ``/metrics`` on
  ``127.0.0.1:<free port>``;
* the exporter (``entrypoints.exporter``: ``ExporterContainer``) on ``127.0.0.1:<free port>``, reading the Runtime
  and kubelet's pod-resources over gRPC.

Cluster-wide: the scheduler's standalone loop (``entrypoints.scheduler``, leader election on, ``/metrics`` on
``127.0.0.1:<free port>``), the controller (``entrypoints.controller``, leader election on) and the Job runner
(:mod:`.jobs`) that plays the Job controller and the container runtime for the controller's toggle Jobs.

Every component gets the one cluster port (overriding its container's ``cluster`` provider); nothing else is
shared: they talk over their real protocols (gRPC on unix sockets, HTTP). :meth:`LocalStack.stop` stops everything
in reverse order, joins the threads, and deletes the host directories (sockets included).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import attrs
from dependency_injector import providers

from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.kubelet_emulator import NodeKubelet, PodResourcesServer
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.simulated import build_inventory, parse_spec
from domain.gpu import Gpu, MigMode
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ExporterData
from entrypoints._shared.httpserver import HealthEndpoint
from entrypoints.controller.app import ControllerApp, ControllerSettings
from entrypoints.controller.containers import ControllerContainer
from entrypoints.device_plugin.app import DevicePluginApp, DevicePluginSettings
from entrypoints.device_plugin.containers import DevicePluginContainer
from entrypoints.exporter.app import ExporterApp, ExporterSettings
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.app import MAX_SOCKET_PATH, RuntimeApp, RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from entrypoints.scheduler.containers import SchedulerContainer
from ports.cluster import ClusterApi, ClusterError, NotFoundError

from .clock import PausableClock
from .cri import ReleasingDeviceManager, RuntimeReleaser
from .jobs import JobMode, JobRunner
from .workload import MANAGED_BY

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
    agent's ``--timeout``). ``log_level`` for the components' loggers (handlers are the caller's)."""

    nodes: int = 4
    gpus_per_node: str = "2x16Gi:A100"
    node_cpu: str = "64"
    node_memory: str = "256Gi"
    node_pods: str = "110"
    speedup: float = 1.0
    policy: str = "fgd"
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


def node_gpus(spec: str, *, node: str) -> tuple[Gpu, ...]:
    """The simulated GPUs ``spec`` gives node ``node`` (same UUIDs as its Runtime). Raises :class:`StackError`
    for a bad spec or MIG GPUs (``ljrk up`` shares GPUs by time slicing only)."""
    try:
        gpus = build_inventory(parse_spec(spec), seed=node)
    except ValueError as error:  # SpecError, InvalidRequestError
        raise StackError(f"--gpus-per-node {spec!r}: {error}") from error
    if any(g.mig_mode is MigMode.ENABLED for g in gpus):
        raise StackError(f"--gpus-per-node {spec!r}: MIG GPUs are not supported by ljrk up")
    if not gpus:
        raise StackError(f"--gpus-per-node {spec!r}: no GPUs")
    return gpus


def node_object(name: str, gpus: tuple[Gpu, ...], settings: StackSettings, protocol: ProtocolConstants) -> NodeObject:
    """The Node as its kubelet registers it: the hostname label and the enable label ``true``; allocatable cpu,
    memory, pods and, as kubelet adds them for registered device plugins, our three resources."""
    names = protocol.resources
    unit = protocol.memory_unit_bytes
    memory_units = 100 * len(gpus) if unit is None else sum(g.memory_bytes // unit for g in gpus)
    return NodeObject(
        name,
        labels={HOSTNAME_LABEL: name, protocol.node_label: "true"},
        allocatable={"cpu": settings.node_cpu, "memory": settings.node_memory, "pods": settings.node_pods,
                     names.gpu: str(len(gpus)), names.core: str(100 * len(gpus)), names.memory: str(memory_units)},
    )


def _close(client: object) -> None:
    """Close a gRPC client built by a component's container (the port types have no ``close``)."""
    if isinstance(client, GrpcNodeRuntime | GrpcPodResourcesLister):
        client.close()


class SimNode:
    """One simulated node (module docstring): :meth:`start`, :meth:`stop`, and the disturbances the tests and the
    demo use (:meth:`restart_runtime`, :meth:`restart_kubelet`)."""

    def __init__(self, *, name: str, root: Path, cluster: ClusterApi, protocol: ProtocolConstants,
                 settings: StackSettings, clock: PausableClock) -> None:
        self.name = name
        self.root = root
        self.cluster = cluster
        self.protocol = protocol
        self.settings = settings
        self.clock = clock
        self.gpus = node_gpus(settings.gpus_per_node, node=name)
        self.runtime_socket = root / "run" / "lj-runtimekit" / "runtime.sock"
        self.state_dir = root / "var" / "lib" / "lj-runtimekit"
        self.plugin_dir = root / "var" / "lib" / "kubelet" / "device-plugins"
        self.pod_resources_dir = root / "var" / "lib" / "kubelet" / "pod-resources"
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

    # ------------------------------------------------------------------ lifecycle
    def runtime_settings(self) -> RuntimeSettings:
        """The Runtime's settings: simulated GPUs, socket and state directory under the node's root."""
        return RuntimeSettings(socket=self.runtime_socket, backend="simulated",
                               simulated_gpus=self.settings.gpus_per_node, state_dir=self.state_dir, seed=self.name,
                               log_level=self.settings.log_level)

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
        manager = ReleasingDeviceManager(self.plugin_dir, self.releaser)
        self.kubelet = NodeKubelet(
            self.cluster, node=self.name, device_manager=manager,
            pod_resources=PodResourcesServer(self.pod_resources_dir, manager.admitted), clock=self.clock,
            speedup=self.settings.speedup, watch_timeout_s=self.settings.watch_timeout_s,
            registration_wait_s=self.settings.registration_wait_s)
        try:
            self.kubelet.start()
        except OSError as error:
            raise StackError(f"node {self.name}: kubelet emulator: {error}") from error
        self._start_device_plugin()
        self._start_exporter()

    def _start_device_plugin(self) -> None:
        settings = DevicePluginSettings(
            node_name=self.name, runtime_socket=self.runtime_socket, device_plugin_dir=self.plugin_dir,
            heartbeat_s=self.settings.heartbeat_s, runtime_wait_s=10.0, listen="127.0.0.1:0",
            log_level=self.settings.log_level)
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

        def serve() -> None:
            try:
                app.run(self._dp_stop)
            except Exception:  # OSError binding a socket: readiness reports the node as not ready
                log.exception("node %s: device plugin stopped", self.name)

        self._dp_thread = threading.Thread(target=serve, name=f"ljrk-up-dp-{self.name}", daemon=True)
        self._dp_thread.start()

    def _start_exporter(self) -> None:
        settings = ExporterSettings(
            node_name=self.name, runtime_socket=self.runtime_socket, listen="127.0.0.1:0",
            pod_resources_socket=self.pod_resources_dir / "kubelet.sock",
            interval_s=self.settings.exporter_interval_s, deadline_s=2.0, runtime_wait_s=10.0,
            log_level=self.settings.log_level)
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
        listed = self.kubelet.device_manager.devices
        names = attrs.astuple(self.protocol.resources)
        missing = [n for n in names if "Healthy" not in listed.get(n, {}).values()]
        if missing:
            return f"kubelet has no healthy devices of {', '.join(missing)}"
        try:
            node = self.cluster.get_node(self.name)
        except ClusterError as error:
            return f"cannot read the node: {error}"
        keys = self.protocol.annotations
        if keys.node_inventory not in node.annotations:
            return "no GPU inventory published"
        state = node.annotations.get(keys.node_state, "")
        if state != "enabled":
            return f"runtime state {state or 'unset'} (waiting for the controller's enable Job)"
        if not self.exporter.collector.snapshot().runtime_up:
            return "exporter has not pulled the Runtime yet"
        return ""

    def runtime_data(self) -> ExporterData:
        """The Runtime's ``ExporterGetDataList`` over gRPC. Raises ``ports.runtime.NodeRuntimeError``."""
        assert self.runtime_client is not None, "start() first"
        return self.runtime_client.exporter_data()


def _in_parallel(steps: list[tuple[str, Callable[[], None]]]) -> None:
    """Run every step on a thread of its own and join them all; a failing step is logged."""
    def guarded(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:  # keep stopping the rest
            log.exception("stopping the %s failed", what)

    threads = [threading.Thread(target=guarded, args=step, name=f"ljrk-up-stop-{i}", daemon=True)
               for i, step in enumerate(steps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)


class LocalStack:
    """Every component over ``cluster`` (module docstring). :meth:`start` creates the Nodes and starts everything;
    :meth:`wait_ready` waits until every node takes pods and the scheduler serves; :meth:`stop` undoes it all."""

    def __init__(self, cluster: ClusterApi, protocol: ProtocolConstants, settings: StackSettings) -> None:
        if settings.nodes < 1:
            raise StackError(f"--nodes {settings.nodes}: need at least one node")
        self.cluster = cluster
        self.protocol = protocol
        self.settings = settings
        self.clock = PausableClock()
        self.root = Path(tempfile.mkdtemp(prefix="ljrk-up-", dir=settings.work_dir))
        self.nodes: dict[str, SimNode] = {}
        self.scheduler: SchedulerApp | None = None
        self.controller: ControllerApp | None = None
        self.jobs: JobRunner | None = None
        self._created_nodes: list[str] = []
        self._stopped = False
        try:
            for index in range(settings.nodes):
                name = f"{settings.node_prefix}-{index}"
                self.nodes[name] = SimNode(name=name, root=self.root / f"n{index}", cluster=cluster, protocol=protocol,
                                           settings=settings, clock=self.clock)
        except Exception:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Create the Nodes, start every node's components (in parallel), then the controller, the Job runner and
        the scheduler. Raises :class:`StackError` (what was started is left for :meth:`stop`)."""
        for name, node in self.nodes.items():
            try:
                self.cluster.create_node(node_object(name, node.gpus, self.settings, self.protocol))
            except ClusterError as error:
                raise StackError(f"cannot create node {name}: {error}") from error
            self._created_nodes.append(name)
        self._each_node("start", lambda node: node.start())
        self.jobs = JobRunner(self.cluster, namespace=self.settings.namespace,
                              nodes={n.name: n.root for n in self.nodes.values()}, mode=self.settings.job_mode,
                              watch_timeout_s=self.settings.watch_timeout_s)
        self.jobs.start()
        self.controller = self._start_controller()
        self.scheduler = self._start_scheduler()

    def _each_node(self, what: str, action: Callable[[SimNode], None]) -> None:
        """Run ``action`` on every node in parallel; raises the first failure (:class:`StackError` as is)."""
        with futures.ThreadPoolExecutor(max_workers=min(8, len(self.nodes)), thread_name_prefix="ljrk-up") as pool:
            results = [pool.submit(action, node) for node in self.nodes.values()]
        for result in results:
            error = result.exception()
            if isinstance(error, StackError):
                raise error
            if error is not None:
                raise StackError(f"{what}: {error}") from error

    def _start_controller(self) -> ControllerApp:
        settings = ControllerSettings(
            namespace=self.settings.namespace, host="127.0.0.1", port=0, leader_elect=True,
            identity="ljrk-up-controller", job_timeout=self.settings.job_timeout_s,
            job_deadline=max(60.0, self.settings.job_timeout_s), backoff_base=1.0, backoff_cap=10.0,
            retry_seconds=1.0, watch_timeout_seconds=self.settings.watch_timeout_s, resync_seconds=60.0,
            log_level=self.settings.log_level)
        container = ControllerContainer(settings=settings)
        container.cluster.override(providers.Object(self.cluster))
        try:
            app = container.app()
            app.start()
        except Exception as error:
            raise StackError(f"the controller did not start: {error}") from error
        return app

    def _start_scheduler(self) -> SchedulerApp:
        settings = SchedulerSettings(
            mode="standalone", host="127.0.0.1", port=0, policy=self.settings.policy,
            lease_namespace=self.settings.namespace, identity="ljrk-up-scheduler", tick_seconds=1.0,
            resync_seconds=60.0, watch_timeout_seconds=self.settings.watch_timeout_s, log_level=self.settings.log_level)
        container = SchedulerContainer(settings=settings)
        container.cluster.override(providers.Object(self.cluster))
        try:
            app = container.app()
            app.start()
        except Exception as error:
            raise StackError(f"the scheduler did not start: {error}") from error
        return app

    def not_ready(self) -> list[str]:
        """What still keeps the stack from taking pods (empty when ready): per node (:meth:`SimNode.not_ready`),
        the scheduler not serving (leader with a rebuilt ledger) or not booking a node yet."""
        problems = [f"{name}: {why}" for name, node in self.nodes.items() if (why := node.not_ready())]
        if self.scheduler is None or not self.scheduler.service.serving:
            problems.append("scheduler: not serving yet (leader election, ledger rebuild)")
        elif unknown := [n for n in self.nodes if not self.scheduler.service.knows_node(n)]:
            problems.append(f"scheduler: no books for {', '.join(unknown)} yet")
        return problems

    def wait_ready(self, timeout_s: float, stop: threading.Event | None = None) -> list[str]:
        """Wait up to ``timeout_s`` seconds for :meth:`not_ready` to be empty; returns what is still not ready (empty
        on success, also when ``stop`` is set first)."""
        deadline = time.monotonic() + timeout_s
        stop = stop or threading.Event()
        while True:
            problems = self.not_ready()
            if not problems or stop.is_set() or time.monotonic() >= deadline:
                return [] if stop.is_set() else problems
            stop.wait(0.1)

    def stop(self) -> None:
        """Stop the scheduler, the controller and the Job runner, then every node, each group in parallel; delete
        the host directories. Idempotent; never raises (failures are logged)."""
        if self._stopped:
            return
        self._stopped = True
        central: list[tuple[str, Callable[[], None]]] = []
        if self.scheduler is not None:
            central.append(("scheduler", self.scheduler.stop))
        if self.controller is not None:
            central.append(("controller", self.controller.stop))
        if self.jobs is not None:
            central.append(("Job runner", self.jobs.stop))
        _in_parallel(central)
        _in_parallel([(f"node {node.name}", node.stop) for node in self.nodes.values()])
        shutil.rmtree(self.root, ignore_errors=True)

    def delete_created(self) -> None:
        """Delete the pods ``ljrk up`` created (label :data:`~.workload.MANAGED_BY`) and the Nodes it created
        (their Jobs go with them: the Node owns them). For a real API server; best effort, logged."""
        key, value = MANAGED_BY
        try:
            pods = [p for p in self.cluster.list_pods().items if p.labels.get(key) == value]
        except ClusterError as error:
            log.warning("cannot list the pods to delete: %s", error)
            pods = []
        for pod in pods:
            try:
                self.cluster.delete_pod(pod.namespace, pod.name, grace_period_seconds=0)
            except NotFoundError:
                pass
            except ClusterError as error:
                log.warning("cannot delete pod %s: %s", pod.key, error)
        for name in self._created_nodes:
            try:
                self.cluster.delete_node(name)
            except NotFoundError:
                pass
            except ClusterError as error:
                log.warning("cannot delete node %s: %s", name, error)

    # ------------------------------------------------------------------ quiescence
    def in_flight(self, pods: list[PodObject]) -> list[str]:
        """What is still moving (empty at a quiescent point): reservations awaiting their binding, pods of ours
        not yet seen or not yet tried by the scheduler, pods on our nodes not admitted yet or terminating, Runtime
        releases queued, toggle Jobs running. ``pods`` is a current listing (other nodes' pods are ignored)."""
        moving: list[str] = []
        scheduler = self.scheduler
        if scheduler is not None:
            service = scheduler.service
            with service.books() as books:
                assumed = len(books.assumed)
            if assumed:
                moving.append(f"{assumed} reservation(s) awaiting their binding")
            loop = scheduler.loop
            if loop is not None:
                queued = set(loop.pending())
                fresh = [p.key for p in pods
                         if p.scheduler_name == self.protocol.scheduler_name and not p.node_name
                         and p.phase is PodPhase.PENDING and p.deletion_timestamp is None
                         and (p.key not in queued or loop.delay(p.key) is None)]
                if fresh:
                    moving.append(f"{len(fresh)} pod(s) waiting for a first scheduling attempt")
        ours = set(self.nodes)
        unadmitted = [p.key for p in pods if p.node_name in ours and p.phase is PodPhase.PENDING]
        if unadmitted:
            moving.append(f"{len(unadmitted)} bound pod(s) not admitted yet")
        terminating = [p.key for p in pods if p.deletion_timestamp is not None and p.node_name in ours]
        if terminating:
            moving.append(f"{len(terminating)} pod(s) terminating")
        for name, node in self.nodes.items():
            if node.releaser is not None and not node.releaser.idle():
                moving.append(f"{name}: Runtime releases in flight")
        if self.jobs is not None and self.jobs.running():
            moving.append("toggle Job(s) running")
        return moving

    def pods(self) -> list[PodObject]:
        """Every pod in the cluster. Raises ClusterError."""
        return list(self.cluster.list_pods().items)

    def device_plugin_urls(self) -> dict[str, str]:
        """Node name → its device plugin's ``/metrics`` URL."""
        return {name: node.device_plugin_url for name, node in self.nodes.items()}

    def exporter_urls(self) -> dict[str, str]:
        """Node name → its exporter's ``/metrics`` URL."""
        return {name: node.exporter_url for name, node in self.nodes.items()}

    def scheduler_url(self) -> str:
        """The scheduler's ``/metrics`` URL (empty before :meth:`start`)."""
        if self.scheduler is None:
            return ""
        host, port = self.scheduler.http.address
        return f"http://{host}:{port}/metrics"

    def controller_url(self) -> str:
        """The controller's ``/metrics`` URL (empty before :meth:`start`)."""
        if self.controller is None:
            return ""
        host, port = self.controller.http.address
        return f"http://{host}:{port}/metrics"
