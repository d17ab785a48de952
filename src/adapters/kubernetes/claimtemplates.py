"""ResourceClaimTemplates (:class:`~ports.claim_templates.ClaimTemplatesApi`) over the official client's
``ResourceV1Api`` (``resource.k8s.io/v1``).

A 409 AlreadyExists answers False; every other API failure the cluster port's errors (:func:`.errors.api_errors`).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client import ApiException

from domain.dra.migrate import ClaimShape

from .compat import wire_timeout
from .errors import api_errors


class KubernetesClaimTemplates:
    """ResourceClaimTemplates through ``api_client`` (module docstring); ``request_timeout`` in seconds per call.
    The caller owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
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
