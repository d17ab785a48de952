"""In-memory twins of the DRA ports (``ports.resource_claims``, ``ports.claim_writes``): :class:`InMemoryResourceClaims`
holds claims put by tests (``put``, ``delete``) or allocated through it, and lists and watches them as kube-apiserver
does (every write at a new
resourceVersion, a bounded change history, 410 for a watch from before it: the in-memory cluster's machinery,
:class:`~adapters.memory.cluster_store.InMemoryStore`), :class:`InMemoryPreparedClaims` holds the last saved
checkpoint (``saves`` counts saves; :meth:`InMemoryPreparedClaims.fail` makes ``save`` raise)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.dra.prepared import PreparedClaim
from domain.kube.objects import Listing, WatchEvent
from ports.claim_writes import DELETE_PROTECTION, Consumer
from ports.cluster import ConflictError, NotFoundError
from ports.resource_claims import CheckpointError

from .cluster_store import InMemoryStore
from .cluster_watch import History


def _always(_: object) -> bool:
    return True


class InMemoryResourceClaims(InMemoryStore):
    """Claims by (namespace, name); thread-safe. ``history_limit``: changes a watch may resume from."""

    def __init__(self, *, history_limit: int = 1000) -> None:
        super().__init__()
        self._claims: dict[tuple[str, str], ClaimAllocation] = {}
        self._history: History[ClaimAllocation] = History(history_limit)
        self.finalizers: dict[str, set[str]] = {}
        """Finalizers the writes put on each claim, by claim UID."""

    def put(self, claim: ClaimAllocation) -> ClaimAllocation:
        """Create or replace ``claim`` (kept as given, at a new resourceVersion); returns the stored claim. A claim
        under a known name with another UID replaces it as a delete and a create do."""
        with self._cond:
            key = (claim.namespace, claim.name)
            prev = self._claims.get(key)
            if prev is not None and prev.uid != claim.uid:
                self._drop(self._claims, key, self._history)
                prev = None
            return self._put(self._claims, key, self._history, claim, prev)

    def delete(self, namespace: str, name: str) -> None:
        """Remove the claim (no error when absent)."""
        with self._cond:
            if (namespace, name) in self._claims:
                self._drop(self._claims, (namespace, name), self._history)

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent."""
        with self._cond:
            return self._claims.get((namespace, name))

    def list_claims(self) -> Listing[ClaimAllocation]:
        """Every claim in (namespace, name) order, and the list's resourceVersion."""
        with self._cond:
            return Listing(tuple(self._current()), str(self._rv))

    def list_namespace_claims(self, namespace: str) -> tuple[ClaimAllocation, ...]:
        """Every claim of ``namespace``, by name."""
        with self._cond:
            return tuple(self._claims[key] for key in sorted(self._claims) if key[0] == namespace)

    def watch_claims(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[ClaimAllocation]]:
        """Claim changes after ``resource_version`` for ``timeout_seconds`` (s). The iterator raises GoneError."""
        return self._watch(self._history, self._current, resource_version, timeout_seconds, _always)

    # ------------------------------------------------------------------ writes (ports.claim_writes)
    def _current_claim(self, claim: ClaimAllocation) -> ClaimAllocation:
        stored = self._claims.get((claim.namespace, claim.name))
        if stored is None or stored.uid != claim.uid:
            raise NotFoundError(f"resourceclaim {claim.key}: UID {claim.uid} not found")
        if claim.resource_version and stored.resource_version != claim.resource_version:
            raise ConflictError(f"resourceclaim {claim.key}: changed since it was read (resourceVersion "
                                f"{claim.resource_version} → {stored.resource_version})")
        return stored

    def _store(self, prev: ClaimAllocation, new: ClaimAllocation) -> ClaimAllocation:
        return self._put(self._claims, (prev.namespace, prev.name), self._history, new, prev)

    def allocate(self, claim: ClaimAllocation, results: Sequence[AllocationResult], *, node: str,
                 consumer: Consumer) -> ClaimAllocation:
        """Allocate and reserve (``ports.claim_writes``); the finalizer is recorded in :attr:`finalizers`."""
        with self._cond:
            stored = self._current_claim(claim)
            if stored.allocated or stored.results:
                raise ConflictError(f"resourceclaim {claim.key}: already allocated")
            self.finalizers.setdefault(claim.uid, set()).add(DELETE_PROTECTION)
            return self._store(stored, attrs.evolve(stored, results=tuple(results), allocated=True,
                                                    reserved_for=(*stored.reserved_for, consumer.uid)))

    def reserve(self, claim: ClaimAllocation, consumer: Consumer) -> ClaimAllocation:
        """Add ``consumer`` to ``reservedFor`` (``ports.claim_writes``)."""
        with self._cond:
            stored = self._current_claim(claim)
            if not (stored.allocated or stored.results):
                raise ConflictError(f"resourceclaim {claim.key}: no longer allocated")
            if consumer.uid in stored.reserved_for:
                return stored
            return self._store(stored, attrs.evolve(stored, reserved_for=(*stored.reserved_for, consumer.uid)))

    def unreserve(self, claim: ClaimAllocation, consumer_uid: str, *, deallocate: bool) -> ClaimAllocation:
        """Remove ``consumer_uid`` from ``reservedFor``, deallocating when asked and none is left."""
        with self._cond:
            stored = self._current_claim(attrs.evolve(claim, resource_version=""))
            left = tuple(u for u in stored.reserved_for if u != consumer_uid)
            new = attrs.evolve(stored, reserved_for=left)
            if deallocate and not left:
                new = attrs.evolve(new, results=(), allocated=False)
                self.finalizers.pop(claim.uid, None)
            return stored if new == stored else self._store(stored, new)

    def compact(self) -> None:
        """Forget the change history (etcd compaction): a watch from an earlier resourceVersion gets 410."""
        with self._cond:
            self._history.compact(self._rv)

    def _current(self) -> Iterable[ClaimAllocation]:
        return [self._claims[key] for key in sorted(self._claims)]


class InMemoryPreparedClaims:
    """The checkpoint in memory; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = {}
        self._error = ""
        self.saves = 0

    def fail(self, message: str = "") -> None:
        """Make ``save`` raise ``CheckpointError(message)`` (empty: stop failing)."""
        self._error = message

    def load(self) -> dict[str, PreparedClaim]:
        """The claims last saved."""
        with self._lock:
            return dict(self._claims)

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the saved claims. Raises :class:`CheckpointError` after :meth:`fail`."""
        with self._lock:
            if self._error:
                raise CheckpointError(self._error)
            self._claims = dict(claims)
            self.saves += 1
