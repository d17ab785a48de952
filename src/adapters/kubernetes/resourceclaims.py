"""ResourceClaims, read only (:class:`~ports.resource_claims.ResourceClaimsApi`,
:class:`~ports.resource_claims.ResourceClaimsWatch` and :class:`~ports.resource_claims.NamespaceClaimsApi`), over the
official client's ``ResourceV1Api`` (``resource.k8s.io/v1``, Kubernetes 1.34+).

``list_claims``/``watch_claims`` cover all namespaces, ``list_namespace_claims`` one; they read the API server's
JSON directly (:mod:`.rawjson`, :func:`claim_from_json`), as the node and pod informers do; ``get`` reads
``status.allocation.devices.results`` (request, driver, pool, device, ``consumedCapacity`` as quantity strings,
``shareID``); a claim without an allocation has no results. A missing claim is None; any other API error
becomes :class:`ports.resource_claims.ResourceClaimsError` naming the claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client

from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.kube.objects import Listing, WatchEvent
from ports.cluster import ClusterError, NotFoundError
from ports.resource_claims import ResourceClaimsError

from .compat import wire_timeout
from .errors import api_errors
from .rawjson import list_json, watch_json


def _result(item: Any) -> AllocationResult:
    consumed = {str(k): str(v) for k, v in (item.consumed_capacity or {}).items()}
    return AllocationResult(request=item.request or "", driver=item.driver or "", pool=item.pool or "",
                            device=item.device or "", consumed=consumed, share_id=item.share_id)


def claim_from_v1(claim: Any) -> ClaimAllocation:
    """A ``V1ResourceClaim`` as the domain's :class:`ClaimAllocation`."""
    allocation = claim.status.allocation if claim.status is not None else None
    devices = allocation.devices if allocation is not None else None
    results = tuple(_result(r) for r in (devices.results or ())) if devices is not None else ()
    meta = claim.metadata
    return ClaimAllocation(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "", results=results,
                           resource_version=meta.resource_version or "")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _result_json(item: dict[str, Any]) -> AllocationResult:
    consumed = {str(k): _text(v) for k, v in (item.get("consumedCapacity") or {}).items()}
    share = item.get("shareID")
    return AllocationResult(request=_text(item.get("request")), driver=_text(item.get("driver")),
                            pool=_text(item.get("pool")), device=_text(item.get("device")), consumed=consumed,
                            share_id=None if share is None else str(share))


def claim_from_json(obj: dict[str, Any]) -> ClaimAllocation:
    """A ResourceClaim's JSON (``resource.k8s.io/v1``) as the domain's :class:`ClaimAllocation`, the same as
    :func:`claim_from_v1` of its model. Raises ValueError/TypeError/AttributeError for another shape."""
    meta = obj.get("metadata") or {}
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = tuple(_result_json(r) for r in ((allocation.get("devices") or {}).get("results") or ()))
    return ClaimAllocation(namespace=_text(meta.get("namespace")), name=_text(meta.get("name")),
                           uid=_text(meta.get("uid")), results=results,
                           resource_version=_text(meta.get("resourceVersion")))


class KubernetesResourceClaims:
    """ResourceClaims through ``api_client`` (module docstring); ``request_timeout`` in seconds per call. The
    caller owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent. Raises :class:`ResourceClaimsError`."""
        try:
            with api_errors(f"get resourceclaim {namespace[:100]}/{name[:100]}"):
                claim = self._api.read_namespaced_resource_claim(name, namespace, _request_timeout=self._timeout)
        except NotFoundError:
            return None
        except ClusterError as error:
            raise ResourceClaimsError(str(error)) from error
        return claim_from_v1(claim)

    def list_claims(self) -> Listing[ClaimAllocation]:
        """Every claim of every namespace and the list's resourceVersion. Raises ClusterError."""
        claims, rv = list_json(self._api.list_resource_claim_for_all_namespaces, claim_from_json,
                               "list resourceclaims", _request_timeout=self._timeout)
        return Listing(claims, rv)

    def list_namespace_claims(self, namespace: str) -> tuple[ClaimAllocation, ...]:
        """Every claim of ``namespace``, by name. Raises ClusterError."""
        claims, _ = list_json(self._api.list_namespaced_resource_claim, claim_from_json,
                              f"list resourceclaims in {namespace[:100]}", namespace=namespace,
                              _request_timeout=self._timeout)
        return tuple(sorted(claims, key=lambda c: c.name))

    def watch_claims(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[ClaimAllocation]]:
        """Claim changes after ``resource_version`` for about ``timeout_seconds`` (s). The iterator raises
        GoneError (410) and ClusterError."""
        return watch_json(self._api.list_resource_claim_for_all_namespaces, claim_from_json, resource_version,
                          timeout_seconds, "watch resourceclaims")
