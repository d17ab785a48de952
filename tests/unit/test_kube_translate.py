"""Translation of Kubernetes objects (domain.kube.translate, domain.kube.inference, domain.kube.quantity).

Behaviours covered:

* pod requests: whole GPUs, core+memory shares (memory units × memory_unit bytes), core-only and memory-only
  shares, ``gpu=0`` next to a share, limits with requests fallback, requests ≠ limits refused, init containers,
  node-level cpu (``500m``, ``2``, ``0.1``) and memory by ``max(Σ app, max init)``, selector annotations
  (models, UUIDs, excluded UUIDs; blanks ignored);
* B12 at the edge: 0, negative, non-integer (``50.5``, ``500m``), core > 100, whole GPUs with core/memory and
  malformed cpu are refused with an error naming pod, container, resource and value;
* percentage mode: memory in percent becomes ``memory_milli``, resolved per GPU (50 % of 16 GiB and of 80 GiB),
  by the planner, the filters, the default rule and the plan check alike; > 100 % is refused;
  ``ContainerRequest`` validates ``memory_milli`` (range, not with bytes, not with whole GPUs);
* a core share above 100 % is refused saying a share cannot exceed one GPU and naming the whole-GPU resource
  (it used to end "0 is not a request");
* quantities: decimal, binary, exponent forms rounded up; garbage refused; numbers of more than 40 digits refused
  with the field named (they used to escape as a raw ValueError past 4300 digits);
* nodes: a fresh inventory is usable; missing, malformed, zero-memory (B12f), stale and foreign-protocol
  inventories give a reason (stale/foreign still count their GPUs); allocatable parsed, bad allocatable
  reported;
* allocations: terminal → none; pending with a plan → none (B07) unless assumed; bound with a valid plan →
  plan; a plan that disagrees with the pod's request or names another node is not trusted; node-only pods;
  unreadable bound pods count node resources; plan-less pods are inferred from the ledger (B08): whole GPUs
  take the first free healthy GPUs, over-commit the least used when none is free; shares go best-fit; init
  containers are placed against the node before the pod.
"""

from __future__ import annotations

from fractions import Fraction

import attrs
import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.inference import check_plan, infer_allocation
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants, ResourceNames, parse_quantity
from domain.kube.quantity import parse_bytes, parse_cpu_milli, parse_decimal_quantity
from domain.kube.translate import (
    KUBELET_UNREGISTERED,
    AllocationSource,
    inventory_reason,
    node_inventory,
    node_requests,
    pod_allocation,
    pod_request,
    protocol_mismatches,
    read_allocation,
    read_node,
)
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, GpuKind, PodRequest, resolve_share
from domain.scheduling.framework.planner import share_needs
from domain.scheduling.sync import LedgerSync
from domain.units import GiB, MiB
from support.kube_builders import (
    GPU16,
    KEYS,
    NOW,
    PROTOCOL,
    RES,
    Clock,
    make_gpus,
    make_node,
    make_pod,
    make_scheduler,
    with_plan,
)

PERCENT = ProtocolConstants(
    memory_unit="1%", resources=ResourceNames(memory="alibabacloud.com/gpu-memory.percentage")
)


def percent_pod(uid: str, *, core: str | None = None, mem: str | None = None, **extra: object) -> PodObject:
    limits = {k: v for k, v in ((RES.core, core), (PERCENT.resources.memory, mem)) if v is not None}
    return attrs.evolve(make_pod(uid, **extra), containers=(ContainerSpec("main", limits=limits),))


def one(pod: PodObject, protocol: ProtocolConstants = PROTOCOL) -> ContainerRequest:
    return pod_request(pod, protocol).containers[0]


# ---------------------------------------------------------------------------------------------- requests
def test_whole_gpu_request() -> None:
    container = one(make_pod("p", gpu="2"))
    assert (container.kind, container.gpus, container.core_milli, container.memory_bytes) == (GpuKind.WHOLE, 2, None,
                                                                                            None)


def test_share_in_protocol_units() -> None:
    container = one(make_pod("p", core="60", mem="8"))
    assert (container.core_milli, container.memory_bytes, container.memory_milli) == (600, 8 * GiB, None)
    assert one(make_pod("p", core="30")).memory_bytes is None
    assert one(make_pod("p", mem="2")).core_milli is None


