"""Namespaces' labels (:class:`~ports.namespaces.NamespacesApi`) over the official client's ``CoreV1Api``.

A missing Namespace raises :class:`~ports.cluster.NotFoundError`; every other API failure the cluster port's errors
(:func:`.errors.api_errors`). Checked by ``tests/contract/test_namespaces_contract.py`` against a real kube-apiserver.
"""

from __future__ import annotations

from kubernetes import client

from .compat import wire_timeout
from .errors import api_errors


class KubernetesNamespaces:
    """Namespaces through ``api_client`` (module docstring); ``request_timeout`` in seconds per call. The caller
    owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of Namespace ``name``. Raises NotFoundError, ClusterError."""
        with api_errors(f"get namespace {name[:100]}"):
            found = self._core.read_namespace(name, _request_timeout=self._timeout)
        return dict((found.metadata.labels if found.metadata is not None else None) or {})

    def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every Namespace's labels by name. Raises ClusterError."""
        with api_errors("list namespaces"):
            found = self._core.list_namespace(_request_timeout=self._timeout)
        out: dict[str, dict[str, str]] = {}
        for item in found.items:
            if item.metadata is not None and item.metadata.name:
                out[item.metadata.name] = dict(item.metadata.labels or {})
        return dict(sorted(out.items()))
