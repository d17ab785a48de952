"""LISTs and watches read as the API server's JSON, straight into domain objects (:mod:`.corejson`).

The informers' LISTs and watches of nodes and pods carry most of what the scheduler reads from the API server.
The official client would first build its models (``ApiClient.deserialize``; a watch even re-encodes every event
to JSON for that), which costs more CPU than the translation itself. Here the calls go out with
``_preload_content=False`` and the body is decoded once with :mod:`json`. Invariant: the domain objects equal those
of the model path (``translate.node_from_v1``/``pod_from_v1``), which ``tests/contract`` checks on a real server.

Watch wire format (API concepts, "Efficient detection of changes"): one JSON object per line, ``{"type": …,
"object": …}``; an ``ERROR`` event carries a ``Status`` (``code`` 410 when the resourceVersion is too old). The
client's own ``kubernetes.watch.Watch`` is not used because with ``deserialize=False`` (37.x) it fails with
``KeyError`` on ``ERROR`` events; :func:`watch_json` reads the lines itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes.client.exceptions import ApiException

from domain.kube.objects import EventType, WatchEvent
from ports.cluster import ClusterError

from .compat import wire_timeout
from .errors import api_errors

_T = TypeVar("_T")

WATCH_SOCKET_SLACK = 5.0
"""Seconds the client socket timeout of a watch exceeds its server-side ``timeoutSeconds``."""


def _decode(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise ClusterError(f"{what}: the API server sent malformed JSON: {error}") from error


def _unreadable(what: str, error: Exception) -> ClusterError:
    """The ClusterError for JSON that decoded but does not have the shape of the objects asked for."""
    return ClusterError(f"{what}: the API server sent an object that cannot be read: {type(error).__name__}: "
                        f"{str(error)[:300]}")


def read_json(response: Any, what: str) -> Any:
    """The decoded JSON body of a ``_preload_content=False`` response (a ``urllib3.HTTPResponse``); its connection
    goes back to the pool. Raises ClusterError (naming ``what``) for a body that is not JSON."""
    try:
        return _decode(response.read(), what)
    finally:
        response.release_conn()


def list_json(call: Callable[..., Any], convert: Callable[[Any], _T], what: str,
              **kwargs: Any) -> tuple[tuple[_T, ...], str]:
    """``call(**kwargs)`` (a client LIST method) read raw: ``(items converted, the list's resourceVersion)``.
    Raises what :func:`~adapters.kubernetes.errors.api_errors` raises (ClusterError and its kinds), and
    ClusterError naming ``what`` for a body or item that is not the object asked for."""
    with api_errors(what):
        payload = read_json(call(_preload_content=False, **kwargs), what)
    try:
        items = payload.get("items") or ()
        metadata = payload.get("metadata") or {}
        return tuple(convert(item) for item in items), str(metadata.get("resourceVersion") or "")
    except (ValueError, TypeError, AttributeError) as error:  # CoreJsonError is a ValueError
        raise _unreadable(what, error) from error


def _lines(response: Any) -> Iterator[bytes]:
    """The non-blank lines of a streamed response body, without their newline."""
    buffer = bytearray()
    for chunk in response.stream(amt=None, decode_content=False):
        buffer.extend(chunk)
        start = 0
        end = buffer.find(b"\n")
        while end != -1:
            line = bytes(buffer[start:end])
            if line.strip():
                yield line
            start = end + 1
            end = buffer.find(b"\n", start)
        del buffer[:start]
    if bytes(buffer).strip():
        yield bytes(buffer)


def watch_json(call: Callable[..., Any], convert: Callable[[Any], _T], resource_version: str,
               timeout_seconds: float, what: str, **kwargs: Any) -> Iterator[WatchEvent[_T]]:
    """Changes after ``resource_version`` from ``call`` (a client LIST method, called with ``watch=True``) for
    about ``timeout_seconds`` (s, rounded up to whole seconds: the server's ``timeoutSeconds``; the client socket
    waits :data:`WATCH_SOCKET_SLACK` longer). The iterator raises GoneError (410, as HTTP status or ``ERROR``
    event) and ClusterError (malformed JSON, or an event or object of the wrong shape, included). A stream the
    server ended (its timeout) was read to its end and its connection goes back to the pool for reuse; closing the
    iterator earlier closes the connection."""
    server_timeout = max(1, math.ceil(timeout_seconds))
    with api_errors(f"{what} from resourceVersion {resource_version[:40]}"):
        response = call(watch=True, resource_version=resource_version, timeout_seconds=server_timeout,
                        allow_watch_bookmarks=True, _preload_content=False,
                        _request_timeout=wire_timeout(server_timeout + WATCH_SOCKET_SLACK), **kwargs)
    ended = False
    try:
        with api_errors(f"{what} from resourceVersion {resource_version[:40]}"):
            for line in _lines(response):
                event = _decode(line, what)
                try:
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        status = int(obj.get("code") or 500)
                        reason = f"{obj.get('reason', '')}: {obj.get('message', '')}"
                    else:
                        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                        parsed = (WatchEvent(EventType.BOOKMARK, None, rv) if kind == EventType.BOOKMARK.value
                                  else WatchEvent(EventType(kind), convert(obj), rv))
                except (ValueError, TypeError, AttributeError) as error:  # CoreJsonError is a ValueError
                    raise _unreadable(what, error) from error
                if kind == "ERROR":
                    raise ApiException(status=status, reason=reason)
                yield parsed
        ended = True
    finally:
        if not ended:
            response.close()
        response.release_conn()
