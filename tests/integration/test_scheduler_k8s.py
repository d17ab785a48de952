"""The scheduler component against a real control plane (etcd + kube-apiserver + kube-scheduler, live version).

One plane for the module, whose REAL kube-scheduler is configured with our extender (filter, prioritize and bind
verbs, ``nodeCacheCapable``, ``managedResources`` for the three resource names, weight 1,
``percentageOfNodesToScore: 100``); our extender runs in-process on the configured port over KubernetesCluster.

Covers:
(a) extender mode: three nodes with two 16 GiB GPUs each, inventory annotation written by the test (no device
    plugin yet), allocatable set through the status subresource, not-ready taint removed; the GPUs are pre-filled
    by bound pods carrying plans so that only one GPU of one node has ≥ 60 % core and ≥ 8 GiB free, while every
    node has enough core and memory *in sum* (so kube-scheduler's own resource fit passes them all); a pod
    ``core=60 mem=8`` for the default scheduler is bound by kube-scheduler through our bind verb to that node,
    with our plan annotation naming that GPU;
(b) standalone mode against the same API server: a pod with schedulerName lj-runtimekit-scheduler gets bound
    (with a plan) and a Scheduled Event;
(c) HA: two replicas with LeaderElector on a real Lease: only the leader binds (the standby attempts nothing);
    stopping the leader releases the Lease, the other takes over and binds the next pod.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from k8s_harness import ControlPlane, control_plane, free_ports
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from services._shared.leader import LeaderConfig, LeaderElector
from services.scheduler.service import SchedulerService, ServiceConfig
from support.k8s_nodes import make_schedulable
from support.polling import eventually

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
RES, KEYS = PROTOCOL.resources, PROTOCOL.annotations
NOBODY = "ljrk-test-none"  # pre-filled pods: no scheduler serves them, the test binds them

NO_HOLDS = ServiceConfig(policy="fgd", admission_hold_seconds=None)
"""No device plugin here marks pods allocated, so admission holds are off."""


def gpus(node: str, count: int = 2) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, GpuUuid(f"GPU-{node}-{i}"), "A100", 16 * GiB) for i in range(count))


@pytest.fixture(scope="module")
def extender_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, extender_port: int) -> Iterator[ControlPlane]:
    extender = {
        "urlPrefix": f"http://127.0.0.1:{extender_port}",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 1,
        "enableHTTPS": False,
        "nodeCacheCapable": True,
        "managedResources": [{"name": name, "ignoredByScheduler": False}
                             for name in (RES.gpu, RES.core, RES.memory)],
    }
    config = {"extenders": [extender], "percentageOfNodesToScore": 100}
    with control_plane(k8s_bin_dir, scheduler=True, scheduler_config=config) as cp:
        yield cp


class Replica:
    """One scheduler replica in-process: its own API client, service, app (and elector when ``lease``)."""

    def __init__(self, plane: ControlPlane, mode: str, *, port: int = 0, lease: str = "", identity: str = "") -> None:
        self.api_client = plane.api_client()
        self.cluster = KubernetesCluster(self.api_client)
        self.metrics = PrometheusSchedulerMetrics()
        self.elector = None
        if lease:
            config = LeaderConfig("kube-system", lease, identity, lease_duration=3, renew_deadline=2,
                                  retry_period=0.2)
            self.elector = LeaderElector(self.cluster, config)
        elector = self.elector
        self.service = SchedulerService(self.cluster, PROTOCOL, self.metrics, config=NO_HOLDS,
                                        is_leader=(lambda: elector.is_leader) if elector is not None else lambda: True)
        settings = SchedulerSettings(mode=mode, host="127.0.0.1", port=port, watch_timeout_seconds=1,
                                     tick_seconds=0.2, identity=identity or "solo")
        self.app = SchedulerApp(settings=settings, cluster=self.cluster, service=self.service, elector=elector,
                                metrics_text=self.metrics.exposition)
        self.stopped = False

    def start(self) -> Replica:
        self.app.start()
        eventually(lambda: self.app.synced, what="informers synced")
        if self.elector is None:
            eventually(lambda: self.service.serving, what="ledger rebuilt")
        return self

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.app.stop(join_seconds=10)
            self.api_client.close()

    def scheduled(self) -> float:
        return self.metrics.registry.get_sample_value("lj_runtimekit_scheduler_decisions_total",
                                                      {"result": "scheduled"}) or 0.0


@pytest.fixture
def core(plane: ControlPlane) -> Iterator[client.CoreV1Api]:
    with plane.api_client() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def make_nodes(core: client.CoreV1Api) -> Iterator[Callable[..., list[str]]]:
    """Creates GPU nodes like a device plugin would publish them; deletes them afterwards."""
    made: list[str] = []

    def make(count: int, *, labels: dict[str, str] | None = None) -> list[str]:
        names = [f"gpu-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        for name in names:
            inventory = encode_inventory(gpus(name), heartbeat=time.time(), protocol=PROTOCOL.fingerprint())
            core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
                name=name, labels=labels, annotations={KEYS.node_inventory: inventory})))
            made.append(name)
            make_schedulable(core, name, {"cpu": "8", "memory": "32Gi", "pods": "110", RES.gpu: "2", RES.core: "200",
                                          RES.memory: "32"})
        return names

    yield make
    for name in made:
        core.delete_node(name)


def share_pod(name: str, core_percent: int, mem_gib: int, *, scheduler: str = "default-scheduler",
              annotations: dict[str, str] | None = None, node_selector: dict[str, str] | None = None) -> PodObject:
    limits = {RES.core: str(core_percent), RES.memory: str(mem_gib)}
    return PodObject("", "default", name, containers=(ContainerSpec("main", limits=limits),), scheduler_name=scheduler,
                     annotations=dict(annotations or {}), node_selector=dict(node_selector or {}))


def prefill(cluster: KubernetesCluster, node: str, gpu: int, core_percent: int, mem_gib: int) -> None:
    """A bound pod of another scheduler holding ``core_percent``/``mem_gib`` of GPU ``gpu``, with a plan naming
    the pod's own UID (written once the server assigned it, before the binding)."""
    grant = ContainerGrant("main", (GpuGrant(gpu, core_percent * 10, mem_gib * GiB),))
    name = f"fill-{uuid.uuid4().hex[:8]}"
    pod = cluster.create_pod(share_pod(name, core_percent, mem_gib, scheduler=NOBODY))
    plan = encode_plan(PodAllocation(pod.uid, node, (grant,)), gpus(node), writer=NOBODY)
    cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
    cluster.bind_pod("default", name, uid=pod.uid, node=node)


