"""The Lease half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``CoordinationV1Api`` (a mixin
over :class:`~.base.KubernetesApis`): leader election's reads and writes.

A create carries no resourceVersion; an update is a PUT whose resourceVersion must be current (stale → 409, empty
→ 422) and creates a missing Lease (the coordination strategy allows create-on-PUT). Times travel as
``metav1.MicroTime`` (:class:`.translate.MicroTime`).
"""

from __future__ import annotations

import attrs
from kubernetes import client

from domain.kube.objects import LeaseRecord

from .base import KubernetesApis
from .errors import api_errors
from .translate import to_epoch, to_microtime


def lease_from_v1(lease: client.V1Lease) -> LeaseRecord:
    """Domain lease of a ``V1Lease`` (absent numbers read as 0, absent times as None)."""
    meta = lease.metadata or client.V1ObjectMeta()
    spec = lease.spec or client.V1LeaseSpec()
    return LeaseRecord(
        namespace=meta.namespace or "",
        name=meta.name or "",
        holder=spec.holder_identity or "",
        lease_duration_seconds=spec.lease_duration_seconds or 0,
        acquire_time=to_epoch(spec.acquire_time),
        renew_time=to_epoch(spec.renew_time),
        transitions=spec.lease_transitions or 0,
        resource_version=meta.resource_version or "",
    )


def lease_to_v1(lease: LeaseRecord) -> client.V1Lease:
    """A ``V1Lease`` carrying ``resource_version`` when set (a replace is then conditional)."""
    return client.V1Lease(
        api_version="coordination.k8s.io/v1",
        kind="Lease",
        metadata=client.V1ObjectMeta(
            name=lease.name, namespace=lease.namespace, resource_version=lease.resource_version or None
        ),
        spec=client.V1LeaseSpec(
            holder_identity=lease.holder or None,
            lease_duration_seconds=lease.lease_duration_seconds,
            acquire_time=to_microtime(lease.acquire_time),
            renew_time=to_microtime(lease.renew_time),
            lease_transitions=lease.transitions,
        ),
    )


class KubernetesLeases(KubernetesApis):
    """The Lease methods of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring)."""

    def get_lease(self, namespace: str, name: str) -> LeaseRecord:
        """A Lease. Raises NotFoundError."""
        with api_errors(f"get lease {namespace[:64]}/{name[:100]}"):
            lease = self._coordination.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)
        return lease_from_v1(lease)

    def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Create a Lease. Raises ConflictError if it exists."""
        body = lease_to_v1(attrs.evolve(lease, resource_version=""))  # a create must carry no RV
        with api_errors(f"create lease {lease.namespace[:64]}/{lease.name[:100]}"):
            created = self._coordination.create_namespaced_lease(lease.namespace, body, _request_timeout=self._timeout)
        return lease_from_v1(created)

    def update_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """PUT a Lease. ``resource_version`` must be current: stale → ConflictError, empty → ClusterError 422. A
        missing Lease is created (the server allows create-on-PUT for Leases)."""
        with api_errors(f"update lease {lease.namespace[:64]}/{lease.name[:100]}"):
            replaced = self._coordination.replace_namespaced_lease(
                lease.name, lease.namespace, lease_to_v1(lease), _request_timeout=self._timeout
            )
        return lease_from_v1(replaced)
