"""Restarts under the genuine kubelet of the live version (kubelet_harness.py): kubelet, the device plugin and the
Runtime.

Runtime on two simulated 16 GiB GPUs, device plugin and standalone scheduler as processes. Covers:
- kubelet restart (SIGTERM, started again): its ``kubelet.sock`` stays behind as a dead file until the new kubelet
  deletes the folder's sockets and listens again — the behaviour the kubelet emulator models; every resource is
  registered again, never with a Register sent before our socket serves (kubelet's log names no missing plugin
  socket); a pod submitted while kubelet is down is not bound (the plugin's inventory says it is not registered)
  and runs once it is; running pods keep their containers and devices; a new pod is admitted;
- device plugin SIGKILL: kubelet sees the ListAndWatch streams end and drops our resources from allocatable; a new
  plugin process restores them and a new pod is admitted;
- Runtime down during admission: the pod fails with ``UnexpectedAdmissionError`` naming the node Runtime; the
  Runtime started again on its state folder still holds the running pod's records; the next pod is admitted.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_harness import ControlPlane
from kubelet_harness import REAL_NODE_NAME, RealNode
from kubernetes import client
from real_node_world import (
    RES,
    NodeStack,
    Pods,
    allocatable,
    container,
    eventually,
    http_get,
    node_stack,
    pod_manifest,
    pods_in_new_namespace,
    unique,
)

from adapters.grpc import GrpcNodeRuntime
from domain.kube.annotations import decode_inventory
from domain.kube.annotations.records import InventoryRecord
from domain.kube.protocol import ProtocolConstants

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

EXPECTED = {RES.gpu: "2", RES.core: "200", RES.memory: "32"}
SHARE = {RES.core: 20, RES.memory: 2}


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[NodeStack]:
    with node_stack(real_node, kubelet_plane, kubelet_api, gpus="2x16Gi:A100", expected=EXPECTED) as world:
        yield world


@pytest.fixture
def pods(kubelet_api: Any, real_node: RealNode, stack: NodeStack) -> Iterator[Pods]:
    with pods_in_new_namespace(kubelet_api, real_node) as helper:
        yield helper


def kubelet_log_since(node: RealNode, offset: int) -> str:
    return node.kubelet_log.read_bytes()[offset:].decode(errors="replace")


def test_kubelet_restart(kubelet_api: Any, stack: NodeStack, pods: Pods, real_node: RealNode) -> None:
    before = pods.create(pod_manifest(unique("before"), [container("main", SHARE)]))
    running = pods.wait_running(before)
    container_id = running.status.container_statuses[0].container_id
    env_before = pods.env(before, "main")
    offset = real_node.kubelet_log.stat().st_size

    registrations = stack.registrations()
    version = _node(kubelet_api).metadata.resource_version
    real_node.stop_kubelet()
    stale = real_node.device_plugin_dir / "kubelet.sock"
    assert stale.exists(), "a stopped kubelet leaves its socket behind (the emulator models this)"
    stray = real_node.device_plugin_dir / "not-a-socket.txt"
    stray.write_text("kubelet deletes only the sockets here when it starts\n")
    dead = real_node.device_plugin_dir / "dead-plugin.sock"
    with socket.socket(socket.AF_UNIX) as listener:  # a socket file nobody serves, as a killed plugin leaves
        listener.bind(str(dead))
    eventually(lambda: http_get(f"http://127.0.0.1:{stack.ports['device-plugin']}/readyz")[0] == 503, 10,
               "device plugin not ready once kubelet is gone")
    eventually(lambda: not _inventory(kubelet_api).kubelet_registered, 10,
               "the node's inventory says kubelet is gone (the gate the scheduler reads)")
    during = pods.create(pod_manifest(unique("during"), [container("main", SHARE)]))
    time.sleep(2.0)  # the plugin polls meanwhile (never serving beside a dead socket); the scheduler holds the pod
    assert not pods.get(during).spec.node_name, "bound while kubelet would refuse it"
    started = time.monotonic()
    real_node.start_kubelet()
    eventually(lambda: stack.registrations() >= registrations + 3, 60, "the three resources registered again")
    registered = time.monotonic() - started
    eventually(lambda: _node(kubelet_api).metadata.resource_version != version
               and allocatable(kubelet_api, REAL_NODE_NAME) == EXPECTED, 60, "allocatable after the restart")
    print(f"\nkubelet restart -> resources registered again {registered:.1f} s, "
          f"allocatable in node status {time.monotonic() - started:.1f} s")

    assert not dead.exists(), "kubelet's start removes every socket (CleanupPluginDirectory; the emulator too)"
    assert stray.exists(), "and keeps files that are not sockets (the emulator too)"
    log = kubelet_log_since(real_node, offset)
    assert "no such file or directory" not in "\n".join(
        line for line in log.splitlines() if "ljrk-" in line), "kubelet dialled a plugin socket that was gone"
    pod = pods.get(before)
    assert pod.status.phase == "Running"
    status = pod.status.container_statuses[0]
    assert status.container_id == container_id
    assert status.restart_count == 0
    assert pods.env(before, "main") == env_before
    pods.wait_running(during)
    after = pods.create(pod_manifest(unique("after"), [container("main", SHARE)]))
    pods.wait_running(after)


def test_device_plugin_sigkill(kubelet_api: Any, stack: NodeStack, pods: Pods) -> None:
    assert stack.procs["device-plugin"].stop(signal.SIGKILL) == -signal.SIGKILL
    zero = {RES.gpu: "0", RES.core: "0", RES.memory: "0"}
    eventually(lambda: allocatable(kubelet_api, REAL_NODE_NAME) == zero, 60, "kubelet drops the resources")
    stack.start_device_plugin()
    eventually(lambda: allocatable(kubelet_api, REAL_NODE_NAME) == EXPECTED, 60, "resources back")
    name = pods.create(pod_manifest(unique("revived"), [container("main", SHARE)]))
    pods.wait_running(name)


def test_runtime_down_during_admission(stack: NodeStack, pods: Pods) -> None:
    keep = pods.create(pod_manifest(unique("keep"), [container("main", SHARE)]))
    uid = pods.wait_running(keep).metadata.uid
    stack.stop("runtime")
    refused = pods.create(pod_manifest(unique("refused"), [container("main", SHARE)]))
    pod = pods.wait_phase(refused, "Failed")
    assert pod.status.reason == "UnexpectedAdmissionError"
    assert "Runtime" in pod.status.message, pod.status.message
    stack.start_runtime("2x16Gi:A100")
    runtime = GrpcNodeRuntime.connect(stack.runtime_socket)
    try:
        records = eventually(lambda: _records(runtime), 30, "the Runtime serving again")
        assert (uid, "main") in records
        assert not any(r[0] == pod.metadata.uid for r in records)
    finally:
        runtime.close()
    pods.wait_running(pods.create(pod_manifest(unique("next"), [container("main", SHARE)])))


def _node(kubelet_api: Any) -> Any:
    return client.CoreV1Api(kubelet_api).read_node(REAL_NODE_NAME)


def _inventory(kubelet_api: Any) -> InventoryRecord:
    """The device plugin's inventory annotation on the node, decoded."""
    key = ProtocolConstants().annotations.node_inventory
    return decode_inventory(_node(kubelet_api).metadata.annotations[key], key=key)


def _records(runtime: GrpcNodeRuntime) -> set[tuple[str, str]] | None:
    try:
        return {(c.pod_uid, c.container) for c in runtime.exporter_data().containers} or None
    except Exception:  # not serving yet
        return None
