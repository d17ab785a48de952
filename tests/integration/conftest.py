"""Fixtures for tests against a real Kubernetes control plane (see k8s_harness.py).

Binaries come from ``$LJRK_K8S_BIN`` or ``bash scripts/k8s-control-plane.sh bin-dir``. Without them the ``k8s``
tests are skipped, unless ``LJRK_REQUIRE_K8S=1`` (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane
from kubelet_harness import REAL_NODE_NAME, SECOND_NODE_NAME

from support.polling import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "k8s-control-plane.sh"


def _missing(reason: str) -> None:
    hint = f"{reason}; build it with: bash {INSTALL_SCRIPT.relative_to(REPO_ROOT)} install"
    if os.environ.get("LJRK_REQUIRE_K8S") == "1":
        pytest.fail(f"LJRK_REQUIRE_K8S=1 but the Kubernetes control plane is unavailable: {hint}", pytrace=False)
    pytest.skip(f"no Kubernetes control plane binaries: {hint}")


def _bin_dir() -> Path:
    env = os.environ.get("LJRK_K8S_BIN")
    if env:
        path = Path(env)
        if not (path / "kube-apiserver").is_file():
            _missing(f"LJRK_K8S_BIN={env} has no kube-apiserver")
        return path
    try:
        result = subprocess.run(
            ["bash", str(INSTALL_SCRIPT), "bin-dir"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _missing(f"{INSTALL_SCRIPT.name} bin-dir could not run ({exc})")
    if result.returncode != 0 or not result.stdout.strip():
        _missing("the control plane is not built")
    return Path(result.stdout.strip())


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """Directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager (skips/fails when absent)."""
    return _bin_dir()


@pytest.fixture(scope="session")
def k8s_control_plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver + kube-scheduler + kube-controller-manager for the whole session.

    The default scheduler schedules every pod whose ``spec.schedulerName`` is ``default-scheduler`` (the default);
    tests that bind pods themselves must set another schedulerName. Tests needing their own scheduler config start
    their own plane with ``k8s_harness.control_plane(k8s_bin_dir, scheduler=True, scheduler_config={...})``.
    """
    plane = start_control_plane(k8s_bin_dir, scheduler=True, controller_manager=True)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def k8s_api(k8s_control_plane: ControlPlane) -> Iterator[Any]:
    """A fresh ``kubernetes.client.ApiClient`` for one test, closed afterwards."""
    api = k8s_control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def k8s_namespace(k8s_api: Any) -> Iterator[str]:
    """A new namespace for one test (deleted afterwards; without a namespace controller it stays Terminating)."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


# ---------------------------------------------------------------------- the real node (kubelet_harness.py)
KUBELET_INSTALL = REPO_ROOT / "scripts" / "real-kubelet.sh"


@pytest.fixture(scope="session")
def real_node_files() -> Path:
    """The installed real-node files (kubelet, images, CNI plugin); skips, or fails with LJRK_REQUIRE_KUBELET=1."""
    from kubelet_harness import node_dir

    found = node_dir()
    if found is None or os.geteuid() != 0:
        why = "not running as root" if found is not None else "the real node is not installed"
        hint = f"{why}; install it with: bash {KUBELET_INSTALL.relative_to(REPO_ROOT)} install (as root)"
        if os.environ.get("LJRK_REQUIRE_KUBELET") == "1":
            pytest.fail(f"LJRK_REQUIRE_KUBELET=1 but no real kubelet: {hint}", pytrace=False)
        pytest.skip(f"no real kubelet: {hint}")
    return found


@pytest.fixture(scope="session")
def real_node_extender_port() -> int:
    """The port the real-node plane's kube-scheduler calls our extender on (``ljrk scheduler --mode extender``)."""
    from k8s_harness import free_ports

    return free_ports(1)[0]


@pytest.fixture(scope="session")
def kubelet_plane(k8s_bin_dir: Path, real_node_files: Path, real_node_extender_port: int) -> Iterator[ControlPlane]:
    """The control plane of the real node: etcd, kube-apiserver and a kube-scheduler whose extender is
    ``127.0.0.1:<real_node_extender_port>`` (filter, prioritize, bind; our three resources managed), and kubelet
    identities for ``REAL_NODE_NAME`` and ``SECOND_NODE_NAME``."""
    from domain.kube.protocol import ProtocolConstants

    res = ProtocolConstants().resources
    extender = {
        "urlPrefix": f"http://127.0.0.1:{real_node_extender_port}", "filterVerb": "filter",
        "prioritizeVerb": "prioritize", "bindVerb": "bind", "weight": 1, "enableHTTPS": False, "nodeCacheCapable": True,
        "managedResources": [{"name": n, "ignoredByScheduler": False} for n in (res.gpu, res.core, res.memory)],
    }
    plane = start_control_plane(k8s_bin_dir, scheduler=True, nodes=[REAL_NODE_NAME, SECOND_NODE_NAME],
                                scheduler_config={"extenders": [extender], "percentageOfNodesToScore": 100})
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubelet_api(kubelet_plane: ControlPlane) -> Iterator[Any]:
    """An admin ``kubernetes.client.ApiClient`` of the real node's plane, for the session."""
    with kubelet_plane.api_client() as api:
        yield api


@pytest.fixture(scope="session")
def real_node(kubelet_plane: ControlPlane, real_node_files: Path) -> Iterator[Any]:
    """containerd 2 + kubelet of the live version registered as ``REAL_NODE_NAME``, Ready, without the not-ready
    taint the admission plugin puts on new nodes (no node lifecycle controller runs to lift it).
    Shared by the session."""
    import tempfile

    from kubelet_harness import start_node
    from kubernetes import client
    from real_node_world import node_ready

    workdir = Path(tempfile.mkdtemp(prefix="ljrk-kubelet-", dir="/tmp"))
    node = start_node(kubelet_plane.node_kubeconfig(REAL_NODE_NAME), REAL_NODE_NAME, workdir,
                      nodes=real_node_files)
    try:
        with kubelet_plane.api_client() as api:
            core = client.CoreV1Api(api)
            if not wait_for(lambda: node_ready(api, REAL_NODE_NAME), timeout=90, interval=0.5):
                raise AssertionError(f"node {REAL_NODE_NAME} not Ready in 90 s\n{node.log_tails()}")
            obj = core.read_node(REAL_NODE_NAME)
            taints = [t for t in obj.spec.taints or [] if not t.key.startswith("node.kubernetes.io/not-ready")]
            core.patch_node(REAL_NODE_NAME, {"spec": {"taints": [t.to_dict() for t in taints] or None}})
        yield node
    finally:
        node.stop()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short folder under /tmp for unix sockets (their paths are limited to 107 bytes; pytest's tmp_path can be
    longer), removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="ljrk-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)

