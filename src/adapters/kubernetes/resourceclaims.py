"""ResourceClaims, read only (:class:`~ports.resource_claims.ResourceClaimsApi`), over the official client's
``ResourceV1Api`` (``resource.k8s.io/v1``, Kubernetes 1.34+).

``get`` reads ``status.allocation.devices.results`` (request, driver, pool, device, ``consumedCapacity`` as
quantity strings, ``shareID``); a claim without an allocation has no results. A missing claim is None; any other
API error becomes :class:`ports.resource_claims.ResourceClaimsError` naming the claim.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from domain.dra.claims import AllocationResult, ClaimAllocation
from ports.cluster import ClusterError, NotFoundError
from ports.resource_claims import ResourceClaimsError

from .compat import wire_timeout
from .errors import api_errors


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
    return ClaimAllocation(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "", results=results)


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
