"""Kubernetes ResourceQuota on our extended resources, against a real kube-apiserver and its quota controller.

What docs/quota.md states, shown here with the shipped resource names (deploy/protocol.yaml):

* ``requests.<gpu-core resource>`` counts the pod's effective request, summed over its containers: a pod of two
  containers with 50 each (two shares, possibly on two GPUs) uses 100 of it, and a third pod that would take the
  namespace past the quota is refused at create with ``exceeded quota`` naming the resource, used and limited;
* init containers count as Kubernetes' effective request, ``max(Σ app, max init)`` (the ledger's rule too);
* ``requests.<gpu resource>`` counts whole GPUs; a whole-GPU pod takes nothing of the core quota (Kubernetes does
  not know a whole GPU is 100 % core), so a namespace limited on shares is limited on whole GPUs only by both;
* quota on an extended resource counts under the ``requests.`` prefix only: the API server accepts a ``limits.`` key
  for it but never counts or enforces it (a pod over it is admitted).

The module starts its own API server with kube-controller-manager's ``resourcequota`` controller, which fills in
the quota's ``status.hard`` (quota admission enforces only what the status holds).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane

from adapters.protocolfile import load_protocol
from support.polling import wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
RESOURCES = load_protocol(REPO / "deploy" / "protocol.yaml").resources
CORE, GPU, MEMORY = RESOURCES.core, RESOURCES.gpu, RESOURCES.memory


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir, controller_manager=True, controllers=("resourcequota",))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def core(plane: ControlPlane) -> Iterator[Any]:
    from kubernetes import client

    api = plane.api_client()
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def quota(core: Any, hard: dict[str, str]) -> str:
    """A new namespace with a ResourceQuota ``hard``, once the quota controller has published it."""
    namespace = f"q-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "gpu"}, "spec": {"hard": hard}})
    assert wait_for(lambda: core.read_namespaced_resource_quota("gpu", namespace).status.hard, timeout=60), \
        "the quota controller never published status.hard"
    return namespace


def pod(name: str, *containers: dict[str, int], init: dict[str, int] | None = None) -> dict[str, Any]:
    """A pod (never scheduled) whose containers ask ``{resource: amount}`` as requests = limits."""
    def container(index: int, asks: dict[str, int], prefix: str) -> dict[str, Any]:
        amounts = {resource: str(amount) for resource, amount in asks.items()}
        return {"name": f"{prefix}{index}", "image": "busybox", "resources": {"requests": amounts, "limits": amounts}}

    spec: dict[str, Any] = {"schedulerName": "nobody", "containers": [
        container(i, asks, "c") for i, asks in enumerate(containers)]}
    if init is not None:
        spec["initContainers"] = [container(0, init, "init")]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def refused(call: Any) -> str:
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value.body
    return str(caught.value.body)


def used(core: Any, namespace: str, resource: str) -> str:
    return str((core.read_namespaced_resource_quota("gpu", namespace).status.used or {}).get(f"requests.{resource}"))


def test_core_quota_sums_every_containers_share(core: Any) -> None:
    namespace = quota(core, {f"requests.{CORE}": "150", f"requests.{MEMORY}": "40"})
    core.create_namespaced_pod(namespace, pod("two-shares", {CORE: 50, MEMORY: 8}, {CORE: 50, MEMORY: 8}))
    assert used(core, namespace, CORE) == "100"
    message = refused(lambda: core.create_namespaced_pod(namespace, pod("too-much", {CORE: 60, MEMORY: 4})))
    assert "exceeded quota: gpu" in message
    assert f"requested: requests.{CORE}=60, used: requests.{CORE}=100, limited: requests.{CORE}=150" in message
    core.create_namespaced_pod(namespace, pod("fits", {CORE: 50, MEMORY: 4}))
    assert used(core, namespace, CORE) == "150"
    assert used(core, namespace, MEMORY) == "20"


def test_init_containers_count_as_the_effective_request(core: Any) -> None:
    namespace = quota(core, {f"requests.{CORE}": "100"})
    core.create_namespaced_pod(namespace, pod("init-heavy", {CORE: 30}, init={CORE: 80}))
    assert used(core, namespace, CORE) == "80"  # max(30, 80), not 110
    refused(lambda: core.create_namespaced_pod(namespace, pod("over", {CORE: 30})))


def test_whole_gpus_count_only_against_the_gpu_quota(core: Any) -> None:
    namespace = quota(core, {f"requests.{GPU}": "1", f"requests.{CORE}": "50"})
    core.create_namespaced_pod(namespace, pod("whole", {GPU: 1}))
    assert used(core, namespace, GPU) == "1"
    assert used(core, namespace, CORE) == "0"
    assert f"requests.{GPU}=1" in refused(lambda: core.create_namespaced_pod(namespace, pod("second", {GPU: 1})))
    core.create_namespaced_pod(namespace, pod("share", {CORE: 50}))


def test_a_limits_key_does_not_limit_extended_resources(core: Any) -> None:
    namespace = quota(core, {f"limits.{CORE}": "10", f"requests.{CORE}": "100"})
    core.create_namespaced_pod(namespace, pod("over-the-limits-key", {CORE: 50}))  # admitted: only requests count
    assert used(core, namespace, CORE) == "50"
    status = core.read_namespaced_resource_quota("gpu", namespace).status
    assert f"limits.{CORE}" not in (status.used or {})
