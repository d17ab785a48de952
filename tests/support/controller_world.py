"""A synchronous test world for the node controller: an in-memory cluster, informers pumped by hand, a fake clock.

``World.settle()`` delivers every pending watch event to the controller and runs every due reconcile, until
nothing changes; the test plays the Job controller and kubelet (``finish``). The controller writes through a
:class:`CountingCluster`, so tests can assert exactly how many API writes it made.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.controller import PrometheusControllerMetrics
from domain.kube.objects import JobObject, JobPhase, JobStatus, NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.toggle.jobs import JOB_SELECTOR, JobTemplate, is_ours, job_node
from domain.toggle.policy import TogglePolicy
from domain.toggle.reconcile import ToggleSettings
from ports.cluster import GoneError
from services._shared.informer import Informer
from services.controller.service import ToggleController

PROTOCOL = ProtocolConstants()
LABEL = PROTOCOL.node_label
STATE_KEY = PROTOCOL.annotations.node_state
DETAIL_KEY = PROTOCOL.annotations.node_toggle
NAMESPACE = "ljrk-system"
WRITES = frozenset({
    "create_node", "delete_node", "patch_node_metadata", "create_pod", "delete_pod", "set_pod_phase",
    "patch_pod_annotations", "bind_pod", "create_event", "create_lease", "update_lease", "create_job",
    "delete_job", "set_job_status",
})


class Clock:
    """A settable epoch clock."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingCluster:
    """Any ClusterApi, with every write method call counted by name in :attr:`writes`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in WRITES:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes[name] += 1
            return attr(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.writes.values())


def settings(**policy: Any) -> ToggleSettings:
    defaults = {"max_tries": 3, "backoff_base": 10.0, "backoff_cap": 60.0, "failed_job_ttl": 600.0,
                "job_deadline": 120.0}
    return ToggleSettings(TogglePolicy(**{**defaults, **policy}), JobTemplate(namespace=NAMESPACE, image="ljrk:test"),
                          state_key=STATE_KEY, detail_key=DETAIL_KEY)


class World:
    """In-memory cluster + controller + hand-pumped informers (module docstring)."""

    def __init__(self, *, history_limit: int = 1000, leader: bool = True, **policy: Any) -> None:
        self.clock = Clock()
        self.cluster = InMemoryCluster(clock=self.clock, history_limit=history_limit)
        self.api = CountingCluster(self.cluster)
        self.metrics = PrometheusControllerMetrics()
        self.leader = leader
        self.controller = self.new_controller(**policy)

    def new_controller(self, **policy: Any) -> ToggleController:
        """A fresh controller process (new caches and informers) on the same cluster."""
        controller = ToggleController(self.api, settings(**policy), self.metrics, enable_label=LABEL,
                                      clock=self.clock, is_leader=lambda: self.leader)
        self.nodes: Informer[NodeObject] = Informer(
            name="nodes", list_fn=self.cluster.list_nodes,
            watch_fn=lambda rv, t: self.cluster.watch_nodes(resource_version=rv, timeout_seconds=t),
            key=lambda n: n.name, uid=lambda n: n.uid, on_upsert=controller.on_node,
            on_delete=controller.on_node_deleted)
        self.jobs: Informer[JobObject] = Informer(
            name="jobs", list_fn=lambda: self.cluster.list_jobs(NAMESPACE, label_selector=JOB_SELECTOR),
            watch_fn=lambda rv, t: self.cluster.watch_jobs(NAMESPACE, resource_version=rv, timeout_seconds=t,
                                                           label_selector=JOB_SELECTOR),
            key=lambda j: j.name, uid=lambda j: j.uid, on_upsert=controller.on_job,
            on_delete=controller.on_job_deleted)
        controller.synced = lambda: self.nodes.synced.is_set() and self.jobs.synced.is_set()
        self.controller = controller
        return controller

    # ------------------------------------------------------------------ driving
    def pump(self) -> int:
        """Deliver every pending watch event; returns how many."""
        delivered = 0
        for informer in (self.nodes, self.jobs):
            if not informer.synced.is_set():
                informer.relist()
                delivered += 1
                continue
            try:
                for event in informer._watch(informer.resource_version, 0.0):
                    informer.apply(event)
                    delivered += 1
            except GoneError:
                informer.synced.clear()
                informer.relist()
                delivered += 1
        return delivered

    def settle(self, rounds: int = 100) -> None:
        """Pump and reconcile until quiet."""
        for _ in range(rounds):
            if self.pump() == 0 and self.controller.run_due() == 0:
                return
        raise AssertionError("the world did not settle")

    def start(self) -> None:
        """List, take leadership (the startup sweep), settle."""
        self.pump()
        if self.leader:
            self.controller.begin_leading()
        self.settle()

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.settle()

    # ------------------------------------------------------------------ the cluster
    def add_node(self, name: str, label: str | None = None, *, state: str | None = None) -> NodeObject:
        annotations = {STATE_KEY: state} if state is not None else {}
        labels = {LABEL: label} if label is not None else {}
        return self.cluster.create_node(NodeObject(name, labels=labels, annotations=annotations))

    def set_label(self, name: str, value: str | None) -> None:
        self.cluster.patch_node_metadata(name, labels={LABEL: value})

    def our_jobs(self, node: str | None = None) -> list[JobObject]:
        items = self.cluster.list_jobs(NAMESPACE).items
        return [j for j in items if is_ours(j) and (node is None or job_node(j) == node)]

    def active(self, node: str | None = None) -> list[JobObject]:
        return [j for j in self.our_jobs(node) if not j.status.phase.finished]

    def finish(self, node: str, *, ok: bool = True) -> JobObject:
        """Play the Job controller: the node's one active Job succeeds (or fails)."""
        (job,) = self.active(node)
        status = (JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=self.clock.now) if ok else
                  JobStatus(JobPhase.FAILED, failed=1, finished_at=self.clock.now, reason="BackoffLimitExceeded",
                            message="Job has reached the specified backoff limit"))
        return self.cluster.set_job_status(job.namespace, job.name, status)

    def state(self, name: str) -> str | None:
        return self.cluster.get_node(name).annotations.get(STATE_KEY)
