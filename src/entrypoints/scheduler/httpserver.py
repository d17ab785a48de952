"""The scheduler's one HTTP listener: extender verbs (POST, JSON) plus ``/healthz``, ``/readyz`` and ``/metrics``.

The shared probe server (``entrypoints._shared.httpserver``) with a POST route added: HTTP/1.1 with keep-alive
(one thread per connection; kube-scheduler's extender client reuses its connections, which saves a connect and a
thread per verb call). A connection may stay idle :data:`KEEP_ALIVE_IDLE` seconds, longer than the 90 s idle limit
of Go's ``net/http`` transport (pkg.go.dev/net/http, ``DefaultTransport``) that kube-scheduler's client keeps, so the
client drops an idle connection before the server would, and the server never closes one a POST is just being sent
on (``net/http`` does not retry a non-idempotent request). The same limit bounds a client that stalls mid-request,
and the shared server's connection cap and whole-request deadline apply (``entrypoints._shared.httpserver``).
An error reply that leaves the body unread closes the connection. :meth:`HttpEndpoint.stop` shuts the read side of
open connections (an idle one ends at once; a request whose body is still arriving then fails with 400) and joins
every request thread.
Routes:

* ``POST /<verb>`` — the last path segment names the verb, so any ``urlPrefix`` path works (kube-scheduler posts
  to ``<urlPrefix>/<verb>``). Body: JSON, at most :data:`MAX_BODY_BYTES`. Replies 200 with the verb's JSON, 400
  for a malformed body (``{"Error": …}``), 404 for an unknown verb, 500 (``{"Error": …}``) for a bug;
* ``GET /healthz`` — liveness: 200 ``ok`` while the component's threads run, else 500 with the reason;
* ``GET /readyz`` — readiness: 200 when the replica serves (informers synced, leading, ledger rebuilt; in both
  modes), else 503;
* ``GET /metrics`` — Prometheus text exposition format 0.0.4;
* ``GET /debug/ledger`` (and any other ``views`` route) — read-only JSON: the scheduler's per-node books
  (:mod:`domain.inspection.view`, what ``ljrk inspect --scheduler`` compares with the API objects); 500
  (``{"Error": …}``) for a bug.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

from entrypoints._shared.httpserver import HealthEndpoint, Probe, ProbeHandler
from services._shared.logs import fields

from .extender_json import ExtenderArgsError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (a NodeList of 5000 nodes is tens of MiB when ``nodeCacheCapable`` is off)."""

Verb = Callable[[object], object]
"""Decoded JSON body → JSON-serialisable reply; raises :class:`ExtenderArgsError` for a malformed body."""

View = Callable[[], object]
"""A read-only GET route: → JSON-serialisable value."""


KEEP_ALIVE_IDLE = 120.0
"""Seconds a kept-alive connection may wait for its next request (module docstring)."""


class _Handler(ProbeHandler):
    """The probe routes plus ``POST /<verb>`` (module docstring)."""

    protocol_version = "HTTP/1.1"
    timeout = KEEP_ALIVE_IDLE

    def _json(self, status: int, value: object) -> None:
        self._reply(status, json.dumps(value, separators=(",", ":")).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server's method name)
        endpoint = self.server.endpoint
        views = endpoint.views if isinstance(endpoint, HttpEndpoint) else {}
        view = views.get(self.path.split("?", 1)[0].rstrip("/"))
        if view is None:
            super().do_GET()
            return
        try:
            value = view()
        except Exception as error:
            log.exception("view failed", extra=fields(path=self.path[:100]))
            self._json(500, {"Error": f"internal error: {error}"[:500]})
            return
        self._json(200, value)

    def do_POST(self) -> None:  # noqa: N802 (http.server's method name)
        endpoint = self.server.endpoint
        verbs = endpoint.verbs if isinstance(endpoint, HttpEndpoint) else {}
        verb = verbs.get(self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        if verb is None:
            self.close_connection = True  # its body is not read
            self._json(404, {"Error": f"unknown verb in {self.path[:100]}"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # its body is not read
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


class HttpEndpoint(HealthEndpoint):
    """The listener on ``host:port`` (port 0 picks a free one; see :attr:`address`). ``verbs`` maps verb names
    to handlers (empty in standalone mode); ``views`` maps GET paths (``/debug/ledger``) to read-only JSON views;
    ``health``/``ready`` are probes; ``metrics`` renders the exposition.
    :meth:`stop` joins every request thread. Raises OSError when the address cannot be bound."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        health: Probe,
        ready: Probe,
        metrics: Callable[[], bytes],
        verbs: Mapping[str, Verb] | None = None,
        views: Mapping[str, View] | None = None,
    ) -> None:
        self.verbs: Mapping[str, Verb] = dict(verbs or {})
        self.views: Mapping[str, View] = dict(views or {})
        super().__init__(host, port, health=health, ready=ready, metrics=metrics, name="scheduler",
                         handler=_Handler, join_requests=True)

    def start(self) -> None:
        """Serve on a background thread."""
        super().start()
        log.info("listening", extra=fields(address=f"{self.address[0]}:{self.address[1]}", verbs=sorted(self.verbs)))
