"""Translate Kubernetes objects into the ledger's terms: pod requests, node inventories, pod allocations.

* :func:`pod_request` reads our three extended resources per container (limits, falling back to requests;
  both set must be equal, as the API server enforces for extended resources) plus node-level ``cpu`` and
  ``memory`` by Kubernetes' effective-request rule ``max(Σ app, max init)``, and the GPU selector annotations.
  Units: core in percent of one GPU (integer 1..100) → milli-GPU; memory in ``memory_unit`` units → bytes, or
  in percentage mode → a relative share (``ContainerRequest.memory_milli``, resolved per GPU by the default
  rule of :mod:`domain.request`). Bad values raise :class:`InvalidRequestError` naming the pod, the container,
  the resource and the value (failure case B12).
* :func:`read_node` / :func:`node_inventory` read a Node's inventory annotation and allocatable quantities,
  and say why a node must not take GPU pods (missing, malformed, stale, future-dated or foreign-protocol
  inventory); :func:`inventory_reason` re-evaluates that reason at a later time without decoding again.
* :func:`read_allocation` / :func:`pod_allocation` give the ledger record of a pod that exists in the cluster:
  its plan when the pod is bound (never for a pending pod: failure case B07), the caller's own reservation
  while it is being bound, or an inferred placement for a pod bound by another scheduler (failure case B08,
  see :mod:`domain.kube.inference`).

MIG (:mod:`domain.mig`): :func:`pod_request` also reads ``<prefix>/mig-<profile>`` resources through the one shared
resource table (:func:`domain.kube.migresources.mig_resource_table`, the table the device plugin registers from); a name
under that stem the table does not know is rejected with the table's "unknown profile" reason (failure case B30),
so the scheduler reports it instead of leaving the pod Pending. :func:`read_mig_plan` reads the MIG part of a
bound pod's plan (same trust rules as the GPU plan), :func:`mig_container_plans` writes it.

Sources: Kubernetes docs "Extended resources" (integers, requests = limits), "Resource sharing within containers"
(effective requests with init containers); failure cases B07/B08/B12 (``docs/failure-cases.md``).

Parts: :mod:`.pods`, :mod:`.nodes`, :mod:`.allocations`, :mod:`.mig`; this package re-exports their public names.
"""

from domain.kube.translate.allocations import (
    AllocationReading,
    AllocationSource,
    names_gpu_resources,
    pod_allocation,
    read_allocation,
)
from domain.kube.translate.mig import (
    MigPlanReading,
    asks_mig,
    check_mig_plan,
    mig_allocation_of,
    mig_container_plans,
    mig_pod_request,
    read_mig_plan,
)
from domain.kube.translate.nodes import (
    KUBELET_UNREGISTERED,
    PROTOCOL_PUBLISHERS,
    InventoryReading,
    heartbeat_problem,
    inventory_reason,
    node_inventory,
    protocol_mismatches,
    read_node,
)
from domain.kube.translate.pods import mig_stem, mig_table, node_requests, pod_request, pod_selector

__all__ = [
    "KUBELET_UNREGISTERED",
    "PROTOCOL_PUBLISHERS",
    "AllocationReading",
    "AllocationSource",
    "InventoryReading",
    "MigPlanReading",
    "asks_mig",
    "check_mig_plan",
    "heartbeat_problem",
    "inventory_reason",
    "mig_allocation_of",
    "mig_container_plans",
    "mig_pod_request",
    "mig_stem",
    "mig_table",
    "names_gpu_resources",
    "node_inventory",
    "node_requests",
    "pod_allocation",
    "pod_request",
    "pod_selector",
    "protocol_mismatches",
    "read_allocation",
    "read_mig_plan",
    "read_node",
]
