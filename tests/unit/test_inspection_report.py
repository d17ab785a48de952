"""``ljrk inspect``'s report builder (domain.inspection.report, flags, compare, view, encode).

Behaviours covered:

* per GPU of several nodes: model, memory, health, core (milli and %) and memory allocated, and the holders of each
  share (namespace/name/container, grant, plan or inferred source); whole GPUs take all memory; cluster totals;
  nothing flagged → ``problems`` false;
* flags: stale inventory (and one in the future), missing and malformed inventory (no GPUs), protocol mismatch
  (device plugin and exporter), kubelet unregistered, quarantined for impossible books, Runtime disabled by the
  toggle (and not when enabled), unhealthy GPU, a bound pod whose GPU request cannot be read, a pod on a vanished
  GPU, a pod bound to a node that does not exist, a scheduler that is not serving;
* MIG: instances listed by the inventory with the pod booked on one, free ones, and totals of held instances;
* the scheduler view: a view of the same books agrees; one that counts other core, other pods, a missing node or
  another gate disagrees, naming node, GPU, field and both values; the JSON codec round-trips and names the path
  of a bad field;
* the JSON form: stable keys and values.
"""

from __future__ import annotations

import attrs
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Health
from domain.inspection.encode import report_json
from domain.inspection.flags import (
    GPU_UNHEALTHY,
    GPU_USAGE_UNKNOWN,
    INVENTORY_MALFORMED,
    INVENTORY_MISSING,
    INVENTORY_STALE,
    KUBELET_NOT_REGISTERED,
    POD_ON_UNKNOWN_NODE,
    PROTOCOL_MISMATCH,
    QUARANTINED,
    RUNTIME_DISABLED,
    SCHEDULER_NOT_SERVING,
    VANISHED_GPU,
)
from domain.inspection.report import InspectionReport, NodeReport, book, build_report
from domain.inspection.view import SchedulerView, decode_view, encode_view, only, scheduler_view
from domain.kube.annotations import encode_inventory
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.units import GiB
from support.kube_builders import KEYS, NOW, PROTOCOL, make_gpus, make_node, make_pod, make_sync, with_plan
from support.mig_builders import mig_gpus, mig_node, mig_pod, with_mig_plan


def share(uid: str, node: str, index: int, core: int, mem_gib: int, *, scheduler: str = "other",
          gpus: int = 2) -> PodObject:
    """A pod bound to ``node`` with its plan: ``core`` % and ``mem_gib`` GiB on GPU ``index``."""
    plan = PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, core * 10, mem_gib * GiB),)),))
    return with_plan(make_pod(uid, core=str(core), mem=str(mem_gib), scheduler=scheduler), plan,
                     make_gpus(node, gpus))


def whole(uid: str, node: str, index: int, *, gpus: int = 2) -> PodObject:
    plan = PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, 1000, 16 * GiB),), whole=True),))
    return with_plan(make_pod(uid, gpu="1"), plan, make_gpus(node, gpus))


def node_of(report: InspectionReport, name: str) -> NodeReport:
    found = report.node(name)
    assert found is not None, name
    return found


def codes(report: InspectionReport, name: str) -> list[str]:
    return [f.code for f in node_of(report, name).flags]


