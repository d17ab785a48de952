"""ResourceClaimTemplates (:class:`~ports.claim_templates.ClaimTemplatesApi`) over the official client's
``ResourceV1Api`` (``resource.k8s.io/v1``).

``create_template`` answers False for a 409 AlreadyExists; ``read_template`` decodes a template back into the
:class:`~domain.dra.migrate.ClaimShape` it asks (:func:`shape_of`), None when it is absent or asks anything a shape
does not say. Every other API failure is the cluster port's errors (:func:`.errors.api_errors`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client import ApiException

from domain.dra.migrate import REQUEST_NAME, ClaimShape
from domain.errors import InvalidRequestError
from domain.kube.protocol import parse_quantity

from .compat import wire_timeout
from .errors import api_errors

_EXACTLY_KEYS = {"deviceClassName", "allocationMode", "count", "capacity"}


def shape_of(spec: Mapping[str, Any]) -> ClaimShape | None:
    """The shape a ``ResourceClaimTemplate.spec`` (JSON) asks: one device request named ``gpu``, ``exactly`` of one
    class with ``ExactCount``, a count, and capacity requests ``cores``/``memory`` or none; None for anything else
    (selectors, constraints, config, several requests, other amounts)."""
    devices = (spec.get("spec") or {}).get("devices") or {}
    requests = devices.get("requests") or []
    if set(devices) - {"requests"} or len(requests) != 1:
        return None
    (request,) = requests
    exactly = request.get("exactly") or {}
    if request.get("name") != REQUEST_NAME or set(request) - {"name", "exactly"} or set(exactly) - _EXACTLY_KEYS:
        return None
    if exactly.get("allocationMode", "ExactCount") != "ExactCount" or not isinstance(exactly.get("count", 1), int):
        return None
    amounts = (exactly.get("capacity") or {}).get("requests") or {}
    if set(amounts) - {"cores", "memory"}:
        return None
    try:
        cores = None if "cores" not in amounts else parse_quantity("cores", str(amounts["cores"]))
        memory = None if "memory" not in amounts else parse_quantity("memory", str(amounts["memory"]))
        return ClaimShape(str(exactly.get("deviceClassName", "")), count=exactly.get("count", 1), cores=cores,
                          memory_bytes=memory)
    except InvalidRequestError:
        return None


class KubernetesClaimTemplates:
    """ResourceClaimTemplates through ``api_client`` (module docstring); ``request_timeout`` in seconds per call.
    The caller owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api_client = api_client
        self._resource = client.ResourceV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def create_template(self, namespace: str, shape: ClaimShape) -> bool:
        """Create the template of ``shape`` in ``namespace``: True, or False when it exists. Raises ClusterError."""
        spec = shape.template_spec()  # a dict body: the client sends it as it is (no model round trip)
        body: Any = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                     "metadata": {"name": shape.template_name, "labels": spec["metadata"]["labels"]}, "spec": spec}
        with api_errors(f"create resourceclaimtemplate {namespace[:100]}/{shape.template_name}"):
            try:
                self._resource.create_namespaced_resource_claim_template(namespace, body,
                                                                         _request_timeout=self._timeout)
            except ApiException as error:
                if error.status == 409:
                    return False
                raise
        return True

    def read_template(self, namespace: str, name: str) -> ClaimShape | None:
        """The shape template ``name`` of ``namespace`` asks; None when absent or no shape. Raises ClusterError."""
        with api_errors(f"get resourceclaimtemplate {namespace[:100]}/{name[:100]}"):
            try:
                found = self._resource.read_namespaced_resource_claim_template(name, namespace,
                                                                               _request_timeout=self._timeout)
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
        spec = self._api_client.sanitize_for_serialization(found.spec)
        return shape_of(spec) if isinstance(spec, dict) else None
