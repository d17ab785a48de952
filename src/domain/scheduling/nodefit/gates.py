"""Filters on what our stack knows of a node: the Runtime toggle (``RuntimeToggle``), inventory gates (``NodeGate``),
admission holds (``AdmissionHold``) and extended resources other than ours (``ExtendedResourceFit``); and
:func:`node_filters`, the standalone loop's node filters in order. Invariant: CPU-only pods pass the GPU gates.
"""


from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping

import numpy as np

from domain.dra.allocate import ASK_PREFIX
from domain.errors import InvalidRequestError
from domain.kube.objects import (
    NodeObject,
)
from domain.kube.quantity import parse_count
from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState, FilterPlugin
from domain.scheduling.nodefit.objects import (
    NodeSelector,
    NodeUnschedulable,
    RequiredNodeAffinity,
    TaintToleration,
)
from domain.scheduling.nodefit.table import (
    _DEFAULTS,
    GATE_EXAMPLES,
    NodeTable,
    PodConstraints,
    _CachedNodeFilter,
)
from domain.toggle.states import Action, ToggleState, desired_from_label


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
        key = (ledger.node_set_generation, ledger.rows, tuple(frozenset(source.items()) for source in self.sources))
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


class ClaimsOnly:
    """Rejects, for pods with a classic GPU or MIG container (one not named :data:`domain.dra.allocate.ASK_PREFIX`,
    whose devices kubelet's device plugin would allocate), the nodes of ``nodes`` (name → reason; a live mapping
    owned by its writer, ``LedgerSync.claims_only``): nodes whose GPUs come from the DRA driver's ResourceSlices,
    where only a pod's claims can get them."""

    name = "ClaimsOnly"
    reason = "the node's GPUs are served through DRA claims only"

    def __init__(self, nodes: Mapping[str, str]) -> None:
        self.nodes = nodes

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """``candidates`` minus claims-only nodes, for pods with a classic GPU or MIG container."""
        classic = any((c.kind is not GpuKind.NONE or c.wants_mig) and not c.name.startswith(ASK_PREFIX)
                      for c in pod.containers)
        if not classic or not self.nodes:
            return candidates
        passed, examples = _without(ledger, candidates, self.nodes)
        if examples:
            shown = ", ".join(sorted(examples)[:GATE_EXAMPLES])
            more = f" and {len(examples) - GATE_EXAMPLES} more" if len(examples) > GATE_EXAMPLES else ""
            state.reasons[self.name] = f"{shown}{more}: {next(iter(self.nodes.values()))}"
        return passed


class AdmissionHold:
    """Keeps a GPU or MIG pod off nodes where a pod with a request it could be confused with is still waiting
    for its devices (``held(pod)`` → ``{node name: reason}``; :mod:`domain.scheduling.nodefit.holds`)."""

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
        passed, removed = _without(ledger, candidates, held)
        if removed:
            state.reasons[self.name] = "; ".join(sorted(f"{name}: {held[name]}" for name in removed)[:GATE_EXAMPLES])
        return passed


def _without(ledger: ClusterLedger, candidates: BoolArray, names: Iterable[str]) -> tuple[BoolArray, list[str]]:
    """``candidates`` without the nodes of ``names`` (names the ledger does not know are skipped), and the names of
    the candidates removed."""
    passed = candidates.copy()
    removed = []
    for name in names:
        try:
            slot = ledger.slot(name)
        except KeyError:
            continue
        if passed[slot]:
            passed[slot] = False
            removed.append(name)
    return passed, removed


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
    claims_only: Mapping[str, str] | None = None,
) -> tuple[FilterPlugin, ...]:
    """The standalone loop's node filters, in kube-scheduler's order; with ``usage`` (bound pods'
    extended-resource requests per node) also :class:`ExtendedResourceFit`; then :class:`RuntimeToggle` (on
    ``state_annotation`` and ``enable_label``, by default the protocol's defaults: pass the loaded protocol's
    ``annotations.node_state`` and ``node_label`` when they are customised), :class:`NodeGate`, with
    ``claims_only`` :class:`ClaimsOnly` and, with ``held``, :class:`AdmissionHold`."""
    plugins: list[Callable[[NodeTable, Mapping[str, PodConstraints]], FilterPlugin]] = [
        NodeUnschedulable, NodeSelector, RequiredNodeAffinity, TaintToleration,
    ]
    fit: tuple[FilterPlugin, ...] = () if usage is None else (ExtendedResourceFit(nodes, constraints, usage),)
    toggle = RuntimeToggle(nodes, constraints, state_annotation=state_annotation, enable_label=enable_label)
    hold: tuple[FilterPlugin, ...] = () if held is None else (AdmissionHold(held),)
    dra: tuple[FilterPlugin, ...] = () if claims_only is None else (ClaimsOnly(claims_only),)
    return (*(make(nodes, constraints) for make in plugins), *fit, toggle, NodeGate(*gates), *dra, *hold)