def test_several_gpus_with_shares_holders_and_totals() -> None:
    nodes = [make_node("n1", 2), make_node("n2", 1, model="V100", memory=32 * GiB)]
    plan_less = make_pod("c", core="20", mem="2", node="n1", phase=PodPhase.RUNNING, scheduler="other")
    pods = [share("a", "n1", 0, 60, 8), share("b", "n1", 0, 10, 1), whole("w", "n1", 1), plan_less,
            make_pod("pending", core="50", mem="4")]
    report = build_report(nodes, pods, PROTOCOL, now=NOW)

    n1 = node_of(report, "n1")
    gpu0, gpu1 = n1.gpus
    assert (gpu0.uuid, gpu0.model, gpu0.memory_bytes, gpu0.health, gpu0.mig) == ("GPU-n1-0", "A100", 16 * GiB,
                                                                                  "Healthy", False)
    assert (gpu0.core_used_milli, gpu0.core_percent, gpu0.memory_used_bytes) == (900, 90.0, 11 * GiB)
    assert [(h.pod_key, h.container, h.core_milli, h.memory_bytes, h.source) for h in gpu0.holders] == [
        ("default/a", "main", 600, 8 * GiB, "plan"), ("default/b", "main", 100, 1 * GiB, "plan"),
        ("default/c", "main", 200, 2 * GiB, "inferred")]  # the plan-less pod went to the GPU with room
    assert (gpu1.core_used_milli, gpu1.memory_used_bytes) == (1000, 16 * GiB)
    assert [h.pod_key for h in gpu1.holders] == ["default/w"]
    assert n1.gpu_pods == ("default/a", "default/b", "default/c", "default/w")
    assert n1.flags == ()
    assert n1.gate == ""

    n2 = node_of(report, "n2")
    assert [(g.model, g.memory_bytes, g.core_used_milli, g.holders) for g in n2.gpus] == [("V100", 32 * GiB, 0, ())]
    t = report.totals
    assert (t.nodes, t.flagged_nodes, t.gpus, t.healthy_gpus, t.mig_gpus) == (2, 0, 3, 3, 0)
    assert (t.core_used_milli, t.core_capacity_milli) == (1900, 3000)
    assert (t.memory_used_bytes, t.memory_capacity_bytes) == (27 * GiB, 64 * GiB)
    assert t.gpu_pods == 4
    assert not report.problems
    assert report.scheduler_serving is None


def test_stale_future_missing_and_malformed_inventories_are_flagged() -> None:
    nodes = [make_node("stale", heartbeat=NOW - 120), make_node("future", heartbeat=NOW + 3600),
             make_node("missing", annotation=None), make_node("malformed", annotation='{"version": 9}'),
             make_node("fresh", heartbeat=NOW - 30)]
    report = build_report(nodes, [], PROTOCOL, now=NOW)
    assert codes(report, "stale") == [INVENTORY_STALE]
    assert "120 s old (limit 60 s)" in node_of(report, "stale").flags[0].message
    assert "stale GPU inventory" in node_of(report, "stale").gate
    assert codes(report, "future") == [INVENTORY_STALE]
    assert "in the future" in node_of(report, "future").flags[0].message
    assert codes(report, "missing") == [INVENTORY_MISSING]
    assert node_of(report, "missing").gpus == ()
    assert codes(report, "malformed") == [INVENTORY_MALFORMED]
    assert "version" in node_of(report, "malformed").flags[0].message
    assert codes(report, "fresh") == []
    assert report.totals.flagged_nodes == 4
    assert report.problems


def test_protocol_mismatch_of_device_plugin_and_exporter_and_kubelet_unregistered() -> None:
    foreign = make_node("dp", fingerprint="0123456789abcdef")
    exporter = attrs.evolve(make_node("ex"), annotations={**make_node("ex").annotations,
                                                          KEYS.node_exporter_protocol: "fedcba9876543210"})
    text = encode_inventory(make_gpus("kr", 1), heartbeat=NOW, protocol=PROTOCOL.fingerprint(),
                            kubelet_registered=False)
    unregistered = make_node("kr", annotation=text)
    report = build_report([foreign, exporter, unregistered], [], PROTOCOL, now=NOW)
    assert codes(report, "dp") == [PROTOCOL_MISMATCH]
    assert "device plugin speaks protocol 0123456789abcdef" in node_of(report, "dp").flags[0].message
    assert codes(report, "ex") == [PROTOCOL_MISMATCH]
    assert "exporter speaks protocol fedcba9876543210" in node_of(report, "ex").flags[0].message
    assert codes(report, "kr") == [KUBELET_NOT_REGISTERED]
    assert node_of(report, "dp").gpus[0].uuid == "GPU-dp-0"  # a foreign inventory still decodes: GPUs shown


