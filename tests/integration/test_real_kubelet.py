"""The node side against the genuine kubelet + containerd 2 of the live version (kubelet_harness.py,
real_node_world.py).

``ljrk runtime`` on simulated GPUs (three 16 GiB A100s and one 80 GiB A100 in MIG mode with two 3g.40gb instances),
``ljrk device-plugin`` in kubelet's device-plugin folder and ``ljrk scheduler --mode standalone``, each its own
process; pods are busybox containers that print their environment. Covers:
- registration: the three resources with the Runtime's counts in node allocatable (whole GPUs and core on the
  time-sharing GPUs only, memory in ``--memory-unit`` units), the MIG resource with one ID per instance; a device
  plugin restarted with ``--memory-unit 2Gi`` re-registers the memory resource with half the IDs;
- admission, each container's environment (the GPU variables kubelet handed it, read from its log file) being
  exactly the scheduler's plan: a whole GPU, a core + memory share, memory only, core only, two containers, an
  init container only (the app container gets no GPU variables), two identical requests pending at once (each
  pod gets its own plan), two whole GPUs (kubelet asks GetPreferredAllocation first), a MIG instance; every
  admitted pod is marked gpu-allocated; containerd injected each planned GPU's CDI device (the device plugin's
  ``cdi_devices`` and its CDI spec); with ``--device-list-strategy volume-mounts,cdi-cri`` the container holds the
  ``/dev/null`` mount of its planned GPU under ``/var/run/nvidia-container-devices`` and no UUID in
  ``NVIDIA_VISIBLE_DEVICES``;
- a pod bound to the node without a plan fails with kubelet's ``UnexpectedAdmissionError`` naming the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from deployed_stack import metric_values
from k8s_harness import ControlPlane
from kubelet_harness import REAL_NODE_NAME, RealNode
from kubernetes import client
from real_node_world import (
    ENV_END,
    PROTOCOL,
    RES,
    NodeStack,
    Pods,
    allocatable,
    cdi_injected,
    container,
    eventually,
    expected_env,
    gpu_env,
    node_stack,
    pod_manifest,
    pods_in_new_namespace,
    unique,
)

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

GPUS = "3x16Gi:A100,1x80Gi:A100:mig=3g.40gb@0/3g.40gb@4"
MIG = f"{RES.gpu.split('/')[0]}/mig-3g.40gb"
EXPECTED = {RES.gpu: "3", RES.core: "300", RES.memory: "48"}


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[NodeStack]:
    with node_stack(real_node, kubelet_plane, kubelet_api, gpus=GPUS, expected=EXPECTED) as world:
        yield world


@pytest.fixture
def pods(kubelet_api: Any, real_node: RealNode, stack: NodeStack) -> Iterator[Pods]:
    with pods_in_new_namespace(kubelet_api, real_node) as helper:
        yield helper


def running_env(pods: Pods, name: str, containers: list[str]) -> dict[str, dict[str, str]]:
    """Wait for ``name`` to run; every listed container's GPU variables, each equal to what the plan says."""
    pods.wait_running(name)
    plan = pods.plan(name)
    seen = {}
    for c in containers:
        env = gpu_env(pods.env(name, c))
        want = expected_env(plan, c)
        assert {k: env.get(k) for k in want} == want, f"{name}/{c}: {env} against plan {plan}"
        planned = {g["uuid"] for g in plan["containers"][c]["gpus"]}
        assert cdi_injected(env) == planned, f"{name}/{c}: containerd injected CDI devices {cdi_injected(env)}"
        seen[c] = env
    return seen


def test_registration_counts_in_node_allocatable(kubelet_api: Any, stack: NodeStack) -> None:
    values = allocatable(kubelet_api, REAL_NODE_NAME)
    assert values == EXPECTED  # the MIG GPU is not time-shared; 3 x 16 GiB in 1 GiB units

    def mig_counted() -> bool:  # the MIG resource registers on its own socket: kubelet may count it a moment later
        status = client.CoreV1Api(kubelet_api).read_node(REAL_NODE_NAME).status
        return (status.allocatable or {}).get(MIG) == "2" and (status.capacity or {}).get(MIG) == "2"

    eventually(mig_counted, what=f"{MIG} = 2 in node allocatable and capacity")
    page = stack.metrics("device-plugin")
    assert f'lj_runtimekit_device_plugin_resource_registered{{resource="{MIG}"}} 1.0' in page


