"""Events and Leases of :class:`~adapters.memory.cluster.InMemoryCluster` (a mixin over
:class:`~.cluster_store.InMemoryStore`).

* **Events** — a repeat of an Event recorded before (same object, reason, message, source…) raises its count and
  last timestamp instead of adding an object, as the API server's clients aggregate (:mod:`domain.kube.events`);
  every write consumes a resourceVersion like a stored Event.
* **Leases** — create refuses an existing name (409); an update is a PUT that needs the current resourceVersion
  (stale → 409, none → 422) and creates a missing Lease (create-on-PUT, as the coordination strategy allows).
"""

from __future__ import annotations

import attrs

from domain.kube.events import EventCorrelator, SeenEvent
from domain.kube.objects import ClusterEvent, LeaseRecord
from ports.cluster import ConflictError, NotFoundError

from .cluster_store import InMemoryStore
from .cluster_watch import status_error


class InMemoryLeasesAndEvents(InMemoryStore):
    """The Event and Lease methods of :class:`~adapters.memory.cluster.InMemoryCluster` (module docstring)."""

    _leases: dict[tuple[str, str], LeaseRecord]
    _events: list[ClusterEvent]
    _correlator: EventCorrelator

    def create_event(self, event: ClusterEvent) -> None:
        """Record an Event (readable through :attr:`events`), or raise the count and last timestamp of the same
        Event recorded before (:mod:`domain.kube.events`); consumes a resourceVersion like a stored Event."""
        with self._cond:
            self._bump()
            now = self._clock()
            seen = self._correlator.seen(event)
            stored = SeenEvent(str(len(self._events)), 1, now, now) if seen is None else seen.repeated(now=now)
            self._correlator.record(event, stored)
            entry = attrs.evolve(event, count=stored.count, first_timestamp=stored.first, last_timestamp=stored.last)
            if seen is None:
                self._events.append(entry)
            else:
                self._events[int(stored.name)] = entry

    def get_lease(self, namespace: str, name: str) -> LeaseRecord:
        """A Lease. Raises NotFoundError."""
        with self._cond:
            return self._lease(namespace, name)

    def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Store a new Lease with an RV. Raises ConflictError if it exists."""
        with self._cond:
            key = (lease.namespace, lease.name)
            if key in self._leases:
                raise ConflictError(f'leases.coordination.k8s.io "{lease.name}" already exists')
            stored = attrs.evolve(lease, resource_version=str(self._bump()))
            self._leases[key] = stored
            return stored

    def update_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Replace a Lease (PUT). ``resource_version`` must be current: stale → ConflictError, empty → ClusterError
        422 ("must be specified for an update"). A missing Lease is created, as the server allows create-on-PUT
        for Leases (coordination lease strategy ``AllowCreateOnUpdate``)."""
        with self._cond:
            key = (lease.namespace, lease.name)
            prev = self._leases.get(key)
            if prev is not None:
                if not lease.resource_version:
                    raise status_error(422, f'leases "{lease.name[:100]}": metadata.resourceVersion must be specified')
                self._check_rv(prev.resource_version, lease.resource_version, f'leases "{lease.name[:100]}"')
                if lease == prev:
                    return prev
            stored = attrs.evolve(lease, resource_version=str(self._bump()))
            self._leases[key] = stored
            return stored

    # ------------------------------------------------------------------ internals (callers hold the lock)
    def _lease(self, namespace: str, name: str) -> LeaseRecord:
        try:
            return self._leases[(namespace, name)]
        except KeyError:
            raise NotFoundError(f'leases.coordination.k8s.io "{name[:100]}" not found') from None
