"""The DRA claim quota webhook (``ljrk claim-quota``) against a real kube-apiserver and kube-scheduler (marker
``k8s``; its listener without a cluster: test_claim_quota_https.py).

The ``k8s`` tests start etcd + kube-apiserver (``k8s_harness``), run ``ljrk claim-quota`` in-process on
``https://127.0.0.1:<port>`` as its ServiceAccount with only the RBAC of ``deploy/claim-quota/01-rbac.yaml``
(kube-apiserver with ``--authorization-mode=RBAC``), with a serving certificate from a CA made here (openssl), and
register ``deploy/claim-quota/05-webhook.yaml`` with its ``clientConfig`` pointed at that URL and ``caBundle`` at
that CA.
Most allocations are written the way kube-scheduler's DRA plugin writes them in PreBind: an UPDATE of the claim's
``status`` adding ``allocation`` (a merge patch of the status subresource). One test runs pods through the plane's
kube-scheduler (default profile, DRA plugin; Nodes without kubelet with our driver's slices, the shipped
DeviceClasses) to show the two FailedScheduling events apart.

Behaviours covered (namespace labels ``dra.claim-quota-cores=100`` and ``dra.claim-quota-memory=48Gi``):
- an allocation within the quota is admitted and stored;
- one that would go over is refused by kube-apiserver with the webhook's message: ``over quota``, the claim, the
  namespace, the label key, its limit, what is in use and what the claim asks; nothing is stored;
- a whole GPU counts its ResourceSlice memory (a 40Gi GPU beside a 20Gi share passes 48Gi: refused);
- a namespace without quota labels is unaffected; one with the memory label only is checked by the second webhook;
- deallocating a claim frees its quota: the refused allocation then goes through;
- a write that keeps an existing allocation is not reviewed (matchConditions), even over quota;
- through kube-scheduler: a pod whose share claim fits is bound with its claim allocated; one whose claim would go
  over quota stays unbound, its claim unallocated, with a FailedScheduling event quoting the webhook's over-quota
  message (PreBind); one whose claim no device can satisfy gets FailedScheduling "cannot allocate all claims"
  (Filter) instead;
- ``ljrk inspect -o json`` reports the namespace's limits, use and allocated claims (``claimQuotas``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane
from webhook_support import account_kubeconfig, dra_node, gpu_devices, register_webhook, serving, webhook_pki
from webhook_support import get as _get

from adapters.protocolfile import load_protocol
from domain.dra.slices import ResourceSlice, SliceContent
from entrypoints.claim_quota.__main__ import main
from support.k8s_nodes import make_schedulable
from support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
PROTOCOL_FILE = REPO / "deploy" / "protocol.yaml"
DRA = load_protocol(PROTOCOL_FILE).dra
DRIVER = DRA.driver
GI = 2**30
NODE = "quota-node"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return webhook_pki(tmp_path_factory.mktemp("claim-quota-pki"))


# ---------------------------------------------------------------- against kube-apiserver

@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    # the default profile, with its DRA plugin; RBAC judges the webhook's ServiceAccount (the harness is a master)
    plane = start_control_plane(k8s_bin_dir, scheduler=True, authorization_mode="RBAC")
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def webhook(plane: ControlPlane, pki: tuple[Path, Path, Path]) -> Iterator[int]:
    """``ljrk claim-quota`` serving on a free loopback port as its ServiceAccount; yields the port."""
    args = ["--kubeconfig", str(account_kubeconfig(plane, "claim-quota")), "--protocol", str(PROTOCOL_FILE)]
    with serving(main, args, pki, "claim-quota") as port:
        yield port


@pytest.fixture(scope="module")
def api(plane: ControlPlane, webhook: int, pki: tuple[Path, Path, Path]) -> Iterator[Any]:
    """A client, with our driver's slice for :data:`NODE` and the webhook configuration of deploy/ registered."""
    api_client = plane.api_client()
    dra_node(api_client, NODE, DRIVER)
    register_webhook(api_client, "claim-quota", f"https://127.0.0.1:{webhook}/validate", pki[0])
    try:
        yield api_client
    finally:
        api_client.close()


