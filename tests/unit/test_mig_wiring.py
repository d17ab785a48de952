"""MIG wiring in the Kubernetes translation, the annotations and the scheduler's books (domain only).

Behaviours covered:

* requests: ``<prefix>/mig-<profile>`` limits (or requests) become a container's MIG ask with the canonical profile
  (``.me`` spelling included); a MIG pod asks for no time-sharing GPU; B30 — a name under our stem that the shared
  table does not know is rejected with "unknown profile" and the valid names, an alias spelling names the canonical
  resource to use; MIG mixed with time-sharing resources in one container or one pod, two profiles in one
  container, requests ≠ limits are clear errors; other vendors' ``mig-*`` names are not ours;
* inventory annotation: version 2 round trip with the MIG layout and strategy (documented JSON), version 1 when no
  GPU is in MIG mode, a version 1 text (older device plugin) still decodes, malformed MIG entries name the field;
* plan annotation: MIG containers round trip through ``decode_mig_plan`` (documented JSON), ``decode_plan`` of a
  MIG plan gives a node-only allocation, a plan without MIG has no MIG containers; an init container's share and the
  inverse mapping to the MIG books' record; a plan disagreeing with the pod's requests is not trusted;
* LedgerSync: MIG books from the inventory (instance ids kept, GPUs without table left out with a note), the
  time-sharing ledger books MIG GPUs as unschedulable; a bound pod's plan is observed, released on terminal phase,
  delete and tombstone; a pending pod's plan is never trusted (B07); rebuild from objects equals the live books;
  instances the Runtime lists as held (or without compute instance) that no record claims are not offered
  (placeholders), until listed free; a node publishing another strategy takes no MIG pod; MIG GPUs never take
  time-sharing pods and time-sharing GPUs never take MIG pods; a reservation is confirmed by the plan, forgotten
  on rollback; a missing inventory keeps the last MIG layout (rebuild agrees);
* property: random sequences of placements, finished pods, deletes, tombstones and inventory updates (static:
  instances randomly listed as held; dynamic: the Runtime's created instances listed, some after their pod ended)
  give live MIG books equal to ``rebuild(final objects)``, and the books verify.
"""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.kube.annotations import (
    MigContainerPlan,
    MigInstanceRecord,
    PlannedInstance,
    decode_inventory,
    decode_mig_plan,
    decode_plan,
    encode_inventory,
    encode_plan,
)
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.kube.translate import (
    mig_allocation_of,
    mig_container_plans,
    pod_request,
    read_mig_plan,
)
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.request import ContainerRequest, GpuKind
from domain.scheduling.mig.books import PLACEHOLDER_PREFIX
from domain.scheduling.sync import LedgerSync, Tombstone
from domain.units import GiB
from support.kube_builders import KEYS, NOW, PROTOCOL, Clock, make_node, make_pod, make_scheduler, make_sync
from support.mig_builders import A100_80, PREFIX, mig_gpus, mig_node, mig_pod, mig_spec, records, with_mig_plan

INV, PLAN = KEYS.node_inventory, KEYS.pod_plan
GPUS = mig_gpus("n1")


def booked(sync: LedgerSync, node: str = "n1") -> dict[str, MigPodAllocation]:
    """Real records of the node's MIG books (placeholders left out)."""
    books = sync.mig.node(node).records()
    return {uid: r for uid, r in books.items() if not uid.startswith(PLACEHOLDER_PREFIX)}


def owners(sync: LedgerSync, node: str = "n1") -> dict[tuple[int, int], str]:
    """``(gpu, start)`` → owning pod UID of every owned instance."""
    return {(g.index, i.start): i.owner.pod_uid for g in sync.mig.node(node).gpus() for i in g.instances
            if i.owner is not None}


def mig_sync(*nodes: object, mode: PlacementMode = PlacementMode.STATIC) -> LedgerSync:
    sync = LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock(), mig_mode=mode)
    for node in nodes:
        sync.on_node(node)  # type: ignore[arg-type]
    return sync


