"""Domain of the kubelet DRA plugin: a claim's allocation results → the Runtime grant, the per-claim CDI spec, the
checkpoint form.

Behaviours covered: results of other drivers or pools are dropped; ``gpu-<index>`` maps to that GPU; consumed
``cores`` (percent) and ``memory`` become milli-GPU and bytes; no consumed capacity is the whole GPU; two results
on one GPU add up and beyond one GPU is refused; a MIG device ``gpu-<i>-mig-<profile>-<start>`` becomes the
Runtime's planned instance (``create`` where none is listed) and one CDI device per parent GPU, mixed with a whole
GPU it is refused; unknown and absent devices, a profile or start the GPU lacks, a MIG device on a GPU without MIG,
a MIG-mode GPU taken whole and bad quantities are refused with the claim and device named; the grant key is (claim
UID, ``dra-claim``); the CDI spec carries the Runtime's environment spec-wide, an env edit per device (CDI refuses
edit-less devices) and a device node per GPU the host lists; the checkpoint round-trips and a malformed one is
refused.
"""

from __future__ import annotations

import pytest

from domain.device_plugin.cdi import CdiDeviceNode, HostGpuNodes
from domain.dra.claims import (
    CLAIM_CONTAINER,
    AllocationResult,
    ClaimPreparationError,
    ClaimRef,
    ours,
    plan_claim,
)
from domain.dra.prepared import CLAIM_CDI_KIND, claim_spec, from_document, prepared, to_document
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.runtime.types import ContainerAllocationResponse, DeviceInfo, MigInstanceInfo, PlannedMig

GIB = 2**30
DRIVER = "gpu.lj-runtimekit.io"
CLAIM = ClaimRef(namespace="ns", uid="uid-1", name="c1")
DEVICES = (DeviceInfo(Gpu(0, GpuUuid("GPU-a"), "A100", 16 * GIB)),
           DeviceInfo(Gpu(1, GpuUuid("GPU-b"), "A100", 16 * GIB)),
           DeviceInfo(Gpu(2, GpuUuid("GPU-m"), "A100", 16 * GIB, mig_mode=MigMode.ENABLED)),
           DeviceInfo(Gpu(3, GpuUuid("GPU-80"), "NVIDIA A100-SXM4-80GB", 80 * GIB, mig_mode=MigMode.ENABLED),
                      mig_instances=(MigInstanceInfo(3, GpuUuid("GPU-80"), 1, 0, "3g.40gb", 0, 4, 3, 40 * GIB,
                                                     "MIG-x"),)))


def result(device: str, *, request: str = "r", consumed: dict[str, str] | None = None, driver: str = DRIVER,
           pool: str = "n1") -> AllocationResult:
    return AllocationResult(request=request, driver=driver, pool=pool, device=device, consumed=consumed or {},
                            share_id="s1" if consumed else None)


def test_only_our_driver_in_our_pool_is_kept() -> None:
    mine = result("gpu-0")
    kept = ours([mine, result("gpu-0", driver="gpu.nvidia.com"), result("gpu-1", pool="n2")], driver=DRIVER,
                pool="n1")
    assert kept == (mine,)


def test_a_share_becomes_milli_gpu_and_bytes_under_the_claim_key() -> None:
    grant = plan_claim(CLAIM, [result("gpu-1", consumed={"cores": "30", "memory": "4Gi"})], DEVICES)
    assert (grant.pod_uid, grant.container, grant.namespace, grant.pod_name) == ("uid-1", CLAIM_CONTAINER, "ns", "c1")
    ((gpu),) = grant.gpus
    assert (gpu.index, gpu.uuid, gpu.core_milli, gpu.memory_bytes) == (1, "GPU-b", 300, 4 * GIB)


def test_no_consumed_capacity_is_the_whole_gpu_and_memory_alone_leaves_cores_whole() -> None:
    (whole,) = plan_claim(CLAIM, [result("gpu-0")], DEVICES).gpus
    assert (whole.core_milli, whole.memory_bytes) == (1000, None)
    (memory_only,) = plan_claim(CLAIM, [result("gpu-0", consumed={"memory": "2Gi"})], DEVICES).gpus
    assert (memory_only.core_milli, memory_only.memory_bytes) == (1000, 2 * GIB)


def test_two_requests_on_one_gpu_add_up_and_may_not_exceed_it() -> None:
    (gpu,) = plan_claim(CLAIM, [result("gpu-0", request="a", consumed={"cores": "30", "memory": "1Gi"}),
                                result("gpu-0", request="b", consumed={"cores": "20", "memory": "2Gi"})],
                        DEVICES).gpus
    assert (gpu.core_milli, gpu.memory_bytes) == (500, 3 * GIB)
    with pytest.raises(ClaimPreparationError, match="1100 milli-GPU"):
        plan_claim(CLAIM, [result("gpu-0", request="a", consumed={"cores": "60"}),
                           result("gpu-0", request="b", consumed={"cores": "50"})], DEVICES)


