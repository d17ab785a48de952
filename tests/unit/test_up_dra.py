"""``ljrk up --dra``'s own parts (entrypoints.up.dra): the workload's claims and the claim releaser.

Behaviours: a share pod's claim asks the share DeviceClass for ``cores`` = its percent and ``memory`` = that percent
of the GPU's memory, a whole-GPU pod's the GPU DeviceClass for its count, a CPU pod none; the pod asks through the
claim and for none of our extended resources, keeping CPU and memory; the releaser takes an ended pod out of its
claim's reservedFor, deallocates and deletes the claim made for it, leaves a claim another running pod still holds
reserved, lists what is owed meanwhile, and handles a pod deleted without a terminal phase.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.resource_claims import InMemoryResourceClaims
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.kube.objects import ContainerSpec, PodClaim, PodObject, PodPhase
from domain.simulation.workload import TracePod
from entrypoints.up.app import UpError, create_pod
from entrypoints.up.dra import POD_CLAIM, ClaimReleaser, claim_pod, workload_claim
from entrypoints.up.simnode import StackSettings
from entrypoints.up.stack import LocalStack
from ports.claim_writes import Consumer
from ports.cluster import ClusterError
from support.kube_builders import PROTOCOL
from support.polling import wait_for

GIB = 2**30
DRA = PROTOCOL.dra


def test_claims_of_the_workload() -> None:
    share = workload_claim(TracePod("s", 1000, 1024, 1, 300), PROTOCOL, namespace="default", name="s",
                           gpu_memory_bytes=16 * GIB)
    assert share is not None
    assert (share.namespace, share.name, share.allocated) == ("default", "s", False)
    assert share.requests == (DeviceAsk("gpu", DRA.device_class_share,
                                        capacity={"cores": "30", "memory": str(16 * GIB * 3 // 10)}),)
    whole = workload_claim(TracePod("w", 1000, 1024, 2, 1000), PROTOCOL, namespace="default", name="w",
                           gpu_memory_bytes=16 * GIB)
    assert whole is not None
    assert whole.requests == (DeviceAsk("gpu", DRA.device_class_gpu, count=2),)
    assert whole.uid
    assert whole.uid != share.uid
    assert workload_claim(TracePod("c", 1000, 1024, 0, 0), PROTOCOL, namespace="default", name="c",
                          gpu_memory_bytes=16 * GIB) is None


def test_a_claim_whose_pod_was_never_created_is_not_owed() -> None:
    cluster, claims = InMemoryCluster(), InMemoryResourceClaims()
    releaser = ClaimReleaser(cluster, claims, watch_timeout_s=0.2)
    releaser.made(claims.put(ClaimAllocation("default", "lost", "ul")))
    releaser.pods.relist()
    assert releaser.owed() == ["default/lost"]  # made for a pod the watch has not shown
    releaser.forget("default/lost")
    claims.delete("default", "lost")
    assert releaser.owed() == []


def test_pod_asks_through_its_claim() -> None:
    names = PROTOCOL.resources
    given = {"cpu": "1", "memory": "1Gi", names.core: "30", names.memory: "4"}
    pod = PodObject("", "default", "s", containers=(ContainerSpec("main", requests=given, limits=given),))
    claim = ClaimAllocation("default", "s", "u1")
    (container,) = claim_pod(pod, claim, PROTOCOL).containers
    assert container.requests == container.limits == {"cpu": "1", "memory": "1Gi"}
    assert claim_pod(pod, claim, PROTOCOL).resource_claims == (PodClaim(POD_CLAIM, claim_name="s"),)


def _bound(cluster: InMemoryCluster, claims: InMemoryResourceClaims, name: str, claim: ClaimAllocation) -> PodObject:
    entry = PodClaim(POD_CLAIM, claim_name=claim.name)
    pod = cluster.create_pod(PodObject("", "default", name, resource_claims=(entry,)))
    stored = claims.get("default", claim.name)
    assert stored is not None
    if stored.allocated:
        claims.reserve(stored, Consumer(pod.name, pod.uid))
    else:
        claims.allocate(stored, (AllocationResult("gpu", DRA.driver, "n0", "gpu-0"),), node="n0",
                        consumer=Consumer(pod.name, pod.uid))
    return cluster.set_pod_phase("default", name, PodPhase.RUNNING)


def test_releaser_frees_the_claims_of_ended_pods() -> None:
    cluster, claims = InMemoryCluster(), InMemoryResourceClaims()
    releaser = ClaimReleaser(cluster, claims, watch_timeout_s=0.2)
    own = claims.put(ClaimAllocation("default", "a", "ua"))
    releaser.made(own)
    shared = claims.put(ClaimAllocation("default", "shared", "us"))
    _bound(cluster, claims, "a", own)
    _bound(cluster, claims, "b", shared)
    c = _bound(cluster, claims, "c", shared)
    releaser.start()
    try:
        assert wait_for(lambda: releaser.pods.synced.is_set())
        assert releaser.owed() == []
        cluster.set_pod_phase("default", "a", PodPhase.SUCCEEDED)
        assert wait_for(lambda: claims.get("default", "a") is None)  # deallocated, then deleted: it was made for a
        cluster.set_pod_phase("default", "b", PodPhase.FAILED)
        assert wait_for(lambda: (s := claims.get("default", "shared")) is not None and s.reserved_for == (c.uid,))
        kept = claims.get("default", "shared")
        assert kept is not None
        assert kept.allocated
        cluster.delete_pod("default", "c", grace_period_seconds=0)
        assert wait_for(lambda: (s := claims.get("default", "shared")) is not None and not s.allocated)
        assert wait_for(lambda: releaser.owed() == [])
        assert releaser.released == 3
    finally:
        releaser.stop()


def test_owed_lists_a_claim_still_held_by_an_ended_pod() -> None:
    cluster, claims = InMemoryCluster(), InMemoryResourceClaims()
    releaser = ClaimReleaser(cluster, claims, watch_timeout_s=0.2)  # not started: nothing releases
    claim = claims.put(ClaimAllocation("default", "x", "ux"))
    pod = _bound(cluster, claims, "x", claim)
    releaser.pods.relist()
    assert releaser.owed() == []
    ended = cluster.set_pod_phase("default", "x", PodPhase.SUCCEEDED)
    releaser.pods.cache[ended.key] = ended  # the watch showed the end; its handler has not run yet
    assert releaser.owed() == ["default/x"]
    stored = claims.get("default", "x")
    assert stored is not None
    assert pod.uid in stored.reserved_for


def test_the_stack_gives_back_the_claim_of_a_pod_it_could_not_create() -> None:
    cluster = InMemoryCluster()
    stack = LocalStack(cluster, PROTOCOL, StackSettings(nodes=1, dra=True, work_dir=Path("/tmp")))  # short paths
    try:
        given = {"cpu": "1", "memory": "1Gi", PROTOCOL.resources.core: "30"}
        pod = PodObject("", "default", "s", containers=(ContainerSpec("main", requests=given, limits=given),))
        asked = stack.with_claim(pod, TracePod("s", 1000, 1024, 1, 300))
        assert stack.claims is not None
        assert asked.resource_claims == (PodClaim(POD_CLAIM, claim_name="s"),)
        assert [c.key for c in stack.claims.list_claims().items] == ["default/s"]
        assert stack.in_flight([]) == ["1 claim(s) of ended pods not released yet"]  # made, its pod never shown
        stack.drop_claim(asked)
        assert stack.claims.list_claims().items == ()
        assert stack.in_flight([]) == []
        assert stack.with_claim(pod, TracePod("c", 1000, 1024, 0, 0)) is pod  # no GPUs: no claim
    finally:
        stack.stop()


class _Refusing(InMemoryCluster):
    """An API server answering every pod creation with ``status`` (0: no answer at all)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def create_pod(self, pod: PodObject) -> PodObject:
        error = ClusterError(f"refused with {self.status}")
        error.status = self.status
        raise error