# ---------------------------------------------------------------------------------------------- requests
def test_pod_request_reads_mig_resources() -> None:
    pod = mig_pod("p", containers=[mig_spec("main", "3g.40gb", 2), mig_spec("side", "1g.10gb+me"),
                                   ContainerSpec("plain", limits={"cpu": "1"})])
    request = pod_request(pod, PROTOCOL)
    main, side, plain = request.containers
    assert (main.mig_profile, main.mig_count, main.kind) == ("3g.40gb", 2, GpuKind.NONE)
    assert (side.mig_profile, side.mig_count) == ("1g.10gb+me", 1)
    assert not plain.wants_mig
    assert request.wants_mig
    assert not request.wants_gpu
    assert [c.name for c in request.mig_containers] == ["main", "side"]
    only_requests = mig_pod("q", containers=[ContainerSpec("main", requests={PREFIX + "7g.80gb": "1"})])
    assert pod_request(only_requests, PROTOCOL).containers[0].mig_profile == "7g.80gb"


def test_b30_unknown_profile_is_rejected_with_the_reason() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        pod_request(mig_pod("p", "3g.41gb"), PROTOCOL)
    assert caught.value.field == f"pod[default/p].container[main].{PREFIX}3g.41gb"
    assert "unknown profile" in caught.value.reason
    assert "valid profiles" in caught.value.reason
    with pytest.raises(InvalidRequestError, match=f"use {PREFIX}3g.71gb"):
        pod_request(mig_pod("p", "3g.70gb"), PROTOCOL)  # the truncated spelling of H200's 3g.71gb


def test_other_vendors_mig_names_are_not_ours() -> None:
    pod = mig_pod("p", containers=[ContainerSpec("main", limits={"nvidia.com/mig-1g.5gb": "1"})])
    request = pod_request(pod, PROTOCOL)
    assert not request.wants_mig
    assert not request.wants_gpu


@pytest.mark.parametrize(
    ("containers", "words"),
    [
        ([ContainerSpec("main", limits={PREFIX + "1g.10gb": "1", PROTOCOL.resources.core: "50"})],
         "either MIG instances or"),
        ([mig_spec("a", "1g.10gb"), ContainerSpec("b", limits={PROTOCOL.resources.gpu: "1"})],
         "a pod takes either MIG instances or time-sharing"),
        ([ContainerSpec("main", limits={PREFIX + "1g.10gb": "1", PREFIX + "2g.20gb": "1"})], "one MIG profile"),
        ([ContainerSpec("main", limits={PREFIX + "1g.10gb": "1"}, requests={PREFIX + "1g.10gb": "2"})],
         "requests must equal limits"),
        ([ContainerSpec("main", limits={PREFIX + "1g.10gb": "500m"})], "integer quantity"),
    ],
)
def test_bad_mig_requests_are_clear_errors(containers: list[ContainerSpec], words: str) -> None:
    with pytest.raises(InvalidRequestError, match=words):
        pod_request(mig_pod("p", containers=containers), PROTOCOL)


def test_container_request_checks_its_mig_fields() -> None:
    with pytest.raises(InvalidRequestError, match="profile and a count"):
        ContainerRequest("c", mig_profile="1g.10gb")
    with pytest.raises(InvalidRequestError, match="profile and a count"):
        ContainerRequest("c", mig_count=1)
    with pytest.raises(InvalidRequestError, match="either MIG"):
        ContainerRequest("c", gpus=1, mig_profile="1g.10gb", mig_count=1)
    assert pod_request(mig_pod("p", "1g.10gb", 0), PROTOCOL).wants_mig is False  # 0 is no ask


