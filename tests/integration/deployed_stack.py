"""The test overlay that lets the stack's own manifests run its own images on the test node, applied two ways.

The edits are computed here once, from the workloads' and ConfigMaps' own contents (so they follow the files):
:func:`prepare_deploy_copy` copies ``deploy/`` into a folder, appends them as JSON patches to the copy's
``kustomization.yaml`` files and edits the copy's ConfigMap files, then ``<copy>/deploy-all.sh`` renders and applies
it as users do; :func:`overlay_manifests` applies the same edits to an already rendered YAML stream, which is what
the Helm post-renderer of the live Helm tests (helm_postrender.py) does to the chart's render. Per
Deployment/DaemonSet:

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
verbs), ``scheduler-metrics``, ``kube-scheduler-secure`` (kube-scheduler's health and metrics, HTTPS). They are
given out once, by :func:`node_settings`, from the manifests of ``deploy/``; :class:`NodeSettings` carries them (and
the host folders) to a post-renderer in another process as JSON, so every render of a run uses the same ports.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
KUBECONFIG_MOUNT = "/etc/lj-runtimekit-test"
CONFIGMAP = "02-configmap.yaml"
OUR_IMAGE = re.compile(r"^(.+/)?lj-runtimekit/[a-z0-9-]+:")
API_CLIENTS = {"deviceplugin", "exporter", "controller", "scheduler"}
"""Components that call the API server (the Runtime does not)."""
WORKLOAD_COMPONENTS = ("runtime", "deviceplugin", "exporter", "controller", "scheduler")
"""The folders of deploy/ whose workloads and ConfigMaps the overlay edits (also their objects' component label,
but ``device-plugin`` for deviceplugin)."""
LABEL_FOLDERS = {"device-plugin": "deviceplugin"}


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
class NodeSettings:
    """What the test node puts in place of the manifests' settings: ``host_dirs`` (a manifest's host path → the
    test's), ``kube_dir`` (host folder holding ``kubeconfig``) and ``ports`` (listener key → loopback port, module
    docstring), a key's port taken from ``free`` on its first use. JSON round-trips it (:meth:`to_json`)."""

    host_dirs: dict[str, str]
    kube_dir: str
    ports: dict[str, int] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)

    def port(self, key: str) -> int:
        if key not in self.ports:
            if not self.free:
                raise AssertionError(f"no loopback port left for the listener {key!r}")
            self.ports[key] = self.free.pop(0)
        return self.ports[key]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> NodeSettings:
        return cls(**json.loads(text))


def node_settings(host_root: Path, kube_dir: Path, ports: Iterable[int], *, cdi_dir: Path) -> NodeSettings:
    """The settings of one test node, every listener of deploy/'s workloads given its port from ``ports``.

    ``host_root``: folder for the Runtime's socket (``run``) and state (``state``) host folders; ``kube_dir``: host
    folder holding ``kubeconfig``; ``ports``: free loopback ports (at least eight); ``cdi_dir``: the folder the node's
    containerd reads CDI specs from, in place of ``/var/run/cdi``."""
    settings = NodeSettings(
        host_dirs={"/run/lj-runtimekit": str(host_root / "run"), "/var/lib/lj-runtimekit": str(host_root / "state"),
                   "/var/run/cdi": str(cdi_dir)},
        kube_dir=str(kube_dir), free=list(ports))
    for component in WORKLOAD_COMPONENTS:
        for workload in _workloads(component):
            workload_ops(component, workload, settings)
    return settings


@dataclass
class Overlay:
    """The prepared copy: its ``deploy-all.sh``, its folder, and the loopback ports given to each listener
    (module docstring)."""

    script: Path
    deploy: Path
    ports: dict[str, int] = field(default_factory=dict)


