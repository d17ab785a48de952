"""The claim-migrate webhook (``ljrk claim-migrate``) against a real kube-apiserver, kube-scheduler (default
profile, its DRA allocator) and kube-controller-manager's resourceclaim controller (marker ``k8s``; its listener
without a cluster: test_claim_migrate_https.py).

``ljrk claim-migrate`` runs in-process on ``https://127.0.0.1:<port>`` as its ServiceAccount with only the RBAC of
``deploy/claim-migrate/01-rbac.yaml`` (kube-apiserver with ``--authorization-mode=RBAC``), with a serving
certificate from a CA made here (openssl); ``deploy/claim-migrate/05-webhook.yaml`` is registered with its
``clientConfig`` pointed at that URL and ``caBundle`` at that CA. One Node without kubelet publishes our driver's
slice of four 40Gi GPUs (consumable ``cores`` and ``memory``, as ``ljrk dra-driver`` does); the shipped
DeviceClasses are applied.

Behaviours covered (namespaces labelled ``dra.claim-migrate=enabled`` unless said otherwise):
- a pod asking ``gpu-core.percentage: 30`` and ``gpu-memory: 4`` is stored mutated: no classic resource in
  requests or limits, ``resources.claims`` in its container, ``spec.resourceClaims`` naming the template; the
  template exists with class gpu-share and capacity requests cores 30 / memory 4Gi; kube-scheduler binds the pod
  and the claim the controller made from the template is allocated one device consuming exactly 30 cores and
  4Gi (what the classic path books: 300 milli-GPU, 4 GiB on one GPU);
- ``gpu: 2`` becomes two whole devices of one node;
- a refused pod (core without memory, MIG) is not created; kube-apiserver returns the webhook's message; so is one
  whose template exists asking another shape;
- a dry run is mutated the same way and creates no template (sideEffects NoneOnDryRun);
- a pod in a namespace not opted in is stored unchanged; a pod asking no classic resource in an opted-in one is
  never sent to the webhook (matchConditions: its review count does not move).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane
from webhook_support import account_kubeconfig, dra_node, register_webhook, serving, webhook_pki
from webhook_support import get as _get

from adapters.protocolfile import load_protocol
from domain.kube.protocol import parse_quantity
from entrypoints.claim_migrate.__main__ import main
from support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
PROTOCOL_FILE = REPO / "deploy" / "protocol.yaml"
PROTOCOL = load_protocol(PROTOCOL_FILE)
DRA = PROTOCOL.dra
CORE, MEM, GPU = PROTOCOL.resources.core, PROTOCOL.resources.memory, PROTOCOL.resources.gpu
GI = 2**30
NODE = "migrate-node"
OPT_IN = {DRA.claim_migrate: "enabled"}

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return webhook_pki(tmp_path_factory.mktemp("claim-migrate-pki"))


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    # the default profile, with its DRA allocator; the resourceclaim controller makes claims from templates; RBAC
    # judges the webhook's ServiceAccount (the harness is a master)
    plane = start_control_plane(k8s_bin_dir, scheduler=True, controller_manager=True,
                                controllers=("resourceclaim-controller", "garbagecollector"),
                                authorization_mode="RBAC")
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def webhook(plane: ControlPlane, pki: tuple[Path, Path, Path]) -> Iterator[int]:
    """``ljrk claim-migrate`` serving on a free loopback port as its ServiceAccount; yields the port."""
    args = ["--kubeconfig", str(account_kubeconfig(plane, "claim-migrate")), "--protocol", str(PROTOCOL_FILE)]
    with serving(main, args, pki, "claim-migrate") as port:
        yield port


@pytest.fixture(scope="module")
def api(plane: ControlPlane, webhook: int, pki: tuple[Path, Path, Path]) -> Iterator[Any]:
    """A client, with our driver's slice for :data:`NODE`, the DeviceClasses and the webhook configuration."""
    api_client = plane.api_client()
    dra_node(api_client, NODE, DRA.driver)
    register_webhook(api_client, "claim-migrate", f"https://127.0.0.1:{webhook}/mutate", pki[0])
    try:
        yield api_client
    finally:
        api_client.close()


class Namespace:
    """A namespace with labels, its pods created through the API."""

    def __init__(self, api_client: Any, labels: dict[str, str]) -> None:
        from kubernetes import client

        self.name = f"cm-{uuid.uuid4().hex[:8]}"
        self.core = client.CoreV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.core.create_namespace({"metadata": {"name": self.name, "labels": labels}})

    def pod(self, name: str, limits: dict[str, str], *, dry_run: bool = False) -> Any:
        """Create a one-container pod asking ``limits`` (requests equal); returns the stored (or dry-run) pod."""
        body = {"metadata": {"name": name}, "spec": {"containers": [{
            "name": "main", "image": "busybox", "resources": {"limits": limits, "requests": dict(limits)}}]}}
        return self.core.create_namespaced_pod(self.name, body, dry_run="All" if dry_run else None)

    def refused(self, name: str, limits: dict[str, str]) -> str:
        """Create, expecting a refusal; returns kube-apiserver's message."""
        from kubernetes.client import ApiException

        with pytest.raises(ApiException) as error:
            self.pod(name, limits)
        assert error.value.status == 403
        assert name not in {p.metadata.name for p in self.core.list_namespaced_pod(self.name).items}
        return str(json.loads(error.value.body)["message"])

    def templates(self) -> dict[str, Any]:
        return {t.metadata.name: t for t in self.resource.list_namespaced_resource_claim_template(self.name).items}

    def allocated_claim(self, pod: str) -> Any:
        """The pod's claim (made from its template) once allocated, else None."""
        statuses = self.core.read_namespaced_pod(pod, self.name).status.resource_claim_statuses or []
        for status in statuses:
            if status.resource_claim_name:
                claim = self.resource.read_namespaced_resource_claim(status.resource_claim_name, self.name)
                if claim.status is not None and claim.status.allocation is not None:
                    return claim
        return None


