"""Extender mode, pod-resources and the exporter under the genuine kubelet of the live version (kubelet_harness.py).

The real kube-scheduler of the real node's plane calls ``ljrk scheduler --mode extender`` (filter, prioritize,
bind); the Runtime runs on two simulated 16 GiB GPUs, the device plugin and ``ljrk exporter`` (on kubelet's real
pod-resources socket) as processes. Covers:
- a GPU-share pod for the default scheduler is bound by kube-scheduler through our bind verb and admitted; its
  containers' environment is the plan;
- kubelet's pod-resources ``List`` names our device IDs (``<gpu uuid>::<kind>::<n>``, as many as requested, on
  the planned GPU) for every container of it, and ``Get`` of that pod says the same;
- the exporter attributes the Runtime's records to the right namespace/pod/container (memory limit per
  container); after the pod is deleted its series and Runtime records go away (release reconciler) and the
  scheduler's ledger shows the GPUs free again;
- pod-resources ``List`` on the current kubelet leaves out a pod that ran to completion (still in the API server).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from k8s_harness import ControlPlane
from kubelet_harness import REAL_NODE_NAME, RealNode
from real_node_world import (
    RES,
    NodeStack,
    Pods,
    container,
    eventually,
    expected_env,
    gpu_env,
    node_stack,
    pod_manifest,
    pods_in_new_namespace,
    unique,
)

from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.podresources import GrpcPodResourcesLister

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

EXPECTED = {RES.gpu: "2", RES.core: "200", RES.memory: "32"}


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any,
          real_node_extender_port: int) -> Iterator[NodeStack]:
    with node_stack(real_node, kubelet_plane, kubelet_api, gpus="2x16Gi:A100", expected=EXPECTED,
                    exporter=True, scheduler="extender", port=real_node_extender_port) as world:
        yield world


@pytest.fixture
def pods(kubelet_api: Any, real_node: RealNode, stack: NodeStack) -> Iterator[Pods]:
    with pods_in_new_namespace(kubelet_api, real_node) as helper:
        yield helper


def ledger_allocated_milli(page: str) -> float:
    """Sum of ``lj_runtimekit_scheduler_gpu_core_allocated_milli`` over the node's GPUs on a /metrics page."""
    total = 0.0
    for line in page.splitlines():
        if line.startswith("lj_runtimekit_scheduler_gpu_core_allocated_milli{") and REAL_NODE_NAME in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_extender_pod_resources_exporter_and_release(stack: NodeStack, pods: Pods, real_node: RealNode) -> None:
    limits = {"a": {RES.core: 30, RES.memory: 4}, "b": {RES.core: 20, RES.memory: 2}}
    name = pods.create(pod_manifest(unique("ext"), [container(c, lim) for c, lim in limits.items()],
                                    scheduler=None))  # default-scheduler: kube-scheduler + our extender
    pod = pods.wait_running(name)
    plan = pods.plan(name)
    for c in limits:
        env = gpu_env(pods.env(name, c))
        assert {k: env.get(k) for k in expected_env(plan, c)} == expected_env(plan, c)

    lister = GrpcPodResourcesLister.connect(real_node.pod_resources_socket)
    try:
        listed = {(e.namespace, e.pod, e.container): e.device_ids for e in lister.list_containers()}
        got = {(e.namespace, e.pod, e.container): e.device_ids for e in lister.pod_containers(pods.namespace, name)}
        assert lister.get_supported is True, "kubelet >= 1.27 serves pod-resources Get"
    finally:
        lister.close()
    assert {key: sorted(ids) for key, ids in got.items()} == {
        key: sorted(ids) for key, ids in listed.items() if key[:2] == (pods.namespace, name)}, "Get = List's entry"
    for c, lim in limits.items():
        ids = listed[(pods.namespace, name, c)]
        uuid_ = plan["containers"][c]["gpus"][0]["uuid"]
        assert sorted(i.split("::")[1] for i in ids) == sorted(
            ["core"] * lim[RES.core] + ["memory"] * lim[RES.memory])
        assert {i.split("::")[0] for i in ids} <= {g["uuid"] for g in plan["containers"][c]["gpus"]}, uuid_

    def series() -> dict[str, str]:
        found = {}
        for line in stack.metrics("exporter").splitlines():
            if line.startswith("lj_runtimekit_container_gpu_memory_limit_bytes{") and f'pod="{name}"' in line:
                container_name = line.split('container="', 1)[1].split('"', 1)[0]
                assert f'namespace="{pods.namespace}"' in line
                found[container_name] = line.rsplit(" ", 1)[1]
        return found

    got = eventually(lambda: len(series()) == 2 and series(), 30, "exporter series of both containers")
    assert {c: float(v) for c, v in got.items()} == {"a": float(4 << 30), "b": float(2 << 30)}
    assert ledger_allocated_milli(stack.metrics("scheduler")) == 500.0

    uid = pod.metadata.uid
    pods.delete(name)
    eventually(lambda: pods.gone(name), 60, "pod deleted by kubelet")
    eventually(lambda: not series(), 30, "exporter series gone")
    runtime = GrpcNodeRuntime.connect(stack.runtime_socket)
    try:
        eventually(lambda: not any(c.pod_uid == uid for c in runtime.exporter_data().containers), 30,
                   "Runtime records released")
    finally:
        runtime.close()
    eventually(lambda: ledger_allocated_milli(stack.metrics("scheduler")) == 0.0, 30, "ledger freed")


def test_pod_resources_on_the_current_kubelet_lists_only_active_pods(
        stack: NodeStack, pods: Pods, real_node: RealNode) -> None:
    """Kubelet >= 1.34 lists only active pods in pod-resources ``List`` (feature gate
    ``KubeletPodResourcesListUseActivePods``, on by default; 1.20 listed terminated pods until they were deleted):
    a pod that ran to completion and is still in the API server is gone from ``List`` while running ones stay."""
    running = pods.create(pod_manifest(unique("run"), [container("main", {RES.core: 10, RES.memory: 1})],
                                       scheduler=None))
    name = pods.create(pod_manifest(unique("done"), [container("main", {RES.core: 10, RES.memory: 1}, sleep="0")],
                                    scheduler=None))
    pods.wait_running(running)
    pods.wait_phase(name, "Succeeded", timeout=90)

    def listed() -> set[str]:
        lister = GrpcPodResourcesLister.connect(real_node.pod_resources_socket)
        try:
            return {e.pod for e in lister.list_containers() if e.namespace == pods.namespace and e.device_ids}
        finally:
            lister.close()

    eventually(lambda: name not in listed(), 30, "the Succeeded pod leaves pod-resources List")
    assert running in listed(), "the running pod stays listed with its devices"
    assert pods.phase(name) == "Succeeded", "the ended pod is still in the API server"
