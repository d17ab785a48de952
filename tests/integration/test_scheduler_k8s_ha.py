"""Scheduler HA against a real API server: leader loss by Lease *expiry*, not by a clean release.

Two standalone replicas elect a leader through a real coordination.k8s.io/v1 Lease with short timings
(lease_duration 3 s, renew_deadline 2 s, retry_period 0.5 s). The leader then stops renewing *without* releasing the
Lease, in one of two ways:

* ``lease-partition`` — its elector's Lease calls fail (a network partition between the elector and the API server;
  the replica's other API calls still work, so nothing but its own view of leadership keeps it from binding). Its
  elector keeps looping, sees renewals fail, and steps down after ``renew_deadline``;
* ``elector-hung`` — its elector thread hangs inside its next Lease call (a stuck connection): it neither renews,
  nor releases, nor runs its "stopped leading" callback. The replica still stops writing, because
  ``LeaderElector.is_leader`` expires on its own clock ``renew_deadline`` after the last renewal.

The cut is made right after a successful renewal, so the last renewal time is known. Asserted:

1. the old leader fences itself (stops serving) within ``renew_deadline`` (+ polling slack) of its last renewal,
   *before* the standby takes over (never two writers);
2. the standby takes over by expiry: not before ``lease_duration`` after it *observed* the last renewal, and within
   ``lease_duration + retry_period`` of that observation (+ API latency slack). Measured from the last renewal itself
   the bound is ``lease_duration + 2 × retry_period``: the standby sees the renewal up to one ``retry_period`` late
   (client-go's algorithm has the same bound);
3. a pod created in the gap (old leader fenced, standby not yet leader) stays unbound until the takeover, then the
   new leader binds it with a plan; the next pod after the takeover is bound by the new leader too;
4. the old leader binds nothing after losing leadership (its decision count stays at the one pod it bound while
   leading, and it holds no reservation for the gap pod) — not even once the fault heals and it can reach the Lease
   again. Its loop may still run one cycle for a pod it was already waiting for when leadership lapsed (the loop
   checks ``serving`` before it waits for the next pod); the commit refuses it (``NotLeaderError``, reservation
   released), which is the guarantee this test holds the replica to.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_harness import ControlPlane
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory
from domain.kube.objects import ContainerSpec, LeaseRecord, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from ports.cluster import ClusterError
from services._shared.leader import LeaderConfig, LeaderElector
from services.scheduler.service import SchedulerService, ServiceConfig
from support.k8s_nodes import make_schedulable
from support.polling import eventually

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
RES, KEYS = PROTOCOL.resources, PROTOCOL.annotations
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.5
SLACK = 0.75
"""Seconds allowed on top of the algorithm's bounds for API round trips and test polling on a loaded machine."""

NO_HOLDS = ServiceConfig(policy="fgd", admission_hold_seconds=None)
"""No device plugin here marks pods allocated, so admission holds are off."""


class LeaseLink:
    """The elector's way to the API server: forwards to the real cluster, records every Lease answer with its
    monotonic time, and can be cut right after the next successful renewal (``partition``: Lease calls then fail;
    ``hang``: the next Lease call blocks until :meth:`heal`)."""

    def __init__(self, inner: KubernetesCluster) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.log: list[tuple[float, str, LeaseRecord]] = []
        self.mode = ""
        self._cut_after_renew = ""
        self.cut_at: float | None = None
        self._unhang = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cut_after_next_renewal(self, mode: str) -> None:
        self._cut_after_renew = mode

    def heal(self) -> None:
        self.mode = ""
        self._unhang.set()

    def _gate(self) -> None:
        if self.mode == "partition":
            raise ClusterError("lease link cut by the test (network partition)")
        if self.mode == "hang":
            self._unhang.wait()

    def _record(self, kind: str, lease: LeaseRecord) -> LeaseRecord:
        with self.lock:
            self.log.append((time.monotonic(), kind, lease))
        return lease

    def get_lease(self, namespace: str, name: str) -> LeaseRecord:
        self._gate()
        return self._record("get", self.inner.get_lease(namespace, name))

    def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        self._gate()
        return self._record("write", self.inner.create_lease(lease))

    def update_lease(self, lease: LeaseRecord) -> LeaseRecord:
        self._gate()
        updated = self._record("write", self.inner.update_lease(lease))
        if self._cut_after_renew:
            self.mode, self._cut_after_renew = self._cut_after_renew, ""
            self.cut_at = time.monotonic()
        return updated


