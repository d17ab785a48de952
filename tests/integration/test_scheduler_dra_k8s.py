"""DRA claims in the scheduler's books against a real control plane (etcd + kube-apiserver of the live version,
``resource.k8s.io/v1``; no kube-scheduler: the test writes the claim's allocation as its DRA allocator would).

Covers, with our standalone scheduler over KubernetesCluster and KubernetesResourceClaims:
(a) a ResourceClaim allocated on a two-GPU node (GPU 0 whole, GPU 1 a 60 % / 8 GiB share with consumedCapacity)
    before the replica starts is in the books after the start's rebuild (restart case), with no pod slot;
(b) a classic pod asking 30 % / 4 GiB is bound to GPU 1 beside the share; one asking 50 % / 4 GiB stays pending
    (GPU 0 is held whole, GPU 1 has 10 % left) while the claim is there;
(c) deleting the claim releases it: the pending pod is then bound (binpack: beside the first, on GPU 1);
(d) a claim allocated while the replica runs (the informer's watch) is booked, and released when deallocated.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_harness import ControlPlane, control_plane
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.kubernetes.resourceclaims import KubernetesResourceClaims
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_inventory
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from services.scheduler.service import SchedulerService, ServiceConfig
from support.k8s_nodes import make_schedulable
from support.polling import eventually

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
RES, KEYS, DRIVER = PROTOCOL.resources, PROTOCOL.annotations, PROTOCOL.dra.driver
NO_HOLDS = ServiceConfig(policy="binpack", admission_hold_seconds=None)
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    with control_plane(k8s_bin_dir) as cp:
        yield cp


class Replica:
    """A standalone scheduler replica in-process, watching ResourceClaims."""

    def __init__(self, plane: ControlPlane) -> None:
        self.api_client = plane.api_client()
        self.cluster = KubernetesCluster(self.api_client)
        self.metrics = PrometheusSchedulerMetrics()
        self.service = SchedulerService(self.cluster, PROTOCOL, self.metrics, config=NO_HOLDS,
                                        claims=KubernetesResourceClaims(self.api_client))
        settings = SchedulerSettings(mode="standalone", port=0, watch_timeout_seconds=1, tick_seconds=0.2)
        self.app = SchedulerApp(settings=settings, cluster=self.cluster, service=self.service, elector=None,
                                metrics_text=self.metrics.exposition)

    def start(self) -> Replica:
        self.app.start()
        eventually(lambda: self.service.serving, what="ledger rebuilt")
        return self

    def stop(self) -> None:
        self.app.stop(join_seconds=10)
        self.api_client.close()

    def used(self, node: str) -> list[tuple[int, int]]:
        return [(g.core_used, g.memory_used) for g in self.service.gpus(node)] if self.service.knows_node(node) else []


def write_claim(api: client.ResourceV1Api, name: str, node: str, results: list[dict[str, object]]) -> None:
    """Create claim ``name`` (requests ``whole`` and ``share`` of our classes) if needed, then write its allocation
    (``results``; empty = deallocate) through the status subresource, as kube-scheduler's allocator does."""
    names = {c.metadata.name for c in api.list_namespaced_resource_claim("default").items}
    if name not in names:
        requests = [{"name": "whole", "exactly": {"deviceClassName": PROTOCOL.dra.device_class_gpu}},
                    {"name": "share", "exactly": {"deviceClassName": PROTOCOL.dra.device_class_share}}]
        api.create_namespaced_resource_claim("default", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": requests}}})
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    allocation = {"devices": {"results": results}, "nodeSelector": selector} if results else None
    api.patch_namespaced_resource_claim_status(name, "default", {"status": {"allocation": allocation}},
                                               _content_type=MERGE)


def whole(node: str, device: str) -> dict[str, object]:
    return {"request": "whole", "driver": DRIVER, "pool": node, "device": device}


def share(node: str, device: str, cores: int, memory: str) -> dict[str, object]:
    return {"request": "share", "driver": DRIVER, "pool": node, "device": device,
            "consumedCapacity": {"cores": str(cores), "memory": memory}, "shareID": str(uuid.uuid4())}


def share_pod(name: str, core: int, mem_gib: int, node: str) -> PodObject:
    limits = {RES.core: str(core), RES.memory: str(mem_gib)}
    return PodObject("", "default", name, containers=(ContainerSpec("main", limits=limits),),
                     scheduler_name=PROTOCOL.scheduler_name, node_selector={"kubernetes.io/hostname": node})


def plan_gpus(pod: PodObject) -> list[str]:
    plan = json.loads(pod.annotations[KEYS.pod_plan])
    return [g["uuid"] for c in plan["containers"].values() for g in c["gpus"]]


def test_claims_hold_capacity_against_classic_pods_until_deleted(plane: ControlPlane) -> None:
    node = f"dra-{uuid.uuid4().hex[:8]}"
    with plane.api_client() as api_client:
        core, dra = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
        gpus = tuple(Gpu(i, GpuUuid(f"GPU-{node}-{i}"), "A100", 16 * GiB) for i in range(2))
        inventory = encode_inventory(gpus, heartbeat=time.time(), protocol=PROTOCOL.fingerprint())
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=node, labels={"kubernetes.io/hostname": node}, annotations={KEYS.node_inventory: inventory})))
        make_schedulable(core, node, {"cpu": "8", "memory": "32Gi", "pods": "110", RES.gpu: "2", RES.core: "200",
                                      RES.memory: "32"})
        claim = f"claim-{uuid.uuid4().hex[:8]}"
        write_claim(dra, claim, node, [whole(node, "gpu-0"), share(node, "gpu-1", 60, "8Gi")])
        replica = Replica(plane).start()  # (a) rebuilt from the listing
        try:
            eventually(lambda: replica.used(node) == [(1000, 16 * GiB), (600, 8 * GiB)], what="claim in the books")
            with replica.service.books() as books:
                assert int(books.ledger.pods_used[books.ledger.slot(node)]) == 0
            fits = replica.cluster.create_pod(share_pod("fits", 30, 4, node))  # (b)
            bound = eventually(lambda: (p := replica.cluster.get_pod("default", fits.name)).node_name and p,
                               what="the fitting pod bound")
            assert plan_gpus(bound) == [f"GPU-{node}-1"]
            waits = replica.cluster.create_pod(share_pod("waits", 50, 4, node))
            loop = replica.app.loop
            assert loop is not None
            eventually(lambda: loop.attempts >= 2, what="the waiting pod tried")
            assert not replica.cluster.get_pod("default", waits.name).node_name
            dra.delete_namespaced_resource_claim(claim, "default")  # (c)
            eventually(lambda: replica.cluster.get_pod("default", waits.name).node_name,
                       what="the waiting pod bound after the claim's delete")
            eventually(lambda: replica.used(node) == [(0, 0), (800, 8 * GiB)], what="claim released")  # binpack
            later = f"claim-{uuid.uuid4().hex[:8]}"  # (d)
            write_claim(dra, later, node, [share(node, "gpu-0", 40, "2Gi")])
            eventually(lambda: replica.used(node) == [(400, 2 * GiB), (800, 8 * GiB)], what="watched claim booked")
            write_claim(dra, later, node, [])
            eventually(lambda: replica.used(node) == [(0, 0), (800, 8 * GiB)], what="deallocated")
            dra.delete_namespaced_resource_claim(later, "default")
        finally:
            replica.stop()
            for name in ("fits", "waits"):
                core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            core.delete_node(node)
