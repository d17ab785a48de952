"""The HTTPS listener of our admission webhooks (``ljrk claim-quota``, ``ljrk claim-migrate``).

The shared bounded server (:mod:`entrypoints._shared.httpserver`: connection cap, idle limit, request deadline)
over TLS (:func:`tls_context`, PEM certificate and key, read again when the files change). Routes:

* ``POST <path>`` — an AdmissionReview v1, body at most :data:`MAX_BODY_BYTES`, answered by the webhook's
  ``answer`` (bytes in, AdmissionReview bytes out): 200 with the answer, 400 (text) for a malformed review or body
  (:class:`adapters.kubernetes.admission.ReviewError`), 404 for another path, 500 for a bug;
* ``GET /healthz``, ``/readyz`` (200 while serving), ``/metrics``: ``<metric>_reviews_total`` by verdict
  (allowed/refused) and whatever the webhook adds.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

from adapters.kubernetes.admission import ReviewError

from .httpserver import HealthEndpoint, ProbeHandler

log = logging.getLogger(__name__)

RELOAD_RETRY_S = 10.0
"""Seconds between two attempts to load a changed certificate pair that did not load."""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest AdmissionReview read: kube-apiserver's 3 MiB object limit, twice (object and oldObject), rounded down."""


def _loaded(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


def _stamp(*paths: Path) -> tuple[tuple[int, int, int], ...]:
    """What tells a file's new version: (inode, size, mtime ns) of each path, links followed (a Secret volume swaps
    its ``..data`` link); an unreadable path stamps as zeros."""
    stamps = []
    for path in paths:
        try:
            info = path.stat()
            stamps.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            stamps.append((0, 0, 0))
    return tuple(stamps)


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or newer) of PEM ``cert`` and ``key`` that reads them again when they change:
    at each handshake (the ClientHello callback) the files are stat'ed, and a new pair — a renewed certificate
    that kubelet wrote into the mounted Secret, cert-manager's every 60 days by default — serves this and later
    connections without a restart. A new pair that does not load (unreadable, not a certificate and its key) is
    logged once and tried again every :data:`RELOAD_RETRY_S` seconds; the previous one keeps serving. Raises
    OSError (unreadable) or ``ssl.SSLError`` (not a certificate and its key) for the first pair."""
    outer = _loaded(cert, key)
    outer.sni_callback = _Reloader(cert, key, outer).pick
    return outer


class _Reloader:
    """The certificate pair :func:`tls_context` serves, read again when its files change (its docstring)."""

    def __init__(self, cert: Path, key: Path, outer: ssl.SSLContext) -> None:
        self.cert, self.key, self.outer = cert, key, outer
        self._lock = threading.Lock()
        self._stamp = _stamp(cert, key)  # of the pair serving now
        self._context = outer
        self._failed: tuple[tuple[int, int, int], ...] | None = None  # the stamp of a pair that did not load
        self._retry_at = 0.0  # monotonic s: when to try that pair again

    def pick(self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _outer: ssl.SSLContext) -> None:
        """The ClientHello callback: this handshake gets the current pair."""
        with self._lock:
            stamp = _stamp(self.cert, self.key)
            if stamp != self._stamp and (stamp != self._failed or time.monotonic() >= self._retry_at):
                self._load(stamp)
            current = self._context
        if current is not self.outer:
            connection.context = current

    def _load(self, stamp: tuple[tuple[int, int, int], ...]) -> None:
        try:
            self._context, self._stamp, self._failed = _loaded(self.cert, self.key), stamp, None
            log.info("webhook serving certificate %s read again", self.cert)
        except (OSError, ssl.SSLError) as error:
            if stamp != self._failed:
                log.warning("webhook serving certificate %s changed but does not load (%s); serving the previous "
                            "one, trying again every %g s", self.cert, error, RELOAD_RETRY_S)
            self._failed, self._retry_at = stamp, time.monotonic() + RELOAD_RETRY_S


class _Handler(ProbeHandler):
    """The probe routes plus ``POST <path>`` (module docstring)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's method name)
        endpoint = self.server.endpoint
        if not isinstance(endpoint, WebhookEndpoint) or self.path.split("?", 1)[0].rstrip("/") != endpoint.path:
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
            reply = endpoint.answer(self.rfile.read(length))
        except ReviewError as error:
            self._reply(400, f"malformed AdmissionReview: {error}"[:500].encode() + b"\n")
            return
        except Exception as error:
            log.exception("%s review failed", endpoint.name)
            self._reply(500, f"internal error: {error}"[:500].encode() + b"\n")
            return
        endpoint.count(b'"allowed":true' in reply)
        self._reply(200, reply, "application/json")


class WebhookEndpoint(HealthEndpoint):
    """The HTTPS listener of a webhook named ``name`` on ``host:port`` (port 0 picks a free one) with ``tls``,
    answering ``POST path`` with ``answer``; ``metric`` prefixes its counters, ``extra_metrics`` adds exposition
    text. Raises OSError when the address cannot be bound."""

    def __init__(self, host: str, port: int, *, name: str, path: str, answer: Callable[[bytes], bytes],
                 tls: ssl.SSLContext, metric: str, what: str,
                 extra_metrics: Callable[[], str] = lambda: "") -> None:
        self.path = path
        self.answer = answer
        self._metric = metric
        self._what = what
        self._extra = extra_metrics
        self._counts = {True: 0, False: 0}
        self._count_lock = threading.Lock()
        super().__init__(host, port, health=lambda: (True, "ok"), ready=lambda: (True, "ok"), metrics=self._metrics,
                         name=name, handler=_Handler, join_requests=True, tls=tls)

    def count(self, allowed: bool) -> None:
        """Count one answered review."""
        with self._count_lock:
            self._counts[allowed] += 1

    def _metrics(self) -> bytes:
        with self._count_lock:
            allowed, refused = self._counts[True], self._counts[False]
        name = f"{self._metric}_reviews_total"
        return (f"# HELP {name} {self._what}, by verdict.\n"
                f"# TYPE {name} counter\n"
                f'{name}{{verdict="allowed"}} {allowed}\n'
                f'{name}{{verdict="refused"}} {refused}\n' + self._extra()).encode()


class WebhookApp:
    """Serves ``endpoint`` until stopped."""

    def __init__(self, endpoint: WebhookEndpoint) -> None:
        self.endpoint = endpoint

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then stop the listener (joining the requests in flight)."""
        self.endpoint.start()
        host, port = self.endpoint.address
        log.info("%s webhook serving on https://%s:%d%s", self.endpoint.name, host, port, self.endpoint.path)
        try:
            stop.wait()
        finally:
            self.endpoint.stop()
