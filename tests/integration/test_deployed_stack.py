"""The stack deployed by ``deploy-all.sh deploy`` from the images of ``make images``, as pods on a real node.

A control plane of its own (kube-scheduler for the DaemonSet and Job pods; kube-controller-manager with the job,
daemonset, deployment, replicaset and garbage-collector controllers; privileged pods allowed) and a real kubelet
node (kubelet_harness.py). The six image tarballs are imported into the node's containerd, then a copy of deploy/
with the test overlay of deployed_stack.py is applied with its own ``deploy-all.sh deploy`` (the node components
and the controller; the scheduler's Deployment needs a kube-scheduler >= 1.25 image, which cannot be made here).
Labelling the node ``lj_runtimekit_enable=true`` must then start the Runtime, device-plugin and exporter pods,
the controller's enable Job must mark the node ``enabled``, and the node must show our three resources.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deployed_stack import prepare_deploy_copy, write_kubeconfig
from image_runner import images_dir
from k8s_harness import ControlPlane, free_ports, start_control_plane
from real_node_world import allocatable, eventually, node_ready

pytestmark = [pytest.mark.kubelet, pytest.mark.k8s, pytest.mark.images]

NODE = "ljrk-deploy-node"
NAMESPACE = "kube-system"
CONTROLLERS = ("job", "daemonset", "deployment", "replicaset", "garbagecollector", "ttl-after-finished")
COMPONENTS = "runtime,deviceplugin,exporter,controller"
KUBECTL = str(Path(sys.executable).with_name("kubectl"))


@pytest.fixture(scope="module")
def image_tarballs() -> list[Path]:
    found, why = images_dir()
    if found is None:
        hint = f"{why}; build them with: make images (as root)"
        if os.environ.get("LJRK_REQUIRE_IMAGES") == "1":
            pytest.fail(f"LJRK_REQUIRE_IMAGES=1 but no current images: {hint}", pytrace=False)
        pytest.skip(f"no current images: {hint}")
    return sorted(found.glob("*.tar"))


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, real_node_files: Path) -> Iterator[ControlPlane]:
    started = start_control_plane(k8s_bin_dir, scheduler=True, controller_manager=True, controllers=CONTROLLERS,
                                  nodes=[NODE], extra_apiserver_args=["--allow-privileged=true"])
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def node(plane: ControlPlane, real_node_files: Path, image_tarballs: list[Path]) -> Iterator[Any]:
    from kubelet_harness import start_node
    from kubernetes import client

    workdir = Path(tempfile.mkdtemp(prefix="ljrk-kubelet-deploy-", dir="/tmp"))
    started = start_node(plane.node_kubeconfig(NODE), NODE, workdir, nodes=real_node_files)
    try:
        for tarball in image_tarballs:
            result = subprocess.run(["ctr", "--address", str(started.containerd_socket), "-n", "k8s.io", "images",
                                     "import", str(tarball)], capture_output=True, text=True, timeout=300, check=False)
            assert result.returncode == 0, f"ctr images import {tarball.name}: {result.stderr}"
        with plane.api_client() as api:
            eventually(lambda: node_ready(api, NODE), timeout=90, what=f"node {NODE} Ready")
            core = client.CoreV1Api(api)
            taints = [t for t in core.read_node(NODE).spec.taints or []
                      if not t.key.startswith("node.kubernetes.io/not-ready")]
            core.patch_node(NODE, {"spec": {"taints": [t.to_dict() for t in taints] or None}})
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def deployed(plane: ControlPlane, node: Any) -> Iterator[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="ljrk-deploy-", dir="/tmp"))
    work.chmod(0o755)
    kube_dir = work / "kube"
    kube_dir.mkdir(mode=0o755)
    write_kubeconfig(kube_dir / "kubeconfig", plane.host, plane.ca_file, plane.token)
    script = prepare_deploy_copy(work / "deploy", work / "host", kube_dir, free_ports(6))
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "KUBECTL": KUBECTL}

    def deploy_all(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(script), *args, f"--components={COMPONENTS}"], env=env,
                              capture_output=True, text=True, timeout=180, check=False)

    started = time.monotonic()
    result = deploy_all("deploy")
    assert result.returncode == 0, result.stderr
    try:
        yield {"env": env, "deploy_all": deploy_all, "started": started, "work": work}
    finally:
        deploy_all("delete")
        subprocess.run(["rm", "-rf", str(work)], check=False)


def _kubectl(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _running(api: Any, component: str) -> bool:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/component={component}").items
    return any(p.status.phase == "Running" and p.spec.node_name == NODE and all(
        c.ready for c in p.status.container_statuses or [object()]) for p in pods)


def test_labelling_the_node_enables_it_and_its_resources_appear(plane: ControlPlane, node: Any,
                                                               deployed: dict[str, Any]) -> None:
    from kubernetes import client

    from domain.kube.protocol import ProtocolConstants

    env = deployed["env"]
    _kubectl(env, "label", "node", NODE, "lj_runtimekit_enable=true", "--overwrite")
    res = ProtocolConstants().resources
    with plane.api_client() as api:
        try:
            for component in ("runtime", "device-plugin", "exporter", "controller"):
                eventually(lambda c=component: _running(api, c), timeout=180, what=f"{component} pod Running", step=1.0)
            core = client.CoreV1Api(api)

            def state() -> str | None:
                annotations = core.read_node(NODE).metadata.annotations or {}
                return annotations.get("lj-runtimekit.io/runtime-state")

            eventually(lambda: state() == "enabled", timeout=120, what="node runtime-state enabled", step=1.0)
            eventually(lambda: all(int(allocatable(api, NODE).get(r, "0")) > 0 for r in (res.gpu, res.core,
                                                                                          res.memory)),
                       timeout=60, what="our three resources allocatable", step=1.0)
        except AssertionError as exc:
            pods = _kubectl(env, "get", "pods", "-A", "-o", "wide")
            raise AssertionError(f"{exc}\n{pods}\n{node.log_tails()}") from exc
