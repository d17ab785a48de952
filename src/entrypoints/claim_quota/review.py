"""AdmissionReview (``admission.k8s.io/v1``) in and out, for the claim quota webhook.

kube-apiserver POSTs an ``AdmissionReview`` whose ``request`` holds ``uid``, ``namespace``, ``operation`` and the
claim's new ``object`` and ``oldObject`` (``resource.k8s.io/v1`` ResourceClaim, the ``status`` subresource's
UPDATE); the webhook answers the same kind with ``response.uid`` = the request's and ``allowed``; a refusal carries
``status`` ``{code: 403, reason: Forbidden, message}``, the message kube-apiserver returns to the writer
(kube-scheduler puts it in the pod's FailedScheduling event).

:func:`review` decodes (claims through :func:`adapters.kubernetes.resourceclaims.claim_from_json`), asks the
gate only for a claim whose allocation is new (old object without one, new object with one; anything else is
allowed) and encodes. A body that is no AdmissionReview v1 with a request uid and an object raises
:class:`ReviewError` naming the field (the handler answers 400).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from adapters.kubernetes.resourceclaims import claim_from_json
from domain.dra.claims import ClaimAllocation
from services.claim_quota.gate import Verdict

ADMISSION_API_VERSION = "admission.k8s.io/v1"
MAX_MESSAGE = 1024
"""Characters of a refusal message kept (the event and the error stay readable)."""


class ReviewError(ValueError):
    """The body is no AdmissionReview this webhook can answer; the message names the field."""


def _field(mapping: dict[str, Any], key: str, where: str) -> Any:
    value = mapping.get(key)
    if value is None:
        raise ReviewError(f"{where}.{key}: missing")
    return value


def _claim(obj: Any, where: str, namespace: str) -> ClaimAllocation | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ReviewError(f"{where}: must be an object, got {type(obj).__name__}")
    try:
        claim = claim_from_json(obj)
    except (ValueError, TypeError, AttributeError) as error:
        raise ReviewError(f"{where}: not a ResourceClaim: {error}") from error
    if not claim.namespace and namespace:
        claim = ClaimAllocation(namespace, claim.name, claim.uid, claim.results, claim.resource_version)
    return claim


def decode(body: bytes) -> tuple[str, ClaimAllocation, ClaimAllocation | None]:
    """``(request uid, new claim, old claim or None)`` of an AdmissionReview body. Raises :class:`ReviewError`."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise ReviewError(f"body: not JSON: {error}") from error
    if not isinstance(data, dict):
        raise ReviewError("body: must be an AdmissionReview object")
    if data.get("apiVersion") != ADMISSION_API_VERSION or data.get("kind") != "AdmissionReview":
        raise ReviewError(f"apiVersion/kind: must be {ADMISSION_API_VERSION} AdmissionReview, got "
                          f"{str(data.get('apiVersion'))[:60]!r} {str(data.get('kind'))[:60]!r}")
    request = _field(data, "request", "AdmissionReview")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview.request: must be an object")
    uid = _field(request, "uid", "request")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: must be a non-empty string")
    given = request.get("namespace")
    namespace = given if isinstance(given, str) else ""
    new = _claim(_field(request, "object", "request"), "request.object", namespace)
    if new is None:  # _field refuses a missing object; kept for the type
        raise ReviewError("request.object: missing")
    return uid, new, _claim(request.get("oldObject"), "request.oldObject", namespace)


def encode(uid: str, verdict: Verdict) -> bytes:
    """The AdmissionReview reply to request ``uid``."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.message[:MAX_MESSAGE]}
    return json.dumps({"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response},
                      separators=(",", ":")).encode()


def review(body: bytes, gate: Callable[[ClaimAllocation], Verdict]) -> bytes:
    """The reply to AdmissionReview ``body`` (module docstring). Raises :class:`ReviewError`."""
    uid, new, old = decode(body)
    if not new.results or (old is not None and old.results):
        return encode(uid, Verdict(True))  # no allocation being added: not ours to judge
    return encode(uid, gate(new))
