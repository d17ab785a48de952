"""Property tests at the boundaries that read Kubernetes objects: whatever the input, the result is a
valid value or our :class:`~domain.errors.InvalidRequestError` naming the field, never another exception.

Behaviours covered:

* quantities (``domain.kube.quantity``, ``domain.kube.protocol.parse_quantity``): any text gives a non-negative
  integer or an error naming the field;
* pod specs (``translate.pod_request``): any containers with any amounts of our resources, CPU, memory and MIG
  names give a :class:`PodRequest` or an error naming the pod; ``read_allocation`` never raises;
* our annotations (``decode_inventory``, ``decode_plan``, ``decode_mig_plan``, ``plan_gpu_uuids``, ``plan_node``,
  ``plan_owner``): valid documents with up to three fields replaced or removed, and arbitrary text, give a value or
  an error whose field starts with the annotation key; a heartbeat beyond float range is such an error (was
  ``OverflowError``); ``read_node`` never raises;
* nodes and pods (``LedgerSync``): any sequence of nodes with such inventories and any allocatable quantities, and
  pods with such plans and amounts, never raises, and the books stay consistent with their records and rebuild
  equal; a node allocatable or a GPU memory beyond int64 (was ``OverflowError`` in the ledger) gates the node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.kube.annotations import (
    decode_inventory,
    decode_mig_plan,
    decode_plan,
    encode_inventory,
    encode_plan,
    plan_gpu_uuids,
    plan_node,
    plan_owner,
)
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import parse_quantity
from domain.kube.quantity import parse_bytes, parse_count, parse_cpu_milli, parse_decimal_quantity
from domain.kube.translate import pod_request, read_allocation, read_node
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.units import GiB
from support.boundary_inputs import mutated, raised
from support.kube_builders import KEYS, NOW, PROTOCOL, RES, make_gpus, make_sync
from support.mig_builders import mig_gpus, mig_pod, records, with_mig_plan

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = "lj-runtimekit.io/test"


def named(error: InvalidRequestError | None, field: str) -> None:
    """No error, or one that names ``field`` (a prefix of its field) and whose message starts with it."""
    if error is not None:
        assert error.field.startswith(field), (error.field, field)
        assert str(error).startswith(error.field)


# ---------------------------------------------------------------------------------------------- quantities
quantity_text = st.one_of(st.text(alphabet="0123456789.eE+-mkMGTPKiun \t", max_size=24), st.text(max_size=12),
                          st.integers(0, 10**60).map(str))


@FAST
@given(quantity_text)
@example("9" * 5000)
@example("1e999")
def test_any_quantity_text_is_a_value_or_an_error_naming_the_field(text: str) -> None:
    values: list[int | Fraction] = []
    parsers: tuple[Callable[[str, str], int | Fraction], ...] = (
        parse_cpu_milli, parse_bytes, parse_count, parse_quantity, parse_decimal_quantity)
    errors: list[InvalidRequestError] = []
    for parse in parsers:
        try:
            values.append(parse("spec.x", text))
        except InvalidRequestError as refused:
            errors.append(refused)
    assert all(value >= 0 for value in values)
    for error in errors:
        named(error, "spec.x")


# ---------------------------------------------------------------------------------------------- pod specs
resources = st.sampled_from([RES.gpu, RES.core, RES.memory, "cpu", "memory", "alibabacloud.com/mig-3g.40gb",
                             "alibabacloud.com/mig-1g.10gb", "alibabacloud.com/mig-3g.41gb", "nvidia.com/gpu"])
amount = st.one_of(quantity_text, st.integers(-3, 10**20).map(str))
amounts = st.dictionaries(resources, amount, max_size=4)
containers = st.lists(st.builds(lambda name, limits, requests, init: ContainerSpec(name, limits=limits,
                                                                                   requests=requests, init=init),
                                st.sampled_from(["a", "b", ""]), amounts, amounts, st.booleans()), max_size=3)
pod_annotations = st.dictionaries(st.sampled_from([KEYS.pod_gpu_models, KEYS.pod_gpu_uuids,
                                                   KEYS.pod_gpu_uuids_exclude, KEYS.pod_plan]),
                                  st.text(max_size=20), max_size=3)


@FAST
@given(containers, pod_annotations, st.sampled_from(["", "u1"]), st.sampled_from(["", "n1"]))
def test_any_pod_spec_is_a_request_or_an_error_naming_the_pod(specs: list[ContainerSpec], annotations: dict[str, str],
                                                              uid: str, node: str) -> None:
    pod = PodObject(uid, "default", "p", containers=tuple(specs), annotations=annotations, node_name=node)
    error = raised(lambda: pod_request(pod, PROTOCOL), InvalidRequestError)
    assert error is None or error.field.startswith(("pod", "container")), error
    read_allocation(pod, make_gpus("n1", 2), PROTOCOL)  # never raises


# ---------------------------------------------------------------------------------------------- annotations
SHARED = make_gpus("n1", 2)
MIG = mig_gpus("n1", 2)
INVENTORY = encode_inventory(mig_gpus("n1", 1, shared=1), heartbeat=NOW, protocol=PROTOCOL.fingerprint(),
                             mig=records("n1", {0: [("3g.40gb", 0)]}), mig_strategy="static")
PLAN = encode_plan(PodAllocation("u", "n1", (ContainerGrant("main", (GpuGrant(0, 300, GiB),)),)), SHARED)
MIG_PLAN = with_mig_plan(mig_pod("u"), MigPodAllocation("u", "n1", (MigBooking(1, "3g.40gb", 0, "main"),)),
                         MIG).annotations[KEYS.pod_plan]
annotation_text = st.one_of(mutated(INVENTORY), mutated(PLAN), mutated(MIG_PLAN), st.text(max_size=30))
HUGE_HEARTBEAT = json.dumps({**json.loads(INVENTORY), "heartbeat": 10**400})


@FAST
@given(annotation_text)
@example(HUGE_HEARTBEAT)  # was OverflowError: int too large to convert to float
def test_any_annotation_text_is_a_value_or_an_error_naming_the_key(text: str) -> None:
    readers = (
        lambda: decode_inventory(text, key=KEY),
        lambda: decode_plan(text, key=KEY, pod_uid="u", node="n1", node_gpus=SHARED),
        lambda: decode_mig_plan(text, key=KEY, pod_uid="u", node="n1", node_gpus=MIG),
        lambda: plan_gpu_uuids(text, key=KEY, pod_uid="u", node="n1"),
        lambda: plan_node(text, key=KEY),
        lambda: plan_owner(text, key=KEY),
    )
    for read in readers:
        named(raised(read, InvalidRequestError), KEY)
    read_node(NodeObject("n1", annotations={PROTOCOL.annotations.node_inventory: text}), PROTOCOL, now=NOW)


def test_a_heartbeat_beyond_float_range_is_refused_with_the_field_named() -> None:
    with pytest.raises(InvalidRequestError, match="heartbeat"):
        decode_inventory(HUGE_HEARTBEAT, key=KEY)


# ---------------------------------------------------------------------------------------------- nodes and pods
allocatable = st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]),
                              st.one_of(st.sampled_from(["64", "256Gi", "110", "1e30", "0", "-1", "500m"]),
                                        st.text(max_size=4)), max_size=3)
nodes = st.builds(lambda alloc, text: NodeObject("n1", annotations={KEYS.node_inventory: text}, allocatable=alloc),
                  allocatable, st.one_of(st.just(INVENTORY), mutated(INVENTORY)))
pods = st.builds(lambda uid, limits, plan, phase: PodObject(uid, "default", uid,
                                                            containers=(ContainerSpec("main", limits=limits),),
                                                            node_name="n1", phase=phase,
                                                            annotations={KEYS.pod_plan: plan}),
                 st.sampled_from(["u", "v"]), amounts, st.one_of(mutated(PLAN), mutated(MIG_PLAN)),
                 st.sampled_from([PodPhase.RUNNING, PodPhase.PENDING, PodPhase.SUCCEEDED]))
events = st.lists(st.one_of(st.tuples(st.just("node"), nodes), st.tuples(st.just("pod"), pods),
                            st.tuples(st.just("delete"), st.sampled_from(["u", "v"]))), max_size=6)
HUGE_ALLOCATABLE = [("node", NodeObject("n1", annotations={KEYS.node_inventory: INVENTORY},
                                        allocatable={"cpu": "1e30", "memory": "1", "pods": "1"}))]
HUGE_GPU = [("node", NodeObject("n1", annotations={KEYS.node_inventory: json.dumps(
    {**json.loads(INVENTORY), "gpus": [{**json.loads(INVENTORY)["gpus"][1], "index": 0, "memoryBytes": 10**30}]})}))]


@FAST
@given(events)
@example(HUGE_ALLOCATABLE)  # was OverflowError: Python int too large to convert to C long (ledger column)
@example(HUGE_GPU)
def test_any_nodes_and_pods_keep_the_books_consistent_and_never_raise(steps: list[tuple[str, Any]]) -> None:
    sync = make_sync()
    seen_nodes: dict[str, NodeObject] = {}
    seen_pods: dict[str, PodObject] = {}
    for kind, item in steps:
        if kind == "node":
            sync.on_node(item)
            seen_nodes[item.name] = item
        elif kind == "pod":
            sync.on_pod(item)
            seen_pods[item.uid] = item
        elif item in seen_pods:
            sync.on_pod_deleted(seen_pods.pop(item))
    for name in sync.ledger.node_names():
        assert sync.ledger.verify_node(name) == []
    fresh = sync.rebuild(list(seen_nodes.values()), list(seen_pods.values()))
    assert fresh.ledger.books() == sync.ledger.books()


@pytest.mark.parametrize("steps", [HUGE_ALLOCATABLE, HUGE_GPU], ids=["allocatable", "gpu-memory"])
def test_a_node_beyond_int64_is_gated_with_the_field_named(steps: list[tuple[str, NodeObject]]) -> None:
    sync = make_sync()
    sync.on_node(steps[0][1])
    assert "must be at most" in sync.gates["n1"]
