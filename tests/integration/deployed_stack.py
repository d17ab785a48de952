"""The test overlay that lets ``deploy/deploy-all.sh deploy`` run the stack's own images on the test node.

:func:`prepare_deploy_copy` copies ``deploy/`` into a folder and appends JSON patches to the copy's
``kustomization.yaml``, computed from the workloads' own manifests (so they follow the files), then
``<copy>/deploy-all.sh`` renders and applies it as users do. Per Deployment/DaemonSet:

- ``hostNetwork: true``: pods of the test node have no network (its CNI plugin only answers ADD), so the in-node
  components reach the test API server on 127.0.0.1; their HTTP servers ``--listen`` on 127.0.0.1 free ports and
  their HTTP probes are removed (kubelet would probe a pod IP the node does not have);
- a kubeconfig (self-contained, admin token, CA embedded) through a hostPath folder and ``--kubeconfig``, instead of
  the in-cluster service account (the test API server runs no token controller);
- ``imagePullPolicy: Never`` (the images are imported into the node's containerd), one controller replica, rolled
  with ``maxSurge: 0`` (with host networking its port is a host port: a surge pod could never be placed beside the
  old one on the only node);
- the Runtime socket and state host folders moved under the test's folder (the controller's
  ``--config-daemon-socket`` with them, so its Jobs mount the same folder), and the device plugin's CDI spec folder
  to the one the node's containerd reads: nothing lands in the host's ``/run``;
- the Runtime's ``LJRK_BACKEND`` set to ``simulated`` in its ConfigMap (``generate.py --adopt`` restamps it); the
  device plugin's release pass every 5 s and the exporter's pull every 2 s instead of 30 s and 10 s (a deleted pod's
  records and series go within seconds);
- the scheduler: kube-scheduler is the live version's binary packed as ``registry.k8s.io/kube-scheduler:v<version>``
  by ``scripts/real-kubelet.sh install`` (``deploy-all.sh --kube-scheduler-tag v<version>``), running the shipped
  ``kubescheduler.config.k8s.io/v1`` configuration with one addition, ``clientConnection.kubeconfig`` (with
  ``--config``, kube-scheduler takes the kubeconfig from the file only); its secure port (health and metrics) binds
  127.0.0.1 with delegated authentication through the same kubeconfig; the extender's ``urlPrefix`` follows the
  extender's new ``--listen`` port, and so do the extender's exec probes (kept: they run in the container).

:attr:`Overlay.ports` names the ports: ``controller``, ``deviceplugin``, ``exporter``, ``scheduler`` (the extender's
verbs), ``scheduler-metrics``, ``kube-scheduler-secure`` (kube-scheduler's health and metrics, HTTPS).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
KUBECONFIG_MOUNT = "/etc/lj-runtimekit-test"
CONFIGMAP = "02-configmap.yaml"
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


def metric_values(page: str, name: str, **labels: str) -> list[float]:
    """Values of the samples ``name`` on a Prometheus text ``page`` whose labels include ``labels`` (parsed with
    prometheus_client's own parser)."""
    return [sample.value for family in text_string_to_metric_families(page) for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())]


