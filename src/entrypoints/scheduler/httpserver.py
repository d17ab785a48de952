"""The scheduler's one HTTP listener: extender verbs (POST, JSON) plus ``/healthz``, ``/readyz`` and ``/metrics``.

Stdlib ``http.server.ThreadingHTTPServer``: one thread per request, HTTP/1.0 (the connection closes after each
reply, so :meth:`HttpEndpoint.stop` can join every request thread). Routes:

* ``POST /<verb>`` — the last path segment names the verb, so any ``urlPrefix`` path works (kube-scheduler posts
  to ``<urlPrefix>/<verb>``). Body: JSON, at most :data:`MAX_BODY_BYTES`. Replies 200 with the verb's JSON, 400
  for a malformed body (``{"Error": …}``), 404 for an unknown verb, 500 (``{"Error": …}``) for a bug;
* ``GET /healthz`` — liveness: 200 ``ok`` while the component's threads run, else 500 with the reason;
* ``GET /readyz`` — readiness: 200 when the replica should receive extender calls (informers synced and, for
  the extender, leading), else 503;
* ``GET /metrics`` — Prometheus text exposition format 0.0.4.
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Callable, Mapping

from entrypoints._shared.logs import fields

from .extender import ExtenderArgsError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (a NodeList of 5000 nodes is tens of MiB when ``nodeCacheCapable`` is off)."""

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of the Prometheus text format."""

REQUEST_TIMEOUT = 30.0
"""Seconds a connection may stay silent before its thread gives up (bounds :meth:`HttpEndpoint.stop`)."""

Probe = Callable[[], tuple[bool, str]]
"""Returns ``(ok, text)`` for a health or readiness answer."""
Verb = Callable[[object], object]
"""Decoded JSON body → JSON-serialisable reply; raises :class:`ExtenderArgsError` for a malformed body."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins request threads
    endpoint: HttpEndpoint


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http " + format, *args)

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: object) -> None:
        self._reply(status, json.dumps(value, separators=(",", ":")).encode(), "application/json")

    def do_GET(self) -> None:
        endpoint = self.server.endpoint
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/metrics":
            self._reply(200, endpoint.metrics(), METRICS_CONTENT_TYPE)
            return
        probes = {"/healthz": (endpoint.health, 500), "/readyz": (endpoint.ready, 503)}
        if path not in probes:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8")
            return
        probe, failure = probes[path]
        ok, text = probe()
        self._reply(200 if ok else failure, (text or ("ok" if ok else "not ok")).encode() + b"\n",
                    "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        endpoint = self.server.endpoint
        verb = endpoint.verbs.get(self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        if verb is None:
            self._json(404, {"Error": f"unknown verb in {self.path[:100]}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._json(400, {"Error": "a JSON body with a valid Content-Length is required"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            reply = verb(body)
        except (ValueError, ExtenderArgsError) as error:  # JSON errors are ValueErrors too
            self._json(400, {"Error": f"malformed request: {error}"[:500]})
            return
        except Exception as error:
            log.exception("extender verb failed", extra=fields(path=self.path[:100]))
            self._json(500, {"Error": f"internal error: {error}"[:500]})
            return
        self._json(200, reply)


class HttpEndpoint:
    """The listener on ``host:port`` (port 0 picks a free one; see :attr:`address`). ``verbs`` maps verb names
    to handlers (empty in standalone mode); ``health``/``ready`` are probes; ``metrics`` renders the exposition.
    Raises OSError when the address cannot be bound."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        health: Probe,
        ready: Probe,
        metrics: Callable[[], bytes],
        verbs: Mapping[str, Verb] | None = None,
    ) -> None:
        self.health = health
        self.ready = ready
        self.metrics = metrics
        self.verbs: Mapping[str, Verb] = dict(verbs or {})
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
                                        name="scheduler-http", daemon=True)
        self._thread.start()
        log.info("listening", extra=fields(address=f"{self.address[0]}:{self.address[1]}", verbs=sorted(self.verbs)))

    def stop(self) -> None:
        """Stop serving, close the socket and join the request threads; idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