# ---------------------------------------------------------------------------------------------- inventory
def test_inventory_v2_round_trip_and_documented_shape() -> None:
    layout = {0: [("3g.40gb", 4), ("3g.40gb", 0)], 1: [("1g.10gb", 6)]}
    gpus = (*GPUS, Gpu(2, GpuUuid("GPU-n1-2"), "A100", 16 * GiB))
    text = encode_inventory(gpus, heartbeat=NOW, protocol="fp", mig=records("n1", layout, held=[(0, 4)]),
                            mig_strategy="static")
    data = json.loads(text)
    assert data["version"] == 2
    assert data["migStrategy"] == "static"
    assert data["gpus"][0]["migInstances"][0] == {"gi": 1, "ci": 0, "profile": "3g.40gb", "start": 0,
                                                  "uuid": "MIG-n1-0-0", "free": True}
    assert "migInstances" not in data["gpus"][2]
    record = decode_inventory(text, key=INV)
    assert record.gpus == gpus
    assert record.mig_strategy == "static"
    assert [(i.start, i.free) for i in record.mig[0]] == [(0, True), (4, False)]
    assert record.mig[1] == (MigInstanceRecord(7, 0, "1g.10gb", 6, "MIG-n1-1-6", True),)


def test_inventory_without_mig_gpus_stays_version_1_and_old_texts_decode() -> None:
    plain = (Gpu(0, GpuUuid("GPU-a"), "A100", 16 * GiB),)
    data = json.loads(encode_inventory(plain, heartbeat=NOW, protocol="fp", mig_strategy="dynamic"))
    assert data["version"] == 1
    assert "migStrategy" not in data
    old = json.dumps({"version": 1, "heartbeat": NOW, "protocol": "fp", "gpus": [
        {"index": 0, "uuid": "GPU-a", "model": A100_80, "memoryBytes": 80 * GiB, "health": "Healthy",
         "migMode": "enabled", "migInstances": [{"gi": 1}]}]})  # an older writer: no MIG layout is read from v1
    record = decode_inventory(old, key=INV)
    assert record.gpus[0].mig_mode is MigMode.ENABLED
    assert record.mig == {}
    assert record.mig_strategy == ""


