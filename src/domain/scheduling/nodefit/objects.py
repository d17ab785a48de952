"""Filters on the Node object, as kube-scheduler's plugins of the same names define them: ``NodeUnschedulable``,
``TaintToleration``, ``NodeSelector``, ``RequiredNodeAffinity``. Sources: kube-scheduler's ``nodeunschedulable``,
``tainttoleration``, ``nodeaffinity`` plugins and the core/v1 API reference. Invariant: each mask depends only on the
node objects and one part of the pod's constraints, and is cached by them.
"""


from __future__ import annotations

from collections.abc import Hashable

from domain.kube.objects import (
    NodeObject,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
)
from domain.scheduling.nodefit.table import (
    UNSCHEDULABLE_TAINT,
    PodConstraints,
    _CachedNodeFilter,
)


def tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> bool:
    """True when every NoSchedule/NoExecute taint is tolerated by some toleration."""
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.effect is not TaintEffect.PREFER_NO_SCHEDULE
    )


class NodeUnschedulable(_CachedNodeFilter):
    """Cordoned nodes (``spec.unschedulable``) take only pods tolerating the unschedulable taint."""

    name = "NodeUnschedulable"
    reason = "node is unschedulable (cordoned)"

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """Whether the pod tolerates :data:`UNSCHEDULABLE_TAINT`."""
        return any(t.tolerates(UNSCHEDULABLE_TAINT) for t in constraints.tolerations)

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """Schedulable nodes always; cordoned ones only when tolerated."""
        return bool(key) or not node.unschedulable



class TaintToleration(_CachedNodeFilter):
    """NoSchedule and NoExecute taints must be tolerated."""

    name = "TaintToleration"
    reason = "node has a taint the pod does not tolerate"

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """The pod's tolerations."""
        return constraints.tolerations

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """See :func:`tolerates_all`."""
        assert isinstance(key, tuple)
        return tolerates_all(key, node.taints)



class NodeSelector(_CachedNodeFilter):
    """``spec.nodeSelector``: every pair must equal a node label."""

    name = "NodeSelector"
    reason = "node labels do not match the pod's nodeSelector"

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """The selector pairs, or None when empty."""
        return constraints.node_selector or None

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """All pairs match."""
        assert isinstance(key, tuple)
        return all(node.labels.get(k) == v for k, v in key)



def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    """One requirement against one value (``None`` = key absent), per core/v1 NodeSelectorOperator."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        have, bound = _as_int(value), _as_int(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: NodeSelectorTerm, node: NodeObject) -> bool:
    """All requirements of ``term`` hold on ``node``; an empty term matches nothing; ``matchFields`` knows
    only ``metadata.name`` with In/NotIn."""
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_fields:
        if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
            return False
        if not requirement_matches(req, node.name):
            return False
    return all(requirement_matches(req, node.labels.get(req.key)) for req in term.match_expressions)


class RequiredNodeAffinity(_CachedNodeFilter):
    """``requiredDuringSchedulingIgnoredDuringExecution``: some term must match."""

    name = "RequiredNodeAffinity"
    reason = "node does not match the pod's required node affinity"

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """The terms, or None when there are none."""
        return constraints.affinity or None

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """Terms ORed."""
        assert isinstance(key, tuple)
        return any(term_matches(term, node) for term in key)
