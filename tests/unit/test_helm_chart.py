"""The Helm chart deploy/helm/lj-runtimekit (issue 33), checked with the pinned Helm 4 and the dev extra's kubectl.

Behaviours covered:

* the chart is what ``deploy/helm/generate.py`` makes of the kustomize tree now (no drift; needs no helm);
* ``helm template`` with the default values holds the same objects as ``kubectl kustomize deploy``, compared as
  parsed objects (so key order, quoting and YAML layout do not count). Two things are compared differently, and only
  these: the ``lj-runtimekit.io/config-checksum`` pod annotation (kustomize's is the SHA-256 of the component's
  02-configmap.yaml file, comments included, which a chart cannot reproduce from values; the chart's must be a
  SHA-256 too, and must change when the values reaching that ConfigMap change) and the ConfigMaps' ``protocol.yaml``
  (compared as the YAML document it is: the chart writes it from ``protocol:`` without deploy/protocol.yaml's
  comments). Helm adds no labels or annotations of its own to these templates, so nothing else is set aside;
* ``helm lint --strict`` passes;
* switching a component off removes exactly the objects of its kustomize folder (the controller's: with deploy/jobs);
* a protocol value reaches every component's ConfigMap and every ``# protocol:`` line (node affinity, the
  scheduler's schedulerName, the admission parameters), and rolls every workload (new checksum);
* namespace, scheduler policy and leader election, images, nodeSelector/tolerations/resources/priorityClassName are
  values that land where they should;
* ``scheduler.mode``: ``extender`` (the default) is deploy/scheduler as it is, kube-scheduler and the extender in one
  pod; ``standalone`` is deploy/scheduler with its kustomize Component deploy/scheduler/standalone, ``ljrk scheduler
  --mode standalone`` alone, leader election kept, without kube-scheduler's grants (its two built-in role bindings,
  Lease name and authentication ConfigMap); the rest of the chart does not change with it;
* values.schema.json refuses a negative memory unit, an unknown policy, a resource name that is not an extended
  resource name, a webhook caBundle that is not base64 and an unknown cert-manager issuer kind, at template time,
  with a message naming the value (the webhooks' renders: test_helm_webhooks.py).

Helm comes from ``$LJRK_HELM`` or ``scripts/kube_platform.py helm-path`` (built by ``scripts/k8s-control-plane.sh
install``); without it the helm tests skip, unless ``LJRK_REQUIRE_K8S=1`` (.ci/run), which makes that a failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.protocolfile import find_protocols, load_protocol
from support.helm import helm_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "lj-runtimekit"
CHECKSUM = "lj-runtimekit.io/config-checksum"
COMPONENTS = ("runtime", "deviceplugin", "exporter", "scheduler", "controller", "admission")
Key = tuple[str, str, str, str]


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"{argv[:3]} failed ({result.returncode}):\n{result.stderr}", pytrace=False)
    return result


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.is_file() else "kubectl"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def objects(text: str) -> dict[Key, dict[str, Any]]:
    found: dict[Key, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(text):
        if doc:
            meta = doc["metadata"]
            key = (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])
            assert key not in found, f"{key} twice"
            found[key] = doc
    return found


def render(helm: str, *args: str) -> str:
    return run([helm, "template", "lj-runtimekit", str(CHART), *args]).stdout


def template(helm: str, *args: str) -> dict[Key, dict[str, Any]]:
    return objects(render(helm, *args))


def kustomize(folder: str = "") -> dict[Key, dict[str, Any]]:
    return objects(run([kubectl(), "kustomize", str(REPO / "deploy" / folder)]).stdout)


def normalised(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the two fields compared apart (see the module's docstring) taken out."""
    copy = yaml.safe_load(yaml.safe_dump(obj))
    annotations = copy.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    annotations.pop(CHECKSUM, None)
    if copy["kind"] == "ConfigMap" and "protocol.yaml" in copy.get("data", {}):
        copy["data"]["protocol.yaml"] = yaml.safe_load(copy["data"]["protocol.yaml"])
    return dict(copy)


def checksums(rendered: dict[Key, dict[str, Any]]) -> dict[Key, str]:
    return {key: obj["spec"]["template"]["metadata"]["annotations"][CHECKSUM] for key, obj in rendered.items()
            if obj["kind"] in ("DaemonSet", "Deployment")}


