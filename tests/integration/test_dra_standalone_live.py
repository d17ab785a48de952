"""Our standalone scheduler allocates DRA claims itself, on the genuine kubelet + containerd 2 of the live version
(kubelet_harness.py, real_node_world.py, dra_live_world.py): the pods name our scheduler, so kube-scheduler's DRA
allocator never sees them; the kubelet and our DRA driver prepare what we wrote as they prepare kube-scheduler's.

On the node, as the shipped DRA manifests set it up (the DRA driver instead of the device plugin): ``ljrk runtime``
on two simulated 16 GiB A100s and an 80 GiB A100 in MIG mode listing two 3g.40gb instances (static MIG), and
``ljrk dra-driver`` (slices, kubelet DRA plugin, CDI); ``ljrk scheduler --mode
standalone`` learns the node's GPUs from the driver's ResourceSlices; kube-controller-manager's resourceclaim
controller makes claims from templates, takes ended pods out of ``reservedFor`` and deallocates. Covers:
- MIG claims (class ``mig-3g-40gb``): the MIG layout read from the slices, each claim allocated by us on one of
  the two listed instances (the device ``gpu-2-mig-3g-40gb-<start>``, no consumed capacity), each pod runs with its
  own instance; a third claim stays pending with our FailedScheduling until one of them is deleted;
- a 30 % / 4 GiB share: the claim's ``status.allocation`` written by us (consumedCapacity, shareID, node selector),
  ``reservedFor`` the pod, the delete-protection finalizer; the pod runs with exactly that share. (The
  resourceclaim controller also reserves an allocated claim for a bound pod that uses it, kubernetes/kubernetes
  #118209, so the ``reservedFor`` check here would pass without our write: checked by leaving it out; our write is
  pinned by tests/unit/test_scheduler_claim_allocation.py and tests/contract/test_claim_writes_contract.py.)
- a claim from a ResourceClaimTemplate: made by the controller, allocated by us, the pod runs; deleting the pod
  deletes the claim and the node unprepares it;
- one whole-GPU claim shared by two pods: both run on that GPU, both in ``reservedFor``, counted once;
- a restart of our scheduler rebuilds its books from the slices and the claims: a pod asking both GPUs stays
  pending while a claim holds one (our FailedScheduling), and runs once that claim's pod is deleted and the claim
  deallocated;
- a pod asking the classic share resources of our scheduler stays pending there: no device plugin would admit it
  (our FailedScheduling names the claims-only node);
- preemption for claims: a low-priority pod whose claim holds both GPUs is evicted for a high-priority pod whose
  claim asks one (the victim marked ``DisruptionTarget``, its claim deallocated by the resourceclaim controller),
  and the preemptor's claim is allocated by us and its pod runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dra_live_world import (
    DRA,
    GIB,
    Claims,
    DraNodeStack,
    claims_in_new_namespace,
    dra_world,
    expected_limits,
    gpu_limits,
    our_pod,
)
from k8s_harness import ControlPlane
from kubelet_harness import RealNode
from kubernetes import client
from mig_claims_world import two_run_and_a_third_waits
from real_node_world import PROTOCOL, container, pod_manifest, unique

from domain.kube.protocol import parse_quantity
from support.polling import eventually

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

GPUS = "2x16Gi:A100,1x80Gi:A100:mig=3g.40gb@0/3g.40gb@4"
MIG_3G = "mig-3g-40gb.lj-runtimekit.io"
SHARE = DRA.device_class_share
WHOLE = DRA.device_class_gpu
OURS = PROTOCOL.scheduler_name


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[DraNodeStack]:
    with dra_world(real_node, kubelet_plane, kubelet_api, GPUS, "scheduler") as world:
        yield world


@pytest.fixture
def claims(kubelet_api: Any, real_node: RealNode, stack: DraNodeStack) -> Iterator[Claims]:
    """Claims and pods in a new namespace, cleaned up afterwards (:func:`claims_in_new_namespace`)."""
    with claims_in_new_namespace(kubelet_api, real_node, stack) as helper:
        yield helper


def test_a_share_claim_allocated_by_us_runs_with_that_share(claims: Claims, stack: DraNodeStack) -> None:
    claim = claims.create(SHARE, {"cores": "30", "memory": "4Gi"})
    pod = our_pod(claims, [{"name": "gpu", "resourceClaimName": claim}])
    claims.pods.wait_running(pod, timeout=90)
    stored = claims.get(claim)
    (result,) = stored.status.allocation.devices.results
    assert (result.driver, result.pool, result.request) == (DRA.driver, claims.pods.node.node_name, "gpu")
    assert {k: parse_quantity(k, str(v)) for k, v in result.consumed_capacity.items()} == {"cores": 30,
                                                                                         "memory": 4 * GIB}
    assert result.share_id
    (term,) = stored.status.allocation.node_selector.node_selector_terms
    assert [(f.key, f.operator, f.values) for f in term.match_fields] == [
        ("metadata.name", "In", [claims.pods.node.node_name])]
    assert [(r.resource, r.name, r.uid) for r in stored.status.reserved_for] == [
        ("pods", pod, claims.pods.get(pod).metadata.uid)]
    assert "resource.kubernetes.io/delete-protection" in stored.metadata.finalizers
    uuid = stack.gpu_uuids()[int(result.device.removeprefix("gpu-"))]
    assert gpu_limits(claims.pods.env(pod, "main")) == expected_limits(uuid, claims.uid(claim), 300, 4 * GIB)


def test_mig_claims_allocated_by_us_get_one_instance_each_and_a_third_waits(claims: Claims,
                                                                            stack: DraNodeStack) -> None:
    two_run_and_a_third_waits(claims, MIG_3G, ["gpu-2-mig-3g-40gb-0", "gpu-2-mig-3g-40gb-4"], "3g.40gb")


def test_a_template_claim_is_made_allocated_and_removed_with_its_pod(claims: Claims, stack: DraNodeStack) -> None:
    template = unique("tpl")
    claims.resource.create_namespaced_resource_claim_template(claims.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": template},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": SHARE, "capacity": {"requests": {"cores": "20", "memory": "2Gi"}}}}]}}}})
    pod = our_pod(claims, [{"name": "gpu", "resourceClaimTemplateName": template}])
    claims.pods.wait_running(pod, timeout=90)
    (made,) = claims.pods.get(pod).status.resource_claim_statuses
    (result,) = claims.get(made.resource_claim_name).status.allocation.devices.results
    assert result.driver == DRA.driver
    assert result.share_id
    assert stack.book()  # the Runtime holds the claim's grant
    claims.pods.delete(pod)
    eventually(lambda: made.resource_claim_name not in claims.names(), 90, "the template's claim deleted")
    eventually(lambda: not stack.book(), 60, "claim unprepared")


def test_one_whole_gpu_claim_shared_by_two_pods(claims: Claims, stack: DraNodeStack) -> None:
    claim = claims.create(WHOLE)
    pods = [our_pod(claims, [{"name": "gpu", "resourceClaimName": claim}]) for _ in range(2)]
    for pod in pods:
        claims.pods.wait_running(pod, timeout=90)
    stored = claims.get(claim)
    assert sorted(r.name for r in stored.status.reserved_for) == sorted(pods)
    assert len(stored.status.allocation.devices.results) == 1
    envs = [gpu_limits(claims.pods.env(pod, "main")) for pod in pods]
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] == envs[1]["NVIDIA_VISIBLE_DEVICES"]


def test_a_restarted_scheduler_counts_the_claims_it_allocated(claims: Claims, stack: DraNodeStack) -> None:
    first = claims.create(WHOLE)
    holder = our_pod(claims, [{"name": "gpu", "resourceClaimName": first}])
    claims.pods.wait_running(holder, timeout=90)
    stack.stop("scheduler")
    stack.start_scheduler("standalone")
    both = unique("claim")
    claims.resource.create_namespaced_resource_claim(claims.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": both},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": WHOLE, "allocationMode": "ExactCount", "count": 2}}]}}})
    waiting = our_pod(claims, [{"name": "gpu", "resourceClaimName": both}])
    eventually(lambda: any("FailedScheduling" in e for e in claims.events(waiting)), 60,
               "our FailedScheduling while the first claim holds a GPU")
    assert claims.pods.phase(waiting) == "Pending"
    assert claims.get(both).status.allocation is None
    claims.pods.delete(holder)
    claims.pods.wait_running(waiting, timeout=120)
    assert len(claims.get(both).status.allocation.devices.results) == 2


def test_a_classic_share_pod_stays_pending_on_a_claims_only_node(claims: Claims) -> None:
    main = container("main", {PROTOCOL.resources.core: 30, PROTOCOL.resources.memory: 4})
    pod = claims.pods.create(pod_manifest(unique("classic"), [main], scheduler=OURS))
    eventually(lambda: any("GPUs published by the DRA driver only" in e for e in claims.events(pod)), 60,
               "our FailedScheduling naming the claims-only node")
    assert claims.pods.get(pod).spec.node_name is None


@pytest.fixture
def priority_classes(kubelet_api: Any) -> Iterator[tuple[str, str]]:
    """Two PriorityClasses (low 10, high 1000), deleted afterwards."""
    scheduling = client.SchedulingV1Api(kubelet_api)
    names = (unique("low"), unique("high"))
    for name, value in zip(names, (10, 1000), strict=True):
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    try:
        yield names
    finally:
        for name in names:
            scheduling.delete_priority_class(name)


def test_a_high_priority_claim_pod_preempts_a_claim_pod_holding_the_gpus(
        claims: Claims, stack: DraNodeStack, priority_classes: tuple[str, str]) -> None:
    low, high = priority_classes
    both = unique("claim")
    claims.resource.create_namespaced_resource_claim(claims.namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": both},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": WHOLE, "allocationMode": "ExactCount", "count": 2}}]}}})
    victim = our_pod(claims, [{"name": "gpu", "resourceClaimName": both}], low, linger_s=30)
    claims.pods.wait_running(victim, timeout=90)
    victim_uid = claims.pods.get(victim).metadata.uid
    wanted = claims.create(SHARE, {"cores": "50", "memory": "8Gi"})
    preemptor = our_pod(claims, [{"name": "gpu", "resourceClaimName": wanted}], high)

    def marked() -> bool:
        pod = claims.pods.get(victim)  # Terminating for 30 s: it ignores SIGTERM
        return pod.metadata.deletion_timestamp is not None and any(
            c.type == "DisruptionTarget" and c.reason == "PreemptionByScheduler" for c in pod.status.conditions or ())

    eventually(marked, 60, "the victim marked DisruptionTarget and being deleted")
    eventually(lambda: any(e.startswith("Preempted: ") and preemptor in e for e in claims.events(victim)), 60,
               "the Preempted event naming the preemptor")
    claims.pods.wait_running(preemptor, timeout=120)
    # the victim's claim is deallocated once the victim is terminal (its containers stopped), so the preemptor may
    # run while kubelet still removes the victim's object: ended, gone or replaced, never still running
    left = None if claims.pods.gone(victim) else claims.pods.get(victim)
    assert left is None or left.metadata.uid != victim_uid or left.status.phase in ("Succeeded", "Failed"), (
        left and left.status.phase)
    (result,) = claims.get(wanted).status.allocation.devices.results
    assert result.driver == DRA.driver
    assert claims.get(both).status.allocation is None  # deallocated once its only consumer was gone