def _kube_scheduler_ops(cpath: str, settings: NodeSettings) -> list[Any]:
    kubeconfig = f"{KUBECONFIG_MOUNT}/kubeconfig"
    args = ["--bind-address=127.0.0.1", f"--secure-port={settings.port('kube-scheduler-secure')}",
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


def _container_ops(component: str, cpath: str, container: dict[str, Any], settings: NodeSettings) -> list[Any]:
    """One of our containers: its listeners, the controller's Runtime socket, the kubeconfig of API clients."""
    ops: list[Any] = []
    moved: dict[str, str] = {}
    for j, arg in enumerate(container.get("args", [])):
        new = arg
        if arg.startswith(("--listen=", "--metrics-listen=")):
            flag, _, old = arg.partition("=")
            new = f"{flag}=127.0.0.1:{settings.port(component if flag == '--listen' else f'{component}-metrics')}"
            moved[old] = new.partition("=")[2]
        elif arg.startswith("--config-daemon-socket="):
            new = f"--config-daemon-socket={settings.host_dirs['/run/lj-runtimekit']}/runtime.sock"
        if new != arg:
            ops.append({"op": "replace", "path": f"{cpath}/args/{j}", "value": new})
    ops += _exec_probe_ops(cpath, container, moved)
    if component in API_CLIENTS:
        ops.append({"op": "add", "path": f"{cpath}/args/-", "value": f"--kubeconfig={KUBECONFIG_MOUNT}/kubeconfig"})
        ops.append({"op": "add", "path": f"{cpath}/volumeMounts/-",
                    "value": {"name": "test-kubeconfig", "mountPath": KUBECONFIG_MOUNT, "readOnly": True}})
    return ops


def workload_ops(component: str, workload: dict[str, Any], settings: NodeSettings) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that adapts one Deployment or DaemonSet of ``component`` to the test node."""
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
            ops += _kube_scheduler_ops(cpath, settings)
        elif OUR_IMAGE.match(container["image"]):
            ops += _container_ops(component, cpath, container, settings)
    for k, volume in enumerate(spec.get("volumes", [])):
        path = volume.get("hostPath", {}).get("path")
        if path in settings.host_dirs:
            ops.append({"op": "replace", "path": f"{base}/volumes/{k}/hostPath/path",
                        "value": settings.host_dirs[path]})
    if component in API_CLIENTS:
        ops.append({"op": "add", "path": f"{base}/volumes/-",
                    "value": {"name": "test-kubeconfig", "hostPath": {"path": settings.kube_dir, "type": "Directory"}}})
    return ops


def configmap_edits(component: str, settings: NodeSettings) -> list[tuple[str, str, str]]:
    """``(data key, old, new)`` edits of ``component``'s ConfigMap (module docstring): ``old`` is the whole value of
    a one-line value, else a part of the value that occurs once."""
    config = "scheduler-config.yaml"
    return {
        "runtime": [("LJRK_BACKEND", "nvml", "simulated")],
        "deviceplugin": [("LJRK_RELEASE_INTERVAL_SECONDS", "30", "5")],
        "exporter": [("LJRK_INTERVAL_SECONDS", "10", "2")],
        "scheduler": [(config, "kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\n"
                       f"clientConnection:\n  kubeconfig: {KUBECONFIG_MOUNT}/kubeconfig\n"),
                      (config, "urlPrefix: http://127.0.0.1:8888",
                       f"urlPrefix: http://127.0.0.1:{settings.port('scheduler')}")],
    }.get(component, [])


def _edit_value(value: str, old: str, new: str, where: str) -> str:
    if "\n" not in value:
        if value != old:
            raise AssertionError(f"{where}: {value!r} is not {old!r}")
        return new
    if value.count(old) != 1:
        raise AssertionError(f"{where}: {old!r} is not once in the value")
    return value.replace(old, new)


def _edit_file(file: Path, key: str, old: str, new: str) -> None:
    """The edit of :func:`configmap_edits` in a ConfigMap file: a one-line ``key: old``, else ``old`` inside the
    value's block, ``new``'s further lines indented as ``old`` is."""
    text = file.read_text()
    line = re.compile(rf"^(?P<head>\s*{re.escape(key)}: )(?P<q>[\"']?){re.escape(old)}(?P=q)[ \t]*$", re.M)
    if line.search(text):
        file.write_text(line.sub(lambda m: f"{m['head']}{m['q']}{new}{m['q']}", text, count=1))
        return
    at = text.find(old)
    if at < 0 or text.count(old) != 1:
        raise AssertionError(f"{file}: {old!r} is not once in it")
    indent = " " * (at - text.rfind("\n", 0, at) - 1)
    body, end = (new[:-1], "\n") if new.endswith("\n") else (new, "")
    file.write_text(text[:at] + body.replace("\n", "\n" + indent) + end + text[at + len(old):])


def apply_ops(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of ``obj`` with the JSON patch ``ops`` applied (the add, replace and remove that
    :func:`workload_ops` writes)."""
    doc = copy.deepcopy(obj)
    for op in ops:
        *parents, last = (p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:])
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            if op["op"] == "remove":
                del node[int(last)]
            elif op["op"] == "replace":
                node[int(last)] = op["value"]
            elif last == "-":
                node.append(op["value"])
            else:
                node.insert(int(last), op["value"])
        elif op["op"] == "remove":
            del node[last]
        else:
            if op["op"] == "replace" and last not in node:
                raise KeyError(f"{op['path']}: nothing to replace")
            node[last] = op["value"]
    return doc


def overlay_manifests(text: str, settings: NodeSettings) -> str:
    """The rendered manifests ``text`` (a YAML stream) with the overlay applied to each of our workloads and
    ConfigMaps (known by their ``app.kubernetes.io/component`` label); every other object as it was."""
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        label = (doc.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component", "")
        component = LABEL_FOLDERS.get(label, label)
        if component in WORKLOAD_COMPONENTS and doc["kind"] in ("Deployment", "DaemonSet"):
            doc = apply_ops(doc, workload_ops(component, doc, settings))
        elif component in WORKLOAD_COMPONENTS and doc["kind"] == "ConfigMap":
            where = f"ConfigMap {doc['metadata']['name']}"
            for key, old, new in configmap_edits(component, settings):
                doc["data"][key] = _edit_value(doc["data"][key], old, new, f"{where} {key}")
        out.append(doc)
    return yaml.safe_dump_all(out, sort_keys=False)


def prepare_deploy_copy(target: Path, host_root: Path, kube_dir: Path, ports: Iterable[int], *,
                        cdi_dir: Path) -> Overlay:
    """Copy deploy/ to ``target`` with the test overlay (module docstring; the arguments: :func:`node_settings`)."""
    settings = node_settings(host_root, kube_dir, ports, cdi_dir=cdi_dir)
    shutil.copytree(DEPLOY, target)
    for component in WORKLOAD_COMPONENTS:
        # in each component's own kustomization: deploy-all.sh --components renders those directly
        patches = [{"target": {"kind": w["kind"], "name": w["metadata"]["name"]},
                    "patch": json.dumps(workload_ops(component, w, settings))}
                   for w in _workloads(component)]
        file = target / component / "kustomization.yaml"
        kustomization = yaml.safe_load(file.read_text())
        kustomization["patches"] = [*kustomization.get("patches", []), *patches]
        file.write_text(yaml.safe_dump(kustomization, sort_keys=False))
        for key, old, new in configmap_edits(component, settings):
            _edit_file(target / component / CONFIGMAP, key, old, new)
    return Overlay(script=target / "deploy-all.sh", deploy=target, ports=dict(settings.ports))