def test_other_memory_unit_multiplies() -> None:
    protocol = ProtocolConstants(memory_unit="512Mi")
    assert one(make_pod("p", mem="3"), protocol).memory_bytes == 3 * 512 * MiB


def test_b12a_gpu_zero_next_to_a_share_is_a_share() -> None:
    container = one(make_pod("p", gpu="0", core="30", mem="4"))
    assert container.kind is GpuKind.SHARE
    assert (container.gpus, container.core_milli, container.memory_bytes) == (0, 300, 4 * GiB)


def test_no_gpu_resources_is_a_cpu_only_container() -> None:
    request = pod_request(make_pod("p", cpu="2"), PROTOCOL)
    assert not request.wants_gpu
    assert request.cpu_milli == 2000


def test_requests_are_used_when_limits_are_absent_and_must_equal_limits() -> None:
    spec = ContainerSpec("main", requests={RES.core: "40"})
    pod = PodObject("p", "default", "p", containers=(spec,))
    assert one(pod).core_milli == 400
    equal = attrs.evolve(spec, limits={RES.core: "40"})
    assert one(attrs.evolve(pod, containers=(equal,))).core_milli == 400
    differ = attrs.evolve(spec, limits={RES.core: "50"})
    with pytest.raises(InvalidRequestError, match="requests must equal limits") as caught:
        pod_request(attrs.evolve(pod, containers=(differ,)), PROTOCOL)
    assert caught.value.field == f"pod[default/p].container[main].{RES.core}"


@pytest.mark.parametrize(
    ("limits", "resource", "value", "why"),
    [
        ({RES.core: "0", RES.memory: "0"}, RES.core, 0, "0 is not a request"),
        ({RES.memory: "0"}, RES.memory, 0, "0 is not a request"),
        ({RES.core: "150"}, RES.core, 150, "1..100"),
        ({RES.core: "50.5"}, RES.core, "50.5", "integer quantity"),
        ({RES.core: "-10"}, RES.core, "-10", "integer quantity"),
        ({RES.gpu: "500m"}, RES.gpu, "500m", "integer quantity"),
        ({RES.memory: "1.5"}, RES.memory, "1.5", "integer quantity"),
        ({RES.gpu: "1", RES.core: "50"}, RES.gpu, 1, "cannot be combined"),
        ({RES.gpu: "1", RES.memory: "4"}, RES.gpu, 1, "cannot be combined"),
        ({"cpu": "two"}, "cpu", "two", "non-negative quantity"),
        ({"memory": "-1Gi"}, "memory", "-1Gi", "non-negative quantity"),
    ],
)
def test_b12_bad_values_name_container_resource_and_value(
    limits: dict[str, str], resource: str, value: object, why: str
) -> None:
    pod = PodObject("p", "team", "job", containers=(ContainerSpec("worker", limits=limits),))
    with pytest.raises(InvalidRequestError) as caught:
        pod_request(pod, PROTOCOL)
    assert caught.value.field == f"pod[team/job].container[worker].{resource}"
    assert caught.value.value == value
    assert why in caught.value.reason


@pytest.mark.parametrize("core", ["101", "150"])
def test_a_core_share_above_100_percent_says_why_and_what_to_ask_instead(core: str) -> None:
    pod = PodObject("p", "team", "job", containers=(ContainerSpec("worker", limits={RES.core: core}),))
    with pytest.raises(InvalidRequestError) as caught:
        pod_request(pod, PROTOCOL)
    assert (caught.value.field, caught.value.value) == (f"pod[team/job].container[worker].{RES.core}", int(core))
    assert "0 is not a request" not in caught.value.reason  # what the message used to end with
    assert "a share cannot exceed one GPU" in caught.value.reason
    assert caught.value.reason.endswith(f"ask for whole GPUs with {RES.gpu} instead")