def test_impossible_books_quarantine_the_node() -> None:
    pods = [share("x", "n1", 0, 60, 10), share("y", "n1", 0, 60, 10)]
    report = build_report([make_node("n1")], pods, PROTOCOL, now=NOW)
    n1 = node_of(report, "n1")
    assert codes(report, "n1") == [QUARANTINED]
    assert "GPU 0 (GPU-n1-0) is booked 1200 of 1000 milli-GPU core" in n1.flags[0].message
    assert "default/x" in n1.flags[0].message
    assert n1.gpus[0].core_used_milli == 1200  # counted as observed, never clamped
    assert n1.gpus[0].core_percent == 120.0


def test_runtime_toggle_disabled_is_flagged_and_enabled_is_not() -> None:
    label = PROTOCOL.node_label
    disabled = attrs.evolve(make_node("off", labels={label: "false"}),
                            annotations={**make_node("off").annotations, KEYS.node_state: "disabled"})
    enabled = attrs.evolve(make_node("on", labels={label: "true"}),
                           annotations={**make_node("on").annotations, KEYS.node_state: "enabled"})
    report = build_report([disabled, enabled, make_node("never")], [], PROTOCOL, now=NOW)
    assert codes(report, "off") == [RUNTIME_DISABLED]
    assert "'disabled'" in node_of(report, "off").flags[0].message
    assert f"{label}='false'" in node_of(report, "off").flags[0].message
    assert codes(report, "on") == []
    assert codes(report, "never") == []  # never toggled: admitted


def test_unhealthy_gpu_and_unreadable_gpu_request_are_flagged() -> None:
    bad = make_pod("bad", core="50.5", mem="2", node="n2", phase=PodPhase.RUNNING, scheduler="other")
    cpu_only = make_pod("cpu", node="n2", phase=PodPhase.RUNNING, scheduler="other", cpu="1")
    report = build_report([make_node("n1", 2, unhealthy=(1,)), make_node("n2")], [bad, cpu_only], PROTOCOL,
                          now=NOW)
    assert codes(report, "n1") == [GPU_UNHEALTHY]
    assert node_of(report, "n1").flags[0].message == "GPU 1 (GPU-n1-1) is Unhealthy"
    assert node_of(report, "n1").gpus[1].health == Health.UNHEALTHY.value
    assert (report.totals.gpus, report.totals.healthy_gpus) == (4, 3)
    assert codes(report, "n2") == [GPU_USAGE_UNKNOWN]
    assert "pod default/bad" in node_of(report, "n2").flags[0].message


def test_a_pod_on_a_vanished_gpu_and_a_pod_on_an_unknown_node() -> None:
    gone = share("x", "n1", 1, 30, 4)  # its plan names GPU-n1-1, which the node no longer lists
    kept = share("a", "n1", 0, 30, 4)
    lost = share("y", "ghost", 0, 30, 4)
    report = build_report([make_node("n1", 1)], [gone, kept, lost], PROTOCOL, now=NOW)
    assert codes(report, "n1") == [VANISHED_GPU]
    assert node_of(report, "n1").flags[0].message == ("pod default/x holds GPU-n1-1, which the node no longer "
                                                      "lists")
    assert {h.pod_key for h in node_of(report, "n1").gpus[0].holders} == {"default/a", "default/x"}  # inferred
    assert [f.code for f in report.flags] == [POD_ON_UNKNOWN_NODE]
    assert "pod default/y is bound to node ghost" in report.flags[0].message
    assert report.problems


def test_mig_instances_with_holders() -> None:
    layout = {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("7g.80gb", 0)]}
    node = mig_node("m1", layout, held=[(0, 4)])
    pod = with_mig_plan(mig_pod("p"), MigPodAllocation("p", "m1", (MigBooking(0, "3g.40gb", 4, "main"),)),
                        mig_gpus("m1"))
    report = build_report([node], [pod], PROTOCOL, now=NOW)
    m1 = node_of(report, "m1")
    assert m1.flags == ()
    gpu0, gpu1 = m1.gpus
    assert (gpu0.mig, gpu1.mig) == (True, True)
    assert [(m.profile, m.start, m.uuid, m.free, m.holder) for m in gpu0.mig_instances] == [
        ("3g.40gb", 0, "MIG-m1-0-0", True, ""), ("3g.40gb", 4, "MIG-m1-0-4", False, "default/p/main")]
    assert [(m.profile, m.holder) for m in gpu1.mig_instances] == [("7g.80gb", "")]
    assert m1.mig_pod_uids == ("p",)
    assert m1.gpu_pods == ("default/p",)
    t = report.totals
    assert (t.mig_gpus, t.mig_instances, t.mig_held, t.core_capacity_milli, t.gpu_pods) == (2, 3, 1, 0, 1)


