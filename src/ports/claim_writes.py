"""Port of the standalone scheduler's DRA allocator: reading a claim and writing its allocation and reservations.

:class:`ClaimWritesApi` works on ``resource.k8s.io/v1`` ResourceClaims the way kube-scheduler's DynamicResources
plugin does (its PreBind and Unreserve), every write preconditioned on the ``resource_version`` of the
:class:`~domain.dra.claims.ClaimAllocation` given (optimistic concurrency: a claim changed since it was read raises
:class:`ports.cluster.ConflictError`, and nothing is written):

* ``allocate``: add the finalizer :data:`DELETE_PROTECTION` (so the claim is not deleted while allocated; the
  resourceclaim controller of kube-controller-manager removes it when it deallocates), then write
  ``status.allocation`` (``devices.results`` as given; ``nodeSelector`` = ``matchFields metadata.name In [node]``)
  and append the consumer to ``status.reservedFor``;
* ``reserve``: append the consumer to ``status.reservedFor`` of an allocated claim;
* ``unreserve``: remove the consumer from ``status.reservedFor``; with ``deallocate`` and no consumer left, clear
  ``status.allocation`` too and drop the finalizer (a rollback of our own ``allocate``).

Each returns the claim as stored after its last write; when ``allocate``'s status write fails after its finalizer
write, the finalizer is taken off again (best effort). Errors: :class:`ports.cluster.ConflictError` (409),
:class:`ports.cluster.NotFoundError` (the claim is gone), :class:`ports.cluster.ClusterError` (anything else),
each naming the claim. Implementations: ``adapters.kubernetes.claimwrites.KubernetesClaimWrites`` and
``adapters.memory.resource_claims.InMemoryResourceClaims``; ``tests/contract/test_claim_writes_contract.py`` holds
both to one contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from domain.dra.claims import AllocationResult, ClaimAllocation

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""The finalizer kube-scheduler puts on a claim it allocates (``resourceapi.Finalizer``)."""


@attrs.frozen
class Consumer:
    """A pod in a claim's ``status.reservedFor``: ``name`` and ``uid`` (resource ``pods``, core API group)."""

    name: str
    uid: str


class ClaimWritesApi(Protocol):
    """ResourceClaims, read and allocated (module docstring)."""

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent. Raises :class:`ports.cluster.ClusterError` (naming the claim)."""
        ...

    def allocate(self, claim: ClaimAllocation, results: Sequence[AllocationResult], *, node: str,
                 consumer: Consumer) -> ClaimAllocation:
        """Allocate ``claim`` (as read, unallocated) with ``results`` on ``node``, reserved for ``consumer``."""
        ...

    def reserve(self, claim: ClaimAllocation, consumer: Consumer) -> ClaimAllocation:
        """Add ``consumer`` to the allocated ``claim``'s ``reservedFor``."""
        ...

    def unreserve(self, claim: ClaimAllocation, consumer_uid: str, *, deallocate: bool) -> ClaimAllocation:
        """Remove ``consumer_uid`` from ``reservedFor``; with ``deallocate`` and none left, deallocate."""
        ...
