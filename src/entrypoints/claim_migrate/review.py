"""AdmissionReview (``admission.k8s.io/v1``) in and out, for the claim-migrate webhook.

The envelope is :mod:`adapters.kubernetes.admission`'s; the ``request`` holds a Pod CREATE: ``object`` (core/v1
Pod JSON, read by :func:`adapters.kubernetes.corejson.pod_from_json`), ``namespace`` (the pod's, which the object
may lack), ``dryRun``. At that point the pod has no UID (the API server sets it after mutating admission): the
request's uid stands in, only for the classic parser, which wants one. :func:`review` decodes the pod into
:class:`~domain.dra.migrate.PodFacts` (adding what :class:`~domain.kube.objects.PodObject` lacks: the names in
``spec.resourceClaims`` and the containers with ``resources.claims``), asks the migrator and encodes its answer
(a JSONPatch when migrated). A body that is no AdmissionReview v1 of a Pod raises :class:`ReviewError` naming the
field (the handler answers 400).
"""

from __future__ import annotations

from typing import Any

import attrs

from adapters.kubernetes.admission import ReviewError, admission_request, admission_response, required
from adapters.kubernetes.corejson import CoreJsonError, pod_from_json
from domain.dra.migrate import PodFacts
from services.claim_migrate.migrator import ClaimMigrator

__all__ = ["ReviewError", "decode", "review"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def facts_of(obj: dict[str, Any], *, namespace: str, uid: str) -> PodFacts:
    """The :class:`PodFacts` of Pod JSON ``obj`` reviewed in ``namespace`` (request ``uid`` standing in for the
    pod's). Raises :class:`ReviewError` naming the field of a malformed pod."""
    try:
        pod = pod_from_json(obj)
    except CoreJsonError as error:
        raise ReviewError(f"request.object: not a Pod: {error}") from error
    meta, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    pod = attrs.evolve(pod, uid=pod.uid or uid, namespace=namespace or pod.namespace)
    name = pod.name or f"{meta.get('generateName') or ''}*"
    pod_claims = tuple(c.name for c in pod.resource_claims) or None  # none: the patch adds the whole list
    claimed = frozenset(str(c.get("name", "")) for key in ("initContainers", "containers")
                        for c in map(_dict, _list(spec.get(key))) if _list(_dict(c.get("resources")).get("claims")))
    return PodFacts(pod, f"{pod.namespace}/{name}", pod_claims=pod_claims, claimed=claimed)


def decode(body: bytes) -> tuple[str, PodFacts, bool]:
    """``(request uid, pod facts, dry run)`` of an AdmissionReview body. Raises :class:`ReviewError`."""
    uid, request = admission_request(body)
    kind = _dict(request.get("kind"))
    if kind.get("kind", "Pod") != "Pod":
        raise ReviewError(f"request.kind: must be Pod, got {str(kind.get('kind'))[:60]!r}")
    obj = required(request, "object", "request")
    if not isinstance(obj, dict):
        raise ReviewError(f"request.object: must be an object, got {type(obj).__name__}")
    given = request.get("namespace")
    namespace = given if isinstance(given, str) else ""
    return uid, facts_of(obj, namespace=namespace, uid=uid), request.get("dryRun") is True


def review(body: bytes, migrator: ClaimMigrator) -> bytes:
    """The reply to AdmissionReview ``body``: the ``migrator``'s answer. Raises :class:`ReviewError`."""
    uid, facts, dry_run = decode(body)
    answer = migrator.review(facts, dry_run=dry_run)
    return admission_response(uid, allowed=answer.allowed, message=answer.message, patch=answer.patch)
