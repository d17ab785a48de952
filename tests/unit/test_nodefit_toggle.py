"""The RuntimeToggle node filter (domain.scheduling.nodefit) keyed on the controller's state annotation.

Behaviours covered:
- a node without the state annotation keeps taking GPU pods (backward compatible), whatever its label;
- ``enabled`` with the label ``true`` takes GPU pods; ``enabling``, ``disabling``, ``disabled``, ``failed``, an
  unknown value, and ``enabled`` with the label removed or ``false`` (a disable pending) take none, with a reason;
- CPU-only pods pass everywhere;
- the annotation's changes reach the filter through the node table (its version moves on a state change, not
  on an unrelated annotation such as the inventory heartbeat), and a custom annotation key and label work;
- through the whole scheduler (node_filters in a profile), a GPU pod lands only on the enabled node.
"""

from __future__ import annotations

import attrs
import numpy as np

from domain.kube.protocol import ProtocolConstants
from domain.request import single_container_pod
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.nodefit import RuntimeToggle, node_filters, toggle_admits
from domain.scheduling.sync import LedgerSync
from support.kube_builders import make_node, make_pod, make_scheduler, make_sync

PROTOCOL = ProtocolConstants()
STATE, LABEL = PROTOCOL.annotations.node_state, PROTOCOL.node_label
GPU_POD = single_container_pod("p", core_milli=100)
CPU_POD = single_container_pod("p", cpu_milli=100)


def toggled(name: str, state: str | None, label: str | None = "true") -> object:
    node = make_node(name, labels={LABEL: label} if label is not None else {})
    if state is not None:
        node = attrs.evolve(node, annotations={**node.annotations, STATE: state})
    return node


def passing(plugin: RuntimeToggle, sync: LedgerSync, pod: object = GPU_POD) -> tuple[list[str], str]:
    state = CycleState()
    mask = plugin.filter(pod, sync.ledger, state, sync.ledger.active.copy())  # type: ignore[arg-type]
    return sorted(sync.ledger.name(int(s)) for s in np.flatnonzero(mask)), state.reasons.get(plugin.name, "")


def test_only_unannotated_or_enabled_nodes_take_gpu_pods() -> None:
    sync = make_sync(
        toggled("plain", None, None), toggled("plain-false", None, "false"), toggled("on", "enabled"),
        toggled("enabling", "enabling"), toggled("disabling", "disabling", "false"), toggled("off", "disabled", None),
        toggled("failed", "failed"), toggled("weird", "sideways"), toggled("pending-off", "enabled", None),
        toggled("pending-false", "enabled", "false"),
    )
    plugin = RuntimeToggle(sync.nodes, {}, state_annotation=STATE, enable_label=LABEL)
    names, reason = passing(plugin, sync)
    assert names == ["on", "plain", "plain-false"]
    assert "not enabled" in reason
    everyone = sorted(sync.ledger.name(int(s)) for s in np.flatnonzero(sync.ledger.active))
    assert passing(plugin, sync, CPU_POD) == (everyone, "")


def test_state_changes_reach_the_filter_and_heartbeats_do_not_move_the_table() -> None:
    sync = make_sync(toggled("n1", "enabling"))
    plugin = RuntimeToggle(sync.nodes, {}, state_annotation=STATE, enable_label=LABEL)
    assert passing(plugin, sync)[0] == []
    node = toggled("n1", "enabled")
    sync.on_node(node)
    assert passing(plugin, sync)[0] == ["n1"]
    version = sync.nodes.version
    sync.on_node(attrs.evolve(node, annotations={**node.annotations, "other": "heartbeat"}))
    assert sync.nodes.version == version
    sync.on_node(toggled("n1", "disabling", None))
    assert sync.nodes.version != version
    assert passing(plugin, sync)[0] == []


def test_custom_keys() -> None:
    node = make_node("n1", labels={"gpu_share": "true"})
    node = attrs.evolve(node, annotations={**node.annotations, "example.com/state": "enabled", STATE: "failed"})
    assert toggle_admits(node, state_annotation="example.com/state", enable_label="gpu_share")
    assert not toggle_admits(node, state_annotation=STATE, enable_label=LABEL)
    sync = make_sync(node)
    filters = node_filters(sync.nodes, {}, state_annotation="example.com/state", enable_label="gpu_share")
    toggle = next(f for f in filters if isinstance(f, RuntimeToggle))
    assert passing(toggle, sync)[0] == ["n1"]


def test_through_the_scheduler() -> None:
    sync = make_sync(toggled("on", "enabled"), toggled("moving", "enabling"), toggled("off", "disabled", "false"))
    scheduler = make_scheduler(sync)
    for uid in ("p1", "p2", "p3"):
        result = sync.schedule(scheduler, make_pod(uid, core="10"))
        assert result.allocation is not None
        assert result.allocation.node == "on"
    sync.on_node(toggled("on", "disabling", "false"))
    blocked = sync.schedule(scheduler, make_pod("p4", core="10"))
    assert blocked.allocation is None
    assert "GPU Runtime is not enabled" in blocked.reason
    sync.on_node(toggled("moving", "enabled"))
    assert sync.schedule(scheduler, make_pod("p5", core="10")).allocation.node == "moving"  # type: ignore[union-attr]
