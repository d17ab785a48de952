"""Device plugin domain rules, without I/O.

Covers: device ID format and parsing; counts per resource (gpu 1, core 100, memory per unit, percent mode 100)
with health; preferred IDs (planned GPU first, must-include kept, size honoured) and the plan's GPUs and MIG
instance IDs they start from; the matching rule — counts only,
never IDs (B17), in-progress container first, kubelet order within a pod, started pod preferred, ambiguity and
untrusted plans raise; candidate building skips running, deleting and foreign-node pods.
"""

from __future__ import annotations

import attrs
import pytest

from domain.allocation import ContainerGrant, GpuGrant
from domain.device_plugin.devices import (
    DeviceId,
    MigResource,
    ResourceKind,
    device_list,
    parse_device_id,
    preferred_ids,
)
from domain.device_plugin.matching import (
    AmbiguousContainerError,
    Candidate,
    NoMatchingContainerError,
    UntrustedPlanError,
    planned_gpus,
    planned_instance_ids,
    select_container,
)
from domain.device_plugin.pods import node_candidates
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import PlannedInstance
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants

GIB = 2**30
G0 = Gpu(0, GpuUuid("GPU-aaaa"), "A100", 16 * GIB)
G1 = Gpu(1, GpuUuid("GPU-bbbb"), "A100", 24 * GIB + 5, health=Health.UNHEALTHY)
CORE, MEM, WHOLE = ResourceKind.CORE, ResourceKind.MEMORY, ResourceKind.GPU


def test_ids_round_trip_and_reject_garbage() -> None:
    ident = DeviceId(GpuUuid("GPU-aaaa"), ResourceKind.CORE, 7)
    assert str(ident) == "GPU-aaaa::core::7"
    assert parse_device_id(str(ident)) == ident
    for bad in ("GPU-aaaa", "GPU-aaaa::cpu::1", "GPU-aaaa::core::x", "::core::1"):
        with pytest.raises(InvalidRequestError):
            parse_device_id(bad)


def test_counts_and_health_per_resource() -> None:
    assert len(device_list(WHOLE, [G0, G1], memory_unit_bytes=GIB)) == 2
    assert len(device_list(CORE, [G0, G1], memory_unit_bytes=GIB)) == 200
    memory = device_list(MEM, [G0, G1], memory_unit_bytes=GIB)
    assert len(memory) == 16 + 24  # floored: never more than the GPU has
    assert {d.health for d in memory if d.id.startswith("GPU-bbbb")} == {Health.UNHEALTHY}
    assert len(device_list(MEM, [G0, G1], memory_unit_bytes=None)) == 200  # percent mode


def test_preferred_ids_pick_the_planned_gpu() -> None:
    available = [f"GPU-aaaa::core::{n}" for n in range(100)] + [f"GPU-bbbb::core::{n}" for n in range(100)]
    chosen = preferred_ids(available, [], 60, [GpuUuid("GPU-bbbb")])
    assert len(chosen) == 60
    assert all(c.startswith("GPU-bbbb") for c in chosen)
    kept = preferred_ids(available, ["GPU-aaaa::core::0"], 3, [GpuUuid("GPU-bbbb")])
    assert kept == ("GPU-aaaa::core::0", "GPU-bbbb::core::0", "GPU-bbbb::core::1")
    whole = preferred_ids(["GPU-aaaa::gpu::0", "GPU-bbbb::gpu::0"], [], 2, [GpuUuid("GPU-bbbb"), GpuUuid("GPU-aaaa")])
    assert whole == ("GPU-bbbb::gpu::0", "GPU-aaaa::gpu::0")
    assert preferred_ids(["x", "y"], [], 5, []) == ("x", "y")


def _cand(pod: str, container: str, order: int = 0, *, plan: bool = True, **amounts: int) -> Candidate:
    grant = ContainerGrant(container, (GpuGrant(0, 500, GIB),)) if plan else None
    return Candidate(pod, "ns", pod, container, order, {ResourceKind(k): v for k, v in amounts.items()}, grant,
                     problem="" if plan else "no plan annotation")


