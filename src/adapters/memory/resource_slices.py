"""In-memory ResourceSlices (:class:`~ports.resource_slices.ResourceSlicesApi` and
:class:`~ports.resource_slices.ResourceSlicesWatch`) for tests and ``--in-memory`` runs.

Holds slices by name on the in-memory cluster's machinery (:class:`~adapters.memory.cluster_store.InMemoryStore`):
every write is at a new resourceVersion of one counter (as the server's are ordered) and is recorded in a bounded
change history (``history_limit`` changes), which ``watch_driver_slices`` follows; a watch from before that window
(or from before :meth:`InMemoryResourceSlices.compact`) raises :class:`~ports.cluster.GoneError`, as kube-apiserver
answers 410. Owner references are kept but nothing collects them: :meth:`InMemoryResourceSlices.delete_node_slices`
does what the garbage collector does when a Node goes (its deletions are recorded and watched too). Thread-safe
(one lock).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from domain.dra.slices import ResourceSlice
from domain.kube.objects import Listing, WatchEvent
from ports.cluster import ConflictError, NotFoundError

from .cluster_store import InMemoryStore
from .cluster_watch import History


class InMemoryResourceSlices(InMemoryStore):
    """ResourceSlices in a dict (module docstring); ``history_limit``: changes a watch may resume from."""

    def __init__(self, *, history_limit: int = 1000) -> None:
        super().__init__()
        self._slices: dict[str, ResourceSlice] = {}
        self._history: History[ResourceSlice] = History(history_limit)
        self.writes = 0
        """Create, update and delete calls that changed something (for tests: an idempotent pass writes none);
        :meth:`delete_node_slices`, the garbage collector's work, does not count."""

    def list_resource_slices(self, *, driver: str, node: str) -> tuple[ResourceSlice, ...]:
        """The slices of ``driver`` on ``node``, by name."""
        with self._cond:
            return tuple(s for s in self._current() if s.driver == driver and s.node == node)

    def create_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Store a new slice. Raises ConflictError when the name exists."""
        with self._cond:
            if resource_slice.name in self._slices:
                raise ConflictError(f"create resourceslice {resource_slice.name}: already exists")
            self.writes += 1
            return self._put(self._slices, resource_slice.name, self._history, resource_slice, None)

    def update_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Replace a stored slice. Raises NotFoundError, ConflictError (stale resourceVersion)."""
        with self._cond:
            old = self._slices.get(resource_slice.name)
            if old is None:
                raise NotFoundError(f"update resourceslice {resource_slice.name}: not found")
            if resource_slice.resource_version and resource_slice.resource_version != old.resource_version:
                raise ConflictError(f"update resourceslice {resource_slice.name}: stale resourceVersion")
            self.writes += 1
            return self._put(self._slices, resource_slice.name, self._history, resource_slice, old)

    def delete_resource_slice(self, name: str) -> None:
        """Delete a slice; a missing one is no error."""
        with self._cond:
            if name in self._slices:
                self.writes += 1
                self._drop(self._slices, name, self._history)

    def delete_node_slices(self, node: str) -> int:
        """What the garbage collector does when Node ``node`` goes: delete the slices it owns; returns how many."""
        with self._cond:
            gone = [n for n, s in sorted(self._slices.items()) if s.owner is not None and s.owner.name == node]
            for name in gone:
                self._drop(self._slices, name, self._history)
            return len(gone)

    def list_driver_slices(self, *, driver: str) -> Listing[ResourceSlice]:
        """Every slice of ``driver`` on every node, by name, and the list's resourceVersion."""
        with self._cond:
            return Listing(tuple(s for s in self._current() if s.driver == driver), str(self._rv))

    def watch_driver_slices(self, *, driver: str, resource_version: str,
                            timeout_seconds: float) -> Iterator[WatchEvent[ResourceSlice]]:
        """Changes of ``driver``'s slices after ``resource_version`` for ``timeout_seconds`` (s); ends early when
        the history moved past the watch. The iterator raises GoneError (and ClusterError, status 400, for a
        malformed resourceVersion)."""
        return self._watch(self._history, self._current, resource_version, timeout_seconds,
                           lambda s: s.driver == driver)

    def compact(self) -> None:
        """Forget the change history (etcd compaction): a watch from an earlier resourceVersion gets GoneError."""
        with self._cond:
            self._history.compact(self._rv)

    def _current(self) -> Iterable[ResourceSlice]:
        return [self._slices[name] for name in sorted(self._slices)]