def test_node_level_requests_follow_the_effective_request_rule() -> None:
    pod = PodObject("p", "default", "p", containers=(
        ContainerSpec("a", requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1"}),
        ContainerSpec("b", limits={"cpu": "2", "memory": "512Mi"}),
        ContainerSpec("init", requests={"cpu": "0.1", "memory": "4Gi"}, init=True),
    ))
    assert node_requests(pod) == (2500, 4 * GiB)  # cpu: Σ app 2500 > init 100; memory: init 4Gi > Σ app 1.5Gi
    request = pod_request(pod, PROTOCOL)
    assert (request.cpu_milli, request.memory_bytes) == (2500, 4 * GiB)
    assert [c.init for c in request.containers] == [False, False, True]


def test_init_container_gpu_request_is_marked_init() -> None:
    pod = PodObject("p", "default", "p", containers=(
        ContainerSpec("setup", limits={RES.core: "20"}, init=True), ContainerSpec("main", limits={RES.gpu: "1"}),
    ))
    request = pod_request(pod, PROTOCOL)
    assert [(c.name, c.init, c.kind) for c in request.gpu_containers] == [
        ("setup", True, GpuKind.SHARE), ("main", False, GpuKind.WHOLE)
    ]


def test_selector_annotations() -> None:
    pod = make_pod("p", core="10", annotations={
        KEYS.pod_gpu_models: "A100, H100,,A100", KEYS.pod_gpu_uuids: "GPU-a,GPU-b ",
        KEYS.pod_gpu_uuids_exclude: " GPU-c",
    })
    selector = pod_request(pod, PROTOCOL).selector
    assert selector.models == ("A100", "H100")
    assert selector.include_uuids == frozenset({"GPU-a", "GPU-b"})
    assert selector.exclude_uuids == frozenset({"GPU-c"})
    assert pod_request(make_pod("q", core="10"), PROTOCOL).selector.unconstrained


# ---------------------------------------------------------------------------------------------- percent mode
def test_percent_mode_memory_is_relative() -> None:
    container = one(percent_pod("p", core="20", mem="50"), PERCENT)
    assert (container.core_milli, container.memory_bytes, container.memory_milli) == (200, None, 500)
    with pytest.raises(InvalidRequestError, match=r"1\.\.100") as caught:
        pod_request(percent_pod("p", mem="150"), PERCENT)
    assert caught.value.field.endswith(PERCENT.resources.memory)


def test_relative_memory_resolves_per_gpu() -> None:
    assert resolve_share(core_milli=None, memory_bytes=None, memory_milli=500, gpu_memory_bytes=GPU16) == (
        500, 8 * GiB
    )
    assert resolve_share(core_milli=200, memory_bytes=None, memory_milli=500, gpu_memory_bytes=80 * GiB) == (
        200, 40 * GiB
    )
    core, mem = share_needs(None, None, np.array([GPU16, 80 * GiB, 0], np.int64), memory_milli=250)
    assert core[:2].tolist() == [250, 250]
    assert mem[:2].tolist() == [4 * GiB, 20 * GiB]
    assert mem[2] > 80 * GiB  # a GPU without memory never fits


def test_container_request_validates_memory_milli() -> None:
    assert ContainerRequest.share("c", memory_percent=30).memory_milli == 300
    with pytest.raises(InvalidRequestError, match=r"1\.\.1000"):
        ContainerRequest("c", memory_milli=0)
    with pytest.raises(InvalidRequestError, match="not both"):
        ContainerRequest("c", memory_bytes=1, memory_milli=10)
    with pytest.raises(InvalidRequestError, match="cannot be combined"):
        ContainerRequest("c", gpus=1, memory_milli=10)
    with pytest.raises(InvalidRequestError, match=r"1\.\.100"):
        ContainerRequest.share("c", memory_percent=101)


def test_percent_mode_schedules_relative_memory_on_different_gpus() -> None:
    small = make_node("small", 1, memory=GPU16, fingerprint=PERCENT.fingerprint())
    large = make_node("large", 1, memory=80 * GiB, model="H100", fingerprint=PERCENT.fingerprint())
    sync = LedgerSync(ClusterLedger(), PERCENT, clock=Clock())
    sync.on_node(small)
    sync.on_node(large)
    assert sync.gates == {}
    scheduler = make_scheduler(sync)
    on_small = sync.schedule(scheduler, percent_pod("a", mem="50", annotations={KEYS.pod_gpu_models: "A100"}))
    on_large = sync.schedule(scheduler, percent_pod("b", mem="50", annotations={KEYS.pod_gpu_models: "H100"}))
    assert on_small.allocation is not None
    assert on_large.allocation is not None
    assert on_small.allocation.per_gpu_usage() == {0: (500, 8 * GiB)}
    assert on_large.allocation.per_gpu_usage() == {0: (500, 40 * GiB)}
    gpus = make_gpus("large", 1, memory=80 * GiB, model="H100")
    check_plan(on_large.allocation, pod_request(percent_pod("b", mem="50"), PERCENT), gpus, key=KEYS.pod_plan)
    assert sync.ledger.gpus("large")[0].memory_used == 40 * GiB


def test_percent_mode_multi_container_pod_resolves_each_share_on_its_gpu() -> None:
    sync = LedgerSync(ClusterLedger(), PERCENT, clock=Clock())
    sync.on_node(make_node("n", 2, memory=80 * GiB, fingerprint=PERCENT.fingerprint()))
    pod = PodObject("p", "default", "p", containers=(
        ContainerSpec("a", limits={RES.core: "60", PERCENT.resources.memory: "25"}),
        ContainerSpec("b", limits={PERCENT.resources.memory: "50"}),
    ))
    result = sync.schedule(make_scheduler(sync), pod)
    assert result.allocation is not None
    grants = {c.container: c.grants[0] for c in result.allocation.containers}
    assert (grants["a"].core_milli, grants["a"].memory_bytes) == (600, 20 * GiB)
    assert (grants["b"].core_milli, grants["b"].memory_bytes) == (500, 40 * GiB)
    assert grants["a"].gpu_index != grants["b"].gpu_index  # 600 + 500 milli-GPU do not fit one GPU


# ---------------------------------------------------------------------------------------------- quantities
@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Fraction(1, 2)), ("2", Fraction(2)), ("1.5Gi", Fraction(3 * 2**29)), ("129e6", Fraction(129 * 10**6)),
     ("1E", Fraction(10**18)), ("1E3", Fraction(1000)), (".5", Fraction(1, 2)), ("+1k", Fraction(1000))],
)
def test_decimal_quantities(text: str, value: Fraction) -> None:
    assert parse_decimal_quantity("q", text) == value