def _v2(**gpu: object) -> str:
    entry = {"index": 0, "uuid": "GPU-a", "model": A100_80, "memoryBytes": 80 * GiB, "health": "Healthy",
             "migMode": "enabled", **gpu}
    return json.dumps({"version": 2, "heartbeat": NOW, "protocol": "fp", "gpus": [entry]})


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        (_v2(migMode="disabled", migInstances=[]), f"{INV}.gpus[0].migInstances", "MIG mode"),
        (_v2(migInstances={}), f"{INV}.gpus[0].migInstances", "JSON array"),
        (_v2(migInstances=[{"gi": 1, "ci": 0, "profile": "1g.10gb", "start": 0, "uuid": "MIG-a"}]),
         f"{INV}.gpus[0].migInstances[0].free", "missing"),
        (_v2(migInstances=[{"gi": 1, "ci": "0", "profile": "1g.10gb", "start": 0, "uuid": "MIG-a", "free": True}]),
         f"{INV}.gpus[0].migInstances[0].ci", "integer or null"),
        (_v2(migInstances=[{"gi": 1, "ci": 0, "profile": "1g.10gb", "start": -1, "uuid": "MIG-a", "free": True}]),
         f"{INV}.gpus[0].migInstances[0]", ">= 0"),
        (_v2(migInstances=[{"gi": 1, "ci": 0, "profile": "1g.10gb", "start": 0, "uuid": "a", "free": True}] * 2),
         f"{INV}.gpus[0].migInstances.start", "share a start"),
        (json.dumps({**json.loads(_v2()), "migStrategy": "sometimes"}), f"{INV}.migStrategy", "static"),
    ],
)
def test_bad_mig_inventory_names_the_field(text: str, field: str, why: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_inventory(text, key=INV)
    assert caught.value.field == field
    assert why in caught.value.reason


def test_encode_inventory_refuses_instances_on_a_gpu_not_in_mig_mode() -> None:
    plain = (Gpu(0, GpuUuid("GPU-a"), "A100", 16 * GiB),)
    with pytest.raises(InvalidRequestError, match="MIG mode"):
        encode_inventory(plain, heartbeat=NOW, protocol="fp", mig=records("n1", {0: [("1g.10gb", 0)]}))
    with pytest.raises(InvalidRequestError, match="static"):
        encode_inventory(GPUS, heartbeat=NOW, protocol="fp", mig_strategy="sometimes")


# ---------------------------------------------------------------------------------------------- plan
def _mig_plan() -> tuple[MigContainerPlan, ...]:
    return (MigContainerPlan("main", False, (PlannedInstance(0, GpuUuid("GPU-n1-0"), "3g.40gb", 4, False, "5"),
                                              PlannedInstance(1, GpuUuid("GPU-n1-1"), "3g.40gb", 0, True))),)


def test_plan_with_mig_round_trips_and_has_the_documented_shape() -> None:
    text = encode_plan(PodAllocation("u1", "n1", cpu_milli=500), GPUS, mig=_mig_plan())
    data = json.loads(text)
    assert data["containers"] == {"main": {"init": False, "whole": False, "gpus": [], "mig": [
        {"index": 0, "uuid": "GPU-n1-0", "profile": "3g.40gb", "start": 4, "create": False, "instanceId": "5"},
        {"index": 1, "uuid": "GPU-n1-1", "profile": "3g.40gb", "start": 0, "create": True, "instanceId": None}]}}
    assert decode_mig_plan(text, key=PLAN, pod_uid="u1", node="n1", node_gpus=GPUS) == _mig_plan()
    plain = decode_plan(text, key=PLAN, pod_uid="u1", node="n1", node_gpus=GPUS, cpu_milli=500)
    assert plain == PodAllocation("u1", "n1", (), cpu_milli=500)


def test_plan_mig_errors() -> None:
    gpus = (*GPUS, Gpu(2, GpuUuid("GPU-n1-2"), "A100", 16 * GiB))
    shared = PodAllocation("u1", "n1", (ContainerGrant("main", (GpuGrant(2, 500, GiB),)),))
    with pytest.raises(InvalidRequestError, match="either GPUs or MIG"):
        encode_plan(shared, gpus, mig=_mig_plan())
    with pytest.raises(InvalidRequestError, match="no such GPU"):
        encode_plan(PodAllocation("u1", "n1"), GPUS[:1], mig=_mig_plan())
    text = encode_plan(PodAllocation("u1", "n1"), GPUS, mig=_mig_plan())
    with pytest.raises(InvalidRequestError, match="not in MIG mode"):
        decode_mig_plan(text, key=PLAN, pod_uid="u1", node="n1",
                        node_gpus=tuple(attrs.evolve(g, mig_mode=MigMode.DISABLED) for g in GPUS))
    with pytest.raises(InvalidRequestError, match="another pod object"):
        decode_mig_plan(text, key=PLAN, pod_uid="u2", node="n1", node_gpus=GPUS)
    old = encode_plan(shared, gpus)
    assert decode_mig_plan(old, key=PLAN, pod_uid="u1", node="n1", node_gpus=gpus) == ()


def test_init_container_share_and_the_inverse_mapping() -> None:
    pod = mig_pod("u1", containers=[mig_spec("prep", "1g.10gb", 2, init=True), mig_spec("main", "1g.10gb", 1)])
    request = pod_request(pod, PROTOCOL)
    allocation = MigPodAllocation("u1", "n1", (MigBooking(0, "1g.10gb", 6, "main"),
                                               MigBooking(1, "1g.10gb", 6, "prep", create=True)))
    plans = mig_container_plans(request, allocation, GPUS, {(0, 6): "7"})
    assert [(p.container, p.init, [(i.gpu_index, i.start, i.instance_id) for i in p.instances]) for p in plans] == [
        ("prep", True, [(1, 6, None), (0, 6, "7")]), ("main", False, [(0, 6, "7")])]
    assert mig_allocation_of(plans, pod_uid="u1", node="n1") == allocation
    bound = with_mig_plan(pod, allocation, GPUS)
    reading = read_mig_plan(attrs.evolve(bound, node_name="n1"), GPUS, PROTOCOL)
    assert reading.allocation == allocation
    assert set(reading.plans) == {"prep", "main"}


def test_plan_that_disagrees_with_the_requests_is_not_trusted() -> None:
    allocation = MigPodAllocation("u1", "n1", (MigBooking(0, "3g.40gb", 4, "main"),))
    bound = with_mig_plan(mig_pod("u1", "3g.40gb"), allocation, GPUS)
    assert read_mig_plan(bound, GPUS, PROTOCOL).allocation == allocation
    wants_two = attrs.evolve(bound, containers=(mig_spec("main", "3g.40gb", 2),))
    assert "asks for 2 x 3g.40gb" in read_mig_plan(wants_two, GPUS, PROTOCOL).problem
    other = attrs.evolve(bound, containers=(mig_spec("main", "4g.40gb"),))
    assert "asks for" in read_mig_plan(other, GPUS, PROTOCOL).problem
    renamed = attrs.evolve(bound, containers=(mig_spec("other", "3g.40gb"),))
    assert "not trusted" in read_mig_plan(renamed, GPUS, PROTOCOL).problem
    assert read_mig_plan(attrs.evolve(bound, node_name=""), GPUS, PROTOCOL).problem == "not bound"


# ---------------------------------------------------------------------------------------------- books
def test_mig_books_follow_the_inventory() -> None:
    gpus = (*mig_gpus("n1", 1), Gpu(1, GpuUuid("GPU-n1-1"), "Tesla T4", 16 * GiB, mig_mode=MigMode.ENABLED),
            Gpu(2, GpuUuid("GPU-n1-2"), "A100", 16 * GiB))
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}, gpus=gpus))
    [gpu] = sync.mig.node("n1").gpus()
    assert [(i.profile.name, i.start, i.instance_id) for i in gpu.instances] == [("3g.40gb", 0, "1"),
                                                                                   ("3g.40gb", 4, "5")]
    assert "GPU 1 (Tesla T4) left out" in sync.books.problems["n1"]
    slot = sync.ledger.slot("n1")
    assert list(sync.ledger.gpu_ok[slot, :3]) == [False, False, True]  # MIG GPUs take no time-sharing pod
    sync.on_node(mig_node("n1", {0: [("7g.80gb", 0)]}, gpus=gpus))
    assert [i.profile.name for i in sync.mig.node("n1").gpu(0).instances] == ["7g.80gb"]
    sync.on_node(make_node("n1", 2))
    assert sync.mig.node_names() == []
    sync.on_node_deleted("n1")
    assert sync.books.problems == {}
    assert sync.books.gates == {}


