"""What every resource of :class:`~adapters.kubernetes.cluster.KubernetesCluster` shares: the ``ApiClient`` (one
connection pool), the API groups' clients over it and the request timeout of one non-watch call.

Invariant: ``_timeout`` is ``_seconds`` as the client takes it (:func:`.compat.wire_timeout`: 28–35 drop a float);
the caller owns and closes the ``ApiClient``.
"""

from __future__ import annotations

from kubernetes import client

from .compat import wire_timeout


class KubernetesApis:
    """The clients of ``api_client`` (CoreV1Api, CoordinationV1Api, BatchV1Api) with ``request_timeout`` (s) per
    non-watch call (module docstring)."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float) -> None:
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._seconds = request_timeout
        self._timeout = wire_timeout(request_timeout)

    @property
    def request_timeout(self) -> float:
        """Client timeout (s) of one non-watch call."""
        return self._seconds

    @property
    def api_client(self) -> client.ApiClient:
        """The API client these calls go through (for the adapters of other API groups on the same connection)."""
        return self._api_client
