"""Fixtures for tests against a real Kubernetes control plane (see k8s_harness.py).

Binaries come from ``$LJRK_K8S_BIN`` or ``bash scripts/k8s-control-plane.sh bin-dir``. Without them the ``k8s``
tests are skipped, unless ``LJRK_REQUIRE_K8S=1`` (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "k8s-control-plane.sh"


def _missing(reason: str) -> None:
    hint = f"{reason}; build it with: bash {INSTALL_SCRIPT.relative_to(REPO_ROOT)} install"
    if os.environ.get("LJRK_REQUIRE_K8S") == "1":
        pytest.fail(f"LJRK_REQUIRE_K8S=1 but the Kubernetes control plane is unavailable: {hint}", pytrace=False)
    pytest.skip(f"no Kubernetes control plane binaries: {hint}")


def _bin_dir() -> Path:
    env = os.environ.get("LJRK_K8S_BIN")
    if env:
        path = Path(env)
        if not (path / "kube-apiserver").is_file():
            _missing(f"LJRK_K8S_BIN={env} has no kube-apiserver")
        return path
    try:
        result = subprocess.run(
            ["bash", str(INSTALL_SCRIPT), "bin-dir"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        _missing(f"{INSTALL_SCRIPT.name} bin-dir could not run ({exc})")
    if result.returncode != 0 or not result.stdout.strip():
        _missing("the control plane is not built")
    return Path(result.stdout.strip())


@pytest.fixture(scope="session")
def k8s_bin_dir() -> Path:
    """Directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager (skips/fails when absent)."""
    return _bin_dir()


@pytest.fixture(scope="session")
def k8s_control_plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver + kube-scheduler + kube-controller-manager for the whole session.

    The default scheduler schedules every pod whose ``spec.schedulerName`` is ``default-scheduler`` (the default);
    tests that bind pods themselves must set another schedulerName. Tests needing their own scheduler config start
    their own plane with ``k8s_harness.control_plane(k8s_bin_dir, scheduler=True, scheduler_config={...})``.
    """
    plane = start_control_plane(k8s_bin_dir, scheduler=True, controller_manager=True)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def k8s_api(k8s_control_plane: ControlPlane) -> Iterator[Any]:
    """A fresh ``kubernetes.client.ApiClient`` for one test, closed afterwards."""
    api = k8s_control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def k8s_namespace(k8s_api: Any) -> Iterator[str]:
    """A new namespace for one test (deleted afterwards; without a namespace controller it stays Terminating)."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)