def test_bound_pod_is_counted_from_its_plan_and_released_on_every_ending() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)]}))
    allocation = MigPodAllocation("a", "n1", (MigBooking(0, "3g.40gb", 4, "main"),))
    pod = with_mig_plan(mig_pod("a"), allocation, GPUS)
    sync.on_pod(pod)
    sync.on_pod(pod)  # idempotent
    assert booked(sync) == {"a": allocation}
    assert owners(sync) == {(0, 4): "a"}
    assert sync.ledger.record("a") == PodAllocation("a", "n1")  # node resources only
    sync.on_pod(attrs.evolve(pod, phase=PodPhase.SUCCEEDED))
    assert booked(sync) == {}
    assert "a" not in sync.ledger
    for ending in (lambda p: sync.on_pod_deleted(p), lambda p: sync.on_pod_deleted(Tombstone(p.key)),
                   lambda p: sync.on_pod_deleted(Tombstone(p.key, p))):
        sync.on_pod(pod)
        assert booked(sync) == {"a": allocation}
        ending(pod)
        assert booked(sync) == {}
        assert owners(sync) == {}


def test_b07_plan_on_a_pending_pod_is_never_trusted() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0)]}))
    allocation = MigPodAllocation("a", "n1", (MigBooking(0, "3g.40gb", 0, "main"),))
    sync.on_pod(with_mig_plan(mig_pod("a"), allocation, GPUS, bind=False))
    assert booked(sync) == {}
    result = sync.schedule(make_scheduler(sync), mig_pod("b"))
    assert result.allocation is not None
    assert owners(sync) == {(0, 0): "b"}