class Namespace:
    """A namespace with labels, its claims made and allocated through the API."""

    def __init__(self, api_client: Any, labels: dict[str, str]) -> None:
        from kubernetes import client

        self.name = f"cq-{uuid.uuid4().hex[:8]}"
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": self.name, "labels": labels}})
        self.resource = client.ResourceV1Api(api_client)

    def claim(self, name: str) -> None:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": DRIVER}}]}}}
        self.resource.create_namespaced_resource_claim(self.name, body)

    def allocate(self, name: str, *devices: tuple[str, dict[str, str] | None]) -> None:
        """Write the allocation (``(device, consumedCapacity or None)`` each) as kube-scheduler's PreBind does."""
        results = []
        for device, consumed in devices:
            result: dict[str, Any] = {"request": "r", "driver": DRIVER, "pool": NODE, "device": device}
            if consumed is not None:
                result["consumedCapacity"] = consumed
                result["shareID"] = str(uuid.uuid4())
            results.append(result)
        self.resource.patch_namespaced_resource_claim_status(
            name, self.name, {"status": {"allocation": {"devices": {"results": results}}}},
            _content_type="application/merge-patch+json")

    def deallocate(self, name: str) -> None:
        self.resource.patch_namespaced_resource_claim_status(name, self.name, {"status": {"allocation": None}},
                                                             _content_type="application/merge-patch+json")

    def allocated(self, name: str) -> bool:
        status = self.resource.read_namespaced_resource_claim(name, self.name).status
        return status is not None and status.allocation is not None

    def refused(self, name: str, *devices: tuple[str, dict[str, str] | None]) -> str:
        """Allocate, expecting a refusal; returns kube-apiserver's message."""
        from kubernetes.client import ApiException

        with pytest.raises(ApiException) as error:
            self.allocate(name, *devices)
        assert error.value.status == 403
        assert not self.allocated(name)
        return str(json.loads(error.value.body)["message"])


def _share(cores: int, memory_gi: int) -> dict[str, str]:
    return {"cores": str(cores), "memory": f"{memory_gi}Gi"}


QUOTA = {DRA.claim_quota_cores: "100", DRA.claim_quota_memory: "48Gi"}


@pytest.fixture(scope="module")
def ready(api: Any) -> Any:
    """The webhook configuration in force: kube-apiserver refuses an allocation past a zero quota."""
    probe = Namespace(api, {DRA.claim_quota_cores: "0"})

    def refused() -> bool:
        from kubernetes.client import ApiException

        name = f"probe-{uuid.uuid4().hex[:6]}"
        probe.claim(name)
        try:
            probe.allocate(name, ("gpu-0", _share(1, 1)))
        except ApiException as error:
            return error.status == 403
        return False

    eventually(refused, timeout=60, interval=0.5, what="the ValidatingWebhookConfiguration to take effect")
    return api


@pytest.mark.k8s
def test_within_quota_admitted_over_quota_refused_with_the_message(ready: Any) -> None:
    team = Namespace(ready, QUOTA)
    team.claim("a")
    team.allocate("a", ("gpu-0", _share(60, 20)))
    assert team.allocated("a")
    team.claim("b")
    message = team.refused("b", ("gpu-1", _share(50, 10)))
    assert 'admission webhook "cores.claim-quota.lj-runtimekit.io" denied the request' in message
    assert (f"ResourceClaim {team.name}/b is over quota in namespace {team.name}: cores limit "
            f"{DRA.claim_quota_cores}=100 (1 GPU): in use 60 (0.6 GPU) by 1 claim(s), this claim asks 50 (0.5 GPU)"
            ) in message
    team.allocate("b", ("gpu-1", _share(40, 28)))  # exactly at both limits
    assert team.allocated("b")


@pytest.mark.k8s
def test_whole_gpu_counts_its_slice_memory(ready: Any) -> None:
    team = Namespace(ready, QUOTA)
    team.claim("small")
    team.allocate("small", ("gpu-0", _share(1, 20)))
    team.claim("whole")
    message = team.refused("whole", ("gpu-2", None))
    assert f"memory limit {DRA.claim_quota_memory}=48Gi: in use 20Gi by 1 claim(s), this claim asks 40Gi" in message


@pytest.mark.k8s
def test_namespaces_without_quota_or_with_memory_only(ready: Any) -> None:
    free = Namespace(ready, {})
    for name in ("x", "y"):
        free.claim(name)
        free.allocate(name, ("gpu-2", None), ("gpu-3", None))
        assert free.allocated(name)
    memory_only = Namespace(ready, {DRA.claim_quota_memory: "40Gi"})
    memory_only.claim("m1")
    memory_only.allocate("m1", ("gpu-2", None))  # 100 cores: no cores limit here
    memory_only.claim("m2")
    message = memory_only.refused("m2", ("gpu-0", _share(1, 1)))
    assert 'admission webhook "memory.claim-quota.lj-runtimekit.io" denied the request' in message
    assert "over quota" in message