def test_cpu_and_bytes_round_up() -> None:
    assert parse_cpu_milli("cpu", "0.0001") == 1
    assert parse_cpu_milli("cpu", "250m") == 250
    assert parse_bytes("memory", "1.5Ki") == 1536
    assert parse_bytes("memory", "100m") == 1


@pytest.mark.parametrize("text", ["", "-1", "1.2.3", "10 Gi", "1e99", "abc", "1Zi", "9" * 5000, "0." + "1" * 5000])
def test_bad_quantities_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequestError):
        parse_decimal_quantity("q", text)


@pytest.mark.parametrize("text", ["9" * 5000, "9" * 41 + "Gi"])
def test_integer_quantities_with_too_many_digits_name_the_field(text: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:  # was a raw ValueError beyond 4300 digits
        parse_quantity("pod[default/a].container[main].gpu-memory", text)
    assert (caught.value.field, caught.value.value) == ("pod[default/a].container[main].gpu-memory", text)
    assert "digits" in caught.value.reason
    assert parse_quantity("q", "9" * 40) == int("9" * 40)


# ---------------------------------------------------------------------------------------------- nodes
def test_fresh_inventory_is_usable_with_allocatable() -> None:
    reading = read_node(make_node("n1", 2, allocatable={"cpu": "63500m", "memory": "255Gi", "pods": "64"}),
                        PROTOCOL, now=NOW + 10)
    assert reading.reason == ""
    assert reading.inventory is not None
    assert reading.inventory.gpus == make_gpus("n1", 2)
    assert (reading.counted.cpu_milli, reading.counted.memory_bytes, reading.counted.max_pods) == (
        63500, 255 * GiB, 64
    )
    assert reading.heartbeat == NOW


@pytest.mark.parametrize(
    ("node", "why", "gpus_counted"),
    [
        (make_node("n", annotation=None), "no GPU inventory annotation", 0),
        (make_node("n", annotation="{oops"), "malformed GPU inventory", 0),
        (make_node("n", memory=GPU16, annotation=encode_inventory(
            make_gpus("n", 1), heartbeat=NOW, protocol=PROTOCOL.fingerprint()).replace(str(GPU16), "0")),
         "memory > 0", 0),
        (make_node("n", heartbeat=NOW - 61), "stale GPU inventory", 2),
        (make_node("n", heartbeat=NOW + 61), "61 s in the future", 2),
        (make_node("n", fingerprint="0000000000000000"), "protocol mismatch", 2),
        (make_node("n", allocatable={"cpu": "lots", "memory": "1Gi", "pods": "10"}), "allocatable.cpu", 2),
        (make_node("n", annotation=encode_inventory(make_gpus("n", 2), heartbeat=NOW, protocol=PROTOCOL.fingerprint(),
                                                    kubelet_registered=False)), KUBELET_UNREGISTERED, 2),
    ],
)
def test_unusable_inventory_has_a_reason(node: object, why: str, gpus_counted: int) -> None:
    reading = read_node(node, PROTOCOL, now=NOW)
    assert why in reading.reason
    assert reading.inventory is None
    assert node_inventory(node, PROTOCOL, now=NOW) is None
    assert reading.counted.gpu_count == gpus_counted


def test_an_exporter_or_device_plugin_with_another_protocol_gates_the_node() -> None:
    keys = PROTOCOL.annotations
    base = make_node("n")
    exporter = attrs.evolve(base, annotations={**base.annotations, keys.node_exporter_protocol: "e" * 16})
    assert protocol_mismatches(exporter, PROTOCOL) == {"exporter": "e" * 16}
    reading = read_node(exporter, PROTOCOL, now=NOW)
    assert reading.inventory is None
    assert f"protocol mismatch: exporter speaks {'e' * 16}, scheduler {PROTOCOL.fingerprint()}" in reading.reason
    agreeing = attrs.evolve(base, annotations={**base.annotations, keys.node_exporter_protocol: PROTOCOL.fingerprint(),
                                               keys.node_protocol: PROTOCOL.fingerprint()})
    assert protocol_mismatches(agreeing, PROTOCOL) == {}
    assert read_node(agreeing, PROTOCOL, now=NOW).reason == ""
    plugin = attrs.evolve(base, annotations={**base.annotations, keys.node_protocol: "d" * 16})
    assert protocol_mismatches(plugin, PROTOCOL) == {"device-plugin": "d" * 16}
    assert "protocol mismatch: device plugin speaks dddd" in read_node(plugin, PROTOCOL, now=NOW).reason


def test_heartbeat_exactly_at_the_limit_is_fresh() -> None:
    assert read_node(make_node("n", heartbeat=NOW - 60), PROTOCOL, now=NOW).reason == ""
    assert read_node(make_node("n", heartbeat=NOW + 60), PROTOCOL, now=NOW).reason == ""


def test_the_reason_at_a_later_time_needs_no_second_decode() -> None:
    node = make_node("n", fingerprint="0000000000000000")
    reading = read_node(node, PROTOCOL, now=NOW)
    assert "protocol mismatch" in reading.steady_reason
    assert "stale" not in reading.reason
    later = inventory_reason(reading.heartbeat, reading.steady_reason, PROTOCOL, now=NOW + 300)
    assert later == read_node(node, PROTOCOL, now=NOW + 300).reason
    assert later.startswith("stale GPU inventory: heartbeat 300 s old")
    assert inventory_reason(None, "", PROTOCOL, now=NOW) == ""


# ---------------------------------------------------------------------------------------------- allocations
GPUS = make_gpus("n1", 2)


def share_plan(uid: str, index: int, core: int = 400, mem: int = 4 * GiB) -> PodAllocation:
    return PodAllocation(uid, "n1", (ContainerGrant("main", (GpuGrant(index, core, mem),)),))


def test_terminal_and_pending_pods_are_not_counted() -> None:
    done = with_plan(make_pod("a", core="40", mem="4"), share_plan("a", 0), GPUS)
    assert read_allocation(attrs.evolve(done, phase=PodPhase.SUCCEEDED), GPUS, PROTOCOL).source is AllocationSource.NONE
    assert pod_allocation(attrs.evolve(done, phase=PodPhase.FAILED), GPUS, PROTOCOL) is None


def test_b07_plan_on_a_pending_pod_is_never_trusted() -> None:
    pending = with_plan(make_pod("a", core="40", mem="4"), share_plan("a", 0), GPUS, bind=False)
    reading = read_allocation(pending, GPUS, PROTOCOL)
    assert (reading.allocation, reading.source) == (None, AllocationSource.NONE)
    mine = share_plan("a", 1)
    assert read_allocation(pending, GPUS, PROTOCOL, assumed=mine).allocation == mine


def test_bound_pod_with_a_valid_plan_uses_it() -> None:
    pod = with_plan(make_pod("a", core="40", mem="4", cpu="1"), share_plan("a", 1), GPUS)
    reading = read_allocation(pod, GPUS, PROTOCOL)
    assert reading.source is AllocationSource.PLAN
    assert reading.allocation == attrs.evolve(share_plan("a", 1), cpu_milli=1000)


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (share_plan("a", 1, core=100), "resolves to"),  # pod-written plan claiming less than the request
        (PodAllocation("a", "n1", (ContainerGrant("other", (GpuGrant(0, 400, 4 * GiB),)),)), "has no entry"),
        (PodAllocation("a", "n1", (ContainerGrant("main", (GpuGrant(0, 1000, GPU16),), whole=True),)), "exactly one"),
        (PodAllocation("a", "n1", (ContainerGrant("main", (GpuGrant(0, 400, 4 * GiB),), init=True),)), "init"),
    ],
)
def test_plan_that_disagrees_with_the_request_is_not_trusted(plan: PodAllocation, why: str) -> None:
    pod = with_plan(make_pod("a", core="40", mem="4"), plan, GPUS)
    reading = read_allocation(pod, GPUS, PROTOCOL)
    assert reading.source is AllocationSource.INFERRED
    assert why in reading.problem
    assert reading.allocation is not None
    assert reading.allocation.per_gpu_usage() == {0: (400, 4 * GiB)}