def _view_of(nodes: list[NodeObject], pods: list[PodObject], *, serving: bool = True) -> SchedulerView:
    return scheduler_view(book(nodes, pods, PROTOCOL, now=NOW), serving=serving)


def test_a_scheduler_view_of_the_same_books_agrees_and_round_trips_as_json() -> None:
    nodes, pods = [make_node("n1", 2), make_node("n2")], [share("a", "n1", 0, 60, 8), whole("w", "n1", 1)]
    view = _view_of(nodes, pods)
    assert decode_view(encode_view(view)) == view
    assert view.nodes["n1"].pods == ("a", "w")
    assert [(g.core_used_milli, g.memory_used_bytes) for g in view.nodes["n1"].gpus] == [(600, 8 * GiB),
                                                                                          (1000, 16 * GiB)]
    report = build_report(nodes, pods, PROTOCOL, now=NOW, view=decode_view(encode_view(view)))
    assert report.disagreements == ()
    assert report.scheduler_serving is True
    assert not report.problems


def test_scheduler_disagreements_name_node_gpu_field_and_both_values() -> None:
    nodes = [make_node("n1", 2), make_node("n2"), make_node("n3")]
    pods = [share("a", "n1", 0, 60, 8), share("b", "n1", 1, 20, 2)]
    # the scheduler missed b, books a reservation r on n1 GPU 0, does not know n3 and gates n2
    theirs = book([*nodes[:2], make_node("n2", heartbeat=NOW - 500)],
                  [pods[0]], PROTOCOL, now=NOW)
    theirs.assume(PodAllocation("r", "n1", (ContainerGrant("main", (GpuGrant(0, 100, GiB),)),)))
    view = scheduler_view(theirs, serving=True)
    report = build_report(nodes, pods, PROTOCOL, now=NOW, view=view)
    described = [d.describe() for d in report.disagreements]
    assert described == [
        "node n1 GPU 0 coreUsedMilli: API 600, scheduler 700",
        f"node n1 GPU 0 memoryUsedBytes: API {8 * GiB}, scheduler {9 * GiB}",
        "node n1 GPU 1 coreUsedMilli: API 200, scheduler 0",
        f"node n1 GPU 1 memoryUsedBytes: API {2 * GiB}, scheduler 0",
        "node n1 pods: API default/b, scheduler r",
        "node n2 gate: API none, scheduler stale GPU inventory: heartbeat 500 s old (limit 60 s)",
        "node n3 node: API present, scheduler absent",
    ]
    assert [d.describe() for d in node_of(report, "n1").disagreements] == described[:5]
    assert report.problems
    assert report_json(report)["disagreements"][0] == {"node": "n1", "gpu": 0, "field": "coreUsedMilli",
                                                       "api": "600", "scheduler": "700"}
    restricted = only(view, {"n2"})
    assert set(restricted.nodes) == {"n2"}


def test_a_standby_scheduler_is_flagged() -> None:
    nodes = [make_node("n1")]
    report = build_report(nodes, [], PROTOCOL, now=NOW, view=_view_of(nodes, [], serving=False))
    assert [f.code for f in report.flags] == [SCHEDULER_NOT_SERVING]
    assert report.disagreements == ()
    assert report.problems