def test_whole_gpu(pods: Pods) -> None:
    name = pods.create(pod_manifest(unique("whole"), [container("main", {RES.gpu: 1})]))
    env = running_env(pods, name, ["main"])["main"]
    plan = pods.plan(name)
    assert plan["containers"]["main"]["whole"] is True
    assert len(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 1
    assert env["LJRK_CORE_MILLI_0"] == "1000"
    assert env["LJRK_MEMORY_LIMIT_BYTES_0"] == str(16 << 30)
    assert env["CUDA_DEVICE_SM_LIMIT"] == "100"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "16384m"
    eventually(lambda: PROTOCOL.annotations.pod_allocated in (pods.get(name).metadata.annotations or {}), 20,
               "gpu-allocated mark")


@pytest.mark.parametrize(("limits", "core_milli", "memory_gib"), [
    ({RES.core: 50, RES.memory: 8}, 500, 8),
    ({RES.memory: 4}, None, 4),
    ({RES.core: 30}, 300, None),
], ids=["core-and-memory", "memory-only", "core-only"])
def test_shares(pods: Pods, limits: dict[str, int], core_milli: int | None, memory_gib: int | None) -> None:
    name = pods.create(pod_manifest(unique("share"), [container("main", limits)]))
    env = running_env(pods, name, ["main"])["main"]
    if core_milli is not None:
        assert env["LJRK_CORE_MILLI_0"] == str(core_milli)
        assert env["CUDA_DEVICE_SM_LIMIT"] == str(core_milli // 10)
    if memory_gib is not None:
        assert env["LJRK_MEMORY_LIMIT_BYTES_0"] == str(memory_gib << 30)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{memory_gib * 1024}m"


def test_two_containers_each_get_their_plan(pods: Pods) -> None:
    name = pods.create(pod_manifest(unique("two"), [
        container("first", {RES.core: 30, RES.memory: 4}), container("second", {RES.core: 20, RES.memory: 2})]))
    envs = running_env(pods, name, ["first", "second"])
    assert envs["first"]["LJRK_CONTAINER_NAME"] == "first"
    assert envs["second"]["LJRK_CONTAINER_NAME"] == "second"
    assert envs["first"]["LJRK_MEMORY_LIMIT_BYTES_0"] == str(4 << 30)
    assert envs["second"]["LJRK_MEMORY_LIMIT_BYTES_0"] == str(2 << 30)


def test_init_container_only(pods: Pods) -> None:
    init = container("setup", {RES.core: 40, RES.memory: 4}, sleep="0")
    name = pods.create(pod_manifest(unique("init"), [container("app")], init=[init]))
    pods.wait_running(name)
    plan = pods.plan(name)
    assert plan["containers"]["setup"]["init"] is True
    assert "app" not in plan["containers"]
    env = gpu_env(pods.env(name, "setup"))
    want = expected_env(plan, "setup")
    assert {k: env.get(k) for k in want} == want
    assert gpu_env(pods.env(name, "app")) == {}


def test_identical_requests_pending_at_once(pods: Pods, stack: NodeStack) -> None:
    twin = [container("main", {RES.core: 25, RES.memory: 2})]
    stack.stop("scheduler")  # both pending before either is placed
    try:
        names = [pods.create(pod_manifest(unique("twin"), twin)) for _ in range(2)]
        assert all(not pods.get(n).spec.node_name for n in names)
    finally:
        stack.start_scheduler()
    envs = {n: running_env(pods, n, ["main"])["main"] for n in names}
    for name in names:
        assert envs[name]["LJRK_POD_UID"] == pods.get(name).metadata.uid


def preferred_requests(stack: NodeStack) -> float:
    """The device plugin's count of GetPreferredAllocation container requests (its /metrics)."""
    page = stack.metrics("device-plugin")
    return sum(metric_values(page, "lj_runtimekit_device_plugin_preferred_allocations_total"))


def test_two_whole_gpus(pods: Pods, stack: NodeStack) -> None:
    asked = preferred_requests(stack)
    name = pods.create(pod_manifest(unique("multi"), [container("main", {RES.gpu: 2})]))
    env = running_env(pods, name, ["main"])["main"]
    # 2 of 3 GPUs: kubelet asks the plugin which (GetPreferredAllocation) before Allocate
    assert preferred_requests(stack) > asked, "kubelet called GetPreferredAllocation"
    uuids = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(uuids)) == 2
    assert [env["LJRK_GPU_UUID_0"], env["LJRK_GPU_UUID_1"]] == uuids


def test_mig_instance(pods: Pods) -> None:
    name = pods.create(pod_manifest(unique("mig"), [container("main", {MIG: 1})]))
    pods.wait_running(name)
    planned = pods.plan(name)["containers"]["main"]["mig"]
    env = gpu_env(pods.env(name, "main"))
    assert len(planned) == 1
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert env["LJRK_MIG_PROFILE_0"] == "3g.40gb"
    assert env["LJRK_MIG_GPU_UUID_0"] == planned[0]["uuid"]
    assert "CUDA_DEVICE_SM_LIMIT" not in env


def test_pod_without_plan_is_refused_by_kubelet(pods: Pods) -> None:
    name = pods.create(pod_manifest(unique("noplan"), [container("main", {RES.core: 10, RES.memory: 1})],
                                    scheduler=None, node_name=REAL_NODE_NAME))
    pod = pods.wait_phase(name, "Failed")
    assert pod.status.reason == "UnexpectedAdmissionError"
    assert "plan" in pod.status.message, pod.status.message


def test_memory_unit_other_than_1gi(kubelet_api: Any, stack: NodeStack) -> None:
    stack.stop("device-plugin")
    stack.start_device_plugin("--memory-unit", "2Gi")
    try:
        want = {**EXPECTED, RES.memory: "24"}
        eventually(lambda: allocatable(kubelet_api, REAL_NODE_NAME) == want, 60, f"allocatable {want}")
    finally:
        stack.stop("device-plugin")
        stack.start_device_plugin()
        eventually(lambda: allocatable(kubelet_api, REAL_NODE_NAME) == EXPECTED, 60, f"allocatable {EXPECTED}")


def test_volume_mounts_and_cdi_cri_strategy(pods: Pods, stack: NodeStack) -> None:
    """``--device-list-strategy volume-mounts,cdi-cri``: containerd mounts host ``/dev/null`` at
    ``/var/run/nvidia-container-devices/<planned uuid>``, injects the CDI device, and the container's
    ``NVIDIA_VISIBLE_DEVICES`` names the folder, not a UUID; the default strategy is restored after."""
    before = stack.registrations()
    stack.stop("device-plugin")
    stack.start_device_plugin("--device-list-strategy", "volume-mounts,cdi-cri")
    try:
        eventually(lambda: stack.registrations() >= 3, 60, "device plugin registered with the new strategy")
        main = container("main", {RES.gpu: 1})
        main["command"] = ["sh", "-c", "trap 'exit 0' TERM; env; echo LISTED=$(ls /var/run/nvidia-container-devices);"
                           f" echo {ENV_END}; sleep 3600 & wait"]
        name = pods.create(pod_manifest(unique("volmounts"), [main]))
        pods.wait_running(name)
        [gpu] = pods.plan(name)["containers"]["main"]["gpus"]
        env = pods.env(name, "main")
        assert env["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
        assert env["LISTED"] == gpu["uuid"]
        assert cdi_injected(env) == {gpu["uuid"]}
        assert env["CUDA_DEVICE_SM_LIMIT"] == "100"
    finally:
        stack.stop("device-plugin")
        stack.start_device_plugin()
        eventually(lambda: stack.registrations() >= min(before, 3), 60, "device plugin registered again")