def test_plan_check_refuses_extra_containers_and_wrong_whole_count() -> None:
    request = PodRequest("a", (ContainerRequest("main", gpus=2),))
    whole_one = PodAllocation("a", "n1", (ContainerGrant("main", (GpuGrant(0, 1000, GPU16),), whole=True),))
    with pytest.raises(InvalidRequestError, match="2 whole GPUs"):
        check_plan(whole_one, request, GPUS, key="k")
    extra = PodAllocation("a", "n1", (*whole_one.containers, ContainerGrant("side", (GpuGrant(1, 10, 1),))))
    with pytest.raises(InvalidRequestError, match="no GPU resources"):
        check_plan(extra, PodRequest("a", (ContainerRequest("main", gpus=1), ContainerRequest("side"))), GPUS, key="k")


def test_plan_for_another_node_is_not_trusted() -> None:
    pod = attrs.evolve(with_plan(make_pod("a", core="40", mem="4"), share_plan("a", 1), GPUS), node_name="n1")
    moved = attrs.evolve(pod, node_name="n2")
    reading = read_allocation(moved, make_gpus("n2", 2), PROTOCOL)
    assert reading.source is AllocationSource.INFERRED
    assert "on node 'n2'" in reading.problem
    assert reading.allocation is not None
    assert reading.allocation.node == "n2"


