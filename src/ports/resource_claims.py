"""Ports of the kubelet DRA plugin: reading ResourceClaims, and the checkpoint of prepared claims.

:class:`ResourceClaimsApi`: ``get`` returns the claim ``namespace``/``name`` with its allocation results
(``domain.dra.claims.ClaimAllocation``), None when it does not exist. Implementations:
``adapters.kubernetes.resourceclaims.KubernetesResourceClaims`` (``resource.k8s.io/v1``) and
``adapters.memory.resource_claims.InMemoryResourceClaims``. Errors: :class:`ResourceClaimsError`.

:class:`PreparedClaimsStore`: ``load`` returns every prepared claim by UID (empty when nothing was saved),
``save`` replaces them atomically (a crash leaves the old or the new set, never a torn one). Implementations:
``adapters.statefile.dra_checkpoint.JsonPreparedClaims`` and ``adapters.memory.resource_claims.InMemoryPreparedClaims``.
Errors: :class:`CheckpointError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from domain.dra.claims import ClaimAllocation
from domain.dra.prepared import PreparedClaim

__all__ = ["CheckpointError", "PreparedClaimsStore", "ResourceClaimsApi", "ResourceClaimsError"]


class ResourceClaimsError(Exception):
    """The claim could not be read (API unreachable, forbidden, malformed); the message names the claim."""


class CheckpointError(Exception):
    """The checkpoint could not be read or written; the message names the file."""


class ResourceClaimsApi(Protocol):
    """ResourceClaims, read only (module docstring)."""

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim with its allocation results, None when absent. Raises :class:`ResourceClaimsError`."""
        ...


class PreparedClaimsStore(Protocol):
    """The plugin's checkpoint (module docstring)."""

    def load(self) -> dict[str, PreparedClaim]:
        """Every saved prepared claim by UID. Raises :class:`CheckpointError`."""
        ...

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the saved claims atomically. Raises :class:`CheckpointError`."""
        ...