@pytest.mark.parametrize(("status", "claim_kept"), [(422, False), (403, False), (0, True), (500, True)])
def test_a_refused_pod_gives_its_claim_back_and_an_unanswered_one_keeps_it(status: int, claim_kept: bool) -> None:
    cluster = _Refusing(status)
    stack = LocalStack(cluster, PROTOCOL, StackSettings(nodes=1, dra=True, work_dir=Path("/tmp")))
    try:
        given = {"cpu": "1", "memory": "1Gi", PROTOCOL.resources.core: "30"}
        pod = PodObject("", "default", "s", containers=(ContainerSpec("main", requests=given, limits=given),))
        asked = stack.with_claim(pod, TracePod("s", 1000, 1024, 1, 300))
        assert stack.claims is not None
        assert not create_pod(cluster, stack, asked)
        assert [c.key for c in stack.claims.list_claims().items] == (["default/s"] if claim_kept else [])
    finally:
        stack.stop()


def test_a_pod_of_an_earlier_run_stops_the_submission() -> None:
    cluster = _Refusing(409)
    stack = LocalStack(cluster, PROTOCOL, StackSettings(nodes=1, dra=True, work_dir=Path("/tmp")))
    try:
        pod = PodObject("", "default", "s", containers=(ContainerSpec("main"),))
        with pytest.raises(UpError, match="pod default/s already exists: delete the pods of an earlier run"):
            create_pod(cluster, stack, pod)
    finally:
        stack.stop()