@pytest.mark.parametrize(("device", "consumed", "message"), [
    ("gpu-0-mig-1g.10gb-0", {}, "'gpu-0-mig-1g.10gb-0' is not a device of this driver"),
    ("gpu-0-mig-1g-10gb-0", {}, "GPU 0 is not in MIG mode"),
    ("gpu-3-mig-9g-99gb-0", {}, "has no MIG profile '9g-99gb' placed at memory slice 0"),
    ("gpu-3-mig-3g-40gb-2", {}, "has no MIG profile '3g-40gb' placed at memory slice 2"),
    ("gpu-8-mig-3g-40gb-0", {}, "this node has no GPU 8"),
    ("tpu-0", {}, "'tpu-0' is not a device of this driver"),
    ("gpu-7", {}, "this node has no GPU 7"),
    ("gpu-2", {}, "GPU 2 is in MIG mode"),
    ("gpu-0", {"cores": "0"}, "consumedCapacity.cores='0': must be 1..100"),
    ("gpu-0", {"cores": "101"}, "consumedCapacity.cores='101'"),
    ("gpu-0", {"memory": "lots"}, "consumedCapacity.memory='lots'"),
])
def test_bad_devices_and_capacities_name_the_claim_and_the_device(device: str, consumed: dict[str, str],
                                                                   message: str) -> None:
    with pytest.raises(ClaimPreparationError) as caught:
        plan_claim(CLAIM, [result(device, consumed=consumed)], DEVICES)
    assert str(caught.value).startswith("claim ns/c1 (uid-1)")
    assert message in str(caught.value)


def test_a_mig_device_becomes_the_runtimes_planned_instance_created_where_none_is_listed() -> None:
    grant = plan_claim(CLAIM, [result("gpu-3-mig-3g-40gb-0"), result("gpu-3-mig-3g-40gb-4", request="b")], DEVICES)
    assert (grant.pod_uid, grant.container, grant.gpus) == ("uid-1", CLAIM_CONTAINER, ())
    assert grant.mig == (PlannedMig(3, GpuUuid("GPU-80"), profile="3g.40gb", start=0, create=False),
                         PlannedMig(3, GpuUuid("GPU-80"), profile="3g.40gb", start=4, create=True))
    spec = claim_spec(grant, ContainerAllocationResponse(envs={"NVIDIA_VISIBLE_DEVICES": "MIG-x,MIG-y"}),
                      HostGpuNodes())
    assert [(d.name, d.env) for d in spec.devices] == [("uid-1-gpu-3", (("LJRK_CDI_DEVICE_3", "GPU-80"),))]
    answer = prepared(CLAIM, [result("gpu-3-mig-3g-40gb-0")], grant)
    assert answer.devices[0].cdi_ids == (f"{CLAIM_CDI_KIND}=uid-1-gpu-3",)
    with pytest.raises(ClaimPreparationError, match="mixes MIG devices with whole GPUs"):
        plan_claim(CLAIM, [result("gpu-3-mig-3g-40gb-0"), result("gpu-0")], DEVICES)


def test_no_results_and_empty_identity_are_refused() -> None:
    with pytest.raises(ClaimPreparationError, match="no allocated device of this driver on this node"):
        plan_claim(CLAIM, [], DEVICES)
    with pytest.raises(InvalidRequestError, match=r"claim\.uid"):
        ClaimRef(namespace="ns", uid="", name="c")


def test_claim_spec_carries_the_runtime_env_and_host_device_nodes() -> None:
    grant = plan_claim(CLAIM, [result("gpu-0", consumed={"cores": "30"}), result("gpu-1")], DEVICES)
    response = ContainerAllocationResponse(envs={"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "LJRK_X": "1"})
    spec = claim_spec(grant, response, HostGpuNodes(minors={GpuUuid("GPU-a"): 3}, control_nodes=("nvidiactl",)))
    assert spec.kind == CLAIM_CDI_KIND
    assert spec.env == (("LJRK_X", "1"), ("NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b"))
    assert [(d.name, d.env, d.device_nodes) for d in spec.devices] == [
        ("uid-1-gpu-0", (("LJRK_CDI_DEVICE_0", "GPU-a"),), (CdiDeviceNode("/dev/nvidia3"),)),
        ("uid-1-gpu-1", (("LJRK_CDI_DEVICE_1", "GPU-b"),), ())]
    assert spec.device_nodes == (CdiDeviceNode("/dev/nvidiactl"),)
    simulated = claim_spec(grant, response, HostGpuNodes(control_nodes=("nvidiactl",)))
    assert simulated.device_nodes == ()
    # CDI refuses a spec with a device without edits (container-device-interface Device.validate): a GPU the host
    # driver does not list still has its env edit
    assert all(d.env or d.device_nodes for d in simulated.devices)


def test_answer_and_checkpoint_round_trip() -> None:
    results = [result("gpu-0", request="a", consumed={"cores": "30"}), result("gpu-1", request="b")]
    answer = prepared(CLAIM, results, plan_claim(CLAIM, results, DEVICES))
    assert [(d.requests, d.device, d.cdi_ids, d.share_id) for d in answer.devices] == [
        (("a",), "gpu-0", ("lj-runtimekit.io/claim=uid-1-gpu-0",), "s1"),
        (("b",), "gpu-1", ("lj-runtimekit.io/claim=uid-1-gpu-1",), None)]
    assert from_document(to_document({"uid-1": answer})) == {"uid-1": answer}
    with pytest.raises(ValueError, match="version 1"):
        from_document({"version": 9, "claims": {}})
    with pytest.raises(ValueError, match="malformed claim entry"):
        from_document({"version": 1, "claims": {"u": {"namespace": "ns"}}})