@pytest.fixture(scope="module")
def ready(api: Any) -> Any:
    """The webhook configuration in force: a dry-run share pod comes back with a claim."""
    probe = Namespace(api, OPT_IN)
    eventually(lambda: probe.pod("probe", {CORE: "1", MEM: "1"}, dry_run=True).spec.resource_claims, timeout=60,
               interval=0.5, what="the MutatingWebhookConfiguration to take effect")
    return api


def _reviews(port: int, ca: Path) -> int:
    """Reviews the webhook answered so far (its /metrics)."""
    text = _get(f"https://127.0.0.1:{port}/metrics", ca)[1].decode()
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ljrk_claim_migrate_reviews_total{"))


def test_a_share_pod_is_migrated_and_placed_by_the_dra_allocator(ready: Any) -> None:
    team = Namespace(ready, OPT_IN)
    pod = team.pod("share", {CORE: "30", MEM: "4", "cpu": "100m"})
    (container,) = pod.spec.containers
    assert container.resources.limits == {"cpu": "100m"}
    assert container.resources.requests == {"cpu": "100m"}
    assert [c.name for c in container.resources.claims] == ["gpu-main"]
    assert [(c.name, c.resource_claim_template_name) for c in pod.spec.resource_claims] == [
        ("gpu-main", "ljrk-migrate-share-30-4gi")]
    template = team.templates()["ljrk-migrate-share-30-4gi"]
    (request,) = template.spec.spec.devices.requests
    assert request.exactly.device_class_name == DRA.device_class_share
    assert request.exactly.capacity.requests == {"cores": "30", "memory": "4Gi"}
    assert template.metadata.labels == {"app.kubernetes.io/managed-by": "lj-runtimekit-claim-migrate"}
    claim = eventually(lambda: team.allocated_claim("share"), timeout=60, what="the migrated pod's claim allocated")
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool) == (DRA.driver, NODE)
    consumed = {k: parse_quantity(k, str(v)) for k, v in result.consumed_capacity.items()}
    assert consumed == {"cores": 30, "memory": 4 * GI}  # the allocator writes memory in bytes
    eventually(lambda: team.core.read_namespaced_pod("share", team.name).spec.node_name == NODE, timeout=60,
               what="the migrated pod bound")


def test_whole_gpus_become_an_exact_count_claim(ready: Any) -> None:
    team = Namespace(ready, OPT_IN)
    pod = team.pod("whole", {GPU: "2"})
    assert pod.spec.resource_claims[0].resource_claim_template_name == "ljrk-migrate-gpu-2"
    assert not pod.spec.containers[0].resources.limits
    claim = eventually(lambda: team.allocated_claim("whole"), timeout=60, what="the whole-GPU claim allocated")
    results = claim.status.allocation.devices.results
    assert len({r.device for r in results}) == 2
    assert {r.pool for r in results} == {NODE}


def test_a_refused_pod_gets_the_message(ready: Any) -> None:
    team = Namespace(ready, OPT_IN)
    message = team.refused("half", {CORE: "30"})
    assert 'admission webhook "claim-migrate.lj-runtimekit.io" denied the request' in message
    assert f"pod {team.name}/half: container main: {CORE}=30 without {MEM}" in message
    assert f"add {MEM} (units of 1Gi)" in message
    message = team.refused("mig", {"alibabacloud.com/mig-1g.10gb": "1"})
    assert "ask a ResourceClaim of DeviceClass mig-1g-10gb.lj-runtimekit.io (count 1) instead" in message
    assert team.templates() == {}
    team.resource.create_namespaced_resource_claim_template(team.name, {  # made by hand, asking another class
        "metadata": {"name": "ljrk-migrate-gpu-1"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRA.device_class_share}}]}}}})
    message = team.refused("stale", {GPU: "1"})
    assert (f"ResourceClaimTemplate {team.name}/ljrk-migrate-gpu-1 exists but does not ask class "
            f"{DRA.device_class_gpu}, 1 device (it asks class {DRA.device_class_share}, 1 device); "
            "delete it") in message


def test_a_dry_run_creates_no_template(ready: Any) -> None:
    team = Namespace(ready, OPT_IN)
    pod = team.pod("dry", {CORE: "20", MEM: "2"}, dry_run=True)
    assert pod.spec.resource_claims[0].resource_claim_template_name == "ljrk-migrate-share-20-2gi"
    assert team.templates() == {}
    assert team.core.list_namespaced_pod(team.name).items == []


def test_other_namespaces_and_pods_without_gpus_are_left_alone(
        ready: Any, webhook: int, pki: tuple[Path, Path, Path]) -> None:
    other = Namespace(ready, {})
    pod = other.pod("classic", {CORE: "30", MEM: "4"})
    assert pod.spec.resource_claims is None
    assert pod.spec.containers[0].resources.limits == {CORE: "30", MEM: "4"}
    assert other.templates() == {}
    team = Namespace(ready, OPT_IN)
    before = _reviews(webhook, pki[0])
    pod = team.pod("cpu-only", {"cpu": "100m"})
    assert pod.spec.resource_claims is None
    assert _reviews(webhook, pki[0]) == before  # matchConditions: kube-apiserver did not call the webhook