def test_bound_pod_without_plan_but_assumed_uses_the_reservation() -> None:
    mine = share_plan("a", 1)
    pod = make_pod("a", core="40", mem="4", node="n1")
    reading = read_allocation(pod, GPUS, PROTOCOL, assumed=mine)
    assert (reading.allocation, reading.source) == (mine, AllocationSource.ASSUMED)
    elsewhere = attrs.evolve(mine, node="n9")
    assert read_allocation(pod, GPUS, PROTOCOL, assumed=elsewhere).source is AllocationSource.INFERRED


def test_node_only_and_unreadable_bound_pods_count_node_resources() -> None:
    cpu_only = make_pod("c", cpu="3", node="n1")
    reading = read_allocation(cpu_only, GPUS, PROTOCOL)
    assert reading.source is AllocationSource.NODE_ONLY
    assert reading.allocation == PodAllocation("c", "n1", (), cpu_milli=3000)
    broken = make_pod("b", core="0", cpu="1", node="n1", scheduler="default-scheduler")
    reading = read_allocation(broken, GPUS, PROTOCOL)
    assert reading.source is AllocationSource.NODE_ONLY
    assert reading.allocation == PodAllocation("b", "n1", (), cpu_milli=1000)
    assert "unreadable request" in reading.problem


def test_infer_false_defers_inference() -> None:
    reading = read_allocation(make_pod("x", gpu="1", node="n1"), GPUS, PROTOCOL, infer=False)
    assert (reading.allocation, reading.source) == (None, AllocationSource.INFERRED)


