"""Settings, the HTTPS listener and the serving loop of ``ljrk claim-quota``.

The listener is the shared bounded server (``entrypoints._shared.httpserver``: connection cap, idle limit, request
deadline) over TLS with ``--tls-cert``/``--tls-key``. Routes:

* ``POST /validate`` — an AdmissionReview v1 (:mod:`.review`), body at most :data:`MAX_BODY_BYTES`; 200 with the
  review's answer, 400 (text) for a malformed review or body, 404 for another path, 500 for a bug;
* ``GET /healthz``, ``/readyz`` (200 while serving), ``/metrics`` (reviews answered, by verdict).
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path

import attrs

from entrypoints._shared.command import SettingsError
from entrypoints._shared.httpserver import HealthEndpoint, ProbeHandler
from services.claim_quota.gate import PENDING_TTL_S, ClaimQuotaGate

from .review import ReviewError, review

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/validate"
"""The path the ValidatingWebhookConfiguration posts to."""
MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest AdmissionReview read: kube-apiserver's 3 MiB object limit, twice (object and oldObject), rounded down."""
DEFAULT_LISTEN = "0.0.0.0:8443"


@attrs.frozen
class ClaimQuotaSettings:
    """Validated settings of ``ljrk claim-quota`` (flags in ``__main__``): ``host``/``port`` of ``--listen``,
    ``tls_cert``/``tls_key`` (PEM files), ``pending_ttl_s`` (seconds an approved allocation counts before a list
    shows it, > 0). Raises :class:`SettingsError` naming the flag."""

    tls_cert: Path
    tls_key: Path
    host: str = "0.0.0.0"
    port: int = 8443
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    log_level: str = "INFO"
    pending_ttl_s: float = PENDING_TTL_S

    def __attrs_post_init__(self) -> None:
        if not 0 < self.pending_ttl_s <= 3600:  # also refuses NaN
            raise SettingsError(f"--pending-ttl {self.pending_ttl_s}: must be > 0 and at most 3600 seconds")


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer) of PEM ``cert`` and ``key``. Raises OSError (unreadable) or
    ``ssl.SSLError`` (not a certificate and its key)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


class _Handler(ProbeHandler):
    """The probe routes plus ``POST /validate`` (module docstring)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's method name)
        endpoint = self.server.endpoint
        if not isinstance(endpoint, WebhookEndpoint) or self.path.split("?", 1)[0].rstrip("/") != WEBHOOK_PATH:
            self.close_connection = True  # its body is not read
            self._reply(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length") or -1)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._reply(400, f"a body of at most {MAX_BODY_BYTES} bytes with its Content-Length is required\n"
                        .encode())
            return
        try:
            reply = review(self.rfile.read(length), endpoint.gate.review)
        except ReviewError as error:
            self._reply(400, f"malformed AdmissionReview: {error}"[:500].encode() + b"\n")
            return
        except Exception as error:
            log.exception("claim quota review failed")
            self._reply(500, f"internal error: {error}"[:500].encode() + b"\n")
            return
        endpoint.count(b'"allowed":true' in reply)
        self._reply(200, reply, "application/json")


class WebhookEndpoint(HealthEndpoint):
    """The HTTPS listener of the webhook on ``host:port`` (port 0 picks a free one) with ``tls``, answering
    reviews with ``gate``. Raises OSError when the address cannot be bound."""

    def __init__(self, host: str, port: int, *, gate: ClaimQuotaGate, tls: ssl.SSLContext) -> None:
        self.gate = gate
        self._counts = {True: 0, False: 0}
        self._count_lock = threading.Lock()
        super().__init__(host, port, health=lambda: (True, "ok"), ready=lambda: (True, "ok"), metrics=self._metrics,
                         name="claim-quota", handler=_Handler, join_requests=True, tls=tls)

    def count(self, allowed: bool) -> None:
        """Count one answered review."""
        with self._count_lock:
            self._counts[allowed] += 1

    def _metrics(self) -> bytes:
        with self._count_lock:
            allowed, refused = self._counts[True], self._counts[False]
        return ("# HELP ljrk_claim_quota_reviews_total Allocations reviewed, by verdict.\n"
                "# TYPE ljrk_claim_quota_reviews_total counter\n"
                f'ljrk_claim_quota_reviews_total{{verdict="allowed"}} {allowed}\n'
                f'ljrk_claim_quota_reviews_total{{verdict="refused"}} {refused}\n'
                "# HELP ljrk_claim_quota_pending Approved allocations no list shows yet.\n"
                "# TYPE ljrk_claim_quota_pending gauge\n"
                f"ljrk_claim_quota_pending {self.gate.pending}\n").encode()


class ClaimQuotaApp:
    """Serves ``endpoint`` until stopped."""

    def __init__(self, endpoint: WebhookEndpoint) -> None:
        self.endpoint = endpoint

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then stop the listener (joining the requests in flight)."""
        self.endpoint.start()
        host, port = self.endpoint.address
        log.info("claim quota webhook serving on https://%s:%d%s", host, port, WEBHOOK_PATH)
        try:
            stop.wait()
        finally:
            self.endpoint.stop()
