"""The DRA driver on the genuine kubelet + containerd 2 of the live version, with kube-scheduler's DRA allocator
(kubelet_harness.py, real_node_world.py, dra_live_world.py). No feature gate is set anywhere (1.37: consumable
capacity and partitionable devices beta and on, extended-resource mapping GA).

``ljrk runtime`` on simulated GPUs (two 16 GiB A100s and one 80 GiB A100 in MIG mode with two 3g.40gb instances)
and ``ljrk dra-driver`` run as processes; the kubelet registers the driver through its ``plugins_registry``; the
shipped DeviceClasses (deploy/dra) are applied; pods are busybox containers that print their environment, whose
GPU variables arrive only through the claim's CDI spec (containerd's CDI injection). Covers:
- a claim for a whole GPU (class ``gpu``): the container's limits are the whole GPU; the claim's CDI spec,
  checkpoint entry and Runtime grant exist while the pod runs; deleting the pod unprepares: all three gone;
- a 30 % / 4 GiB share (class ``gpu-share``, capacity requests): the container's limits are that share;
- the exporter (``ljrk exporter`` on the real kubelet's pod-resources) serves that share's grant under the pod's
  container with the claim's labels;
- two 50 % / 8 GiB shares land on one GPU (first fit) and run; a whole GPU takes the other; a third share fits
  nowhere: pending, PodScheduled False with kube-scheduler's "cannot allocate all claims";
- a classic ``gpu: 1`` pod served through the whole-GPU class's ``extendedResourceName`` (the claim the scheduler
  made for it, in ``status.extendedResourceClaimStatus``);
- a restart of the plugin process and of the kubelet keep a prepared claim: the pod keeps running, kubelet
  registers the driver again, the slices the kubelet deleted at its start come back, unprepare still works;
- a grant the Runtime refuses (its GPUs granted behind DRA's back): the pod's FailedPrepareDynamicResources event
  carries the claim's error, nothing is booked, written or checkpointed; once the GPUs are free the kubelet's
  retry prepares it and the pod runs;
- inputs the kubelet never sends (kube-scheduler allocates only published devices of the driver; the kubelet reads
  the claim before calling the plugin), from a gRPC client in the kubelet's place on the driver's DRA socket, with
  allocations written by hand in the API server: in one ``NodePrepareResources`` a share claim is prepared, while a
  claim allocated for another driver only, one naming a GPU the node lacks and one deleted after its allocation
  each get their own error and nothing booked, written or checkpointed; ``NodeUnprepareResources`` of all four
  leaves the node holding nothing;
- a MIG claim (class ``mig-3g-40gb``): the container gets the Runtime's MIG instance of that profile;
- a classic 30 % / 4 GiB pod in a namespace opted into ``ljrk claim-migrate`` (the webhook served in-process,
  registered from deploy/claim-migrate): admitted with a claim from its template, it runs with that share and the
  Runtime's book holds the claim (300 milli-GPU, 4 GiB).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_live_world import (
    DRA,
    GIB,
    Claims,
    DraNodeStack,
    NodeClaims,
    claims_in_new_namespace,
    dra_world,
    expected_limits,
    gpu_limits,
    slices,
)
from k8s_harness import ControlPlane
from kubelet_harness import RealNode
from real_node_world import RES, node_ready
from webhook_support import register_webhook, serving, webhook_pki

from adapters.grpc._pb.kubelet.dra.v1 import api_pb2 as dra
from domain.kube.protocol import parse_quantity
from support.polling import eventually

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

GPUS = "2x16Gi:A100,1x80Gi:A100:mig=3g.40gb@0/3g.40gb@4"
SHARE = DRA.device_class_share
WHOLE = DRA.device_class_gpu


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[DraNodeStack]:
    with dra_world(real_node, kubelet_plane, kubelet_api, GPUS) as world:
        yield world


@pytest.fixture
def node(real_node: RealNode) -> NodeClaims:
    return NodeClaims(real_node)


@pytest.fixture
def claims(kubelet_api: Any, real_node: RealNode, stack: DraNodeStack) -> Iterator[Claims]:
    """Claims and pods in a new namespace, cleaned up afterwards (:func:`claims_in_new_namespace`)."""
    with claims_in_new_namespace(kubelet_api, real_node, stack) as helper:
        yield helper


def running(claims: Claims, pod: str) -> dict[str, str]:
    """Wait for ``pod`` to run; the GPU limit variables its container printed."""
    claims.pods.wait_running(pod, timeout=90)
    return gpu_limits(claims.pods.env(pod, "main"))


def test_whole_gpu_claim_then_deleting_the_pod_unprepares(claims: Claims, stack: DraNodeStack,
                                                          node: NodeClaims) -> None:
    claim = claims.create(WHOLE)
    pod = claims.pod(claim)
    env = running(claims, pod)
    uid = claims.uid(claim)
    uuid = stack.gpu_uuids()[int(claims.device(claim).removeprefix("gpu-"))]
    assert env == expected_limits(uuid, uid, 1000, 16 * GIB)
    assert stack.book() == {uid: "dra-claim"}
    assert node.cdi_uids() == {uid}
    assert node.checkpoint() == {uid}
    spec = json.loads(node.cdi_spec(uid).read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-{claims.device(claim)}"]

    claims.pods.delete(pod)
    eventually(lambda: claims.pods.gone(pod), 60, f"pod {pod} gone")
    eventually(lambda: not stack.book() and not node.cdi_uids() and not node.checkpoint(), 60, "claim unprepared")


def test_share_of_30_percent_and_4_gib(claims: Claims, stack: DraNodeStack) -> None:
    claim = claims.create(SHARE, {"cores": "30", "memory": "4Gi"})
    pod = claims.pod(claim)
    env = running(claims, pod)
    (result,) = claims.get(claim).status.allocation.devices.results
    consumed = {k: parse_quantity(k, str(v)) for k, v in result.consumed_capacity.items()}
    assert consumed == {"cores": 30, "memory": 4 * GIB}
    assert result.share_id
    uuid = stack.gpu_uuids()[int(result.device.removeprefix("gpu-"))]
    assert env == expected_limits(uuid, claims.uid(claim), 300, 4 * GIB)


def test_the_exporter_attributes_a_claim_to_the_container_using_it(claims: Claims, stack: DraNodeStack) -> None:
    """The real kubelet's pod-resources lists the claim under the pod's container (``dynamic_resources``); the
    exporter serves the claim's grant under that pod and container, with the claim's labels."""
    claim = claims.create(SHARE, {"cores": "30", "memory": "4Gi"})
    pod = claims.pod(claim)
    running(claims, pod)
    stack.start_exporter()
    try:
        def served(metric: str) -> str:
            return next((line for line in stack.metrics("exporter").splitlines()
                         if line.startswith(metric + "{") and f'pod="{pod}"' in line), "")

        eventually(lambda: served("lj_runtimekit_container_gpu_core_limit_ratio"), 60,
                   f"the claim's row served under pod {pod}\n{stack.tails()}")
        core, memory = (served(f"lj_runtimekit_container_gpu_{m}") for m in ("core_limit_ratio", "memory_limit_bytes"))
        for line in (core, memory):
            assert 'container="main"' in line, line
            assert f'claim_name="{claim}"' in line, line
            assert f'claim_namespace="{claims.namespace}"' in line, line
        assert float(core.rsplit(" ", 1)[1]) == 0.3
        assert float(memory.rsplit(" ", 1)[1]) == 4 * GIB
    finally:
        stack.stop("exporter")


def test_two_shares_fit_on_one_gpu_and_a_third_fits_nowhere(claims: Claims, stack: DraNodeStack) -> None:
    half = {"cores": "50", "memory": "8Gi"}
    first, second = claims.create(SHARE, half), claims.create(SHARE, half)
    pods = [claims.pod(first), claims.pod(second)]
    envs = [running(claims, pod) for pod in pods]
    assert claims.device(first) == claims.device(second)  # first fit: both on the first GPU
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] == envs[1]["NVIDIA_VISIBLE_DEVICES"]
    assert [e["LJRK_CORE_MILLI_0"] for e in envs] == ["500", "500"]
    whole = claims.create(WHOLE)
    running(claims, claims.pod(whole))
    assert claims.device(whole) != claims.device(first)

    third = claims.create(SHARE, {"cores": "10", "memory": "1Gi"})
    pending = claims.pod(third)
    condition = eventually(lambda: (c := claims.scheduled_condition(pending)) is not None and c.status == "False"
                           and c, 60, "PodScheduled False")
    assert condition.reason == "Unschedulable"
    assert "cannot allocate all claims" in condition.message, condition.message
    assert claims.pods.get(pending).spec.node_name is None
    assert claims.get(third).status is None or claims.get(third).status.allocation is None
    assert sorted(stack.book()) == sorted(claims.uid(c) for c in (first, second, whole))


def test_classic_gpu_resource_served_through_extended_resource_name(claims: Claims, stack: DraNodeStack) -> None:
    pod = claims.pod(None, {RES.gpu: 1}, prefix="classic")
    env = running(claims, pod)
    status = claims.pods.get(pod).status.extended_resource_claim_status
    assert status is not None, "the scheduler made no claim for the extended resource"
    claim = status.resource_claim_name
    assert [m.resource_name for m in status.request_mappings] == [RES.gpu]
    uid = claims.uid(claim)
    uuid = stack.gpu_uuids()[int(claims.device(claim).removeprefix("gpu-"))]
    assert env == expected_limits(uuid, uid, 1000, 16 * GIB)
    assert stack.book() == {uid: "dra-claim"}


def test_plugin_and_kubelet_restarts_keep_a_prepared_claim(claims: Claims, stack: DraNodeStack, node: NodeClaims,
                                                           kubelet_api: Any) -> None:
    claim = claims.create(SHARE, {"cores": "20", "memory": "2Gi"})
    pod = claims.pod(claim)
    before = running(claims, pod)
    uid = claims.uid(claim)
    started = claims.pods.get(pod).status.container_statuses[0].state.running.started_at

    registered = stack.registrations()
    stack.stop("dra-driver")
    stack.start_dra_driver()
    eventually(lambda: stack.registrations() > registered, 60, "kubelet registered the restarted driver")
    assert node.checkpoint() == {uid}
    assert stack.book() == {uid: "dra-claim"}

    registered = stack.registrations()
    stack.node.restart_kubelet()
    eventually(stack.node.healthz, 60, "kubelet /healthz after its restart")
    eventually(lambda: node_ready(kubelet_api, stack.node.node_name), 60, "node Ready after the kubelet restart")
    eventually(lambda: stack.registrations() > registered, 60, "kubelet registered the driver again")
    eventually(lambda: slices(kubelet_api, stack.node.node_name), 30, "slices back after the kubelet's wipe")
    status = claims.pods.get(pod).status
    assert status.phase == "Running"
    assert status.container_statuses[0].state.running.started_at == started  # the same container, never restarted
    assert (node.checkpoint(), stack.book(), node.cdi_uids()) == ({uid}, {uid: "dra-claim"}, {uid})
    assert before["LJRK_CORE_MILLI_0"] == "200"

    claims.pods.delete(pod)
    eventually(lambda: not stack.book() and not node.cdi_uids() and not node.checkpoint(), 90,
               "claim unprepared after the restarts")


def test_a_grant_the_runtime_refuses_is_the_claims_error_and_leaks_nothing(claims: Claims, stack: DraNodeStack,
                                                                          node: NodeClaims) -> None:
    stack.block_gpus("blocker")
    try:
        claim = claims.create(SHARE, {"cores": "10", "memory": "1Gi"})
        pod = claims.pod(claim)
        failed = eventually(lambda: [e for e in claims.events(pod) if e.startswith("FailedPrepareDynamicResources")],
                            90, "FailedPrepareDynamicResources event")
        uid = claims.uid(claim)
        assert f"NodePrepareResources failed for ResourceClaim {claim}" in failed[0], failed
        assert f"claim {claims.namespace}/{claim} ({uid})" in failed[0], failed
        assert stack.book() == {"blocker": "main"}
        assert uid not in node.cdi_uids() | node.checkpoint()
        assert claims.pods.phase(pod) == "Pending"
    finally:
        stack.unblock_gpus("blocker")
    env = running(claims, pod)  # the kubelet retries the preparation
    assert env["LJRK_POD_UID"] == uid
    assert stack.book() == {uid: "dra-claim"}


def test_claims_the_kubelet_never_sends_get_their_own_errors_and_leak_nothing(claims: Claims, stack: DraNodeStack,
                                                                            node: NodeClaims) -> None:
    kinds = ("good", "other", "unknown", "vanished")
    names = {k: claims.create(SHARE, {"cores": "30", "memory": "4Gi"}) for k in kinds}
    holder = claims.holder(list(names.values()))
    share_ids = {k: str(uuid.uuid4()) for k in kinds}

    def result(kind: str, driver: str, device: str) -> dict[str, Any]:
        share = {"consumedCapacity": {"cores": "30", "memory": "4Gi"}, "shareID": share_ids[kind]}
        return {"request": "gpu", "driver": driver, "pool": stack.node.node_name, "device": device,
                **(share if driver == DRA.driver else {})}

    for kind, driver, device in (("good", DRA.driver, "gpu-0"), ("other", "gpu.example.com", "dev-0"),
                                 ("unknown", DRA.driver, "gpu-9"), ("vanished", DRA.driver, "gpu-1")):
        claims.allocate(names[kind], [result(kind, driver, device)], holder)
    uids = {k: claims.uid(n) for k, n in names.items()}
    claims.delete(names["vanished"])
    eventually(lambda: names["vanished"] not in claims.names(), 30, "claim deleted")
    label = {k: f"claim {claims.namespace}/{names[k]} ({uids[k]})" for k in kinds}
    refs = [dra.Claim(namespace=claims.namespace, uid=uids[k], name=names[k]) for k in kinds]
    with stack.dra_plugin() as plugin:
        try:
            answer = plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=refs), timeout=30)
            assert sorted(answer.claims) == sorted(uids.values())  # first: reading a missing key would add it
            assert {k: answer.claims[uids[k]].error for k in kinds} == {
                "good": "",
                "other": f"{label['other']}: no allocated device of this driver on this node",
                "unknown": f"{label['unknown']}: device 'gpu-9': this node has no GPU 9",
                "vanished": f"{label['vanished']}: the ResourceClaim does not exist"}
            assert [len(answer.claims[uids[k]].devices) for k in kinds] == [1, 0, 0, 0]
            (device,) = answer.claims[uids["good"]].devices
            good = uids["good"]
            assert (list(device.request_names), device.pool_name, device.device_name, list(device.cdi_device_ids),
                    device.share_id) == (["gpu"], stack.node.node_name, "gpu-0",
                                         [f"lj-runtimekit.io/claim={good}-gpu-0"], share_ids["good"])
            assert stack.book() == {good: "dra-claim"}
            with stack.runtime() as runtime:
                (row,) = runtime.exporter_data().containers
            assert [(g.index, g.core_milli, g.memory_limit_bytes) for g in row.gpus] == [(0, 300, 4 * GIB)]
            assert (node.cdi_uids(), node.checkpoint()) == ({good}, {good})
            assert "LJRK_CORE_MILLI_0=300" in json.loads(node.cdi_spec(good).read_text())["containerEdits"]["env"]
        finally:
            unprepared = plugin.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=refs), timeout=30)
    assert {uid: c.error for uid, c in unprepared.claims.items()} == dict.fromkeys(uids.values(), "")
    assert (stack.book(), node.cdi_uids(), node.checkpoint()) == ({}, set(), set())


def test_mig_claim_gets_the_runtimes_mig_instance(claims: Claims, stack: DraNodeStack, node: NodeClaims) -> None:
    claim = claims.create("mig-3g-40gb.lj-runtimekit.io")
    pod = claims.pod(claim)
    claims.pods.wait_running(pod, timeout=90)
    env = claims.pods.env(pod, "main")
    device = claims.device(claim)
    assert device in ("gpu-2-mig-3g-40gb-0", "gpu-2-mig-3g-40gb-4")
    parent = stack.gpu_uuids()[2]
    uid = claims.uid(claim)
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert (env["LJRK_MIG_PROFILE_0"], env["LJRK_MIG_GPU_UUID_0"], env["LJRK_POD_UID"]) == ("3g.40gb", parent, uid)
    assert gpu_limits(env)["CDI"] == parent
    assert stack.book() == {uid: "dra-claim"}
    assert node.cdi_uids() == {uid}


def test_a_classic_share_pod_migrated_by_the_webhook_runs_with_its_claim(
        claims: Claims, stack: DraNodeStack, kubelet_plane: ControlPlane, kubelet_api: Any, tmp_path: Path) -> None:
    from kubernetes import client

    from entrypoints.claim_migrate.__main__ import main as claim_migrate

    pki = webhook_pki(tmp_path)
    protocol = Path(__file__).resolve().parents[2] / "deploy" / "protocol.yaml"
    args = ["--kubeconfig", str(kubelet_plane.kubeconfig), "--protocol", str(protocol)]
    core = client.CoreV1Api(kubelet_api)
    admission = client.AdmissionregistrationV1Api(kubelet_api)
    share = {RES.core: "30", RES.memory: "4"}
    with serving(claim_migrate, args, pki, "claim-migrate") as port:
        register_webhook(kubelet_api, "claim-migrate", f"https://127.0.0.1:{port}/mutate", pki[0])
        try:
            core.patch_namespace(claims.namespace, {"metadata": {"labels": {DRA.claim_migrate: "enabled"}}})
            probe = {"metadata": {"name": "probe"}, "spec": {"containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": share}}]}}
            eventually(lambda: core.create_namespaced_pod(claims.namespace, probe, dry_run="All").spec.resource_claims,
                       60, "the MutatingWebhookConfiguration in force")
            pod = claims.pod(None, share, prefix="migrated")
            env = running(claims, pod)
            (status,) = claims.pods.get(pod).status.resource_claim_statuses
            claim = status.resource_claim_name
            uid = claims.uid(claim)
            (result,) = claims.get(claim).status.allocation.devices.results
            consumed = {k: parse_quantity(k, str(v)) for k, v in result.consumed_capacity.items()}
            assert consumed == {"cores": 30, "memory": 4 * GIB}
            uuid = stack.gpu_uuids()[int(result.device.removeprefix("gpu-"))]
            assert env == expected_limits(uuid, uid, 300, 4 * GIB)
            assert stack.book() == {uid: "dra-claim"}
        finally:
            admission.delete_mutating_webhook_configuration("lj-runtimekit-claim-migrate")
