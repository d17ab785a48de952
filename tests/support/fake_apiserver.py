"""A loopback HTTP server standing in for the API server in adapter tests (no control plane needed).

:class:`JsonHandler` is the request handler base: quiet, with :meth:`JsonHandler.body` (the request's JSON) and
:meth:`JsonHandler.answer` (a JSON response with a status). :func:`serving` runs a handler class on 127.0.0.1 (a
free port) in a thread and yields an official-client ``ApiClient`` pointed at it, closing both afterwards.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes import client


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """Handler base of a fake API server: subclasses add ``do_GET``/``do_POST``/… and answer with :meth:`answer`."""

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def body(self) -> Any:
        """The request's JSON body (None when empty)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"null")

    def answer(self, code: int, payload: dict[str, Any]) -> None:
        """Send ``payload`` as JSON with HTTP status ``code``."""
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[client.ApiClient]:
    """``handler`` served on 127.0.0.1 in a daemon thread; yields a client of it (plain HTTP, no auth)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    api_client = client.ApiClient(configuration)
    try:
        yield api_client
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()
        thread.join(5)
