"""Per-component ``make deploy`` (the product documentation: each component deploys its own way, make deploy,
Helm chart or kustomize), checked by rendering, with no cluster.

Behaviours covered:

* ``make render-<component>`` prints exactly the objects of ``kubectl kustomize deploy/<component>`` (the
  controller's with its Jobs' namespace, deploy/jobs), for each component of ``deploy-all.sh --components``;
* ``make render COMPONENT=a,b`` prints the union of those components, and ``make render`` the whole stack;
* ``make deploy-<component>`` and ``make delete-<component>`` run ``deploy-all.sh deploy|delete
  --components=<component>`` with ``DEPLOY_ARGS`` (``make -n``: nothing runs);
* ``DEPLOY_ARGS=--scheduler-mode=standalone`` renders the scheduler without kube-scheduler, ``--mode=standalone``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPONENTS = ("runtime", "deviceplugin", "exporter", "scheduler", "controller", "admission", "monitoring", "dra")
Key = tuple[str, str, str]


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.is_file() else "kubectl"


def make(*args: str) -> str:
    result = subprocess.run(["make", "-s", f"KUBECTL={kubectl()}", *args], cwd=REPO, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def keys(text: str) -> set[Key]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
            for d in yaml.safe_load_all(text) if d}


def kustomize(*folders: str) -> set[Key]:
    found: set[Key] = set()
    for folder in folders:
        out = subprocess.run([kubectl(), "kustomize", str(REPO / "deploy" / folder)], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        found |= keys(out)
    return found


def folders(component: str) -> tuple[str, ...]:
    return (component, "jobs") if component == "controller" else (component,)


@pytest.mark.parametrize("component", COMPONENTS)
def test_render_of_one_component_is_its_folder(component: str) -> None:
    assert keys(make(f"render-{component}")) == kustomize(*folders(component))


def test_render_of_some_components_and_of_all() -> None:
    assert keys(make("render", "COMPONENT=scheduler,exporter")) == kustomize("scheduler", "exporter")
    assert keys(make("render")) == kustomize("")


@pytest.mark.parametrize("verb", ["deploy", "delete"])
def test_component_targets_call_deploy_all_with_that_component(verb: str) -> None:
    planned = make("-n", f"{verb}-exporter", "DEPLOY_ARGS=--dry-run")
    assert f"bash deploy/deploy-all.sh {verb} --components=exporter --dry-run" in planned
    assert f"bash deploy/deploy-all.sh {verb} --components=runtime,exporter" in make("-n", verb,
                                                                                  "COMPONENT=runtime,exporter")


def test_scheduler_mode_standalone_through_make() -> None:
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(
        make("render-scheduler", "DEPLOY_ARGS=--scheduler-mode=standalone")) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (alone,) = deployment["spec"]["template"]["spec"]["containers"]
    assert alone["name"] == "extender"
    assert "--mode=standalone" in alone["args"]


def test_scheduler_mode_standalone_with_the_controller_in_a_partial_set() -> None:
    # the controller brings deploy/jobs as a resource; the standalone Component must not swallow it
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(make(
        "render", "COMPONENT=runtime,deviceplugin,exporter,scheduler,controller",
        "DEPLOY_ARGS=--scheduler-mode=standalone")) if d]
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == ["lj-runtimekit-jobs"]
    (scheduler,) = [d for d in docs if d["kind"] == "Deployment" and "scheduler" in d["metadata"]["name"]]
    (alone,) = scheduler["spec"]["template"]["spec"]["containers"]
    assert "--mode=standalone" in alone["args"]
