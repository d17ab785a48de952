"""ResourceClaims, read only (:class:`~ports.resource_claims.ResourceClaimsApi`,
:class:`~ports.resource_claims.ResourceClaimsWatch` and :class:`~ports.resource_claims.NamespaceClaimsApi`), over the
official client's ``ResourceV1Api`` (``resource.k8s.io/v1``, Kubernetes 1.34+).

``list_claims``/``watch_claims`` cover all namespaces, ``list_namespace_claims`` one; they read the API server's
JSON directly (:mod:`.rawjson`, :func:`claim_from_json`), as the node and pod informers do; every read goes
through :func:`claim_from_json` (``status.allocation.devices.results``: request, driver, pool, device,
``consumedCapacity`` as quantity strings, ``shareID``; ``spec.devices.requests``; ``status.reservedFor``); a claim
without an allocation has no results. A missing claim is None; any other API error
becomes :class:`ports.resource_claims.ResourceClaimsError` naming the claim. :func:`serves_resource_v1` tells
whether the API server has this API at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client

from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.kube.objects import Listing, WatchEvent
from ports.cluster import ClusterError, NotFoundError
from ports.resource_claims import ResourceClaimsError

from .compat import wire_timeout
from .errors import api_errors
from .rawjson import list_json, read_json, watch_json


def serves_resource_v1(api_client: client.ApiClient, *, request_timeout: float = 30.0) -> bool | None:
    """Whether the API server serves ``resource.k8s.io/v1`` (ResourceClaims and ResourceSlices: Kubernetes 1.34+),
    read from API discovery (``GET /apis``, the official client's ``ApisApi.get_api_versions``); ``request_timeout``
    in seconds. None when discovery fails (API server unreachable, an error status, an unreadable answer); raises
    nothing."""
    try:
        with api_errors("API discovery"):
            groups = client.ApisApi(api_client).get_api_versions(_request_timeout=wire_timeout(request_timeout))
        listed = [(group.name, [v.version for v in group.versions or ()]) for group in groups.groups or ()]
    except (ClusterError, ValueError, TypeError, AttributeError):
        return None
    return any(name == "resource.k8s.io" and "v1" in versions for name, versions in listed)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _result_json(item: dict[str, Any]) -> AllocationResult:
    consumed = {str(k): _text(v) for k, v in (item.get("consumedCapacity") or {}).items()}
    share = item.get("shareID")
    return AllocationResult(request=_text(item.get("request")), driver=_text(item.get("driver")),
                            pool=_text(item.get("pool")), device=_text(item.get("device")), consumed=consumed,
                            share_id=None if share is None else str(share))


_ASK_EXTRAS = ("selectors", "adminAccess", "tolerations")
_SPEC_EXTRAS = ("constraints", "config")


def _ask_json(item: dict[str, Any]) -> DeviceAsk:
    name = _text(item.get("name"))
    if item.get("firstAvailable"):
        return DeviceAsk(name, extras=("firstAvailable",))
    exactly = item.get("exactly") or {}
    capacity = {str(k): _text(v) for k, v in ((exactly.get("capacity") or {}).get("requests") or {}).items()}
    count = exactly.get("count")
    return DeviceAsk(name, device_class=_text(exactly.get("deviceClassName")),
                     mode=_text(exactly.get("allocationMode")) or "ExactCount",
                     count=1 if count is None else int(count), capacity=capacity,
                     extras=tuple(k for k in _ASK_EXTRAS if exactly.get(k)))


def claim_from_json(obj: dict[str, Any]) -> ClaimAllocation:
    """A ResourceClaim's JSON (``resource.k8s.io/v1``) as the domain's :class:`ClaimAllocation`: identity,
    allocation results, device requests, ``reservedFor`` UIDs. Raises ValueError/TypeError/AttributeError for
    another shape."""
    meta = obj.get("metadata") or {}
    devices = (obj.get("spec") or {}).get("devices") or {}
    status = obj.get("status") or {}
    allocation = status.get("allocation") or {}
    results = tuple(_result_json(r) for r in ((allocation.get("devices") or {}).get("results") or ()))
    return ClaimAllocation(namespace=_text(meta.get("namespace")), name=_text(meta.get("name")),
                           uid=_text(meta.get("uid")), results=results,
                           resource_version=_text(meta.get("resourceVersion")),
                           requests=tuple(_ask_json(r) for r in devices.get("requests") or ()),
                           extras=tuple(k for k in _SPEC_EXTRAS if devices.get(k)),
                           allocated=bool(status.get("allocation")),
                           reserved_for=tuple(_text(r.get("uid")) for r in status.get("reservedFor") or ()))


class KubernetesResourceClaims:
    """ResourceClaims through ``api_client`` (module docstring); ``request_timeout`` in seconds per call. The
    caller owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent. Raises :class:`ResourceClaimsError`."""
        what = f"get resourceclaim {namespace[:100]}/{name[:100]}"
        try:
            with api_errors(what):
                claim = read_json(self._api.read_namespaced_resource_claim(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout), what)
        except NotFoundError:
            return None
        except ClusterError as error:
            raise ResourceClaimsError(str(error)) from error
        try:
            return claim_from_json(claim)
        except (ValueError, TypeError, AttributeError) as error:
            raise ResourceClaimsError(f"resourceclaim {namespace[:100]}/{name[:100]}: unreadable: {error}") from error

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
