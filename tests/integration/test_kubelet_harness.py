"""The real-node harness itself (kubelet_harness.py): a second node beside the session's, started, used and stopped.

Covers: while it runs, the host's kernel tunables are the ones from before (kubelet saw its wanted values only in
its private mount namespace), the host sees none of its mounts and nothing in the folders it mounts over (pod
network namespaces, CNI results, kubelet's folders); a pod bound to it runs and reads a Secret volume kubelet
mounted (containerd shares kubelet's mount namespace); after ``stop`` no process of it is
left (kubelet, containerd, shims, the namespace holder, the containers), no mount, no container cgroup, every host
folder is as before and its work folder is gone.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from k8s_harness import ControlPlane
from kubelet_harness import SECOND_NODE_NAME, container_cgroups, process_alive, start_node
from kubelet_node_config import HOST_MOUNT_POINTS, KERNEL_TUNABLES
from kubernetes import client
from real_node_world import Pods, container, eventually, node_ready, pod_manifest, unique

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]


def _tunables() -> dict[str, str]:
    return {key: Path(f"/proc/sys/{key}").read_text().strip() for key in KERNEL_TUNABLES}


def _host_folders() -> dict[str, list[str] | None]:
    """What the host holds at each path the node's namespace mounts over (None: the path does not exist)."""
    return {p: sorted(x.name for x in Path(p).iterdir()) if Path(p).is_dir() else None for p in HOST_MOUNT_POINTS}


def _mounts() -> set[str]:
    return {" ".join(line.split()[3:5]) for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def test_second_node_runs_a_pod_and_stop_leaves_nothing(kubelet_plane: ControlPlane, real_node_files: Path) -> None:
    tunables, mounts, folders = _tunables(), _mounts(), _host_folders()
    workdir = Path(tempfile.mkdtemp(prefix="ljrk-kubelet-", dir="/tmp"))
    node = start_node(kubelet_plane.node_kubeconfig(SECOND_NODE_NAME), SECOND_NODE_NAME, workdir,
                      nodes=real_node_files)
    namespace_pids: list[int] = []
    try:
        with kubelet_plane.api_client() as api:
            core = client.CoreV1Api(api)
            eventually(lambda: node_ready(api, SECOND_NODE_NAME), 90, "Ready")
            pods = Pods(api, "default", node)
            secret = unique("secret")
            core.create_namespaced_secret("default", {"apiVersion": "v1", "kind": "Secret",
                                                      "metadata": {"name": secret}, "stringData": {"token": "t0k3n"}})
            manifest = pod_manifest(unique("plain"), [container("main")], scheduler=None, node_name=SECOND_NODE_NAME)
            main = manifest["spec"]["containers"][0]
            main["command"][-1] = "cat /s/token; echo; " + main["command"][-1]
            main["volumeMounts"] = [{"name": "s", "mountPath": "/s"}]
            manifest["spec"]["volumes"] = [{"name": "s", "secret": {"secretName": secret}}]
            name = pods.create(manifest)
            pods.wait_running(name)
            assert "HOSTNAME" in pods.env(name, "main")
            log = node.pod_logs_dir / f"default_{name}_{pods.get(name).metadata.uid}" / "main" / "0.log"
            assert " t0k3n\n" in log.read_text()  # a volume kubelet mounted (tmpfs) is seen by the container
            assert _tunables() == tunables
            assert not any(str(workdir) in m for m in _mounts() - mounts)
            assert all(_host_folders()[p] in (None, [], folders[p]) for p in HOST_MOUNT_POINTS)  # netns, CNI cache
            ids = node.containers()
            assert len(ids) == 2  # the pause sandbox and the container
            assert container_cgroups(ids)
            namespace_pids = [*node.namespace_pids(), node.state.holder_pid]
            pods.delete(name, force=True)
            core.delete_node(SECOND_NODE_NAME)
    finally:
        node.stop()
    assert not workdir.exists()
    assert not [pid for pid in namespace_pids if process_alive(pid)]
    assert not container_cgroups(ids)
    assert not any(str(workdir) in m for m in _mounts())
    assert _tunables() == tunables
    assert _host_folders() == folders  # as before: nothing left in /run/netns or /var/lib/cni, made ones gone
