"""Ports of the kubelet DRA plugin: reading ResourceClaims, and the checkpoint of prepared claims.

:class:`ResourceClaimsApi`: ``get`` returns the claim ``namespace``/``name`` with its allocation results
(``domain.dra.claims.ClaimAllocation``), None when it does not exist. Implementations:
``adapters.kubernetes.resourceclaims.KubernetesResourceClaims`` (``resource.k8s.io/v1``) and
``adapters.memory.resource_claims.InMemoryResourceClaims``. Errors: :class:`ResourceClaimsError`.

:class:`ResourceClaimsWatch` (the scheduler's claim informer): ``list_claims`` returns every claim of every
namespace with the list's resourceVersion, ``watch_claims`` every later change, in order, with the semantics of the
cluster port (``ports.cluster``: a watch from a resourceVersion the server no longer has raises
:class:`ports.cluster.GoneError`; every failure is a :class:`ports.cluster.ClusterError`). Implemented by the same
two adapters; ``tests/contract/test_resource_claims_contract.py`` checks both against one contract.

:class:`NamespaceClaimsApi` (the claim quota webhook): ``list_namespace_claims`` returns every claim of one
namespace, in name order (a namespaced list: a Role, or a ClusterRole's ``list``, suffices). Implemented by the same
two adapters, checked by the same contract suite; failures are :class:`ports.cluster.ClusterError`.

:class:`PreparedClaimsStore`: ``load`` returns every prepared claim by UID (empty when nothing was saved),
``save`` replaces them atomically (a crash leaves the old or the new set, never a torn one). Implementations:
``adapters.statefile.dra_checkpoint.JsonPreparedClaims`` and ``adapters.memory.resource_claims.InMemoryPreparedClaims``.
Errors: :class:`CheckpointError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from domain.dra.claims import ClaimAllocation
from domain.dra.prepared import PreparedClaim
from domain.kube.objects import Listing, WatchEvent

__all__ = ["CheckpointError", "NamespaceClaimsApi", "PreparedClaimsStore", "ResourceClaimsApi",
           "ResourceClaimsError", "ResourceClaimsWatch"]


class ResourceClaimsError(Exception):
    """The claim could not be read (API unreachable, forbidden, malformed); the message names the claim."""


class CheckpointError(Exception):
    """The checkpoint could not be read or written; the message names the file."""


class ResourceClaimsApi(Protocol):
    """ResourceClaims, read only (module docstring)."""

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim with its allocation results, None when absent. Raises :class:`ResourceClaimsError`."""
        ...


class ResourceClaimsWatch(Protocol):
    """ResourceClaims of all namespaces, listed and watched (module docstring)."""

    def list_claims(self) -> Listing[ClaimAllocation]:
        """Every claim and the list's resourceVersion. Raises :class:`ports.cluster.ClusterError`."""
        ...

    def watch_claims(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[ClaimAllocation]]:
        """Claim changes after ``resource_version`` for about ``timeout_seconds`` (s). The iterator raises
        :class:`ports.cluster.GoneError` (410) and :class:`ports.cluster.ClusterError`."""
        ...


class NamespaceClaimsApi(Protocol):
    """The ResourceClaims of one namespace, listed (module docstring)."""

    def list_namespace_claims(self, namespace: str) -> tuple[ClaimAllocation, ...]:
        """Every claim of ``namespace`` (none for an unknown one), by name. Raises
        :class:`ports.cluster.ClusterError`."""
        ...


class PreparedClaimsStore(Protocol):
    """The plugin's checkpoint (module docstring)."""

    def load(self) -> dict[str, PreparedClaim]:
        """Every saved prepared claim by UID. Raises :class:`CheckpointError`."""
        ...

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the saved claims atomically. Raises :class:`CheckpointError`."""
        ...
