"""The ResourceClaimTemplate port of the claim-migrate webhook: create the template of a claim shape.

``create_template(namespace, shape)`` creates ``ResourceClaimTemplate`` ``shape.template_name`` in ``namespace``
with ``shape.template_spec()`` (:class:`domain.dra.migrate.ClaimShape`) and returns True, or returns False when a
template of that name already exists there (its content is left alone). ``read_template(namespace, name)`` returns
the shape a template asks, None when it is absent or asks something no shape says (selectors, constraints, several
requests): the migrator compares an existing template with the shape its name stands for.

Implementations: ``adapters.kubernetes.claimtemplates.KubernetesClaimTemplates`` (``resource.k8s.io/v1``; RBAC
``create`` and ``get`` on ``resourceclaimtemplates``) and ``adapters.memory.claim_templates.InMemoryClaimTemplates``.
Errors: the cluster port's (:class:`~ports.cluster.ClusterError` and subclasses), re-exported here.
"""

from __future__ import annotations

from typing import Protocol

from domain.dra.migrate import ClaimShape
from ports.cluster import ClusterError

__all__ = ["ClaimTemplatesApi", "ClusterError"]


class ClaimTemplatesApi(Protocol):
    """ResourceClaimTemplates, created (module docstring)."""

    def create_template(self, namespace: str, shape: ClaimShape) -> bool:
        """Create the template of ``shape`` in ``namespace``: True, or False when it exists. Raises ClusterError."""
        ...

    def read_template(self, namespace: str, name: str) -> ClaimShape | None:
        """The shape template ``name`` of ``namespace`` asks (module docstring). Raises ClusterError."""
        ...