@pytest.mark.parametrize(("data", "field"), [
    ({"version": 2, "serving": True, "nodes": []}, "version"),
    ({"version": 1, "nodes": []}, "serving"),
    ({"version": 1, "serving": "yes", "nodes": []}, "serving"),
    ({"version": 1, "serving": True, "nodes": [{"name": "n1", "gate": "", "quarantine": "", "pods": [],
                                                "migPods": [], "gpus": [{"index": 0, "uuid": "G",
                                                                         "coreUsedMilli": -1}]}]},
     "nodes[0].gpus[0].coreUsedMilli"),
    ({"version": 1, "serving": True, "nodes": [{"name": "n1", "gate": "", "quarantine": "", "pods": [7],
                                                "migPods": [], "gpus": []}]}, "nodes[0].pods[0]"),
    ([], "view"),
])
def test_a_bad_view_names_the_json_path(data: object, field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_view(data)
    assert caught.value.field == field


def test_json_form_has_stable_keys_and_values() -> None:
    report = build_report([make_node("n1", 1), make_node("n2", heartbeat=NOW - 120)], [share("a", "n1", 0, 25, 3,
                                                                                             gpus=1)],
                          PROTOCOL, now=NOW)
    data = report_json(report)
    assert list(data) == ["version", "generatedAt", "scheduler", "nodes", "flags", "disagreements", "totals",
                          "claimQuotas", "problems"]
    assert (data["version"], data["generatedAt"], data["scheduler"], data["problems"]) == (1, NOW, None, True)
    n1 = data["nodes"][0]  # type: ignore[index]
    assert list(n1) == ["name", "gate", "heartbeat", "enforcement", "flags", "gpus", "pods", "disagreements"]
    assert n1["gpus"] == [{
        "index": 0, "uuid": "GPU-n1-0", "model": "A100", "health": "Healthy", "mig": False,
        "memoryBytes": 16 * GiB, "coreUsedMilli": 250, "corePercent": 25.0, "memoryUsedBytes": 3 * GiB,
        "holders": [{"namespace": "default", "pod": "a", "container": "main", "init": False, "coreMilli": 250,
                     "memoryBytes": 3 * GiB, "source": "plan"}],
        "migInstances": []}]
    assert n1["pods"] == ["default/a"]
    assert data["nodes"][1]["flags"][0]["code"] == INVENTORY_STALE  # type: ignore[index]
    assert data["totals"] == {"nodes": 2, "flaggedNodes": 1, "gpus": 3, "healthyGpus": 3, "migGpus": 0,
                              "coreUsedMilli": 250, "coreCapacityMilli": 3000, "memoryUsedBytes": 3 * GiB,
                              "memoryCapacityBytes": 48 * GiB, "gpuPods": 1, "migInstances": 0, "migHeld": 0}


def test_the_report_equals_a_sync_fed_the_same_objects() -> None:
    """The books the report reads are the scheduler's own for the same listing (no parsing of its own)."""
    nodes = [make_node("n1", 2)]
    pods = [share("a", "n1", 0, 60, 8), make_pod("c", core="20", mem="2", node="n1", phase=PodPhase.RUNNING,
                                                 scheduler="other")]
    sync = make_sync(*nodes)
    for pod in pods:
        sync.on_pod(pod)
    report = build_report(nodes, pods, PROTOCOL, now=NOW)
    assert [(g.core_used_milli, g.memory_used_bytes) for g in node_of(report, "n1").gpus] == [
        (g.core_used, g.memory_used) for g in sync.ledger.gpus("n1")]


def test_dra_claims_are_booked_as_the_scheduler_books_them_and_named_as_claims() -> None:
    from domain.dra.claims import AllocationResult, ClaimAllocation

    claims = [ClaimAllocation("team", "gpu", "c-uid", (AllocationResult("r", PROTOCOL.dra.driver, "n1", "gpu-1"),))]
    nodes = [make_node("n1", 2)]
    view = scheduler_view(book(nodes, [], PROTOCOL, now=NOW, claims=claims), serving=True)
    report = build_report(nodes, [], PROTOCOL, now=NOW, view=view, claims=claims)
    assert report.disagreements == ()
    gpu1 = report.node("n1").gpus[1]  # type: ignore[union-attr]
    assert (gpu1.core_used_milli, gpu1.memory_used_bytes) == (1000, 16 * GiB)
    assert [(h.namespace, h.name, h.core_milli) for h in gpu1.holders] == [("team", "claim/gpu", 1000)]
    without = build_report(nodes, [], PROTOCOL, now=NOW, view=view)  # an inspection blind to claims disagrees
    assert "node n1 GPU 1 coreUsedMilli: API 0, scheduler 1000" in [d.describe() for d in without.disagreements]