class Replica:
    """One standalone replica in-process: its own API client, service and app; its elector talks to the Lease
    through a :class:`LeaseLink`, everything else through the plain cluster."""

    def __init__(self, plane: ControlPlane, lease: str, identity: str) -> None:
        self.identity = identity
        self.api_client = plane.api_client()
        self.cluster = KubernetesCluster(self.api_client)
        self.link = LeaseLink(self.cluster)
        self.metrics = PrometheusSchedulerMetrics()
        config = LeaderConfig("kube-system", lease, identity, lease_duration=LEASE_DURATION,
                              renew_deadline=RENEW_DEADLINE, retry_period=RETRY_PERIOD)
        self.elector = LeaderElector(self.link, config)
        elector = self.elector
        self.service = SchedulerService(self.cluster, PROTOCOL, self.metrics, config=NO_HOLDS,
                                        is_leader=lambda: elector.is_leader)
        settings = SchedulerSettings(mode="standalone", host="127.0.0.1", port=0, watch_timeout_seconds=1,
                                     tick_seconds=0.2, identity=identity, lease_duration=LEASE_DURATION,
                                     renew_deadline=RENEW_DEADLINE, retry_period=RETRY_PERIOD)
        self.app = SchedulerApp(settings=settings, cluster=self.cluster, service=self.service, elector=elector,
                                metrics_text=self.metrics.exposition)
        self.stopped = False

    def start(self) -> Replica:
        self.app.start()
        eventually(lambda: self.app.synced, what=f"{self.identity}: informers synced")
        return self

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.link.heal()  # a hung elector thread must be able to finish
            self.app.stop(join_seconds=10)
            self.api_client.close()

    def scheduled(self) -> float:
        return self.metrics.registry.get_sample_value("lj_runtimekit_scheduler_decisions_total",
                                                      {"result": "scheduled"}) or 0.0


@pytest.fixture
def core(k8s_control_plane: ControlPlane) -> Iterator[client.CoreV1Api]:
    with k8s_control_plane.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def gpu_node(core: client.CoreV1Api) -> Iterator[tuple[str, dict[str, str]]]:
    """One labelled node with two 16 GiB GPUs, published like the device plugin would; deleted afterwards."""
    name = f"ha-{uuid.uuid4().hex[:8]}"
    label = {"ljrk-test": name}
    gpus = tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", 16 * GiB) for i in range(2))
    inventory = encode_inventory(gpus, heartbeat=time.time(), protocol=PROTOCOL.fingerprint())
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels=label, annotations={KEYS.node_inventory: inventory})))
    try:
        make_schedulable(core, name, {"cpu": "8", "memory": "32Gi", "pods": "110", RES.gpu: "2", RES.core: "200",
                                      RES.memory: "32"})
        yield name, label
    finally:
        core.delete_node(name)


def our_pod(name: str, label: dict[str, str]) -> PodObject:
    limits = {RES.core: "10", RES.memory: "1"}
    return PodObject("", "default", name, containers=(ContainerSpec("main", limits=limits),),
                     scheduler_name=PROTOCOL.scheduler_name, node_selector=dict(label))


def renewals(link: LeaseLink, identity: str) -> list[float]:
    with link.lock:
        return [t for t, kind, lease in link.log if kind == "write" and lease.holder == identity]


