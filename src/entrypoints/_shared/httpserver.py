"""A component's probe and metrics listener: ``/healthz``, ``/readyz`` and ``/metrics`` (stdlib
``ThreadingHTTPServer``), shared by the controller, the device plugin, the exporter and the scheduler (which adds
its extender verbs by subclassing :class:`ProbeHandler` and :class:`HealthEndpoint`).

* ``GET /healthz`` — liveness: 200 ``ok`` while the component's threads run, else 500 with the reason;
* ``GET /readyz`` — readiness: 200 when the component should receive traffic, else 503;
* ``GET /metrics`` — Prometheus text exposition format 0.0.4;
* anything else — 404.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import logging
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT = 30.0
"""Seconds a connection may stay silent before its thread gives up."""

Probe = Callable[[], tuple[bool, str]]
"""Returns ``(ok, text)``."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8081`` for IPv6, ``:8081`` for all interfaces) → ``(host, port)``, the syntax of
    every component's ``--listen``. Raises :class:`argparse.ArgumentTypeError` (usable as an argparse ``type``)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port 0..65535")
    return host.strip("[]") or "0.0.0.0", int(port)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    endpoint: HealthEndpoint

    def __init__(self, address: tuple[str, int], handler: type[ProbeHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: socket.socket | tuple[bytes, socket.socket],
                        client_address: object) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                self._open.discard(request)
        super().shutdown_request(request)

    def end_reads(self) -> None:
        """Shut the read side of every open connection: a kept-alive idle one ends at once, one being answered
        still sends its reply (its request was read) and then ends."""
        with self._open_lock:
            open_now = list(self._open)
        for connection in open_now:
            with contextlib.suppress(OSError):  # already closed by its thread
                connection.shutdown(socket.SHUT_RD)


class ProbeHandler(http.server.BaseHTTPRequestHandler):
    """Serves the GET routes of the module docstring; subclasses add other methods (the scheduler's POST verbs)."""

    server: _Server
    timeout = REQUEST_TIMEOUT
    disable_nagle_algorithm = True  # TCP_NODELAY: a reply is not held back waiting for the peer's ACK
    wbufsize = -1  # buffered: status line, headers and a small body leave in one send, at the request's end

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http " + format, *args)

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
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
    """The listener on ``host:port`` (port 0 picks a free one; see :attr:`address`); ``name`` prefixes its
    thread's name; ``handler`` serves the requests; with ``join_requests``, :meth:`stop` waits for the request
    threads. Raises OSError when the address cannot be bound."""

    def __init__(
        self, host: str, port: int, *, health: Probe, ready: Probe, metrics: Callable[[], bytes],
        name: str = "http", handler: type[ProbeHandler] = ProbeHandler, join_requests: bool = False,
    ) -> None:
        self.name = name
        self.health = health
        self.ready = ready
        self.metrics = metrics
        self._server = _Server((host, port), handler)
        self._server.daemon_threads = not join_requests  # joined by server_close() when True
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
                                        name=f"{self.name}-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (joining the request threads with ``join_requests``); idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.end_reads()
        self._server.server_close()