def test_rebuild_from_objects_equals_the_live_books() -> None:
    node = mig_node("n1", {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("1g.10gb", 0)]}, held=[(1, 0)])
    sync = mig_sync(node)
    scheduler = make_scheduler(sync)
    pods = []
    for uid in ("a", "b"):
        result = sync.schedule(scheduler, mig_pod(uid))
        assert result.allocation is not None
        mig = sync.books.assumed[uid]
        pods.append(with_mig_plan(mig_pod(uid), mig, GPUS))
        sync.on_pod(pods[-1])
    assert sync.books.assumed == {}  # the plans confirmed the reservations
    fresh = sync.rebuild([node], pods)
    assert fresh.mig.node("n1").records() == sync.mig.node("n1").records()
    assert fresh.mig.node("n1").gpus() == sync.mig.node("n1").gpus()
    report = sync.resync([node], pods)
    assert not report.missing
    assert not report.extra
    assert booked(sync).keys() == {"a", "b"}


def test_held_instances_without_a_record_are_not_offered() -> None:
    layout = {0: [("3g.40gb", 0), ("3g.40gb", 4)]}
    sync = mig_sync(mig_node("n1", layout, gpus=mig_gpus("n1", 1), held=[(0, 4)], no_compute=[(0, 0)]))
    assert owners(sync) == {(0, 0): f"{PLACEHOLDER_PREFIX}n1/0/0", (0, 4): f"{PLACEHOLDER_PREFIX}n1/0/4"}
    scheduler = make_scheduler(sync)
    result = sync.schedule(scheduler, mig_pod("b"))
    assert result.allocation is None
    assert "3g.40gb" in result.reason
    # the holder turns out to be a pod we count: its record takes the instance, no placeholder remains there
    allocation = MigPodAllocation("a", "n1", (MigBooking(0, "3g.40gb", 4, "main"),))
    sync.on_pod(with_mig_plan(mig_pod("a"), allocation, mig_gpus("n1", 1)))
    assert owners(sync)[(0, 4)] == "a"
    sync.on_pod_deleted(mig_pod("a"))
    assert owners(sync)[(0, 4)] == f"{PLACEHOLDER_PREFIX}n1/0/4"  # still listed as held by the Runtime
    sync.on_node(mig_node("n1", layout, gpus=mig_gpus("n1", 1), no_compute=[(0, 0)], heartbeat=NOW + 1))  # free
    assert (0, 4) not in owners(sync)
    assert sync.schedule(scheduler, mig_pod("b")).allocation is not None
    assert owners(sync)[(0, 4)] == "b"


def test_dynamic_placeholders_keep_slices_taken_until_the_runtime_destroys_them() -> None:
    node = mig_node("n1", {0: [("4g.40gb", 0)]}, gpus=mig_gpus("n1", 1), held=[(0, 0)], strategy="dynamic")
    sync = mig_sync(node, mode=PlacementMode.DYNAMIC)
    scheduler = make_scheduler(sync)
    assert sync.schedule(scheduler, mig_pod("big", "7g.80gb")).allocation is None
    result = sync.schedule(scheduler, mig_pod("small", "3g.40gb"))
    assert result.allocation is not None
    assert sync.books.assumed["small"].bookings == (MigBooking(0, "3g.40gb", 4, "main", create=True),)