def configmap(rendered: dict[Key, dict[str, Any]], name: str) -> dict[str, str]:
    return dict(next(o for k, o in rendered.items() if k[1] == "ConfigMap" and k[3] == name)["data"])


def test_chart_is_generated_from_deploy() -> None:
    result = run([sys.executable, str(REPO / "deploy" / "helm" / "generate.py"), "--check", "--kubectl", kubectl()],
                 check=False)
    assert result.returncode == 0, result.stderr
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f'version = "{chart["version"]}"' in (REPO / "pyproject.toml").read_text()


def test_default_render_holds_the_kustomize_objects(helm: str) -> None:
    chart, tree = template(helm), kustomize()
    assert sorted(chart) == sorted(tree)
    for key, obj in tree.items():
        assert normalised(chart[key]) == normalised(obj), key
    sums = checksums(chart)
    assert len(sums) == 5
    assert all(re.fullmatch(r"[0-9a-f]{64}", s) for s in sums.values())
    assert set(sums) == set(checksums(tree))


def test_dra_is_off_by_default_and_renders_deploy_dra_when_enabled(helm: str) -> None:
    only = ["--show-only", "templates/dra.yaml"]
    assert "DeviceClass" not in render(helm)
    chart, tree = template(helm, *only, "--set", "dra.enabled=true"), kustomize("dra")
    assert sorted(chart) == sorted(tree)
    for key, obj in tree.items():
        assert normalised(chart[key]) == normalised(obj), key
    renamed = template(helm, *only, "--set", "dra.enabled=true", "--set", "protocol.resources.gpu=example.com/gpu")
    classes = {k[3]: o for k, o in renamed.items() if k[1] == "DeviceClass"}
    assert classes["gpu.lj-runtimekit.io"]["spec"]["extendedResourceName"] == "example.com/gpu"


def test_components_read_the_charts_protocol(helm: str) -> None:
    """The components' own loader (what ``ljrk protocol check`` runs) finds the same protocol in each of the five
    ConfigMaps: deploy/protocol.yaml's by default, the changed one when a value changes."""
    default = find_protocols(render(helm), source="helm")
    assert len(default) == 5
    assert {constants for _, constants in default} == {load_protocol(REPO / "deploy" / "protocol.yaml")}
    changed = find_protocols(render(helm, "--set", "protocol.memory-unit=2Gi"), source="helm")
    assert {constants.memory_unit for _, constants in changed} == {"2Gi"}


