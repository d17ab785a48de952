"""The control plane and real node that the stack's own images are deployed onto (test_deployed_stack.py with
deploy-all.sh, test_helm_live.py with the Helm chart).

A control plane of its own (kube-scheduler for the stack's own pods; kube-controller-manager with the job,
daemonset, deployment, replicaset, garbage-collector, ttl-after-finished and namespace controllers; privileged pods
allowed) and a real kubelet node (kubelet_harness.py) into whose containerd the six image tarballs of ``make
images`` and the kube-scheduler image of ``scripts/real-kubelet.sh`` (the live version's own binary) are imported;
the node is Ready and untainted when :func:`started_node` yields it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from image_runner import images_dir
from k8s_harness import ControlPlane, start_control_plane
from real_node_world import eventually, node_ready

CONTROLLERS = ("job", "daemonset", "deployment", "replicaset", "garbagecollector", "ttl-after-finished",
               "namespace")


def image_tarballs(real_node_files: Path) -> list[Path]:
    """Our images' tarballs and the kube-scheduler image's; skips (fails with ``LJRK_REQUIRE_IMAGES=1``) without
    current images."""
    found, why = images_dir()
    if found is None:
        hint = why  # names the build command itself
        if os.environ.get("LJRK_REQUIRE_IMAGES") == "1":
            pytest.fail(f"LJRK_REQUIRE_IMAGES=1 but no current images: {hint}", pytrace=False)
        pytest.skip(f"no current images: {hint}")
    return [*sorted(found.glob("*.tar")), real_node_files / "images" / "kube-scheduler.tar"]


def kube_scheduler_tag(real_node_files: Path) -> str:
    """The tag of the kube-scheduler image scripts/real-kubelet.sh packed (``names`` lists the images)."""
    names = (real_node_files / "images" / "names").read_text().split()
    tags = [n.rpartition(":")[2] for n in names if n.startswith("registry.k8s.io/kube-scheduler:")]
    assert tags, f"{real_node_files}/images/names lists no kube-scheduler image: run scripts/real-kubelet.sh install"
    return tags[0]


@contextmanager
def started_plane(k8s_bin_dir: Path, node: str) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir, scheduler=True, controller_manager=True, controllers=CONTROLLERS,
                                nodes=[node], extra_apiserver_args=["--allow-privileged=true"])
    try:
        yield plane
    finally:
        plane.stop()


def _import_images(ctr: Path, socket: Path, tarballs: list[Path]) -> None:
    """``ctr images import`` each tarball into containerd's k8s.io namespace: the first alone (it stores the layers
    our six images share), then the rest side by side (containerd finds those layers stored and only adds each
    image's config and manifest)."""
    def start(tarball: Path) -> subprocess.Popen[str]:
        return subprocess.Popen([str(ctr), "--address", str(socket), "-n", "k8s.io", "images", "import", str(tarball)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first, *rest = tarballs
    for batch in ([first], rest):
        running = [(tarball, start(tarball)) for tarball in batch]
        deadline = time.monotonic() + 300
        failures = []
        try:
            for tarball, process in running:
                try:
                    _, stderr = process.communicate(timeout=max(deadline - time.monotonic(), 1))
                except subprocess.TimeoutExpired:
                    process.kill()
                    _, stderr = process.communicate()
                    stderr = f"still running after 300 s; {stderr}"
                if process.returncode != 0:
                    failures.append(f"ctr images import {tarball.name}: {stderr}")
        finally:
            for _, process in running:  # none is left behind, whatever failed
                if process.poll() is None:
                    process.kill()
                    process.communicate()
        assert not failures, failures


@contextmanager
def started_node(plane: ControlPlane, real_node_files: Path, tarballs: list[Path], name: str) -> Iterator[Any]:
    """The real node ``name`` with the images imported, Ready, its not-ready taints gone (module docstring)."""
    from kubelet_harness import start_node
    from kubernetes import client

    workdir = Path(tempfile.mkdtemp(prefix="ljrk-kubelet-deploy-", dir="/tmp"))
    started = start_node(plane.node_kubeconfig(name), name, workdir, nodes=real_node_files)
    try:
        _import_images(real_node_files / "bin" / "ctr", started.containerd_socket, tarballs)
        with plane.api_client() as api:
            eventually(lambda: node_ready(api, name), timeout=90, what=f"node {name} Ready")
            core = client.CoreV1Api(api)
            taints = [t for t in core.read_node(name).spec.taints or []
                      if not t.key.startswith("node.kubernetes.io/not-ready")]
            core.patch_node(name, {"spec": {"taints": [t.to_dict() for t in taints] or None}})
        yield started
    finally:
        started.stop()


def protocol_check(kubeconfig: Path, namespace: str, fingerprint: str, last: list[str]) -> bool:
    """``ljrk protocol check --kubeconfig`` exits 0 and lists every API-client component on ``fingerprint``, none of
    them terminating (exit 0 alone is not enough: terminating or starting pods are no problem for the check);
    ``last`` is set to the run's exit status, stdout and stderr."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    result = subprocess.run([sys.executable, "-m", "entrypoints.cli", "protocol", "check", "--kubeconfig",
                             str(kubeconfig), "--namespace", namespace], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    last[:] = [f"exit {result.returncode}", result.stdout, result.stderr]
    lines = result.stdout.splitlines()
    on_new = all(any(line.startswith(f"{fingerprint}  {component} on ") and "(terminating)" not in line
                     for line in lines) for component in ("device-plugin", "exporter", "scheduler", "controller"))
    problems = any(line.startswith("problem:") for line in lines)
    return result.returncode == 0 and on_new and not problems