def test_strategy_mismatch_gates_mig_pods() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0)]}, strategy="dynamic"))
    assert "dynamic" in sync.books.gates["n1"]
    assert "--mig-strategy" in sync.books.gates["n1"]
    result = sync.schedule(make_scheduler(sync), mig_pod("a"))
    assert result.allocation is None
    assert "takes no MIG pods" in result.reason
    sync.on_node(mig_node("n1", {0: [("3g.40gb", 0)]}, strategy="static", heartbeat=NOW + 1))
    assert sync.books.gates == {}


def test_mig_gpus_and_time_sharing_gpus_never_mix() -> None:
    sync = mig_sync(mig_node("n1", {0: [("7g.80gb", 0)]}, gpus=mig_gpus("n1", 1, shared=1)))
    scheduler = make_scheduler(sync)
    whole = sync.schedule(scheduler, make_pod("w", gpu="1"))
    assert whole.allocation is not None
    assert whole.allocation.containers[0].grants[0].gpu_index == 1
    assert sync.schedule(scheduler, make_pod("w2", gpu="1")).allocation is None  # the MIG GPU is not offered
    assert sync.schedule(scheduler, make_pod("s", core="10", mem="1")).allocation is None
    mig = sync.schedule(scheduler, mig_pod("m", "7g.80gb"))
    assert mig.allocation is not None
    assert sync.books.assumed["m"].bookings[0].gpu_index == 0
    assert sync.schedule(scheduler, mig_pod("m2", "1g.10gb")).allocation is None  # GPU 1 is not a MIG GPU


def test_reservation_rollback_and_node_level_filters() -> None:
    node = mig_node("n1", {0: [("3g.40gb", 0)]})
    sync = mig_sync(node)
    scheduler = make_scheduler(sync)
    result = sync.schedule(scheduler, mig_pod("a"))
    assert result.allocation is not None
    assert "a" in sync.books.assumed
    assert sync.forget("a")
    assert booked(sync) == {}
    assert "a" not in sync.ledger
    assert not sync.forget("a")
    full = attrs.evolve(node, allocatable={"cpu": "64", "memory": "256Gi", "pods": "0"})
    sync.on_node(full)
    refused = sync.schedule(scheduler, mig_pod("a"))
    assert refused.allocation is None
    assert "insufficient cpu, memory or pod slots" in refused.reason
    assert booked(sync) == {}


def test_node_gate_applies_to_mig_pods() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0)]}, heartbeat=NOW - 3600))
    result = sync.schedule(make_scheduler(sync), mig_pod("a"))
    assert result.allocation is None
    assert "stale GPU inventory" in result.reason


def test_unknown_profile_through_the_books_is_an_invalid_request() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0)]}))
    result = sync.schedule(make_scheduler(sync), mig_pod("a", "3g.41gb"))
    assert result.allocation is None
    assert result.reason.startswith("invalid request")
    assert "unknown profile" in (
        result.reason)


def test_a_bound_mig_pod_without_plan_is_noted_not_booked() -> None:
    sync = mig_sync(mig_node("n1", {0: [("3g.40gb", 0)]}))
    sync.on_pod(mig_pod("a", node="n1", phase=PodPhase.RUNNING))
    assert booked(sync) == {}
    assert "not in the MIG books" in sync.problems["a"]
    assert sync.ledger.record("a") == PodAllocation("a", "n1")


def test_pods_on_a_node_seen_later_are_counted_when_it_arrives() -> None:
    allocation = MigPodAllocation("a", "n1", (MigBooking(0, "3g.40gb", 0, "main"),))
    sync = make_sync()
    sync.on_pod(with_mig_plan(mig_pod("a"), allocation, GPUS))
    sync.on_node(mig_node("n1", {0: [("3g.40gb", 0)]}))
    assert booked(sync) == {"a": allocation}
    assert "a" not in sync.problems



