"""In-memory ResourceSlices (:class:`~ports.resource_slices.ResourceSlicesApi`) for tests and ``--in-memory`` runs.

Holds slices by name; resourceVersions are a counter shared by all slices (as the server's are ordered). Owner
references are kept but nothing collects them: :meth:`InMemoryResourceSlices.delete_node_slices` does what the
garbage collector does when a Node goes. Thread-safe (one lock).
"""

from __future__ import annotations

import threading

import attrs

from domain.dra.slices import ResourceSlice
from ports.cluster import ConflictError, NotFoundError


class InMemoryResourceSlices:
    """ResourceSlices in a dict (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, ResourceSlice] = {}
        self._version = 0
        self.writes = 0
        """Create, update and delete calls that changed something (for tests: an idempotent pass writes none)."""

    def _stamp(self, resource_slice: ResourceSlice) -> ResourceSlice:
        self._version += 1
        self.writes += 1
        stored = attrs.evolve(resource_slice, resource_version=str(self._version))
        self._slices[stored.name] = stored
        return stored

    def list_resource_slices(self, *, driver: str, node: str) -> tuple[ResourceSlice, ...]:
        """The slices of ``driver`` on ``node``, by name."""
        with self._lock:
            return tuple(s for _, s in sorted(self._slices.items()) if s.driver == driver and s.node == node)

    def create_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Store a new slice. Raises ConflictError when the name exists."""
        with self._lock:
            if resource_slice.name in self._slices:
                raise ConflictError(f"create resourceslice {resource_slice.name}: already exists")
            return self._stamp(resource_slice)

    def update_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Replace a stored slice. Raises NotFoundError, ConflictError (stale resourceVersion)."""
        with self._lock:
            old = self._slices.get(resource_slice.name)
            if old is None:
                raise NotFoundError(f"update resourceslice {resource_slice.name}: not found")
            if resource_slice.resource_version and resource_slice.resource_version != old.resource_version:
                raise ConflictError(f"update resourceslice {resource_slice.name}: stale resourceVersion")
            return self._stamp(resource_slice)

    def delete_resource_slice(self, name: str) -> None:
        """Delete a slice; a missing one is no error."""
        with self._lock:
            if self._slices.pop(name, None) is not None:
                self.writes += 1

    def delete_node_slices(self, node: str) -> int:
        """What the garbage collector does when Node ``node`` goes: delete the slices it owns; returns how many."""
        with self._lock:
            gone = [n for n, s in self._slices.items() if s.owner is not None and s.owner.name == node]
            for name in gone:
                del self._slices[name]
            return len(gone)