# ---------------------------------------------------------------------------------------------- inference (B08)
def ledger_with(*allocations: PodAllocation, unhealthy: tuple[int, ...] = (), count: int = 2) -> ClusterLedger:
    from domain.gpu import NodeInventory, NodeName

    inventory = NodeInventory(NodeName("n1"), make_gpus("n1", count, unhealthy=unhealthy), cpu_milli=64000,
                              memory_bytes=256 * GiB)
    return ClusterLedger.rebuild([inventory], list(allocations))


def test_b08_foreign_whole_gpu_pod_takes_the_first_free_gpu() -> None:
    ledger = ledger_with(share_plan("y", 0, core=500, mem=8 * GiB))
    x = make_pod("x", gpu="1", node="n1", scheduler="default-scheduler")
    allocation = pod_allocation(x, GPUS, PROTOCOL, ledger=ledger)
    assert allocation is not None
    assert allocation.per_gpu_usage() == {1: (1000, GPU16)}
    assert allocation.whole_gpu_indexes == frozenset({1})


def test_inference_prefers_healthy_free_gpus_then_overcommits_the_least_used() -> None:
    gpus = make_gpus("n1", 3, unhealthy=(0,))
    request = pod_request(make_pod("x", gpu="1", node="n1"), PROTOCOL)
    allocation, note = infer_allocation(request, "n1", gpus, ledger_with(unhealthy=(0,), count=3))
    assert allocation.whole_gpu_indexes == frozenset({1})
    assert note == ""
    busy = ledger_with(share_plan("a", 0, core=900, mem=GiB), share_plan("b", 1, core=200, mem=GiB))
    allocation, _ = infer_allocation(request, "n1", GPUS, busy)
    assert allocation.whole_gpu_indexes == frozenset({1})  # nothing free: the least used GPU still loses capacity


def test_inferred_share_goes_best_fit_and_discounts_its_own_record() -> None:
    ledger = ledger_with(share_plan("a", 0, core=300, mem=GiB), share_plan("b", 1, core=700, mem=GiB))
    request = pod_request(make_pod("x", core="20", mem="2", node="n1"), PROTOCOL)
    allocation, _ = infer_allocation(request, "n1", GPUS, ledger)
    assert allocation.per_gpu_usage() == {1: (200, 2 * GiB)}  # least free core that fits
    ledger.observe(allocation)
    again, _ = infer_allocation(request, "n1", GPUS, ledger)
    assert again == allocation  # its own booking does not push it elsewhere
    big = pod_request(make_pod("y", core="90", mem="2", node="n1"), PROTOCOL)
    allocation, _ = infer_allocation(big, "n1", GPUS, ledger)
    assert allocation.per_gpu_usage() == {0: (900, 2 * GiB)}  # fits nowhere: most free core, over-committed


def test_inference_places_init_containers_against_the_node_before_the_pod() -> None:
    pod = PodObject("x", "default", "x", node_name="n1", containers=(
        ContainerSpec("init", limits={RES.gpu: "1"}, init=True), ContainerSpec("main", limits={RES.gpu: "1"}),
    ))
    allocation, _ = infer_allocation(pod_request(pod, PROTOCOL), "n1", GPUS, ledger_with())
    assert allocation.per_gpu_usage() == {0: (1000, GPU16)}  # both on GPU0: the pod holds max(app, init)


def test_inference_without_gpus_counts_node_resources_and_says_why() -> None:
    request = pod_request(make_pod("x", gpu="1", cpu="1", node="n1"), PROTOCOL)
    allocation, note = infer_allocation(request, "n1", (), None)
    assert allocation == PodAllocation("x", "n1", (), cpu_milli=1000)
    assert "reports no GPUs" in note
    many = pod_request(make_pod("y", gpu="3", node="n1"), PROTOCOL)
    allocation, note = infer_allocation(many, "n1", GPUS, None)
    assert allocation.whole_gpu_indexes == frozenset({0, 1})
    assert "asks for 3 GPUs" in note


def test_plan_text_round_trip_through_a_bound_pod() -> None:
    plan = share_plan("a", 1)
    pod = attrs.evolve(make_pod("a", core="40", mem="4", node="n1"),
                       annotations={KEYS.pod_plan: encode_plan(plan, GPUS)})
    assert pod_allocation(pod, GPUS, PROTOCOL) == plan
