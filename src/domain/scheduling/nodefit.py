"""Node filters of the standalone scheduling loop, as kube-scheduler's plugins of the same names define them.

Each plugin matches :class:`~domain.scheduling.framework.FilterPlugin`: it returns a boolean mask over ledger
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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping

import attrs
import numpy as np

from domain.errors import InvalidRequestError
from domain.kube.objects import (
    NodeObject,
    NodeSelectorRequirement,
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
from domain.scheduling.framework import BoolArray, CycleState, FilterPlugin
from domain.toggle.states import Action, ToggleState, desired_from_label

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



def toggle_admits(node: NodeObject, *, state_annotation: str, enable_label: str) -> bool:
    """True when ``node`` may take GPU pods as far as the Runtime toggle goes: it has no state annotation at all
    (never toggled: backward compatible), or the state is ``enabled`` and the enable label asks for enabled."""
    state = node.annotations.get(state_annotation)
    if state is None:
        return True
    return (state.strip() == ToggleState.ENABLED.value
            and desired_from_label(node.labels.get(enable_label)) is Action.ENABLE)


class RuntimeToggle(_CachedNodeFilter):
    """GPU pods only on nodes whose Runtime toggle is enabled (:func:`toggle_admits`; module docstring). The
    mask depends on no pod constraint, so it is computed once per change of the node table."""

    name = "RuntimeToggle"
    reason = "node's GPU Runtime is not enabled (being toggled, disabled or failed)"

    def __init__(
        self, nodes: NodeTable, constraints: Mapping[str, PodConstraints], *, state_annotation: str,
        enable_label: str,
    ) -> None:
        super().__init__(nodes, constraints)
        self.state_annotation = state_annotation
        self.enable_label = enable_label
        nodes.watch_annotation(state_annotation)

    def key(self, constraints: PodConstraints) -> Hashable | None:
        """Always the same key: the mask does not depend on the pod."""
        return True

    def admits(self, key: Hashable, node: NodeObject) -> bool:
        """See :func:`toggle_admits`."""
        return toggle_admits(node, state_annotation=self.state_annotation, enable_label=self.enable_label)

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus nodes whose toggle is not enabled (GPU and MIG pods only)."""
        if not (pod.wants_gpu or pod.wants_mig):
            return candidates
        passed: BoolArray = candidates & self._mask(True, ledger.rows)
        if passed.sum() < candidates.sum():
            state.reasons[self.name] = self.reason
        return passed


class NodeGate:
    """Rejects, for GPU pods, the nodes named in any of ``sources`` (node name → reason).

    Sources are live mappings owned by their writers (for example ``LedgerSync.gates`` for inventory
    problems, a controller's map of nodes whose runtime toggle is in transition). The gated mask is rebuilt only
    when a source's content or the ledger's node set changes. :attr:`reason` names up to
    :data:`GATE_EXAMPLES` of the nodes removed by the last call and counts the rest.
    """

    name = "NodeGate"
    reason = "node is not taking GPU pods"

    def __init__(self, *sources: Mapping[str, str]) -> None:
        self.sources = sources
        self._key: object = None
        self._gated: BoolArray = np.zeros(0, np.bool_)
        self._why: dict[int, str] = {}

    def _refresh(self, ledger: ClusterLedger) -> BoolArray:
        key = (ledger.topology, ledger.rows, tuple(frozenset(source.items()) for source in self.sources))
        if key != self._key:
            gated = np.zeros(ledger.rows, np.bool_)
            why: dict[int, str] = {}
            for source in self.sources:
                for name, text in source.items():
                    try:
                        slot = ledger.slot(name)
                    except KeyError:
                        continue
                    if not gated[slot]:
                        gated[slot] = True
                        why[slot] = f"{name}: {text}"
            self._key, self._gated, self._why = key, gated, why
        return self._gated

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus gated nodes (GPU and MIG pods only)."""
        if not (pod.wants_gpu or pod.wants_mig):
            return candidates
        gated = self._refresh(ledger)
        removed = np.flatnonzero(candidates & gated)
        examples = [self._why[int(slot)] for slot in removed[:GATE_EXAMPLES]]
        if len(removed) > GATE_EXAMPLES:
            examples.append(f"and {len(removed) - GATE_EXAMPLES} more")
        if examples:
            state.reasons[self.name] = f"node not taking GPU pods ({'; '.join(examples)})"
        passed: BoolArray = candidates & ~gated
        return passed


class AdmissionHold:
    """Keeps a GPU or MIG pod off nodes where a pod with a request it could be confused with is still waiting
    for its devices (``held(pod)`` → ``{node name: reason}``; :mod:`domain.scheduling.holds`)."""

    name = "AdmissionHold"
    reason = "a pod with an identical GPU request is being admitted on the node"

    def __init__(self, held: Callable[[PodRequest], Mapping[str, str]]) -> None:
        self.held = held

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus held nodes (GPU and MIG pods only)."""
        if not (pod.wants_gpu or pod.wants_mig):
            return candidates
        held = self.held(pod)
        if not held:
            return candidates
        passed = candidates.copy()
        examples = []
        for name, why in held.items():
            try:
                slot = ledger.slot(name)
            except KeyError:
                continue
            if passed[slot]:
                passed[slot] = False
                examples.append(f"{name}: {why}")
        if examples:
            state.reasons[self.name] = "; ".join(sorted(examples)[:GATE_EXAMPLES])
        return passed


