"""In-memory twins of the DRA ports (``ports.resource_claims``): :class:`InMemoryResourceClaims` holds claims put by
tests (``put``, ``delete``) and lists and watches them as kube-apiserver does (every write at a new
resourceVersion, a bounded change history, 410 for a watch from before it: the in-memory cluster's machinery,
:class:`~adapters.memory.cluster_store.InMemoryStore`), :class:`InMemoryPreparedClaims` holds the last saved
checkpoint (``saves`` counts saves; :meth:`InMemoryPreparedClaims.fail` makes ``save`` raise)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping

from domain.dra.claims import ClaimAllocation
from domain.dra.prepared import PreparedClaim
from domain.kube.objects import Listing, WatchEvent
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
