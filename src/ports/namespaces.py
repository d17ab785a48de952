"""The Namespace port: the labels of Namespaces, read only (the claim quota webhook and ``ljrk inspect`` read the
quota labels there, ``domain.dra.quota``).

Semantics every implementation honours (``tests/contract/test_namespaces_contract.py``, in memory and against a
real kube-apiserver):

* ``namespace_labels(name)`` returns the Namespace's labels (empty when it has none, a copy the caller may keep);
  an unknown Namespace raises :class:`NotFoundError`;
* ``list_namespace_labels()`` returns every Namespace's labels by name.

Implementations: ``adapters.kubernetes.namespaces.KubernetesNamespaces`` (core/v1; RBAC ``get``/``list`` on
``namespaces``) and ``adapters.memory.namespaces.InMemoryNamespaces``. Errors: the cluster port's
(:class:`~ports.cluster.ClusterError` and subclasses), re-exported here.
"""

from __future__ import annotations

from typing import Protocol

from ports.cluster import ClusterError, NotFoundError

__all__ = ["ClusterError", "NamespacesApi", "NotFoundError"]


class NamespacesApi(Protocol):
    """Namespaces' labels (module docstring)."""

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of Namespace ``name``. Raises NotFoundError (no such Namespace), ClusterError."""
        ...

    def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every Namespace's labels by name. Raises ClusterError."""
        ...
