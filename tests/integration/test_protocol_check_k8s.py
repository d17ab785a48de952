"""``ljrk protocol check --kubeconfig`` against a real kube-apiserver (the session's test control plane).

Behaviours covered, in one namespace of the shared plane:

* the five ConfigMaps of ``deploy/*/02-configmap.yaml`` created as ``kubectl apply`` would (moved to the test's
  namespace), a Node, and the components' pods (labels of the manifests, Running) whose fingerprints are written
  by the components' own publisher (:class:`services._shared.publish.ProtocolPublisher`: the device plugin's
  and the exporter's on the Node, the scheduler's and the controller's on their Pod) → exit 0, every ConfigMap
  and the four instances listed;
* the device plugin's ConfigMap edited (``memory-unit: 2Gi``, as the product documentation's hand edit does) and
  the device plugin not restarted → exit 1, the differing constant and the stale device plugin named with both
  fingerprints and the restart command, the other components still agreeing;
* the device plugin "restarted" (its publisher writes the new protocol's fingerprint) while the other ConfigMaps
  still hold the old constant → still 1 for the ConfigMaps; all ConfigMaps given the edit and every component
  republished → 0;
* an unknown namespace → exit 2 with one line.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import ControlPlane

from adapters.kubernetes import KubernetesCluster
from adapters.protocolfile import parse_protocol
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from entrypoints.cli import main as ljrk
from ports.cluster import NotFoundError
from services._shared.publish import ProtocolPublisher

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
COMPONENT_DIRS = ("controller", "deviceplugin", "exporter", "runtime", "scheduler")
DP_CONFIG = "lj-runtimekit-device-plugin-config"


def configmap_documents(namespace: str) -> list[dict[str, Any]]:
    docs = []
    for directory in COMPONENT_DIRS:
        doc = yaml.safe_load((REPO / "deploy" / directory / "02-configmap.yaml").read_text())
        doc["metadata"]["namespace"] = namespace
        docs.append(doc)
    return docs


@pytest.fixture
def cluster(k8s_api: Any) -> KubernetesCluster:
    return KubernetesCluster(k8s_api)


@pytest.fixture
def node(cluster: KubernetesCluster) -> Iterator[str]:
    name = f"pc-{uuid.uuid4().hex[:8]}"
    cluster.create_node(NodeObject(name, allocatable={"cpu": "8", "memory": "16Gi", "pods": "110"}))
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            cluster.delete_node(name)


def running_pod(cluster: KubernetesCluster, namespace: str, component: str, node: str) -> str:
    name = f"{component}-{uuid.uuid4().hex[:6]}"
    cluster.create_pod(PodObject(
        uid="", namespace=namespace, name=name, node_name=node, scheduler_name="nobody",
        containers=(ContainerSpec("c"),),
        labels={"app.kubernetes.io/name": "lj-runtimekit", "app.kubernetes.io/component": component}))
    cluster.set_pod_phase(namespace, name, PodPhase.RUNNING)
    return name


def publish(cluster: KubernetesCluster, protocol: ProtocolConstants, *, node: str | None = None,
            pod: tuple[str, str] | None = None, exporter: bool = False) -> None:
    keys = protocol.annotations
    publisher = ProtocolPublisher(cluster, node=node, pod=pod, fingerprint=protocol.fingerprint(),
                                  key=keys.node_exporter_protocol if exporter else keys.node_protocol)
    publisher(threading.Event())
    assert publisher.published.is_set()


def check(plane: ControlPlane, namespace: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = ljrk(["protocol", "check", "--kubeconfig", str(plane.kubeconfig), "--namespace", namespace])
    return code, capsys.readouterr().out


def test_live_check_finds_the_component_not_restarted_after_a_configmap_edit(
    k8s_control_plane: ControlPlane, k8s_api: Any, k8s_namespace: str, cluster: KubernetesCluster, node: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    docs = configmap_documents(k8s_namespace)
    for doc in docs:
        core.create_namespaced_config_map(k8s_namespace, doc)
    old = parse_protocol(docs[0]["data"]["protocol.yaml"])
    assert old == ProtocolConstants()
    pods = {c: running_pod(cluster, k8s_namespace, c, node) for c in ("device-plugin", "exporter", "scheduler",
                                                                      "controller")}
    publish(cluster, old, node=node)
    publish(cluster, old, node=node, exporter=True)
    for component in ("scheduler", "controller"):
        publish(cluster, old, pod=(k8s_namespace, pods[component]))

    code, out = check(k8s_control_plane, k8s_namespace, capsys)
    assert code == 0, out
    assert f"{old.fingerprint()}  ConfigMap {k8s_namespace}/{DP_CONFIG} (device-plugin)" in out
    assert f"device-plugin on node {node} runs {old.fingerprint()}" in out
    assert f"scheduler on pod {k8s_namespace}/{pods['scheduler']} runs {old.fingerprint()}" in out
    assert "protocol check: 5 ConfigMap(s) and 4 running instance(s) agree" in out

    edited = docs[1]["data"]["protocol.yaml"].replace("memory-unit: 1Gi", "memory-unit: 2Gi")
    assert edited != docs[1]["data"]["protocol.yaml"]
    core.patch_namespaced_config_map(DP_CONFIG, k8s_namespace, {"data": {"protocol.yaml": edited}})
    new = parse_protocol(edited)
    code, out = check(k8s_control_plane, k8s_namespace, capsys)
    assert code == 1, out
    assert (f"problem: device-plugin on node {node} runs {old.fingerprint()}, ConfigMap {DP_CONFIG} has "
            f"{new.fingerprint()}: restart it (kubectl rollout restart daemonset -n {k8s_namespace} -l "
            "app.kubernetes.io/name=lj-runtimekit,app.kubernetes.io/component=device-plugin, or for this node "
            f"only: kubectl delete pod -n {k8s_namespace} {pods['device-plugin']})") in out
    assert f"ConfigMap {k8s_namespace}/{DP_CONFIG}='2Gi'" in out
    assert sum(line.startswith("problem:") for line in out.splitlines()) == 1

    publish(cluster, new, node=node)  # the device plugin restarted with the edited copy
    code, out = check(k8s_control_plane, k8s_namespace, capsys)
    assert code == 1, out  # the other ConfigMaps still say 1Gi
    assert "problem:" not in out
    assert "1 constant(s) differ across 5 ConfigMap(s); 0 of 4 running instance(s) need attention" in out

    for doc in docs:  # the same edit everywhere, every component restarted
        text = doc["data"]["protocol.yaml"].replace("memory-unit: 1Gi", "memory-unit: 2Gi")
        core.patch_namespaced_config_map(doc["metadata"]["name"], k8s_namespace, {"data": {"protocol.yaml": text}})
    publish(cluster, new, node=node, exporter=True)
    for component in ("scheduler", "controller"):
        publish(cluster, new, pod=(k8s_namespace, pods[component]))
    code, out = check(k8s_control_plane, k8s_namespace, capsys)
    assert code == 0, out
    assert "protocol check: 5 ConfigMap(s) and 4 running instance(s) agree" in out


def test_live_check_of_a_namespace_without_the_stack_exits_2(
    k8s_control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ljrk(["protocol", "check", "--kubeconfig", str(k8s_control_plane.kubeconfig), "--namespace", "absent"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ljrk protocol: error: no ConfigMap with protocol.yaml in namespace absent (is the stack "
                   "deployed there? --namespace)"]
