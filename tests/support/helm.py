"""The pinned Helm binary for the chart's tests (unit renders and live installs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def helm_binary() -> str:
    """Path of the Helm that ``scripts/k8s-control-plane.sh install`` built (``LJRK_HELM`` overrides it); a skip
    when there is none, a failure instead with ``LJRK_REQUIRE_K8S=1`` (CI)."""
    path = os.environ.get("LJRK_HELM") or subprocess.run(
        [sys.executable, str(REPO / "scripts" / "kube_platform.py"), "helm-path"],
        capture_output=True, text=True, check=False).stdout.strip()
    if path and os.access(path, os.X_OK):
        return path
    hint = "helm is not built; build it with: bash scripts/k8s-control-plane.sh install"
    if os.environ.get("LJRK_REQUIRE_K8S") == "1":
        pytest.fail(f"LJRK_REQUIRE_K8S=1 but {hint}", pytrace=False)
    pytest.skip(hint)