def plan_grants(pod: PodObject) -> list[tuple[str, int, int]]:
    plan = json.loads(pod.annotations[KEYS.pod_plan])
    return [(g["uuid"], g["coreMilli"], g["memoryBytes"]) for c in plan["containers"].values() for g in c["gpus"]]


def test_real_kube_scheduler_binds_through_our_extender_to_the_only_fitting_gpu(
    plane: ControlPlane, extender_port: int, make_nodes: Callable[..., list[str]]
) -> None:
    replica = Replica(plane, "extender", port=extender_port).start()
    try:
        n1, n2, n3 = make_nodes(3)
        for node, fills in ((n1, ((0, 50, 4), (1, 50, 4))), (n2, ((0, 20, 12), (1, 20, 12))),
                            (n3, ((0, 50, 4), (1, 30, 4)))):
            for gpu, core_percent, mem in fills:
                prefill(replica.cluster, node, gpu, core_percent, mem)
        expected = {n1: [500, 500], n2: [200, 200], n3: [500, 300]}
        eventually(lambda: all(replica.service.knows_node(n) and [g.core_used for g in replica.service.gpus(n)] == used
                               for n, used in expected.items()), what="pre-filled pods counted")
        offered: list[set[str]] = []
        verbs = dict(replica.app.http.verbs)
        real_filter = verbs["filter"]

        def spy(body: object) -> object:
            assert isinstance(body, dict)
            offered.append(set(body["NodeNames"]))
            return real_filter(body)

        replica.app.http.verbs = {**verbs, "filter": spy}
        pod = replica.cluster.create_pod(share_pod("want-60-8", 60, 8))
        bound = eventually(lambda: (p := replica.cluster.get_pod("default", pod.name)).node_name and p,
                           what="kube-scheduler binding the pod")
        assert bound.node_name == n3
        assert plan_grants(bound) == [(f"GPU-{n3}-1", 600, 8 * GiB)]
        assert offered
        assert {n1, n2, n3} <= offered[0]  # kube-scheduler's own (summed) resource fit kept all three nodes
        eventually(lambda: replica.scheduled() == 1, what="the decision counted")  # after bind returns
    finally:
        replica.stop()


def test_standalone_mode_binds_our_pods(plane: ControlPlane, make_nodes: Callable[..., list[str]]) -> None:
    label = {"ljrk-test": uuid.uuid4().hex[:8]}
    (node,) = make_nodes(1, labels=label)
    replica = Replica(plane, "standalone").start()
    try:
        eventually(lambda: replica.service.knows_node(node), what="node seen")
        pod = replica.cluster.create_pod(share_pod("solo", 30, 4, scheduler=PROTOCOL.scheduler_name,
                                                   node_selector=label))
        bound = eventually(lambda: (p := replica.cluster.get_pod("default", pod.name)).node_name and p,
                           what="standalone binding")
        assert bound.node_name == node
        assert plan_grants(bound)[0][1:] == (300, 4 * GiB)
    finally:
        replica.stop()


def test_only_the_leader_binds_and_the_standby_takes_over(
    plane: ControlPlane, make_nodes: Callable[..., list[str]]
) -> None:
    label = {"ljrk-test": uuid.uuid4().hex[:8]}
    (node,) = make_nodes(1, labels=label)
    lease = f"ljrk-{uuid.uuid4().hex[:8]}"
    a = Replica(plane, "standalone", lease=lease, identity="replica-a").start()
    b = Replica(plane, "standalone", lease=lease, identity="replica-b").start()
    try:
        eventually(lambda: a.service.serving != b.service.serving, what="one serving leader")
        leader, standby = (a, b) if a.service.serving else (b, a)
        assert not standby.service.is_leader()
        eventually(lambda: leader.service.knows_node(node) and standby.service.knows_node(node), what="node seen")
        first = leader.cluster.create_pod(share_pod("ha-1", 20, 2, scheduler=PROTOCOL.scheduler_name,
                                                    node_selector=label))
        eventually(lambda: leader.cluster.get_pod("default", first.name).node_name, what="leader binding")
        eventually(lambda: leader.scheduled() == 1, what="the decision counted")  # counted after bind returns
        assert standby.scheduled() == 0
        assert standby.app.loop is not None
        assert standby.app.loop.attempts == 0
        leader.stop()  # releases the Lease
        eventually(lambda: standby.service.serving, timeout=10, what="takeover")
        second = standby.cluster.create_pod(share_pod("ha-2", 20, 2, scheduler=PROTOCOL.scheduler_name,
                                                      node_selector=label))
        eventually(lambda: standby.cluster.get_pod("default", second.name).node_name, what="new leader binding")
        eventually(lambda: standby.scheduled() == 1, what="the decision counted")
        assert standby.cluster.get_lease("kube-system", lease).holder == standby.app.settings.identity
    finally:
        a.stop()
        b.stop()
