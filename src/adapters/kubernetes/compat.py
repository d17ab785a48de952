"""How this adapter sends JSON merge patches with each supported official client (28–35 and 37+, the majors
``hack/kubernetes-versions.toml`` pins), decided once, at import, from the client's own signatures.

* **37 and later** (``KEYWORD``): the generated ``patch_*`` methods take a per-call ``_content_type``; the adapter
  passes ``application/merge-patch+json`` through it.
* **28–35** (``HEADER``): the methods take ``**kwargs`` and reject ``_content_type``; they would send a dict body
  as ``application/json-patch+json``, which their ``rest.py`` rewrites to ``strategic-merge-patch+json``. A
  strategic merge is not a merge patch for our Job status (``status.conditions`` has ``patchMergeKey: type``: the
  old conditions would stay beside the new one), so the adapter calls ``ApiClient.call_api`` itself — the same
  call the generated method makes (path, ``Accept: application/json``, ``BearerToken`` auth, response model) —
  with an explicit ``Content-Type: application/merge-patch+json``. Either way the server sees one merge patch.
* a **strategic merge patch** (:data:`STRATEGIC_MERGE_PATCH`, for a list merged by key such as a pod's
  ``status.conditions``) takes the same two paths with that content type instead.
* anything else (36: ``_content_type`` only through ``**kwargs`` and a ``call_api`` of another shape) is refused
  by :func:`require_supported` with a message naming the client.

**Timeouts**: 37 takes a float ``_request_timeout`` as urllib3 ``Timeout(total=…)``; 28–35 take only an int
that way (a float is silently dropped: no timeout at all) or a ``(connect, read)`` pair. :func:`wire_timeout`
passes whole seconds there as the int (the same total bound) and a fraction as the pair ``(t, t)`` (connect
within t, then each read within t).

Also :func:`client_problems`, which ``scripts/download_deps.py --verify`` loads from this file by path (it must
import nothing but the standard library and the client): unsupported shape, or a urllib3 2.x beside a client
whose own requirement says urllib3 < 2 (28.x; a pair pip never installs, so one nobody has tested).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from kubernetes import client

MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
KEYWORD: Final = "keyword"
HEADER: Final = "header"

_T = TypeVar("_T")


def patch_style(api: type[Any] = client.CoreV1Api, api_client: type[Any] = client.ApiClient) -> str | None:
    """``KEYWORD``, ``HEADER`` or None (unsupported) for a client whose generated API class is ``api`` and whose
    ``ApiClient`` is ``api_client`` (module docstring)."""
    if "_content_type" in inspect.signature(api.patch_node).parameters:
        return KEYWORD
    if "response_type" in inspect.signature(api_client.call_api).parameters:
        return HEADER
    return None


STYLE: Final = patch_style()
"""The style of the importable client."""


def wire_timeout(seconds: float) -> float | tuple[float, float]:
    """The ``_request_timeout`` that bounds one call by ``seconds`` (s, > 0) on this client (module docstring)."""
    if STYLE == KEYWORD:
        return seconds
    return int(seconds) if float(seconds).is_integer() else (seconds, seconds)


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def client_problems(style: str | None = STYLE) -> list[str]:
    """What keeps the importable client (``kubernetes`` distribution metadata, ``style``) from working with this
    adapter, one line each; empty when nothing does."""
    version = _installed("kubernetes") or "(no metadata)"
    problems = []
    if style is None:
        problems.append(f"installed kubernetes client {version} is not supported by adapters/kubernetes: its "
                        "patch methods take no _content_type and its ApiClient.call_api takes no response_type, "
                        "so it cannot send merge patches (supported: 28-35 and >= 37, hack/kubernetes-versions.toml)")
    urllib3 = _installed("urllib3")
    requires = importlib.metadata.requires("kubernetes") if version != "(no metadata)" else None
    below_two = any(re.match(r"urllib3\b[^;]*<\s*2(\.0)*\s*(,|;|$)", r) for r in requires or ())
    if urllib3 is not None and below_two and int(urllib3.split(".", 1)[0]) >= 2:
        problems.append(f"installed kubernetes client {version} requires urllib3 < 2 but urllib3 {urllib3} is "
                        "installed (a pair pip would not install, untested): run make, which reinstalls from "
                        "pyproject.toml and lets pip pick urllib3")
    return problems


def require_supported() -> None:
    """Raise RuntimeError naming the client when :data:`STYLE` is None (see :func:`client_problems`)."""
    if STYLE is None:
        raise RuntimeError(client_problems(STYLE)[0])


@dataclass(frozen=True)
class PatchRoute:
    """The REST route of one generated ``patch_*`` method: ``path`` with ``{name}``/``{namespace}`` (the
    client's own template) and ``model``, the response model's name (``V1Node``)."""

    path: str
    model: str


NODE: Final = PatchRoute("/api/v1/nodes/{name}", "V1Node")
POD: Final = PatchRoute("/api/v1/namespaces/{namespace}/pods/{name}", "V1Pod")
POD_STATUS: Final = PatchRoute("/api/v1/namespaces/{namespace}/pods/{name}/status", "V1Pod")
EVENT: Final = PatchRoute("/api/v1/namespaces/{namespace}/events/{name}", "CoreV1Event")
JOB_STATUS: Final = PatchRoute("/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status", "V1Job")


def merge_patch(keyword_call: Callable[[], _T], api_client: Any, route: PatchRoute, body: Mapping[str, object],
                *, timeout: float | tuple[float, float], path: Mapping[str, str],
                content_type: str = MERGE_PATCH) -> _T:
    """One JSON merge patch (RFC 7386), or with ``content_type`` :data:`STRATEGIC_MERGE_PATCH` one strategic merge
    patch: ``keyword_call()`` (the generated method with ``_content_type``, which must be the same) on ``KEYWORD``
    clients; otherwise ``api_client.call_api`` on ``route`` with ``path`` (``{"name": …}``), ``body``, ``timeout``
    (:func:`wire_timeout`) and ``content_type``. Returns the response model. Raises what the client raises
    (``ApiException``, urllib3 errors) and RuntimeError for an unsupported client."""
    if STYLE == KEYWORD:
        return keyword_call()
    require_supported()
    headers = {"Accept": "application/json", "Content-Type": content_type}
    return cast(_T, api_client.call_api(
        route.path, "PATCH", dict(path), [], headers, body=dict(body), response_type=route.model,
        auth_settings=["BearerToken"], _return_http_data_only=True, _preload_content=True,
        _request_timeout=timeout))
