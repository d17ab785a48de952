"""The AdmissionReview envelope (``admission.k8s.io/v1``) of our admission webhooks, in and out.

kube-apiserver POSTs an ``AdmissionReview`` whose ``request`` holds ``uid``, ``namespace``, ``operation``,
``dryRun`` and the ``object`` (and ``oldObject``) under review; a webhook answers the same kind with
``response.uid`` = the request's and ``allowed``. A refusal carries ``status`` ``{code: 403, reason: Forbidden,
message}``, the message kube-apiserver returns to the writer; a mutating webhook's change is a JSONPatch (RFC 6902)
in ``response.patch``, base64 of its JSON, with ``patchType: JSONPatch``.

:func:`admission_request` decodes the envelope and :func:`admission_response` encodes the answer; each webhook
decodes the object it reviews itself (``entrypoints.claim_quota.review``, ``entrypoints.claim_migrate.review``).
A body that is no AdmissionReview v1 with a request uid raises :class:`ReviewError` naming the field (the listener
answers 400).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

ADMISSION_API_VERSION = "admission.k8s.io/v1"
MAX_MESSAGE = 1024
"""Characters of a refusal message kept (the event and the error stay readable)."""


class ReviewError(ValueError):
    """The body is no AdmissionReview the webhook can answer; the message names the field."""


def required(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    """``mapping[key]``; raises :class:`ReviewError` ``<where>.<key>: missing`` when absent or null."""
    value = mapping.get(key)
    if value is None:
        raise ReviewError(f"{where}.{key}: missing")
    return value


def admission_request(body: bytes) -> tuple[str, dict[str, Any]]:
    """``(request uid, request object)`` of an AdmissionReview body. Raises :class:`ReviewError`."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise ReviewError(f"body: not JSON: {error}") from error
    if not isinstance(data, dict):
        raise ReviewError("body: must be an AdmissionReview object")
    if data.get("apiVersion") != ADMISSION_API_VERSION or data.get("kind") != "AdmissionReview":
        raise ReviewError(f"apiVersion/kind: must be {ADMISSION_API_VERSION} AdmissionReview, got "
                          f"{str(data.get('apiVersion'))[:60]!r} {str(data.get('kind'))[:60]!r}")
    request = required(data, "request", "AdmissionReview")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview.request: must be an object")
    uid = required(request, "uid", "request")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: must be a non-empty string")
    return uid, request


def admission_response(uid: str, *, allowed: bool, message: str = "",
                       patch: Sequence[Mapping[str, Any]] = ()) -> bytes:
    """The AdmissionReview reply to request ``uid``: a refusal with ``message`` (cut to :data:`MAX_MESSAGE`), or
    an admission with ``patch`` (JSONPatch operations; none: the object unchanged)."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message[:MAX_MESSAGE]}
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(patch), separators=(",", ":")).encode()).decode()
    return json.dumps({"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response},
                      separators=(",", ":")).encode()
