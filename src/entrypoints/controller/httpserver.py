"""The controller's HTTP listener: ``/healthz``, ``/readyz`` and ``/metrics`` (stdlib ``ThreadingHTTPServer``).

* ``GET /healthz`` — liveness: 200 ``ok`` while the controller's threads run, else 500 with the reason;
* ``GET /readyz`` — readiness: 200 once both informers have listed, else 503;
* ``GET /metrics`` — Prometheus text exposition format 0.0.4;
* anything else — 404.
"""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT = 30.0
"""Seconds a connection may stay silent before its thread gives up."""

Probe = Callable[[], tuple[bool, str]]
"""Returns ``(ok, text)``."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    endpoint: HealthEndpoint


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http " + format, *args)

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        endpoint = self.server.endpoint
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/metrics":
            self._reply(200, endpoint.metrics(), METRICS_CONTENT_TYPE)
            return
        probes = {"/healthz": (endpoint.health, 500), "/readyz": (endpoint.ready, 503)}
        if path not in probes:
            self._reply(404, b"not found\n")
            return
        probe, failure = probes[path]
        ok, text = probe()
        self._reply(200 if ok else failure, (text or ("ok" if ok else "not ok")).encode() + b"\n")


class HealthEndpoint:
    """The listener on ``host:port`` (port 0 picks a free one; see :attr:`address`). Raises OSError when the
    address cannot be bound."""

    def __init__(self, host: str, port: int, *, health: Probe, ready: Probe, metrics: Callable[[], bytes]) -> None:
        self.health = health
        self.ready = ready
        self.metrics = metrics
        self._server = _Server((host, port), _Handler)
        self._server.endpoint = self
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        """Serve on a background thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="controller-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
