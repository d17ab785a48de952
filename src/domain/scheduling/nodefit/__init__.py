"""Node filters of the standalone scheduling loop, as kube-scheduler's plugins of the same names define them.

Each plugin matches :class:`~domain.scheduling.framework.cycle.FilterPlugin`: it returns a boolean mask over ledger
slots. Node objects come from a :class:`NodeTable` (slot → :class:`NodeObject`, kept by
:class:`~domain.scheduling.sync.LedgerSync`); a pod's scheduling constraints from a mapping pod UID →
:class:`PodConstraints` that the loop fills before each cycle (:class:`PodRequest` carries resources only).
A pod whose constraints are missing from the mapping fits no node — fail closed, with a reason that says so.

* ``NodeUnschedulable``: ``spec.unschedulable`` nodes, unless the pod tolerates the
  ``node.kubernetes.io/unschedulable:NoSchedule`` taint (kube-scheduler's rule);
* ``TaintToleration``: every ``NoSchedule``/``NoExecute`` taint must be tolerated (``PreferNoSchedule`` is a
  scoring matter and ignored);
* ``NodeSelector``: every ``spec.nodeSelector`` pair must equal a node label;
* ``RequiredNodeAffinity``: terms ORed, requirements in a term ANDed; operators In, NotIn, Exists,
  DoesNotExist, Gt, Lt (integers); ``matchFields`` supports ``metadata.name`` with In/NotIn; an empty term or
  an unknown operator matches nothing (the API server refuses those anyway);
* ``ExtendedResourceFit``: extended resources other than ours (names with a ``/``, e.g. ``example.com/fpga``):
  node allocatable minus what the pods bound there request must cover the pod's effective request
  (``max(Σ app, max init)``, Kubernetes' rule); our GPU resources are the ledger's business;
* ``RuntimeToggle``: for GPU pods (MIG pods included), nodes whose Runtime toggle state annotation (written by the node
  controller, :mod:`domain.toggle`) is present but is not ``enabled`` with the enable label ``true`` — a toggle
  in transition (``enabling``, ``disabling``), ``disabled``, ``failed``, an unknown value, or ``enabled`` while the
  label already asks for disable. Nodes without the annotation were never toggled and keep taking GPU pods as
  before; CPU-only pods pass;
* ``NodeGate``: nodes the caller marks as not taking GPU pods (stale or foreign-protocol inventory), each with a
  reason; MIG pods are gated like GPU pods (their instances come from the same inventory); CPU-only pods pass.

Cost: masks depend only on the node objects and on one part of the pod's constraints, so each plugin caches
the full-width mask by ``(NodeTable.version, ledger rows, constraint key)``; ``version`` only moves when a
scheduling-relevant node field changes (labels, taints, unschedulable), not on heartbeats. With 5000 nodes a
new constraint key costs one Python pass over the nodes; repeats cost one ``&``. A plugin that reads an
annotation registers its key with :meth:`NodeTable.watch_annotation`, so ``version`` also moves when that
annotation's value changes (and only then).

Sources: kube-scheduler's ``nodeunschedulable``, ``tainttoleration``, ``nodeaffinity`` plugins
(``pkg/scheduler/framework/plugins``) and the core/v1 API reference for ``NodeSelectorRequirement`` and
``Toleration``.

Parts: :mod:`.table`, :mod:`.objects`, :mod:`.gates`; this package re-exports their public names. The admission
holds that the held-nodes gate reads are :mod:`.holds`.
"""

from domain.scheduling.nodefit.gates import (
    AdmissionHold,
    ClaimsOnly,
    ExtendedResourceFit,
    NodeGate,
    RuntimeToggle,
    node_filters,
    node_fit_reason,
    toggle_admits,
)
from domain.scheduling.nodefit.objects import (
    NodeSelector,
    NodeUnschedulable,
    RequiredNodeAffinity,
    TaintToleration,
    requirement_matches,
    term_matches,
    tolerates_all,
)
from domain.scheduling.nodefit.table import (
    GATE_EXAMPLES,
    UNSCHEDULABLE_TAINT,
    NodeTable,
    PodConstraints,
    extended_requests,
)

__all__ = [
    "GATE_EXAMPLES",
    "UNSCHEDULABLE_TAINT",
    "AdmissionHold",
    "ClaimsOnly",
    "ExtendedResourceFit",
    "NodeGate",
    "NodeSelector",
    "NodeTable",
    "NodeUnschedulable",
    "PodConstraints",
    "RequiredNodeAffinity",
    "RuntimeToggle",
    "TaintToleration",
    "extended_requests",
    "node_filters",
    "node_fit_reason",
    "requirement_matches",
    "term_matches",
    "toggle_admits",
    "tolerates_all",
]