def test_lint_strict(helm: str) -> None:
    result = run([helm, "lint", "--strict", str(CHART)], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("component", COMPONENTS)
def test_switching_a_component_off_removes_exactly_its_objects(helm: str, component: str) -> None:
    full = template(helm)
    off = template(helm, "--set", f"{component}.enabled=false")
    own = set(kustomize(component)) | (set(kustomize("jobs")) if component == "controller" else set())
    assert own
    assert set(off) == set(full) - own
    for key in off:
        assert normalised(off[key]) == normalised(full[key])


def test_a_protocol_value_reaches_every_component(helm: str) -> None:
    default = template(helm)
    changed = template(helm, "--set", "protocol.resources.gpu=example.com/gpu", "--set",
                       "protocol.node-label=example.com/gpu-share", "--set",
                       "protocol.scheduler-name=shared-gpu", "--set", "protocol.annotations.pod-plan=example.com/plan")
    protocols = {k[3]: yaml.safe_load(o["data"]["protocol.yaml"]) for k, o in changed.items()
                 if k[1] == "ConfigMap" and "protocol.yaml" in o.get("data", {})}
    assert len(protocols) == 5  # runtime, deviceplugin, exporter, scheduler, controller
    for name, protocol in protocols.items():
        assert protocol["resources"]["gpu"] == "example.com/gpu", name
        assert protocol["node-label"] == "example.com/gpu-share", name
        assert protocol["resources"]["memory"] == "alibabacloud.com/gpu-memory", name  # the others stay
    for key, obj in changed.items():
        if obj["kind"] == "DaemonSet":
            terms = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert terms[0]["matchExpressions"][0]["key"] == "example.com/gpu-share", key
    config = yaml.safe_load(configmap(changed, "lj-runtimekit-scheduler-config")["scheduler-config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "shared-gpu"
    assert configmap(changed, "lj-runtimekit-admission")["pod-plan"] == "example.com/plan"
    before, after = checksums(default), checksums(changed)
    assert all(before[key] != after[key] for key in before)


def test_namespace_scheduler_and_pod_values(helm: str) -> None:
    rendered = template(
        helm, "--set", "namespace=gpu-system", "--set", "scheduler.policy=binpack", "--set",
        "scheduler.leaderElection.enabled=false", "--set", "image.registry=registry.example/ljrk", "--set",
        "image.tag=9.9.9", "--set", "exporter.nodeSelector.pool=gpu", "--set", "exporter.priorityClassName=high",
        "--set", "runtime.tolerations=null", "--set", "controller.resources.limits.memory=1Gi")
    text = yaml.safe_dump_all(rendered.values())
    assert "kube-system" not in text
    assert {k[2] for k in rendered} == {"", "gpu-system", "lj-runtimekit-jobs"}
    binding = next(o for k, o in rendered.items() if k[1] == "RoleBinding" and k[2] == "lj-runtimekit-jobs")
    assert {s["namespace"] for s in binding["subjects"]} == {"gpu-system"}
    scheduler = configmap(rendered, "lj-runtimekit-scheduler-config")
    assert scheduler["LJRK_POLICY"] == "binpack"
    config = yaml.safe_load(scheduler["scheduler-config.yaml"])
    assert config["leaderElection"] == {"leaderElect": False, "resourceName": "lj-runtimekit-kube-scheduler",
                                        "resourceNamespace": "gpu-system"}
    pods = {k[3]: o["spec"]["template"]["spec"] for k, o in rendered.items() if k[1] in ("DaemonSet", "Deployment")}
    images = {c["image"] for spec in pods.values() for c in spec["containers"]}
    assert {i for i in images if "kube-scheduler" not in i} == {
        f"registry.example/ljrk/{n}:9.9.9" for n in ("runtime", "device-plugin", "exporter", "scheduler", "controller")}
    exporter = pods["lj-runtimekit-exporter-ds"]
    assert exporter["nodeSelector"] == {"pool": "gpu"}
    assert exporter["priorityClassName"] == "high"
    assert "tolerations" not in pods["lj-runtimekit-runtime-ds"]
    assert pods["lj-runtimekit-device-plugin-ds"]["tolerations"] == [{"operator": "Exists"}]  # the others keep theirs
    controller = pods["lj-runtimekit-controller"]
    assert controller["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    job_image = {e["value"] for e in controller["containers"][0]["env"] if e["name"] == "LJRK_JOB_IMAGE"}
    assert job_image == {"registry.example/ljrk/job-agent:9.9.9"}


def test_extra_args_are_appended_to_the_main_container_only(helm: str) -> None:
    library = "--hami-core-library=/usr/local/vgpu/libvgpu.so"
    preload = "--hami-preload-file=/var/lib/lj-runtimekit/runtime/ld.so.preload"
    default = template(helm, "--set", "dra.enabled=true")
    rendered = template(helm, "--set", "dra.enabled=true", "--set", f"runtime.extraArgs={{{library}}}",
                        "--set", f"dra.extraArgs={{{library},{preload}}}")
    changed = {k[3] for k in rendered if normalised(rendered[k]) != normalised(default[k])}
    assert changed == {"lj-runtimekit-runtime-ds", "lj-runtimekit-dra-driver-ds"}
    runtime = next(k for k in rendered if k[3] == "lj-runtimekit-runtime-ds")
    dra = next(k for k in rendered if k[3] == "lj-runtimekit-dra-driver-ds")
    for key, extra in ((runtime, [library]), (dra, [library, preload])):
        before = default[key]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert rendered[key]["spec"]["template"]["spec"]["containers"][0]["args"] == [*before, *extra]
        assert checksums(rendered)[key] != checksums(default)[key]  # the pods roll
    scheduler = template(helm, "--set", "scheduler.extraArgs={--tick=2}")
    containers = scheduler_deployment(scheduler)["spec"]["template"]["spec"]["containers"]
    ours = [c for c in containers if "kube-scheduler" not in c["image"]]
    theirs = [c for c in containers if "kube-scheduler" in c["image"]]
    assert [c["args"][-1] for c in ours] == ["--tick=2"]
    assert theirs
    assert all("--tick=2" not in c.get("args", []) for c in theirs)  # kube-scheduler's container is not ours


@pytest.mark.parametrize(("setting", "message"), [
    ("protocol.memory-unit=-1Gi", "- at '/protocol/memory-unit': '-1Gi' does not match pattern"),
    ("scheduler.policy=fastest", "- at '/scheduler/policy': value must be one of 'binpack', 'spread'"),
    ("protocol.resources.gpu=gpu", "  - at '/protocol/resources/gpu': 'gpu' does not match pattern"),
    ("protocol.resources.core=kubernetes.io/gpu-core", "  - at '/protocol/resources/core': 'not' failed"),
    ("scheduler.mode=embedded", "- at '/scheduler/mode': value must be one of 'extender', 'standalone'"),
    ("exporter.extraArgs=--port=1", "- at '/exporter/extraArgs': got string, want array"),
    ("claimMigrate.certificate.caBundle=not-base64!",
     "- at '/claimMigrate/certificate/caBundle': 'not-base64!' does not match pattern"),
    ("claimQuota.certificate.certManager.issuer.kind=Foo",
     "- at '/claimQuota/certificate/certManager/issuer/kind': value must be one of 'Issuer', 'ClusterIssuer'"),
])
def test_schema_refuses_bad_values(helm: str, setting: str, message: str) -> None:
    """Helm names the value's path, and the bad value itself where the check is a pattern (an enum prints the
    allowed ones instead; the kubernetes.io domain, refused by a ``not``, only the path)."""
    result = run([helm, "template", "lj-runtimekit", str(CHART), "--set", setting], check=False)
    assert result.returncode != 0
    assert result.stderr.startswith("Error: values don't meet the specifications of the schema(s)"), result.stderr
    assert message in result.stderr.splitlines() or any(line.startswith(message) for line in
                                                         result.stderr.splitlines()), result.stderr
    assert result.stdout == ""


def scheduler_deployment(rendered: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    return next(o for k, o in rendered.items() if k[1] == "Deployment" and k[3] == "lj-runtimekit-scheduler-framework")


def test_scheduler_modes_render_deploy_scheduler_with_or_without_its_standalone_component(
        helm: str, tmp_path: Path) -> None:
    base = os.path.relpath(REPO / "deploy" / "scheduler", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [base],
        "components": [f"{base}/standalone"]}))
    tree = objects(run([kubectl(), "kustomize", str(tmp_path)]).stdout)
    only = ["--show-only", "templates/scheduler.yaml"]
    standalone = template(helm, *only, "--set", "scheduler.mode=standalone")
    assert sorted(standalone) == sorted(tree)
    for key, obj in tree.items():
        assert normalised(standalone[key]) == normalised(obj), key
    extender = template(helm, *only, "--set", "scheduler.mode=extender")
    assert [c["name"] for c in scheduler_deployment(extender)["spec"]["template"]["spec"]["containers"]] == [
        "kube-scheduler", "extender"]
    (alone,) = scheduler_deployment(standalone)["spec"]["template"]["spec"]["containers"]
    assert alone["name"] == "extender"
    assert "--mode=standalone" in alone["args"]
    assert "--lease-name=lj-runtimekit-scheduler" in alone["args"]
    assert "--mode=extender" in scheduler_deployment(extender)["spec"]["template"]["spec"]["containers"][1]["args"]
    differs = {k for k in extender if k in standalone and normalised(extender[k]) != normalised(standalone[k])}
    assert {k[1] for k in differs} == {"Deployment", "ClusterRole", "Role"}
    # standalone holds none of kube-scheduler's grants: its built-in roles, its Lease, the authentication ConfigMap
    assert {k[3] for k in set(extender) - set(standalone)} == {
        "lj-runtimekit-scheduler-as-kube-scheduler", "lj-runtimekit-scheduler-as-volume-scheduler"}
    assert set(standalone) <= set(extender)
    grants = json.dumps([o for k, o in standalone.items() if k[1] in ("Role", "ClusterRole")])
    assert "lj-runtimekit-kube-scheduler" not in grants
    assert "extension-apiserver-authentication" not in grants
    assert "lj-runtimekit-kube-scheduler" in json.dumps([o for k, o in extender.items() if k[1] == "Role"])
    assert checksums(extender) != checksums(standalone)
    rest = ["--set", "scheduler.enabled=false"]
    assert render(helm, *rest, "--set", "scheduler.mode=standalone") == render(helm, *rest)