@pytest.mark.parametrize("fault", ["lease-partition", "elector-hung"])
def test_standby_takes_over_when_the_leaders_lease_expires(
    k8s_control_plane: ControlPlane, core: client.CoreV1Api, gpu_node: tuple[str, dict[str, str]], fault: str
) -> None:
    node, label = gpu_node
    lease = f"ljrk-ha-{uuid.uuid4().hex[:8]}"
    a = Replica(k8s_control_plane, lease, "replica-a").start()
    b = Replica(k8s_control_plane, lease, "replica-b").start()
    pods: list[str] = []
    try:
        eventually(lambda: a.service.serving != b.service.serving, what="one serving leader")
        old, new = (a, b) if a.service.serving else (b, a)
        eventually(lambda: old.service.knows_node(node) and new.service.knows_node(node), what="node seen")
        first = old.cluster.create_pod(our_pod(f"ha-first-{uuid.uuid4().hex[:6]}", label))
        pods.append(first.name)
        eventually(lambda: old.cluster.get_pod("default", first.name).node_name, what="the leader binding")
        eventually(lambda: old.scheduled() == 1, what="the leader's decision counted")  # counted after bind returns
        assert new.scheduled() == 0

        # Cut the leader's Lease link right after its next successful renewal: no release, no further renewal.
        old.link.cut_after_next_renewal("partition" if fault == "lease-partition" else "hang")
        eventually(lambda: old.link.cut_at is not None, timeout=5, what="the leader's next renewal")
        cut_at = old.link.cut_at
        assert cut_at is not None

        # 1. The old leader fences itself before anyone else can lead.
        eventually(lambda: not old.service.serving, timeout=RENEW_DEADLINE + 2, what="the old leader stepping down")
        fenced_at = time.monotonic()
        assert RENEW_DEADLINE - SLACK <= fenced_at - cut_at <= RENEW_DEADLINE + SLACK

        # 3. A pod created in the gap waits for the new leader.
        gap = new.cluster.create_pod(our_pod(f"ha-gap-{uuid.uuid4().hex[:6]}", label))
        pods.append(gap.name)
        eventually(lambda: new.service.serving, timeout=LEASE_DURATION + 2 * RETRY_PERIOD + 3, what="takeover",
                   interval=0.01)
        took_over = renewals(new.link, new.identity)
        assert took_over, "the standby serves without having written the Lease"
        takeover_at = took_over[0]

        # 2. Takeover by expiry, timed from what the standby saw and from the last renewal.
        with old.link.lock:
            final_rv = next(lease.resource_version for t, kind, lease in reversed(old.link.log) if kind == "write")
        with new.link.lock:
            observed = [t for t, kind, lease in new.link.log if kind == "get" and lease.resource_version == final_rv]
        assert observed, "the standby never saw the old leader's last renewal"
        waited = takeover_at - observed[0]
        assert LEASE_DURATION <= waited <= LEASE_DURATION + RETRY_PERIOD + SLACK, waited
        assert takeover_at - cut_at <= LEASE_DURATION + 2 * RETRY_PERIOD + SLACK
        # Never two writers: the old leader's leadership ends renew_deadline after its last renewal (its own clock),
        # the standby's starts lease_duration after it saw that renewal.
        assert takeover_at - cut_at > RENEW_DEADLINE
        print(f"{fault}: fenced {fenced_at - cut_at:.2f} s after the last renewal; takeover {waited:.2f} s after "
              f"the standby saw it, {takeover_at - cut_at:.2f} s after the last renewal")  # shown with -s
        holder = new.cluster.get_lease("kube-system", lease)
        assert holder.holder == new.identity
        assert holder.transitions >= 1

        bound_gap = eventually(lambda: (p := new.cluster.get_pod("default", gap.name)).node_name and p,
                               what="the new leader binding the gap pod")
        assert bound_gap.node_name == node
        assert json.loads(bound_gap.annotations[KEYS.pod_plan])["containers"]["main"]["gpus"]
        nxt = new.cluster.create_pod(our_pod(f"ha-next-{uuid.uuid4().hex[:6]}", label))
        pods.append(nxt.name)
        eventually(lambda: new.cluster.get_pod("default", nxt.name).node_name == node, what="the next pod bound")
        eventually(lambda: new.scheduled() == 2, what="both decisions counted")  # counted after bind returns

        # 4. The old leader bound nothing after losing leadership, and stays a follower once the fault heals.
        old.link.heal()
        time.sleep(LEASE_DURATION)
        assert not old.service.serving
        assert not old.elector.is_leader
        assert new.service.serving
        assert new.cluster.get_lease("kube-system", lease).holder == new.identity
        assert old.scheduled() == 1
        assert old.service.reservation(gap.uid) is None
        assert old.service.reservation(nxt.uid) is None
    finally:
        a.stop()
        b.stop()
        for name in pods:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
