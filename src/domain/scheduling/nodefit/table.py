"""A pod's node constraints (:class:`PodConstraints`) and the node objects the filters read (:class:`NodeTable`,
slot → Node, with a version that moves only when a scheduling-relevant field changes), plus the cached full-width
mask every node-object filter shares. Invariant: a pod whose constraints are missing fits no node (fail closed).
"""


from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping

import attrs
import numpy as np

from domain.kube.objects import (
    NodeObject,
    NodeSelectorTerm,
    PodObject,
    Taint,
    TaintEffect,
    Toleration,
)
from domain.kube.protocol import ProtocolConstants
from domain.kube.quantity import parse_count
from domain.ledger import ClusterLedger
from domain.request import PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE)
"""The taint kube-scheduler's NodeUnschedulable plugin checks tolerations against."""

_EMPTY_NODE = NodeObject(name="")
GATE_EXAMPLES = 3
"""Gated nodes named in a NodeGate reason; the rest are counted (reasons end up in pod events)."""
_CACHE_LIMIT = 512
"""Constraint keys kept per plugin before the cache is dropped (bounded memory; misses only cost time)."""
_DEFAULTS = ProtocolConstants()


@attrs.frozen
class PodConstraints:
    """A pod's node constraints, hashable so masks can be cached by them.

    ``node_selector``: sorted ``(key, value)`` pairs; ``tolerations``; ``affinity``: required node affinity
    terms (ORed).
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()
    extended: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, pod: PodObject, *, ignore: frozenset[str] = frozenset()) -> PodConstraints:
        """The constraints of ``pod``; ``extended`` holds its extended-resource requests except ``ignore``."""
        return cls(
            tuple(sorted(pod.node_selector.items())), pod.tolerations, pod.required_node_affinity,
            extended_requests(pod, ignore=ignore),
        )


def extended_requests(pod: PodObject, *, ignore: frozenset[str] = frozenset()) -> tuple[tuple[str, int], ...]:
    """Effective requests (``max(Σ app, max init)``, counts) of the pod's extended resources — names containing
    ``/`` that are not in ``ignore`` — sorted by name. Requests fall back to limits, as the API defaults them.
    Raises :class:`InvalidRequestError` (from the quantity parser) for a malformed quantity."""
    app: dict[str, int] = {}
    init: dict[str, int] = {}
    for container in pod.containers:
        values = {**container.limits, **container.requests}
        for name, text in values.items():
            if "/" not in name or name in ignore:
                continue
            amount = parse_count(f"container[{container.name}].resources[{name}]", text)
            if container.init:
                init[name] = max(init.get(name, 0), amount)
            else:
                app[name] = app.get(name, 0) + amount
    names = sorted(set(app) | set(init))
    return tuple((n, max(app.get(n, 0), init.get(n, 0))) for n in names if max(app.get(n, 0), init.get(n, 0)))


def _relevant(node: NodeObject, watched: tuple[str, ...] = ()) -> tuple[object, ...]:
    annotations = tuple(node.annotations.get(key) for key in watched)
    return (node.name, tuple(sorted(node.labels.items())), node.taints, node.unschedulable, annotations)


class NodeTable:
    """Ledger slot → :class:`NodeObject`, with a ``version`` that moves only when a scheduling-relevant field
    (name, labels, taints, unschedulable, a watched annotation) of some node changes."""

    def __init__(self) -> None:
        self._nodes: dict[int, NodeObject] = {}
        self.version = 0
        self.watched: tuple[str, ...] = ()

    def watch_annotation(self, key: str) -> None:
        """Make changes of annotation ``key`` move :attr:`version` (a plugin reads it)."""
        if key not in self.watched:
            self.watched = (*self.watched, key)
            self.version += 1

    def put(self, slot: int, node: NodeObject) -> None:
        """Set the object of ``slot``."""
        old = self._nodes.get(slot)
        self._nodes[slot] = node
        if old is None or _relevant(old, self.watched) != _relevant(node, self.watched):
            self.version += 1

    def drop(self, slot: int) -> None:
        """Forget ``slot`` (node deleted); no-op when unknown."""
        if self._nodes.pop(slot, None) is not None:
            self.version += 1

    def clear(self) -> None:
        """Forget every slot."""
        self._nodes.clear()
        self.version += 1

    def get(self, slot: int) -> NodeObject | None:
        """The object of ``slot``, or None."""
        return self._nodes.get(slot)

    def items(self) -> Iterator[tuple[int, NodeObject]]:
        """``(slot, node)`` pairs."""
        return iter(list(self._nodes.items()))


class _CachedNodeFilter:
    """Shared machinery: per-node predicate → cached full-width mask, by constraint key."""

    name = "NodeFilter"
    reason = ""

    def __init__(self, nodes: NodeTable, constraints: Mapping[str, PodConstraints]) -> None:
        self.nodes = nodes
        self.constraints = constraints
        self._cache: dict[Hashable, BoolArray] = {}
        self._stamp: tuple[int, int] = (-1, -1)

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """The part of the constraints this plugin depends on; None when it constrains nothing."""
        raise NotImplementedError

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """True when a pod with constraint part ``key`` may run on ``node``."""
        raise NotImplementedError

    def _mask(self, key: Hashable, rows: int) -> BoolArray:
        stamp = (self.nodes.version, rows)
        if stamp != self._stamp or len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
            self._stamp = stamp
        mask = self._cache.get(key)
        if mask is None:
            mask = np.full(rows, self.admits(key, _EMPTY_NODE), np.bool_)
            for slot, node in self.nodes.items():
                if slot < rows:
                    mask[slot] = self.admits(key, node)
            self._cache[key] = mask
        return mask

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus the nodes the pod may not run on (bool mask over ledger slots)."""
        constraints = self.constraints.get(pod.uid)
        if constraints is None:
            state.reasons[self.name] = "the pod's node constraints are unknown to the scheduler"
            return np.zeros_like(candidates)
        key = self.key(constraints)
        if key is None:
            return candidates
        passed: BoolArray = candidates & self._mask(key, ledger.rows)
        return passed
