"""A component's probe and metrics listener: ``/healthz``, ``/readyz`` and ``/metrics`` (stdlib
``ThreadingHTTPServer``), shared by the controller, the device plugin, the exporter and the scheduler (which adds
its extender verbs by subclassing :class:`ProbeHandler` and :class:`HealthEndpoint`).

* ``GET /healthz`` — liveness: 200 ``ok`` while the component's threads run, else 500 with the reason;
* ``GET /readyz`` — readiness: 200 when the component should receive traffic, else 503;
* ``GET /metrics`` — Prometheus text exposition format 0.0.4;
* anything else — 404.

Bounds, so that no client can hold the component's threads or memory (a slowloris client sends a request a byte
at a time; each listener is on the pod network):

* at most ``max_connections`` (:data:`MAX_CONNECTIONS`) connections are served at once; one more is closed at
  accept, unanswered, and counted in :attr:`HealthEndpoint.refused`;
* a connection may wait for the first byte of its next request at most the handler's ``timeout`` (idle limit);
* once that byte arrived, the whole request — reading it, answering it, writing the reply — must end within
  ``request_deadline`` (:data:`REQUEST_DEADLINE`) seconds, or a watchdog shuts the connection.

With ``tls`` (an ``ssl.SSLContext``, server side) every connection is HTTPS: the accepted socket is wrapped without
a handshake, and the handshake runs on the connection's own thread under the idle limit (a client that never
completes it holds one connection of the cap, for at most ``timeout`` seconds, never the accept loop); a failed
handshake closes the connection.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT = 30.0
"""Seconds a connection may stay silent (waiting for a request, or between two reads of one) before its thread
gives up."""
MAX_CONNECTIONS = 64
"""Connections served at once per listener (module docstring); a scrape or probe needs one."""
REQUEST_DEADLINE = 60.0
"""Seconds from a request's first byte to the end of its reply (module docstring); kube-scheduler's extender
client gives up after 30 s (``httpTimeout``'s default)."""

Probe = Callable[[], tuple[bool, str]]
"""Returns ``(ok, text)``."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8081`` for IPv6, ``:8081`` for all interfaces) → ``(host, port)``, the syntax of
    every component's ``--listen``. Raises :class:`argparse.ArgumentTypeError` (usable as an argparse ``type``)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port 0..65535")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (``127.0.0.0/8``, ``::1``); False for any other name or
    address, ``0.0.0.0`` (every interface) included."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


class _Server(http.server.ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with the connection cap and request deadline of the module docstring."""

    daemon_threads = True
    endpoint: HealthEndpoint

    def __init__(self, address: tuple[str, int], handler: type[ProbeHandler], *, max_connections: int,
                 request_deadline: float, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self._open: dict[socket.socket, float] = {}  # connection → monotonic deadline of its request (inf: idle)
        self._open_lock = threading.Lock()
        self.max_connections = max_connections
        self.request_deadline = request_deadline
        self.refused = 0
        self.watch_passes = 0
        self._watchdog_stop = threading.Event()
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, object]:
        connection, address = super().get_request()
        if self.tls is None:
            return connection, address
        try:
            return self.tls.wrap_socket(connection, server_side=True, do_handshake_on_connect=False), address
        except (OSError, ValueError):
            connection.close()
            raise

    def process_request(self, request: socket.socket | tuple[bytes, socket.socket],
                        client_address: object) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                full = len(self._open) >= self.max_connections
                if full:
                    self.refused += 1
                else:
                    self._open[request] = float("inf")
            if full:
                if self.refused == 1 or self.refused % 1000 == 0:  # once per burst, not once per connection
                    log.warning("connection refused: %d connections already open (%d refused so far)",
                                self.max_connections, self.refused)
                self.shutdown_request(request)
                return
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._open_lock:
                self._open.pop(request, None)
        super().shutdown_request(request)

    def arm(self, connection: socket.socket) -> None:
        """Start ``connection``'s request deadline (its first byte arrived)."""
        with self._open_lock:
            if connection in self._open:
                self._open[connection] = time.monotonic() + self.request_deadline

    def disarm(self, connection: socket.socket) -> None:
        """The request on ``connection`` is answered; it may idle again."""
        with self._open_lock:
            if connection in self._open:
                self._open[connection] = float("inf")

    def watch(self) -> None:
        """Until :meth:`stop_watch`: shut every connection whose request outlived its deadline (its thread's
        blocked read or write then fails and the thread ends)."""
        period = min(1.0, self.request_deadline / 4)
        while not self._watchdog_stop.wait(period):
            self.watch_passes += 1
            now = time.monotonic()
            with self._open_lock:
                late = [connection for connection, deadline in self._open.items() if deadline <= now]
            for connection in late:
                log.warning("request deadline of %.1f s passed; closing the connection", self.request_deadline)
                with contextlib.suppress(OSError):  # already closed by its thread
                    connection.shutdown(socket.SHUT_RDWR)

    def stop_watch(self) -> None:
        self._watchdog_stop.set()

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

    def setup(self) -> None:
        super().setup()  # sets the idle limit on the socket first: it bounds the TLS handshake too
        self.handshake_failed = False
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (OSError, ValueError) as error:  # ssl.SSLError is an OSError; a timeout too
                log.debug("TLS handshake failed: %s", error)
                self.handshake_failed = True
                self.close_connection = True

    def handle(self) -> None:
        if not self.handshake_failed:
            super().handle()

    def handle_one_request(self) -> None:
        """Wait (idle limit: ``timeout``) for the next request's first byte, then serve it under the server's
        request deadline."""
        try:
            first = self.rfile.peek(1)  # type: ignore[attr-defined]  # a BufferedReader: buffered bytes count
        except OSError:  # idle limit reached, or reset by the peer
            self.close_connection = True
            return
        if not first:  # the peer closed the connection
            self.close_connection = True
            return
        self.server.arm(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.disarm(self.connection)

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
    threads; ``max_connections`` and ``request_deadline`` (s) bound the clients; ``tls`` serves HTTPS (module
    docstring). Raises OSError when the address cannot be bound, ValueError for a ``max_connections`` below 1 or a
    ``request_deadline`` not above 0."""

    def __init__(
        self, host: str, port: int, *, health: Probe, ready: Probe, metrics: Callable[[], bytes],
        name: str = "http", handler: type[ProbeHandler] = ProbeHandler, join_requests: bool = False,
        max_connections: int = MAX_CONNECTIONS, request_deadline: float = REQUEST_DEADLINE,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections}: must be at least 1")
        if not request_deadline > 0:
            raise ValueError(f"request_deadline={request_deadline}: must be above 0 s")
        self.name = name
        self.health = health
        self.ready = ready
        self.metrics = metrics
        self._server = _Server((host, port), handler, max_connections=max_connections,
                               request_deadline=request_deadline, tls=tls)
        self._server.daemon_threads = not join_requests  # joined by server_close() when True
        self._server.endpoint = self
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None

    @property
    def refused(self) -> int:
        """Connections closed unanswered at accept because ``max_connections`` were open."""
        return self._server.refused

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
        self._watchdog = threading.Thread(target=self._server.watch, name=f"{self.name}-http-deadline", daemon=True)
        self._watchdog.start()

    def stop(self) -> None:
        """Stop serving and close the socket (joining the request threads with ``join_requests``); idempotent."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.end_reads()
        self._server.server_close()  # joins the request threads with join_requests; the watchdog still bounds them
        if self._watchdog is not None:
            self._server.stop_watch()
            self._watchdog.join()
            self._watchdog = None
