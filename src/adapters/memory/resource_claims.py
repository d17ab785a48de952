"""In-memory twins of the DRA plugin's ports (``ports.resource_claims``): :class:`InMemoryResourceClaims` holds
claims put by tests (``put``, ``delete``), :class:`InMemoryPreparedClaims` holds the last saved checkpoint (``saves``
counts saves; :meth:`InMemoryPreparedClaims.fail` makes ``save`` raise)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from domain.dra.claims import ClaimAllocation
from domain.dra.prepared import PreparedClaim
from ports.resource_claims import CheckpointError


class InMemoryResourceClaims:
    """Claims by (namespace, name); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[tuple[str, str], ClaimAllocation] = {}

    def put(self, claim: ClaimAllocation) -> None:
        """Create or replace ``claim``."""
        with self._lock:
            self._claims[(claim.namespace, claim.name)] = claim

    def delete(self, namespace: str, name: str) -> None:
        """Remove the claim (no error when absent)."""
        with self._lock:
            self._claims.pop((namespace, name), None)

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent."""
        with self._lock:
            return self._claims.get((namespace, name))


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