def node_fit_reason(constraints: PodConstraints, node: NodeObject) -> str:
    """Why a pod with ``constraints`` may not run on ``node`` under the four node-fit plugins above
    (``"<plugin>: <reason>"``, the first that refuses), or empty when it may. For one node, without masks."""
    nowhere = NodeTable()
    for plugin in (NodeUnschedulable, NodeSelector, RequiredNodeAffinity, TaintToleration):
        check = plugin(nowhere, {})
        key = check.key(constraints)
        if key is not None and not check.admits(key, node):
            return f"{check.name}: {check.reason}"
    return ""


class ExtendedResourceFit:
    """Kubernetes' NodeResourcesFit for extended resources other than ours (module docstring).

    ``usage(node_name)`` returns what the pods bound to that node request of each extended resource (counts).
    Pods that ask for none pass untouched, so the common case costs nothing.
    """

    name = "ExtendedResourceFit"
    reason = "insufficient extended resources"

    def __init__(
        self, nodes: NodeTable, constraints: Mapping[str, PodConstraints], usage: Callable[[str], Mapping[str, int]]
    ) -> None:
        self.nodes = nodes
        self.constraints = constraints
        self.usage = usage

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus nodes whose free extended resources do not cover the pod's requests."""
        constraints = self.constraints.get(pod.uid)
        if constraints is None or not constraints.extended:
            return candidates
        passed = candidates.copy()
        short: set[str] = set()
        for slot in np.flatnonzero(candidates):
            node = self.nodes.get(int(slot))
            used = self.usage(node.name) if node is not None else {}
            for name, amount in constraints.extended:
                allocatable = node.allocatable.get(name) if node is not None else None
                try:
                    capacity = parse_count(f"node.allocatable[{name}]", allocatable) if allocatable else 0
                except InvalidRequestError:
                    capacity = 0
                if used.get(name, 0) + amount > capacity:
                    passed[slot] = False
                    short.add(name)
                    break
        if short:
            state.reasons[self.name] = f"insufficient {', '.join(sorted(short))}"
        return passed


def node_filters(
    nodes: NodeTable,
    constraints: Mapping[str, PodConstraints],
    *gates: Mapping[str, str],
    usage: Callable[[str], Mapping[str, int]] | None = None,
    state_annotation: str = _DEFAULTS.annotations.node_state,
    enable_label: str = _DEFAULTS.node_label,
    held: Callable[[PodRequest], Mapping[str, str]] | None = None,
) -> tuple[FilterPlugin, ...]:
    """The standalone loop's node filters, in kube-scheduler's order; with ``usage`` (bound pods'
    extended-resource requests per node) also :class:`ExtendedResourceFit`; then :class:`RuntimeToggle` (on
    ``state_annotation`` and ``enable_label``, by default the protocol's defaults: pass the loaded protocol's
    ``annotations.node_state`` and ``node_label`` when they are customised), :class:`NodeGate` and, with
    ``held``, :class:`AdmissionHold`."""
    plugins: list[Callable[[NodeTable, Mapping[str, PodConstraints]], FilterPlugin]] = [
        NodeUnschedulable, NodeSelector, RequiredNodeAffinity, TaintToleration,
    ]
    fit: tuple[FilterPlugin, ...] = () if usage is None else (ExtendedResourceFit(nodes, constraints, usage),)
    toggle = RuntimeToggle(nodes, constraints, state_annotation=state_annotation, enable_label=enable_label)
    hold: tuple[FilterPlugin, ...] = () if held is None else (AdmissionHold(held),)
    return (*(make(nodes, constraints) for make in plugins), *fit, toggle, NodeGate(*gates), *hold)
