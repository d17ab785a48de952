"""The cluster port of a component that talks to an API server: the Kubernetes adapter over a kubeconfig.

Invariant: the API client is closed when the resource ends (dependency-injector ``Resource`` shutdown), however
the component stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from adapters.kubernetes import KubernetesCluster, from_kubeconfig
from adapters.memory.cluster import InMemoryCluster
from ports.cluster import ClusterApi


def api_server(kubeconfig: Path | None, *, component: str, request_timeout: float | None = None
               ) -> Iterator[ClusterApi]:
    """Yield the API server of ``kubeconfig`` (None: the pod's in-cluster service account) as the cluster port,
    writing Events as ``component``; ``request_timeout`` (s; None: the adapter's default) bounds each request.
    Closes the client on exit. Raises the client's configuration errors (``kubernetes.config.ConfigException``)."""
    api_client = from_kubeconfig(None if kubeconfig is None else str(kubeconfig))
    with contextlib.closing(api_client):
        if request_timeout is None:
            yield KubernetesCluster(api_client, component=component)
        else:
            yield KubernetesCluster(api_client, component=component, request_timeout=request_timeout)


def in_memory_or_api_server(in_memory: bool, kubeconfig: Path | None, *, component: str) -> Iterator[ClusterApi]:
    """Yield an empty in-memory cluster when ``in_memory`` (development, tests), else :func:`api_server`."""
    if in_memory:
        yield InMemoryCluster()
        return
    yield from api_server(kubeconfig, component=component)
