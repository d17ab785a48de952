"""The claim quota webhook's HTTPS listener and command container, without a cluster (``ljrk claim-quota``;
the live tests against kube-apiserver and kube-scheduler are in test_claim_quota_live.py).

Behaviours covered: the command's container resolves over in-memory adapters and serves until stopped; the HTTPS
listener answers AdmissionReviews allowed and refused (an approval not listed yet counts), 404 and 400 for other
paths and malformed reviews, serves /healthz and /metrics, and survives a client that never completes the TLS
handshake.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from webhook_support import get as _get
from webhook_support import post as _post
from webhook_support import webhook_pki

from adapters.memory.namespaces import InMemoryNamespaces
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from adapters.protocolfile import load_protocol
from domain.dra.claims import ClaimAllocation
from entrypoints._shared.webhook import tls_context
from entrypoints.claim_quota.app import ClaimQuotaEndpoint
from services.claim_quota.gate import ClaimQuotaGate

REPO = Path(__file__).resolve().parents[2]
DRA = load_protocol(REPO / "deploy" / "protocol.yaml").dra
DRIVER = DRA.driver
NODE = "quota-node"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return webhook_pki(tmp_path_factory.mktemp("claim-quota-pki"))

def _review(namespace: str, name: str, cores: str) -> bytes:
    claim = {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "r", "driver": DRIVER, "pool": NODE, "device": "gpu-0",
                  "consumedCapacity": {"cores": cores, "memory": "1Gi"}}]}}}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "r1", "namespace": namespace, "object": claim, "oldObject": None}}).encode()


def test_https_listener_answers_reviews_and_bounds_bad_clients(pki: tuple[Path, Path, Path]) -> None:
    ca, crt, key = pki
    namespaces = InMemoryNamespaces()
    namespaces.put("team", {DRA.claim_quota_cores: "50"})
    claims = InMemoryResourceClaims()
    for name in ("a", "b"):  # created, not allocated yet: the reviews add the allocations
        claims.put(ClaimAllocation("team", name, f"uid-{name}"))
    gate = ClaimQuotaGate(names=DRA, namespaces=namespaces, claims=claims, slices=InMemoryResourceSlices(),
                          clock=lambda: 0.0)
    endpoint = ClaimQuotaEndpoint("127.0.0.1", 0, gate=gate, tls=tls_context(crt, key))
    endpoint.start()
    try:
        base = f"https://127.0.0.1:{endpoint.address[1]}"
        with socket.create_connection(("127.0.0.1", endpoint.address[1]), timeout=10) as plain:
            plain.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # no TLS: the handshake fails, the server goes on
            assert not plain.recv(100).startswith(b"HTTP/")
        assert _get(f"{base}/healthz", ca) == (200, b"ok\n")
        status, body = _post(f"{base}/validate", _review("team", "a", "30"), ca)
        assert status == 200
        assert json.loads(body)["response"] == {"uid": "r1", "allowed": True}
        status, body = _post(f"{base}/validate", _review("team", "b", "30"), ca)  # "a" not listed yet: pending
        response = json.loads(body)["response"]
        assert response["allowed"] is False
        assert "over quota in namespace team" in response["status"]["message"]
        assert _post(f"{base}/other", b"{}", ca)[0] == 404
        status, body = _post(f"{base}/validate", b"{}", ca)
        assert status == 400
        assert b"malformed AdmissionReview: apiVersion/kind" in body
        metrics = _get(f"{base}/metrics", ca)[1]
        assert b'ljrk_claim_quota_reviews_total{verdict="refused"} 1' in metrics
    finally:
        endpoint.stop()


def test_container_resolves_with_in_memory_api_and_serves_until_stopped(pki: tuple[Path, Path, Path]) -> None:
    from dependency_injector import providers

    from entrypoints.claim_quota.app import ClaimQuotaApp, ClaimQuotaSettings
    from entrypoints.claim_quota.containers import ApiAccess, ClaimQuotaContainer

    ca, crt, key = pki
    container = ClaimQuotaContainer(settings=ClaimQuotaSettings(tls_cert=crt, tls_key=key, host="127.0.0.1", port=0))
    container.check_dependencies()
    api = ApiAccess(InMemoryNamespaces(), InMemoryResourceClaims(), InMemoryResourceSlices())
    with container.api.override(providers.Object(api)):
        app = container.app()
        assert isinstance(app, ClaimQuotaApp)
        assert container.gate() is app.endpoint.gate
        stop = threading.Event()
        stop.set()
        app.run(stop)  # starts, then stops at once: already stopped
    assert ca.is_file()


