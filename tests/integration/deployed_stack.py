"""The test overlay that lets ``deploy/deploy-all.sh deploy`` run the stack's own images on the test node.

:func:`prepare_deploy_copy` copies ``deploy/`` into a folder and appends JSON patches to the copy's
``kustomization.yaml``, computed from the workloads' own manifests (so they follow the files), then
``<copy>/deploy-all.sh`` renders and applies it as users do. Per Deployment/DaemonSet:

- ``hostNetwork: true``: pods of the test node have no network (its CNI plugin only answers ADD), so the in-node
  components reach the test API server on 127.0.0.1; their HTTP servers ``--listen`` on 127.0.0.1 free ports and
  their HTTP probes are removed (kubelet would probe a pod IP the node does not have);
- a kubeconfig (self-contained, admin token, CA embedded) through a hostPath folder and ``--kubeconfig``, instead of
  the in-cluster service account (the test API server runs no token controller);
- ``imagePullPolicy: Never`` (the images are imported into the node's containerd), one controller replica;
- the Runtime socket and state host folders moved under the test's folder (the controller's
  ``--config-daemon-socket`` with them, so its Jobs mount the same folder): nothing lands in the host's ``/run``;
- the Runtime's ``LJRK_BACKEND`` set to ``simulated`` in its ConfigMap (``generate.py --adopt`` restamps it).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
KUBECONFIG_MOUNT = "/etc/lj-runtimekit-test"
API_CLIENTS = {"deviceplugin", "exporter", "controller", "scheduler"}
"""Components that call the API server (the Runtime does not)."""


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> None:
    """A kubeconfig usable inside a container: the CA certificate embedded, readable by uid 65532."""
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
    }
    path.write_text(json.dumps(config))
    path.chmod(0o644)


def _workloads(component: str) -> Iterable[dict[str, Any]]:
    for path in sorted((DEPLOY / component).glob("03-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Deployment", "DaemonSet"):
                yield doc


def _ops(component: str, workload: dict[str, Any], host_dirs: dict[str, str], kube_dir: Path,
         ports: Iterable[int]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    base = "/spec/template/spec"
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": f"{base}/hostNetwork", "value": True},
        {"op": "add", "path": f"{base}/dnsPolicy", "value": "ClusterFirstWithHostNet"},
    ]
    if workload["kind"] == "Deployment":
        ops.append({"op": "replace", "path": "/spec/replicas", "value": 1})
    free = iter(ports)
    for i, container in enumerate(spec["containers"]):
        cpath = f"{base}/containers/{i}"
        ops.append({"op": "add", "path": f"{cpath}/imagePullPolicy", "value": "Never"})
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if "httpGet" in container.get(probe, {}):
                ops.append({"op": "remove", "path": f"{cpath}/{probe}"})
        if not container["image"].startswith("lj-runtimekit/"):
            continue
        for j, arg in enumerate(container.get("args", [])):
            new = arg
            if arg.startswith("--listen="):
                new = f"--listen=127.0.0.1:{next(free)}"
            elif arg.startswith("--config-daemon-socket="):
                new = f"--config-daemon-socket={host_dirs['/run/lj-runtimekit']}/runtime.sock"
            if new != arg:
                ops.append({"op": "replace", "path": f"{cpath}/args/{j}", "value": new})
        if component in API_CLIENTS:
            ops.append({"op": "add", "path": f"{cpath}/args/-", "value": f"--kubeconfig={KUBECONFIG_MOUNT}/kubeconfig"})
            ops.append({"op": "add", "path": f"{cpath}/volumeMounts/-",
                        "value": {"name": "test-kubeconfig", "mountPath": KUBECONFIG_MOUNT, "readOnly": True}})
    for k, volume in enumerate(spec.get("volumes", [])):
        path = volume.get("hostPath", {}).get("path")
        if path in host_dirs:
            ops.append({"op": "replace", "path": f"{base}/volumes/{k}/hostPath/path", "value": host_dirs[path]})
    if component in API_CLIENTS:
        ops.append({"op": "add", "path": f"{base}/volumes/-",
                    "value": {"name": "test-kubeconfig", "hostPath": {"path": str(kube_dir), "type": "Directory"}}})
    return ops


def prepare_deploy_copy(target: Path, host_root: Path, kube_dir: Path, ports: Iterable[int]) -> Path:
    """Copy deploy/ to ``target`` with the test overlay; returns the copy's deploy-all.sh.

    ``host_root``: folder for the Runtime's socket (``run``) and state (``state``) host folders; ``kube_dir``:
    host folder holding ``kubeconfig``; ``ports``: free loopback ports for the ``--listen`` flags."""
    shutil.copytree(DEPLOY, target)
    host_dirs = {"/run/lj-runtimekit": str(host_root / "run"), "/var/lib/lj-runtimekit": str(host_root / "state")}
    free = iter(ports)
    for component in ("runtime", "deviceplugin", "exporter", "controller", "scheduler"):
        # in each component's own kustomization: deploy-all.sh --components renders those directly
        patches = [{"target": {"kind": w["kind"], "name": w["metadata"]["name"]},
                    "patch": json.dumps(_ops(component, w, host_dirs, kube_dir, free))} for w in _workloads(component)]
        file = target / component / "kustomization.yaml"
        kustomization = yaml.safe_load(file.read_text())
        kustomization["patches"] = [*kustomization.get("patches", []), *patches]
        file.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    configmap = target / "runtime" / "02-configmap.yaml"
    text = configmap.read_text()
    if "LJRK_BACKEND: nvml" not in text:
        raise AssertionError(f"{configmap}: no 'LJRK_BACKEND: nvml' to switch to simulated")
    configmap.write_text(text.replace("LJRK_BACKEND: nvml", "LJRK_BACKEND: simulated"))
    return target / "deploy-all.sh"
