"""The whole stack on one machine: every component built by its own container, as in production, over one cluster.

Per simulated node (:class:`~.simnode.SimNode`), in its own host directory ``<root>/n<i>`` laid out like a node's
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

With ``StackSettings.dra`` each node runs the DRA driver (:mod:`.dranode`) in place of the device plugin, over one
set of in-memory ResourceSlices and ResourceClaims that the scheduler watches and allocates too, and the claim
releaser (:class:`~.dra.ClaimReleaser`) plays kube-controller-manager's resourceclaim controller.

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

from dependency_injector import providers

from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.kube.objects import PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.simulation.workload import TracePod
from entrypoints.controller.app import ControllerApp, ControllerSettings
from entrypoints.controller.containers import ControllerContainer
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from entrypoints.scheduler.containers import SchedulerContainer
from ports.cluster import ClusterApi, ClusterError, NotFoundError

from .clock import PausableClock
from .dra import ClaimReleaser, claim_pod, workload_claim
from .jobs import JobRunner
from .simnode import SimNode, StackError, StackSettings, node_object
from .workload import MANAGED_BY

log = logging.getLogger(__name__)

HISTORY_LIMIT = 100_000
"""Watch window of the in-memory ResourceClaims and ResourceSlices (changes): a claim changes about five times."""


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
        self.claims = InMemoryResourceClaims(history_limit=HISTORY_LIMIT) if settings.dra else None
        self.slices = InMemoryResourceSlices(history_limit=HISTORY_LIMIT) if settings.dra else None
        self.claim_releaser = None if self.claims is None else ClaimReleaser(
            cluster, self.claims, watch_timeout_s=settings.watch_timeout_s)
        try:
            for index in range(settings.nodes):
                name = f"{settings.node_prefix}-{index}"
                self.nodes[name] = SimNode(name=name, root=self.root / f"n{index}", cluster=cluster, protocol=protocol,
                                           settings=settings, clock=self.clock, claims=self.claims,
                                           slices=self.slices)
        except Exception:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self._share_memory = min(g.memory_bytes for node in self.nodes.values() for g in node.gpus)
        """Bytes of the smallest GPU of the nodes: the memory a share's claim asks in proportion to (with ``dra``)."""

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
        if self.claim_releaser is not None:
            self.claim_releaser.start()
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
        if self.claims is not None:
            container.claims.override(providers.Object(self.claims))
            container.slices.override(providers.Object(self.slices))
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
        if self.claim_releaser is not None:
            central.append(("claim releaser", self.claim_releaser.stop))
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

    def with_claim(self, pod: PodObject, trace: TracePod) -> PodObject:
        """With ``dra``: create the ResourceClaim of ``pod``'s GPUs (:func:`~.dra.workload_claim`, the nodes' smallest
        GPU memory for a share's) and return the pod asking through it; otherwise, or for a pod without GPUs,
        ``pod`` as it is."""
        if self.claims is None or self.claim_releaser is None:
            return pod
        claim = workload_claim(trace, self.protocol, namespace=pod.namespace, name=pod.name,
                               gpu_memory_bytes=self._share_memory)
        if claim is None:
            return pod
        self.claim_releaser.made(self.claims.put(claim))
        return claim_pod(pod, claim, self.protocol)

    def drop_claim(self, pod: PodObject) -> None:
        """``pod`` (from :meth:`with_claim`) was not created: delete the claims made for it."""
        if self.claims is None or self.claim_releaser is None:
            return
        for entry in pod.resource_claims:
            if entry.claim_name:
                self.claim_releaser.forget(f"{pod.namespace}/{entry.claim_name}")
                self.claims.delete(pod.namespace, entry.claim_name)

    # ------------------------------------------------------------------ quiescence
    def in_flight(self, pods: list[PodObject]) -> list[str]:
        """What is still moving (empty at a quiescent point): reservations awaiting their binding, pods of ours
        not yet seen or not yet tried by the scheduler, or due again within the wake interval, pods on our nodes not
        admitted yet or terminating, Runtime releases queued, DRA claims the kubelet still has to unprepare, toggle
        Jobs running, claims of ended pods not released. ``pods`` is a current listing (other nodes' pods are
        ignored)."""
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
                if waking := loop.waking():
                    moving.append(f"{len(waking)} pod(s) due again soon (capacity changed, or a short backoff)")
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
            dra = None if node.kubelet is None else node.kubelet.device_manager.dra
            if dra is not None and (owed := [uid for uid, users in dra.prepared().items() if not users]):
                moving.append(f"{name}: {len(owed)} claim(s) to unprepare")
        if self.jobs is not None and self.jobs.running():
            moving.append("toggle Job(s) running")
        if self.claim_releaser is not None and (owed := self.claim_releaser.owed()):
            moving.append(f"{len(owed)} claim(s) of ended pods not released yet")
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
