"""The scheduler-view port over HTTP: ``GET <scheduler>/debug/ledger`` (:mod:`domain.inspection.view`).

``url`` is the scheduler's listener (``http://host:8888``, the ``--listen`` address), to which the view's path is
appended; its ``/metrics`` URL (as ``ljrk up`` prints it) names the same listener; a URL already ending in
``/debug/ledger`` is used as is. Stdlib ``urllib`` does the GET, as in the Prometheus
scrape adapter: one request, no session, nothing to close. Every failure — connection refused, a timeout, an HTTP
error status, a body that is not JSON or not a view — raises :class:`~ports.scheduler_view.SchedulerViewError`
naming the URL.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from domain.errors import InvalidRequestError
from domain.inspection.view import VIEW_PATH, SchedulerView, decode_view
from ports.scheduler_view import SchedulerViewError

MAX_VIEW_BYTES = 256 * 1024 * 1024
"""Largest body read (a view of 5000 nodes with their pods is a few MiB)."""


def view_url(url: str) -> str:
    """The view's URL for a scheduler address (module docstring). Raises :class:`SchedulerViewError` for a URL
    that is not ``http://`` or ``https://`` with a host."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SchedulerViewError(f"--scheduler={url!r}: must be an http:// or https:// URL with a host, such as "
                                 "http://127.0.0.1:8888")
    path = parts.path.rstrip("/").removesuffix("/metrics")
    if not path.endswith(VIEW_PATH):
        path += VIEW_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class HttpSchedulerView:
    """:class:`~ports.scheduler_view.SchedulerViewSource` of the scheduler at ``url`` (module docstring), each
    request within ``timeout_s`` seconds. Raises :class:`SchedulerViewError` for a malformed ``url``."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self.url = view_url(url)
        self.timeout_s = timeout_s

    def fetch(self) -> SchedulerView:
        """GET and decode the view. Raises :class:`SchedulerViewError` (module docstring)."""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                body = response.read(MAX_VIEW_BYTES + 1)
        except (urllib.error.URLError, OSError) as error:
            raise SchedulerViewError(f"GET {self.url}: {error}") from error
        if len(body) > MAX_VIEW_BYTES:
            raise SchedulerViewError(f"GET {self.url}: body larger than {MAX_VIEW_BYTES} bytes")
        try:
            return decode_view(json.loads(body))
        except (ValueError, RecursionError) as error:  # JSON errors and InvalidRequestError are ValueErrors
            what = "not a scheduler view" if isinstance(error, InvalidRequestError) else "not JSON"
            raise SchedulerViewError(f"GET {self.url}: {what}: {error}") from error