def test_the_plan_gives_the_preferred_gpus_and_mig_instance_ids() -> None:
    shared = _cand("a", "c1", core=30)
    assert planned_gpus(shared, [G1, G0]) == [G0.uuid]  # grant on GPU index 0
    assert planned_gpus(shared, [G1]) == []  # a planned index not on the node is no preference
    mig = attrs.evolve(_cand("m", "c1", plan=False, core=1), mig=(PlannedInstance(1, G1.uuid, "1g.10gb", 4),
                                                                  PlannedInstance(0, G0.uuid, "1g.10gb", 0)))
    assert planned_gpus(mig, [G0, G1]) == [G1.uuid, G0.uuid]
    kind = MigResource("1g.10gb")
    assert planned_instance_ids(mig, kind, {(G0.uuid, 0): 9, (G1.uuid, 4): 3}) == [
        str(DeviceId(G1.uuid, kind, 3)), str(DeviceId(G0.uuid, kind, 9))]
    assert planned_instance_ids(mig, kind, {(G1.uuid, 0): 3}) == []  # not listed at the planned start


def test_matching_uses_counts_and_kubelet_order() -> None:
    a1, a2 = _cand("a", "c1", 0, core=30), _cand("a", "c2", 1, core=30, memory=2)
    b = _cand("b", "main", 0, core=70)
    assert select_container(CORE, 70, [a1, a2, b], {}) is b
    assert select_container(CORE, 30, [a1, a2, b], {}) is a1  # first in kubelet order within the pod
    assert select_container(CORE, 30, [a1, a2, b], {("a", "c1"): {CORE}}) is a2
    assert select_container(MEM, 2, [a1, a2, b], {("a", "c2"): {CORE}}) is a2  # in-progress container
    with pytest.raises(NoMatchingContainerError):
        select_container(CORE, 31, [a1, a2, b], {})


def test_matching_refuses_to_guess_and_to_use_untrusted_plans() -> None:
    a, b = _cand("a", "main", core=50), _cand("b", "main", core=50)
    with pytest.raises(AmbiguousContainerError, match="refusing to guess"):
        select_container(CORE, 50, [a, b], {})
    assert select_container(CORE, 50, [a, b], {("b", "other"): {MEM}}) is b  # b's admission has started
    with pytest.raises(AmbiguousContainerError):  # a pod without a plan still makes the match ambiguous
        select_container(CORE, 50, [a, _cand("x", "main", plan=False, core=50)], {})
    with pytest.raises(UntrustedPlanError, match="no trusted plan"):
        select_container(CORE, 50, [_cand("x", "main", plan=False, core=50)], {})


def test_candidates_only_from_pending_bound_live_pods_in_admission_order() -> None:
    protocol = ProtocolConstants()
    spec = ContainerSpec("main", limits={protocol.resources.core: "50"})
    init = ContainerSpec("setup", limits={protocol.resources.memory: "2"}, init=True)
    pods = [
        PodObject("u1", "ns", "p1", (spec, init), node_name="n1"),
        PodObject("u2", "ns", "p2", (spec,), node_name="n1", phase=PodPhase.RUNNING),
        PodObject("u3", "ns", "p3", (spec,), node_name="n1", deletion_timestamp=1.0),
        PodObject("u4", "ns", "p4", (spec,), node_name="n2"),
        PodObject("u5", "ns", "p5", (ContainerSpec("none"),), node_name="n1"),
    ]
    found = node_candidates(pods, node="n1", node_gpus=[G0], protocol=protocol)
    assert [(c.pod_uid, c.container, c.order) for c in found] == [("u1", "setup", 0), ("u1", "main", 1)]
    assert all(c.grant is None and "plan" in c.problem for c in found)
