"""The claim-migrate webhook's HTTPS listener without a cluster (the shared webhook listener, with a CA and a
serving certificate for 127.0.0.1 made by openssl; against kube-apiserver: test_claim_migrate_live.py).

Behaviours covered:
- ``POST /mutate`` answers a Pod review with a JSONPatch, a malformed body with 400, another path with 404; a
  plain-TCP client fails its handshake and the server goes on; ``/metrics`` counts reviews by verdict;
- the composition root resolves with the in-memory template port and serves until stopped;
- a renewed certificate (the mounted Secret's files replaced) serves from the next handshake on, without a restart;
  a new pair that does not load leaves the previous one serving.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import threading
from pathlib import Path

import pytest
from webhook_support import get as _get
from webhook_support import post as _post
from webhook_support import webhook_pki

from adapters.memory.claim_templates import InMemoryClaimTemplates
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.webhook import tls_context
from entrypoints.claim_migrate.app import ClaimMigrateEndpoint
from services.claim_migrate.migrator import ClaimMigrator

P = ProtocolConstants()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return webhook_pki(tmp_path_factory.mktemp("claim-migrate-pki"))


def _review(limits: dict[str, str]) -> bytes:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "r1", "namespace": "team", "object": pod}}).encode()


def test_https_listener_answers_reviews(pki: tuple[Path, Path, Path]) -> None:
    ca, crt, key = pki
    templates = InMemoryClaimTemplates()
    endpoint = ClaimMigrateEndpoint("127.0.0.1", 0, migrator=ClaimMigrator(protocol=P, templates=templates),
                                    tls=tls_context(crt, key))
    endpoint.start()
    try:
        base = f"https://127.0.0.1:{endpoint.address[1]}"
        with socket.create_connection(("127.0.0.1", endpoint.address[1]), timeout=10) as plain:
            plain.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert not plain.recv(100).startswith(b"HTTP/")
        assert _get(f"{base}/healthz", ca) == (200, b"ok\n")
        status, body = _post(f"{base}/mutate", _review({P.resources.core: "30", P.resources.memory: "4"}), ca)
        assert status == 200
        response = json.loads(body)["response"]
        assert response["allowed"] is True
        assert response["patchType"] == "JSONPatch"
        assert ("team", "ljrk-migrate-share-30-4gi") in templates.templates
        status, body = _post(f"{base}/mutate", _review({P.resources.core: "130", P.resources.memory: "4"}), ca)
        assert json.loads(body)["response"]["allowed"] is False
        assert _post(f"{base}/validate", b"{}", ca)[0] == 404
        status, body = _post(f"{base}/mutate", b"{}", ca)
        assert status == 400
        assert b"malformed AdmissionReview: apiVersion/kind" in body
        metrics = _get(f"{base}/metrics", ca)[1]
        assert b'ljrk_claim_migrate_reviews_total{verdict="allowed"} 1' in metrics
        assert b'ljrk_claim_migrate_reviews_total{verdict="refused"} 1' in metrics
    finally:
        endpoint.stop()


def test_container_resolves_with_in_memory_templates_and_serves_until_stopped(pki: tuple[Path, Path, Path]) -> None:
    from dependency_injector import providers

    from entrypoints.claim_migrate.app import ClaimMigrateApp, ClaimMigrateSettings
    from entrypoints.claim_migrate.containers import ClaimMigrateContainer

    _, crt, key = pki
    container = ClaimMigrateContainer(settings=ClaimMigrateSettings(tls_cert=crt, tls_key=key, host="127.0.0.1",
                                                                    port=0))
    container.check_dependencies()
    with container.templates.override(providers.Object(InMemoryClaimTemplates())):
        app = container.app()
        assert isinstance(app, ClaimMigrateApp)
        assert container.migrator() is app.endpoint.migrator
        stop = threading.Event()
        stop.set()
        app.run(stop)


def test_a_renewed_certificate_serves_without_a_restart(tmp_path: Path) -> None:
    """The Secret volume's way (a ``..data`` link swapped to a new folder): the next handshake serves the new pair;
    a new pair that does not load leaves the previous one serving."""
    first, second = webhook_pki(tmp_path / "a"), webhook_pki(tmp_path / "b")
    live = tmp_path / "live"
    live.mkdir()
    for name in ("tls.crt", "tls.key"):
        (live / name).symlink_to(Path("..data") / name)

    def mount(crt: Path, key: Path) -> None:
        version = live / f"..v{len(list(live.iterdir()))}"
        version.mkdir()
        shutil.copy(crt, version / "tls.crt")
        shutil.copy(key, version / "tls.key")
        (live / "..data.tmp").symlink_to(version.name)
        os.replace(live / "..data.tmp", live / "..data")

    def answers(ca: Path) -> bool:
        """A handshake without SNI (an IP address) and one with SNI (a DNS name, as kube-apiserver's) both verify."""
        verified = []
        for name in ("127.0.0.1", "localhost"):
            context = ssl.create_default_context(cafile=str(ca))
            try:
                with socket.create_connection(("127.0.0.1", endpoint.address[1]), timeout=5) as raw, \
                        context.wrap_socket(raw, server_hostname=name):
                    verified.append(True)
            except (ssl.SSLError, OSError):
                verified.append(False)
        assert verified[0] == verified[1], verified
        return verified[0]

    mount(first[1], first[2])
    migrator = ClaimMigrator(protocol=P, templates=InMemoryClaimTemplates())
    endpoint = ClaimMigrateEndpoint("127.0.0.1", 0, migrator=migrator,
                                    tls=tls_context(live / "tls.crt", live / "tls.key"))
    endpoint.start()
    try:
        assert answers(first[0])
        assert not answers(second[0])
        mount(second[1], second[2])
        assert answers(second[0])
        assert not answers(first[0])
        mount(first[1], second[2])  # a certificate with another pair's key: refused, the last good one serves
        assert answers(second[0])
        mount(first[1], first[2])  # the next write completes the pair: served
        assert answers(first[0])
    finally:
        endpoint.stop()
