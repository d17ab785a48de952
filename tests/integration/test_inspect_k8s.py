"""``ljrk inspect`` against a real kube-apiserver (the session's control plane; ``k8s``: skipped without it).

Nodes carry inventory annotations as a device plugin writes them (one fresh, one stale), pods are bound by "another
scheduler" with plans (and one without, counted by inference); a scheduler replica runs in-process over the same
API server. Covers: ``ljrk inspect NODE --kubeconfig … --scheduler URL -o json`` shows the node's GPUs with their
holders and no disagreement (exit 0); the stale node exits 1 with ``inventory-stale``; the whole-cluster listing
lists both nodes; an unknown node exits 2 naming it.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from k8s_harness import ControlPlane
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.inspect.__main__ import main
from services.scheduler.service import ServiceConfig
from support.polling import eventually
from support.scheduler_replica import SchedulerReplica

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
RES, KEYS = PROTOCOL.resources, PROTOCOL.annotations
NOBODY = "ljrk-test-none"  # no scheduler serves these pods: the test binds them


def gpus(node: str) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, GpuUuid(f"GPU-{node}-{i}"), "A100", 16 * GiB) for i in range(2))


class World(SchedulerReplica):
    """Two GPU nodes, bound pods, and a scheduler replica, on the real API server; deleted at the end."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.api = plane.api_client()
        self.core = client.CoreV1Api(self.api)
        self.nodes: list[str] = []
        super().__init__(KubernetesCluster(self.api), config=ServiceConfig(admission_hold_seconds=None),
                         watch_timeout_seconds=1, tick_seconds=0.2)

    def node(self, *, age_s: float = 0.0) -> str:
        name = f"inspect-{uuid.uuid4().hex[:8]}"
        inventory = encode_inventory(gpus(name), heartbeat=time.time() - age_s, protocol=PROTOCOL.fingerprint())
        self.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=name, annotations={KEYS.node_inventory: inventory})))
        self.nodes.append(name)
        return name

    def bound(self, node: str, index: int, core: int, mem_gib: int, *, plan: bool = True) -> str:
        name = f"p-{uuid.uuid4().hex[:8]}"
        limits = {RES.core: str(core), RES.memory: str(mem_gib)}
        pod = self.cluster.create_pod(PodObject("", self.namespace, name, scheduler_name=NOBODY,
                                                containers=(ContainerSpec("main", limits=limits),)))
        if plan:
            grant = ContainerGrant("main", (GpuGrant(index, core * 10, mem_gib * GiB),))
            text = encode_plan(PodAllocation(pod.uid, node, (grant,)), gpus(node), writer=NOBODY)
            self.cluster.patch_pod_annotations(self.namespace, name, {KEYS.pod_plan: text})
        self.cluster.bind_pod(self.namespace, name, uid=pod.uid, node=node)
        return name

    def caught_up(self, count: int) -> bool:
        with self.service.books() as books:
            return sum(len(books.ledger.pods_on(n)) for n in self.nodes
                       if self.service.knows_node(n)) == count

    def close(self) -> None:
        self.app.stop(join_seconds=5)
        for pod in self.cluster.list_pods(namespace=self.namespace).items:
            self.cluster.delete_pod(self.namespace, pod.name, grace_period_seconds=0)
        for name in self.nodes:
            self.core.delete_node(name)
        self.api.close()


@pytest.fixture
def world(k8s_control_plane: ControlPlane, k8s_namespace: str) -> Iterator[World]:
    w = World(k8s_control_plane, k8s_namespace)
    try:
        yield w
    finally:
        w.close()


def test_inspect_reads_the_api_server_and_agrees_with_the_scheduler(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, stale = world.node(), world.node(age_s=600)
    a = world.bound(ok, 0, 60, 8)
    b = world.bound(ok, 1, 25, 2)
    c = world.bound(ok, 0, 10, 1, plan=False)  # no plan: counted by inference
    world.app.start()
    eventually(lambda: world.service.serving and world.caught_up(3), what="the scheduler counting the pods")
    kubeconfig = str(world.plane.kubeconfig)

    code = main([ok, "--kubeconfig", kubeconfig, "--scheduler", world.url, "-o", "json"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    data = json.loads(out)
    (node,) = data["nodes"]
    assert (node["name"], node["flags"], data["disagreements"]) == (ok, [], [])
    held = [sorted((h["pod"], h["coreMilli"], h["source"]) for h in g["holders"]) for g in node["gpus"]]
    assert held == [sorted([(a, 600, "plan"), (c, 100, "inferred")]), [(b, 250, "plan")]]
    assert [g["coreUsedMilli"] for g in node["gpus"]] == [700, 250]
    assert data["scheduler"] == {"serving": True}

    code = main([stale, "--kubeconfig", kubeconfig, "-o", "wide"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert re.search(f"  {stale}: inventory-stale: stale GPU inventory: heartbeat 6[0-9][0-9] s old", out), out

    assert main(["--kubeconfig", kubeconfig, "-o", "json"]) in (0, 1)  # other tests' nodes may be flagged
    names = {n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert {ok, stale} <= names

    assert main(["inspect-absent", "--kubeconfig", kubeconfig]) == 2
    assert capsys.readouterr().err == "ljrk inspect: error: node 'inspect-absent' not found\n"
