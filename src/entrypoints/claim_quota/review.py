"""AdmissionReview (``admission.k8s.io/v1``) in and out, for the claim quota webhook.

The envelope is :mod:`adapters.kubernetes.admission`'s; here the ``request`` holds the claim's new ``object`` and
``oldObject`` (``resource.k8s.io/v1`` ResourceClaim, the ``status`` subresource's UPDATE). A refusal's message is
what kube-apiserver returns to the writer (kube-scheduler puts it in the pod's FailedScheduling event).

:func:`review` decodes (claims through :func:`adapters.kubernetes.resourceclaims.claim_from_json`), asks the
gate only for a claim whose allocation is new (old object without one, new object with one; anything else is
allowed) and encodes. A body that is no AdmissionReview v1 with a request uid and an object raises
:class:`ReviewError` naming the field (the handler answers 400).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.kubernetes.admission import ReviewError, admission_request, admission_response, required
from adapters.kubernetes.resourceclaims import claim_from_json
from domain.dra.claims import ClaimAllocation
from services.claim_quota.gate import Verdict

__all__ = ["ReviewError", "decode", "encode", "review"]


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
    uid, request = admission_request(body)
    given = request.get("namespace")
    namespace = given if isinstance(given, str) else ""
    new = _claim(required(request, "object", "request"), "request.object", namespace)
    if new is None:  # required() refuses a missing object; kept for the type
        raise ReviewError("request.object: missing")
    return uid, new, _claim(request.get("oldObject"), "request.oldObject", namespace)


def encode(uid: str, verdict: Verdict) -> bytes:
    """The AdmissionReview reply to request ``uid``."""
    return admission_response(uid, allowed=verdict.allowed, message=verdict.message)


def review(body: bytes, gate: Callable[[ClaimAllocation], Verdict]) -> bytes:
    """The reply to AdmissionReview ``body`` (module docstring). Raises :class:`ReviewError`."""
    uid, new, old = decode(body)
    if not new.results or (old is not None and old.results):
        return encode(uid, Verdict(True))  # no allocation being added: not ours to judge
    return encode(uid, gate(new))