def _workloads(component: str) -> Iterable[dict[str, Any]]:
    for path in sorted((DEPLOY / component).glob("03-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Deployment", "DaemonSet"):
                yield doc


@dataclass
class Overlay:
    """The prepared copy: its ``deploy-all.sh``, its folder, and the loopback ports given to each listener
    (module docstring)."""

    script: Path
    deploy: Path
    ports: dict[str, int] = field(default_factory=dict)


def _kube_scheduler_ops(cpath: str, overlay: Overlay, free: Iterator[int]) -> list[Any]:
    overlay.ports["kube-scheduler-secure"] = next(free)
    kubeconfig = f"{KUBECONFIG_MOUNT}/kubeconfig"
    args = ["--bind-address=127.0.0.1", f"--secure-port={overlay.ports['kube-scheduler-secure']}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
    return [*({"op": "add", "path": f"{cpath}/args/-", "value": a} for a in args),
            {"op": "add", "path": f"{cpath}/volumeMounts/-",
             "value": {"name": "test-kubeconfig", "mountPath": KUBECONFIG_MOUNT, "readOnly": True}}]


def _exec_probe_ops(cpath: str, container: dict[str, Any], moved: dict[str, str]) -> list[Any]:
    """Rewrite loopback addresses a moved ``--listen`` had in exec probes' commands."""
    ops: list[Any] = []
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        command = container.get(probe, {}).get("exec", {}).get("command", [])
        for k, word in enumerate(command):
            new = word
            for old_address, new_address in moved.items():
                new = new.replace(f"//{old_address}/", f"//{new_address}/")
            if new != word:
                ops.append({"op": "replace", "path": f"{cpath}/{probe}/exec/command/{k}", "value": new})
    return ops


def _ops(component: str, workload: dict[str, Any], host_dirs: dict[str, str], kube_dir: Path,
         overlay: Overlay, free: Iterator[int]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    base = "/spec/template/spec"
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": f"{base}/hostNetwork", "value": True},
        {"op": "add", "path": f"{base}/dnsPolicy", "value": "ClusterFirstWithHostNet"},
    ]
    if workload["kind"] == "Deployment":
        ops.append({"op": "replace", "path": "/spec/replicas", "value": 1})
        if workload["spec"].get("strategy", {}).get("type", "RollingUpdate") == "RollingUpdate":
            # host ports on one node: the old pod must go before its replacement can be placed
            ops.append({"op": "add", "path": "/spec/strategy",
                        "value": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}})
    for i, container in enumerate(spec["containers"]):
        cpath = f"{base}/containers/{i}"
        ops.append({"op": "add", "path": f"{cpath}/imagePullPolicy", "value": "Never"})
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if "httpGet" in container.get(probe, {}):
                ops.append({"op": "remove", "path": f"{cpath}/{probe}"})
        if container["name"] == "kube-scheduler":
            ops += _kube_scheduler_ops(cpath, overlay, free)
            continue
        if not container["image"].startswith("lj-runtimekit/"):
            continue
        moved: dict[str, str] = {}
        for j, arg in enumerate(container.get("args", [])):
            new = arg
            if arg.startswith(("--listen=", "--metrics-listen=")):
                flag, _, old = arg.partition("=")
                key = component if flag == "--listen" else f"{component}-metrics"
                overlay.ports[key] = next(free)
                new = f"{flag}=127.0.0.1:{overlay.ports[key]}"
                moved[old] = new.partition("=")[2]
            elif arg.startswith("--config-daemon-socket="):
                new = f"--config-daemon-socket={host_dirs['/run/lj-runtimekit']}/runtime.sock"
            if new != arg:
                ops.append({"op": "replace", "path": f"{cpath}/args/{j}", "value": new})
        ops += _exec_probe_ops(cpath, container, moved)
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


def _edit(file: Path, *replacements: tuple[str, str]) -> None:
    """Replace each (old, new) in ``file`` once; AssertionError naming the file when ``old`` is not there."""
    text = file.read_text()
    for old, new in replacements:
        if old not in text:
            raise AssertionError(f"{file}: no {old!r} to replace")
        text = text.replace(old, new, 1)
    file.write_text(text)


def _edit_configmaps(target: Path, overlay: Overlay, free: Iterator[int]) -> None:
    _edit(target / "runtime" / CONFIGMAP, ("LJRK_BACKEND: nvml", "LJRK_BACKEND: simulated"))
    _edit(target / "deviceplugin" / CONFIGMAP,
          ('LJRK_RELEASE_INTERVAL_SECONDS: "30"', 'LJRK_RELEASE_INTERVAL_SECONDS: "5"'))
    _edit(target / "exporter" / CONFIGMAP, ('LJRK_INTERVAL_SECONDS: "10"', 'LJRK_INTERVAL_SECONDS: "2"'))
    indent = "    "
    _edit(target / "scheduler" / CONFIGMAP,
          ("kind: KubeSchedulerConfiguration\n",
           f"kind: KubeSchedulerConfiguration\n{indent}clientConnection:\n"
           f"{indent}  kubeconfig: {KUBECONFIG_MOUNT}/kubeconfig\n"),
          ("urlPrefix: http://127.0.0.1:8888", f"urlPrefix: http://127.0.0.1:{overlay.ports['scheduler']}"))


def prepare_deploy_copy(target: Path, host_root: Path, kube_dir: Path, ports: Iterable[int], *,
                        cdi_dir: Path) -> Overlay:
    """Copy deploy/ to ``target`` with the test overlay (module docstring).

    ``host_root``: folder for the Runtime's socket (``run``) and state (``state``) host folders; ``kube_dir``:
    host folder holding ``kubeconfig``; ``ports``: free loopback ports for the listeners (at least eight);
    ``cdi_dir``: the folder the node's containerd reads CDI specs from, in place of ``/var/run/cdi``."""
    shutil.copytree(DEPLOY, target)
    host_dirs = {"/run/lj-runtimekit": str(host_root / "run"), "/var/lib/lj-runtimekit": str(host_root / "state"),
                 "/var/run/cdi": str(cdi_dir)}
    overlay = Overlay(script=target / "deploy-all.sh", deploy=target)
    free = iter(ports)
    for component in ("runtime", "deviceplugin", "exporter", "controller", "scheduler"):
        # in each component's own kustomization: deploy-all.sh --components renders those directly
        patches = [{"target": {"kind": w["kind"], "name": w["metadata"]["name"]},
                    "patch": json.dumps(_ops(component, w, host_dirs, kube_dir, overlay, free))}
                   for w in _workloads(component)]
        file = target / component / "kustomization.yaml"
        kustomization = yaml.safe_load(file.read_text())
        kustomization["patches"] = [*kustomization.get("patches", []), *patches]
        file.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    _edit_configmaps(target, overlay, free)
    return overlay