def _reviews(port: int, ca: Path) -> int:
    """Reviews the webhook answered so far (its /metrics)."""
    text = _get(f"https://127.0.0.1:{port}/metrics", ca)[1].decode()
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ljrk_claim_quota_reviews_total{"))


@pytest.mark.k8s
def test_deallocation_frees_quota_and_kept_allocations_are_not_reviewed(
        ready: Any, webhook: int, pki: tuple[Path, Path, Path]) -> None:
    from kubernetes import client

    team = Namespace(ready, QUOTA)
    team.claim("a")
    team.allocate("a", ("gpu-0", _share(80, 40)))
    team.claim("b")
    assert "over quota" in team.refused("b", ("gpu-1", _share(30, 4)))
    team.deallocate("a")
    team.allocate("b", ("gpu-1", _share(30, 4)))
    assert team.allocated("b")
    client.CoreV1Api(ready).patch_namespace(team.name, {"metadata": {"labels": {DRA.claim_quota_cores: "10"}}})
    before = _reviews(webhook, pki[0])
    team.resource.patch_namespaced_resource_claim_status(  # a status write keeping the allocation, over quota now
        "b", team.name, {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": str(uuid.uuid4())}]}},
        _content_type="application/merge-patch+json")
    assert team.allocated("b")
    assert _reviews(webhook, pki[0]) == before  # matchConditions: kube-apiserver did not call the webhook


def _pod(namespace: Namespace, name: str, claim: str) -> None:
    from kubernetes import client

    client.CoreV1Api(namespace.resource.api_client).create_namespaced_pod(namespace.name, {
        "metadata": {"name": name},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]}})


def _claim_of(namespace: Namespace, name: str, device_class: str, count: int = 1,
              capacity: dict[str, str] | None = None) -> None:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    namespace.resource.create_namespaced_resource_claim(namespace.name, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})


def _failed_scheduling(namespace: Namespace, pod: str) -> str:
    from kubernetes import client

    events = client.CoreV1Api(namespace.resource.api_client).list_namespaced_event(
        namespace.name, field_selector=f"involvedObject.name={pod}").items
    return "\n".join(e.message or "" for e in events if e.reason == "FailedScheduling")


@pytest.mark.k8s
def test_kube_scheduler_tells_over_quota_from_no_capacity(ready: Any) -> None:
    from kubernetes import client

    from adapters.kubernetes.resourceslices import KubernetesResourceSlices

    pods = client.CoreV1Api(ready)
    fresh = f"{NODE}-2"  # four free GPUs: the other tests' allocations fill the first node's
    pods.create_node({"metadata": {"name": fresh}})
    make_schedulable(pods, fresh, {"cpu": "8", "memory": "32Gi", "pods": "110"})
    KubernetesResourceSlices(ready).create_resource_slice(ResourceSlice(f"{fresh}-gpus", DRIVER, fresh, 1, 1,
                                                                        SliceContent(gpu_devices())))
    team = Namespace(ready, QUOTA)
    _claim_of(team, "fits", DRA.device_class_share, capacity={"cores": "60", "memory": "20Gi"})
    _pod(team, "fits", "fits")
    eventually(lambda: pods.read_namespaced_pod("fits", team.name).spec.node_name, timeout=60,
               what="the pod whose claim fits to be bound")
    assert team.allocated("fits")
    _claim_of(team, "over", DRA.device_class_share, capacity={"cores": "50", "memory": "10Gi"})
    _pod(team, "over", "over")
    over = eventually(lambda: _failed_scheduling(team, "over"), timeout=60, what="FailedScheduling of 'over'")
    assert 'running PreBind plugin "DynamicResources"' in over
    assert f"ResourceClaim {team.name}/over is over quota in namespace {team.name}: cores limit" in over
    assert "in use 60 (0.6 GPU) by 1 claim(s), this claim asks 50 (0.5 GPU)" in over
    assert pods.read_namespaced_pod("over", team.name).spec.node_name is None
    assert not team.allocated("over")
    _claim_of(team, "none", DRA.device_class_gpu, count=5)  # no node has 5 GPUs
    _pod(team, "none", "none")
    none = eventually(lambda: _failed_scheduling(team, "none"), timeout=60, what="FailedScheduling of 'none'")
    assert "cannot allocate all claims" in none
    assert "over quota" not in none


@pytest.mark.k8s
def test_inspect_reports_the_namespace_quota(plane: ControlPlane, ready: Any,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from entrypoints.inspect.__main__ import main as inspect

    team = Namespace(ready, QUOTA)
    team.claim("share")
    team.allocate("share", ("gpu-1", _share(10, 3)))
    team.claim("pending")  # created, never allocated: counts nothing
    capsys.readouterr()
    inspect(["-o", "json", "--kubeconfig", str(plane.kubeconfig), "--protocol", str(PROTOCOL_FILE)])
    quotas = {q["namespace"]: q for q in json.loads(capsys.readouterr().out)["claimQuotas"]}
    assert quotas[team.name] == {"namespace": team.name, "claims": 1, "over": False, "error": "",
                                 "limits": {"cores": 100, "memoryBytes": 48 * GI},
                                 "used": {"cores": 10, "memoryBytes": 3 * GI}, "problems": []}
