"""Node filters of the standalone loop (domain.scheduling.nodefit).

Behaviours covered:

* NodeUnschedulable: cordoned nodes are removed unless the pod tolerates the unschedulable taint (by key or
  by a blanket ``Exists``);
* TaintToleration: NoSchedule and NoExecute taints must be tolerated (Equal with value, Exists, effect-specific),
  PreferNoSchedule is ignored;
* NodeSelector: every pair must match a label;
* RequiredNodeAffinity: terms ORed, requirements ANDed, In/NotIn/Exists/DoesNotExist/Gt/Lt, matchFields on
  ``metadata.name``, empty terms, unknown operators, unsupported field keys and non-integer Gt values match
  nothing;
* fail closed: a pod whose constraints were never recorded fits no node, with a reason saying so;
* NodeGate: gated nodes are removed for GPU pods only, from several sources, with each node's reason;
* caching: masks are reused while the node table's version is unchanged (no per-node work on a repeat, checked
  on 5000 nodes), heartbeat-only node updates keep the version, label changes move it and change the answer;
* through the Scheduler: the filters' reasons reach the ScheduleResult.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from domain.kube.objects import NodeObject, NodeSelectorRequirement, NodeSelectorTerm, Taint, TaintEffect, Toleration
from domain.ledger import ClusterLedger
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.nodefit import (
    NodeGate,
    NodeSelector,
    NodeTable,
    NodeUnschedulable,
    PodConstraints,
    RequiredNodeAffinity,
    TaintToleration,
    term_matches,
)
from domain.scheduling.sync import LedgerSync
from support.kube_builders import NOW, make_node, make_pod, make_scheduler, make_sync

GPU_POD = single_container_pod("p", core_milli=100)
CPU_POD = single_container_pod("p", cpu_milli=100)


def passing(plugin: object, sync: LedgerSync, pod: PodRequest = GPU_POD) -> list[str]:
    return filtered(plugin, sync, pod)[0]


def filtered(plugin: object, sync: LedgerSync, pod: PodRequest = GPU_POD) -> tuple[list[str], str]:
    """Passing node names and the reason the plugin reports for this pod (its specific or generic one)."""
    state = CycleState()
    mask = plugin.filter(pod, sync.ledger, state, sync.ledger.active.copy())
    reason = state.reasons.get(plugin.name, plugin.reason)
    return sorted(sync.ledger.name(int(s)) for s in np.flatnonzero(mask)), reason


def constrained(sync: LedgerSync, **fields: object) -> dict[str, PodConstraints]:
    return {GPU_POD.uid: PodConstraints(**fields)}


# ---------------------------------------------------------------------------------------------- unschedulable
def test_cordoned_node_is_removed_unless_tolerated() -> None:
    sync = make_sync(make_node("a"), make_node("b", unschedulable=True))
    assert passing(NodeUnschedulable(sync.nodes, constrained(sync)), sync) == ["a"]
    by_key = Toleration("node.kubernetes.io/unschedulable", "Exists", effect=TaintEffect.NO_SCHEDULE)
    assert passing(NodeUnschedulable(sync.nodes, constrained(sync, tolerations=(by_key,))), sync) == ["a", "b"]
    blanket = Toleration(operator="Exists")
    assert passing(NodeUnschedulable(sync.nodes, constrained(sync, tolerations=(blanket,))), sync) == ["a", "b"]
    other = Toleration("gpu", "Exists")
    assert passing(NodeUnschedulable(sync.nodes, constrained(sync, tolerations=(other,))), sync) == ["a"]


# ---------------------------------------------------------------------------------------------- taints
def tainted_sync() -> LedgerSync:
    return make_sync(
        make_node("plain"),
        make_node("nosched", taints=(Taint("gpu", TaintEffect.NO_SCHEDULE, "shared"),)),
        make_node("noexec", taints=(Taint("maint", TaintEffect.NO_EXECUTE),)),
        make_node("prefer", taints=(Taint("soft", TaintEffect.PREFER_NO_SCHEDULE),)),
    )


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ((), ["plain", "prefer"]),
        ((Toleration("gpu", "Equal", "shared"),), ["nosched", "plain", "prefer"]),
        ((Toleration("gpu", "Equal", "other"),), ["plain", "prefer"]),
        ((Toleration("gpu", "Exists", effect=TaintEffect.NO_EXECUTE),), ["plain", "prefer"]),
        ((Toleration("gpu", "Exists"), Toleration("maint", "Exists", effect=TaintEffect.NO_EXECUTE)),
         ["noexec", "nosched", "plain", "prefer"]),
        ((Toleration(operator="Exists"),), ["noexec", "nosched", "plain", "prefer"]),
    ],
)
def test_taints_must_be_tolerated(tolerations: tuple[Toleration, ...], expected: list[str]) -> None:
    sync = tainted_sync()
    plugin = TaintToleration(sync.nodes, constrained(sync, tolerations=tolerations))
    assert passing(plugin, sync) == expected


# ---------------------------------------------------------------------------------------------- selector
def test_node_selector_needs_every_pair() -> None:
    sync = make_sync(make_node("a", labels={"zone": "z1", "tier": "gpu"}), make_node("b", labels={"zone": "z1"}),
                     make_node("c"))
    assert passing(NodeSelector(sync.nodes, constrained(sync, node_selector=(("zone", "z1"),))), sync) == ["a", "b"]
    both = (("tier", "gpu"), ("zone", "z1"))
    assert passing(NodeSelector(sync.nodes, constrained(sync, node_selector=both)), sync) == ["a"]
    assert passing(NodeSelector(sync.nodes, constrained(sync)), sync) == ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------- affinity
def req(key: str, op: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, values)


NODE = NodeObject("n7", labels={"zone": "z1", "gpus": "8", "arch": "amd64"})


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        (NodeSelectorTerm((req("zone", "In", "z1", "z2"),)), True),
        (NodeSelectorTerm((req("zone", "In", "z3"),)), False),
        (NodeSelectorTerm((req("zone", "NotIn", "z3"),)), True),
        (NodeSelectorTerm((req("missing", "NotIn", "x"),)), True),
        (NodeSelectorTerm((req("zone", "NotIn", "z1"),)), False),
        (NodeSelectorTerm((req("arch", "Exists"),)), True),
        (NodeSelectorTerm((req("missing", "Exists"),)), False),
        (NodeSelectorTerm((req("missing", "DoesNotExist"),)), True),
        (NodeSelectorTerm((req("zone", "DoesNotExist"),)), False),
        (NodeSelectorTerm((req("gpus", "Gt", "4"),)), True),
        (NodeSelectorTerm((req("gpus", "Gt", "8"),)), False),
        (NodeSelectorTerm((req("gpus", "Lt", "16"),)), True),
        (NodeSelectorTerm((req("zone", "Gt", "1"),)), False),
        (NodeSelectorTerm((req("missing", "Lt", "1"),)), False),
        (NodeSelectorTerm((req("zone", "Like", "z1"),)), False),
        (NodeSelectorTerm((req("zone", "In", "z1"), req("arch", "In", "arm64"))), False),
        (NodeSelectorTerm((req("zone", "In", "z1"), req("arch", "In", "amd64"))), True),
        (NodeSelectorTerm(match_fields=(req("metadata.name", "In", "n7"),)), True),
        (NodeSelectorTerm(match_fields=(req("metadata.name", "NotIn", "n7"),)), False),
        (NodeSelectorTerm(match_fields=(req("metadata.uid", "In", "n7"),)), False),
        (NodeSelectorTerm(), False),
    ],
)
def test_term_semantics(term: NodeSelectorTerm, matches: bool) -> None:
    assert term_matches(term, NODE) is matches


def test_affinity_terms_are_ored() -> None:
    sync = make_sync(make_node("a", labels={"zone": "z1"}), make_node("b", labels={"zone": "z2"}), make_node("c"))
    terms = (NodeSelectorTerm((req("zone", "In", "z1"),)), NodeSelectorTerm(match_fields=(req("metadata.name", "In",
                                                                                               "c"),)))
    assert passing(RequiredNodeAffinity(sync.nodes, constrained(sync, affinity=terms)), sync) == ["a", "c"]
    assert passing(RequiredNodeAffinity(sync.nodes, constrained(sync)), sync) == ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------- fail closed
def test_unknown_constraints_fit_no_node() -> None:
    sync = make_sync(make_node("a"))
    plugin = NodeSelector(sync.nodes, {})
    names, reason = filtered(plugin, sync)
    assert names == []
    assert "unknown" in reason
    plugin.constraints = constrained(sync)
    names, reason = filtered(plugin, sync)
    assert names == ["a"]
    assert reason == NodeSelector.reason


# ---------------------------------------------------------------------------------------------- gate
def test_gate_removes_marked_nodes_for_gpu_pods_only() -> None:
    sync = make_sync(make_node("a"), make_node("b"), make_node("c"))
    toggles = {"c": "runtime toggle in transition"}
    gate = NodeGate({"b": "stale GPU inventory"}, toggles, {"ghost": "not in the ledger"})
    names, reason = filtered(gate, sync)
    assert names == ["a"]
    assert "b: stale GPU inventory" in reason
    assert "c: runtime toggle in transition" in reason
    assert passing(gate, sync, CPU_POD) == ["a", "b", "c"]
    toggles.clear()
    assert passing(gate, sync) == ["a", "c"]
    toggles["a"] = "draining"
    assert passing(gate, sync) == ["c"]


def test_gate_reason_stays_short_with_many_gated_nodes() -> None:
    sync = make_sync(*(make_node(f"n{i}", 1, heartbeat=NOW - 3600) for i in range(50)), make_node("ok", 1))
    gate = NodeGate(sync.gates)
    names, reason = filtered(gate, sync)
    assert names == ["ok"]
    assert reason.count("stale GPU inventory") == 3
    assert reason.endswith("and 47 more)")


# ---------------------------------------------------------------------------------------------- cache
class CountingSelector(NodeSelector):
    calls = 0

    def admits(self, key: object, node: NodeObject) -> bool:
        CountingSelector.calls += 1
        return super().admits(key, node)


def test_masks_are_cached_until_a_relevant_node_change() -> None:
    sync = make_sync(*(make_node(f"n{i:04d}", 1, labels={"zone": f"z{i % 2}"}) for i in range(5000)))
    plugin = CountingSelector(sync.nodes, constrained(sync, node_selector=(("zone", "z1"),)))
    CountingSelector.calls = 0
    assert len(passing(plugin, sync)) == 2500
    first = CountingSelector.calls
    assert first >= 5000
    assert len(passing(plugin, sync)) == 2500
    assert CountingSelector.calls == first  # a repeat costs no per-node work
    version = sync.nodes.version
    sync.on_node(make_node("n0000", 1, labels={"zone": "z0"}, heartbeat=NOW + 5))  # heartbeat only
    assert sync.nodes.version == version
    sync.on_node(make_node("n0000", 1, labels={"zone": "z1"}))
    assert sync.nodes.version > version
    assert len(passing(plugin, sync)) == 2501
    other = CountingSelector(sync.nodes, constrained(sync, node_selector=(("zone", "z9"),)))
    assert passing(other, sync) == []


def test_node_table_versions() -> None:
    table = NodeTable()
    table.put(0, NodeObject("a"))
    v = table.version
    table.put(0, attrs.evolve(NodeObject("a"), annotations={"x": "1"}))
    assert table.version == v
    table.put(0, NodeObject("a", taints=(Taint("k", TaintEffect.NO_SCHEDULE),)))
    assert table.version == v + 1
    table.drop(0)
    table.drop(0)
    assert table.version == v + 2
    assert table.get(0) is None


def test_nodes_without_objects_act_as_bare_nodes() -> None:
    from domain.gpu import NodeInventory, NodeName

    ledger = ClusterLedger([NodeInventory(NodeName("bare"), cpu_milli=1000, memory_bytes=1)])
    sync = LedgerSync(ledger, make_sync().protocol, clock=lambda: NOW)
    assert passing(TaintToleration(sync.nodes, constrained(sync)), sync) == ["bare"]
    assert passing(NodeSelector(sync.nodes, constrained(sync, node_selector=(("a", "b"),))), sync) == []


# ---------------------------------------------------------------------------------------------- scheduler
def test_reasons_reach_the_schedule_result() -> None:
    sync = make_sync(
        make_node("cordoned", unschedulable=True),
        make_node("tainted", taints=(Taint("gpu", TaintEffect.NO_SCHEDULE),)),
        make_node("elsewhere", labels={"zone": "z2"}),
        make_node("stale", labels={"zone": "z1"}, heartbeat=NOW - 3600),
    )
    scheduler = make_scheduler(sync)
    result = sync.schedule(scheduler, make_pod("p", core="10", node_selector={"zone": "z1"}))
    assert result.allocation is None
    assert "node is unschedulable (cordoned)" in result.reason
    assert "node labels do not match the pod's nodeSelector" in result.reason
    assert "stale: stale GPU inventory" in result.reason
    fits = sync.schedule(scheduler, make_pod("q", core="10", tolerations=(Toleration("gpu", "Exists"),)))
    assert fits.allocation is not None
    assert fits.allocation.node in ("tainted", "elsewhere")


# ---------------------------------------------------------------------------------------------- extended resources
def test_extended_resources_other_than_ours_must_fit_the_node() -> None:
    """Standalone node fit for extended resources: allocatable minus bound pods' requests (effective rule)."""
    from domain.kube.objects import ContainerSpec, PodObject, PodPhase
    from domain.scheduling.nodefit import ExtendedResourceFit, extended_requests

    base = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    sync: LedgerSync = make_sync(
        make_node("a", allocatable={**base, "example.com/fpga": "1"}),
        make_node("b", allocatable={**base, "example.com/fpga": "2"}),
        make_node("c"),
    )
    holder = PodObject("h", "default", "h", containers=(ContainerSpec("m", requests={"example.com/fpga": "1"}),),
                       node_name="b", phase=PodPhase.RUNNING)
    sync.on_pod(holder)
    assert sync.extended_usage("b") == {"example.com/fpga": 1}
    wanting = PodObject("w", "default", "w", containers=(
        ContainerSpec("init", requests={"example.com/fpga": "2"}, init=True),
        ContainerSpec("app", limits={"example.com/fpga": "1", "cpu": "1"}),
    ))
    assert extended_requests(wanting) == (("example.com/fpga", 2),)  # max(Σ app = 1, max init = 2)
    one = PodObject("o", "default", "o", containers=(ContainerSpec("app", limits={"example.com/fpga": "1"}),))
    plugin = ExtendedResourceFit(sync.nodes, {p.uid: PodConstraints.of(p) for p in (wanting, one)},
                                 sync.extended_usage)
    names, reason = filtered(plugin, sync, attrs.evolve(GPU_POD, uid="w"))
    assert names == []
    assert reason == "insufficient example.com/fpga"
    names, _ = filtered(plugin, sync, attrs.evolve(GPU_POD, uid="o"))
    assert names == ["a", "b"]
    # our own GPU resources are the ledger's business, not this filter's
    ours = frozenset({"alibabacloud.com/gpu", "alibabacloud.com/gpu-core.percentage", "alibabacloud.com/gpu-memory"})
    gpu_pod = PodObject("g", "default", "g", containers=(ContainerSpec("m", limits={"alibabacloud.com/gpu": "1"}),))
    assert extended_requests(gpu_pod, ignore=ours) == ()
