"""The shared probe/metrics listener bounds its clients (``entrypoints._shared.httpserver``): a connection cap
(one more connection is closed unanswered, and counted) and a whole-request deadline (a slowloris request that
never ends is cut), while idle and well-behaved clients are served as before; ``is_loopback`` for the extender's
listen check.

The listeners under test get an idle limit of an hour, so only the deadline can end a stalled request.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest

from entrypoints._shared.httpserver import HealthEndpoint, ProbeHandler, is_loopback
from entrypoints.scheduler.httpserver import HttpEndpoint
from support.polling import eventually


class _PatientHandler(ProbeHandler):
    timeout = 3600.0  # idle limit: far beyond any test, so a closed connection means the deadline acted


def _endpoint(**bounds: float) -> HealthEndpoint:
    return HealthEndpoint("127.0.0.1", 0, health=lambda: (True, "ok"), ready=lambda: (True, "ok"),
                          metrics=lambda: b"up 1\n", handler=_PatientHandler, **bounds)  # type: ignore[arg-type]


@pytest.fixture
def capped() -> Iterator[HealthEndpoint]:
    endpoint = _endpoint(max_connections=2)
    endpoint.start()
    yield endpoint
    endpoint.stop()


def _connect(endpoint: HealthEndpoint) -> socket.socket:
    return socket.create_connection(endpoint.address, timeout=60)


def _healthz(endpoint: HealthEndpoint) -> int:
    host, port = endpoint.address
    with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=60) as reply:
        return int(reply.status)


def test_a_connection_beyond_the_cap_is_closed_unanswered_and_counted(capped: HealthEndpoint) -> None:
    held = [_connect(capped), _connect(capped)]  # silent: each holds a serving thread
    try:
        def refused_one() -> bool:
            extra = _connect(capped)
            try:
                extra.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                return extra.recv(1024) == b""  # closed at accept: no reply at all
            except ConnectionResetError:
                return True
            finally:
                extra.close()

        assert eventually(refused_one, what="a third connection refused")
        assert capped.refused >= 1
    finally:
        for connection in held:
            connection.close()
    assert eventually(lambda: _healthz(capped) == 200, what="a slot freed once the held connections closed",
                      ignoring=(OSError,))


def test_a_request_that_never_ends_is_cut_at_the_deadline() -> None:
    endpoint = _endpoint(request_deadline=0.5)
    endpoint.start()
    try:
        slow = _connect(endpoint)
        slow.sendall(b"GET /heal")  # a slowloris request: the rest never comes
        assert slow.recv(1024) == b""  # the watchdog shut it; the hour-long idle limit did not
        slow.close()
        assert _healthz(endpoint) == 200  # the listener still serves others
    finally:
        endpoint.stop()


def test_an_idle_keep_alive_connection_is_not_under_the_deadline() -> None:
    """The deadline starts at a request's first byte: the scheduler's kept-alive connection serves request after
    request while the deadline is far shorter than its life."""
    endpoint = HttpEndpoint("127.0.0.1", 0, health=lambda: (True, "ok"), ready=lambda: (True, "ok"),
                            metrics=lambda: b"up 1\n")
    server = endpoint._server
    server.request_deadline = 0.2  # the scheduler keeps the default; shortened to test
    endpoint.start()
    try:
        connection = _connect(endpoint)
        for _ in range(3):
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = b""
            while not reply.endswith(b"ok\n"):
                chunk = connection.recv(1024)
                assert chunk, f"closed after {reply!r}"
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200")
            # idle until the watchdog has checked for longer than a deadline (period 0.05 s: 8 passes = 0.4 s)
            target = server.watch_passes + 8
            assert eventually(lambda target=target: server.watch_passes >= target, what="eight watchdog passes")
        connection.close()
    finally:
        endpoint.stop()


@pytest.mark.parametrize(("bounds", "field"), [({"max_connections": 0}, "max_connections"),
                                               ({"request_deadline": 0.0}, "request_deadline")])
def test_bad_bounds_are_refused_naming_the_field(bounds: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _endpoint(**bounds)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("example.com", False), ("", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