def test_missing_inventory_keeps_the_last_mig_layout_and_rebuild_agrees() -> None:
    node = mig_node("n1", {0: [("3g.40gb", 0)]})
    sync = mig_sync(node)
    allocation = MigPodAllocation("a", "n1", (MigBooking(0, "3g.40gb", 0, "main"),))
    pod = with_mig_plan(mig_pod("a"), allocation, GPUS)
    sync.on_pod(pod)
    gone = attrs.evolve(node, annotations={})
    sync.on_node(gone)
    assert "n1" in sync.gates
    assert booked(sync) == {"a": allocation}
    assert sync.mig.node("n1").admitting
    fresh = sync.rebuild([gone], [pod])
    assert fresh.mig.node("n1").records() == sync.mig.node("n1").records()
    assert fresh.mig.node("n1").admitting


_EVENTS = st.lists(st.tuples(st.sampled_from(["place", "finish", "delete", "tombstone", "node"]),
                             st.integers(0, 3), st.sampled_from(["1g.10gb", "3g.40gb", "2g.20gb"]),
                             st.frozensets(st.sampled_from([(0, 0), (0, 4), (1, 0), (1, 6)]))),
                   max_size=25)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, dynamic=st.booleans())
def test_property_live_mig_books_equal_rebuild_from_final_objects(
    events: list[tuple[str, int, str, frozenset[tuple[int, int]]]], dynamic: bool,
) -> None:
    mode = PlacementMode.DYNAMIC if dynamic else PlacementMode.STATIC
    strategy = mode.value
    layout = {} if dynamic else {0: [("3g.40gb", 0), ("3g.40gb", 4)], 1: [("1g.10gb", 0), ("1g.10gb", 6),
                                                                         ("2g.20gb", 2)]}
    node = mig_node("n1", layout, strategy=strategy)
    sync = mig_sync(node, mode=mode)
    scheduler = make_scheduler(sync)
    pods: dict[str, PodObject] = {}
    ever: dict[str, MigPodAllocation] = {}
    heartbeat = NOW
    for kind, n, profile, held in events:
        uid = f"p{n}"
        pod = pods.get(uid)
        if kind == "place" and pod is None:
            fresh = mig_pod(uid, profile)
            if sync.schedule(scheduler, fresh).allocation is not None:
                ever[uid] = sync.books.assumed[uid]
                pods[uid] = with_mig_plan(fresh, ever[uid], GPUS)
                sync.on_pod(pods[uid])
        elif kind == "finish" and pod is not None:
            pods[uid] = attrs.evolve(pod, phase=PodPhase.SUCCEEDED)
            sync.on_pod(pods[uid])
        elif kind in ("delete", "tombstone") and pod is not None:
            del pods[uid]
            sync.on_pod_deleted(pod if kind == "delete" else Tombstone(pod.key))
        elif kind == "node":
            heartbeat += 1
            listed: dict[int, list[tuple[str, int]]] = {i: list(items) for i, items in layout.items()}
            busy = set(held)
            if dynamic:  # the Runtime lists the instances it created: live pods', and some of ended pods'
                live = {u for u, p in pods.items() if not p.phase.terminal}
                for u, allocation in ever.items():
                    for b in allocation.bookings:
                        if u in live or (b.gpu_index, b.start) in held:
                            listed.setdefault(b.gpu_index, []).append((b.profile, b.start))
                            busy.add((b.gpu_index, b.start))
                listed = {i: list({s: (p, s) for p, s in items}.values()) for i, items in listed.items()}
            node = mig_node("n1", listed, held=busy, strategy=strategy, heartbeat=heartbeat)
            sync.on_node(node)
    fresh = sync.rebuild([node], list(pods.values()))
    assert fresh.mig.node("n1").records() == sync.mig.node("n1").records()
    assert fresh.mig.node("n1").gpus() == sync.mig.node("n1").gpus()
    assert sync.mig.node("n1").verify() == []
