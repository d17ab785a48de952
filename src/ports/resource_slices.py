"""The ResourceSlice port: what the DRA driver needs of ``resource.k8s.io/v1`` ResourceSlices, in domain types
(:mod:`domain.dra.slices`).

Semantics every implementation honours (``tests/contract/test_resource_slices_contract.py``, in-memory and against a
real kube-apiserver):

* ``list_resource_slices(driver=, node=)`` returns the slices of that driver on that node (``spec.driver``,
  ``spec.nodeName``), by name, with their resourceVersion; content reads back equal to what was written (the
  server's ``timeAdded`` of taints is not part of the domain value);
* ``create_resource_slice`` stores a new slice, with an owner reference to its Node when ``owner`` is set (so the
  garbage collector removes it with the Node); an existing name raises :class:`ConflictError`;
* ``update_resource_slice`` replaces a slice's spec (and owner); with a ``resource_version`` the write is
  conditional (stale: :class:`ConflictError`); a missing one raises :class:`NotFoundError`;
* ``delete_resource_slice`` is idempotent: a missing slice is not an error.

:class:`ResourceSlicesWatch` (the scheduler's slice informer, for the GPU inventory of DRA-only nodes):
``list_driver_slices(driver=)`` returns every slice of that driver on every node with the list's resourceVersion,
``watch_driver_slices`` every later change of that driver's slices, in order (a DELETED event carries the last
state), with the semantics of the cluster port (``ports.cluster``: a watch from a resourceVersion the server no
longer has raises :class:`ports.cluster.GoneError`; every failure is a :class:`ports.cluster.ClusterError`).
Implemented by the same two adapters (``adapters.kubernetes.resourceslices.KubernetesResourceSlices``,
``adapters.memory.resource_slices.InMemoryResourceSlices``), checked by the same contract suite.

Errors: the cluster port's (:class:`~ports.cluster.ClusterError` and subclasses; :class:`UnavailableError` when the
API server cannot be reached), re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from domain.dra.slices import ResourceSlice
from domain.kube.objects import Listing, WatchEvent
from ports.cluster import ClusterError, ConflictError, GoneError, NotFoundError, UnavailableError

__all__ = ["ClusterError", "ConflictError", "GoneError", "NotFoundError", "ResourceSlicesApi", "ResourceSlicesWatch",
           "UnavailableError"]


class ResourceSlicesApi(Protocol):
    """ResourceSlices of one driver's node pools (module docstring)."""

    def list_resource_slices(self, *, driver: str, node: str) -> tuple[ResourceSlice, ...]:
        """The slices of ``driver`` on ``node``, by name. Raises ClusterError."""
        ...

    def create_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Store a new slice; returns it with its resourceVersion. Raises ConflictError when the name exists."""
        ...

    def update_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Replace a stored slice; returns it with its new resourceVersion. Raises NotFoundError, ConflictError
        (stale resourceVersion)."""
        ...

    def delete_resource_slice(self, name: str) -> None:
        """Delete a slice; a missing one is no error. Raises ClusterError."""
        ...


class ResourceSlicesWatch(Protocol):
    """One driver's ResourceSlices of all nodes, listed and watched (module docstring)."""

    def list_driver_slices(self, *, driver: str) -> Listing[ResourceSlice]:
        """Every slice of ``driver`` on every node and the list's resourceVersion. Raises
        :class:`ports.cluster.ClusterError`."""
        ...

    def watch_driver_slices(self, *, driver: str, resource_version: str,
                            timeout_seconds: float) -> Iterator[WatchEvent[ResourceSlice]]:
        """Changes of ``driver``'s slices after ``resource_version`` for about ``timeout_seconds`` (s). The iterator
        raises :class:`ports.cluster.GoneError` (410) and :class:`ports.cluster.ClusterError`."""
        ...
