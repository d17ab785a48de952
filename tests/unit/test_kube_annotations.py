"""Annotation codecs (domain.kube.annotations).

Behaviours covered:

* inventory: encode → decode round trip (GPUs in index order, health, MIG mode, heartbeat, fingerprint);
  decoding sorts GPUs by index; unknown version, malformed JSON, non-object JSON, missing fields, wrong types
  (string index, bool memory, NaN-free heartbeat), unknown health/MIG values, zero memory (B12f), duplicate
  UUIDs and non-dense indexes are refused with an error naming the annotation key and the field;
* plan: encode → decode round trip equals the allocation (container order, init and whole flags); the UUID is
  authoritative (an index that disagrees with the inventory is corrected, an unknown UUID is refused); a plan
  for another node, an unknown version, corePercent disagreeing with coreMilli, out-of-range core, whole
  grants below 1000 milli-GPU, empty or duplicate GPU lists are refused naming key and field; encoding a grant
  for a GPU the node lacks is refused; ``plan_node`` reads only the node; a plan names its pod (``podUID``) and
  writer: a plan of another pod object (same name, new UID) and a version 1 plan (no podUID) are not trusted;
  ``plan_owner`` reads the pod UID and the writer; encoding needs a pod UID and a writer.
"""

from __future__ import annotations

import json

import attrs
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.annotations import (
    core_percent,
    decode_inventory,
    decode_plan,
    encode_inventory,
    encode_plan,
    plan_node,
    plan_owner,
)
from domain.units import GiB
from support.kube_builders import GPU16, KEYS, NOW, PROTOCOL, make_gpus

INV = KEYS.node_inventory
PLAN = KEYS.pod_plan
GPUS = make_gpus("n1", 2)


def inventory_json(**changes: object) -> dict[str, object]:
    data = json.loads(encode_inventory(GPUS, heartbeat=NOW, protocol="abc"))
    data.update(changes)
    return data


def gpu_entry(**changes: object) -> dict[str, object]:
    entry = dict(inventory_json()["gpus"][0])
    entry.update(changes)
    return entry


# ---------------------------------------------------------------------------------------------- inventory
def test_inventory_round_trip_keeps_every_field() -> None:
    gpus = (GPUS[0], Gpu(1, GpuUuid("GPU-n1-1"), "H100", 80 * GiB, health=Health.UNHEALTHY, mig_mode=MigMode.ENABLED))
    record = decode_inventory(encode_inventory(gpus, heartbeat=NOW + 0.5, protocol=PROTOCOL.fingerprint()), key=INV)
    assert record.gpus == gpus
    assert record.heartbeat == NOW + 0.5
    assert record.protocol == PROTOCOL.fingerprint()


def test_inventory_json_shape_is_the_documented_one() -> None:
    data = json.loads(encode_inventory(GPUS[:1], heartbeat=NOW, protocol="fp"))
    assert data == {
        "version": 1, "heartbeat": NOW, "protocol": "fp",
        "gpus": [{"index": 0, "uuid": "GPU-n1-0", "model": "A100", "memoryBytes": GPU16, "health": "Healthy",
                  "migMode": "disabled"}],
    }


def test_inventory_kubelet_registered_is_written_only_when_false() -> None:
    fingerprint = PROTOCOL.fingerprint()
    assert "kubeletRegistered" not in encode_inventory(GPUS[:1], heartbeat=NOW, protocol=fingerprint)
    text = encode_inventory(GPUS[:1], heartbeat=NOW, protocol=fingerprint, kubelet_registered=False)
    assert json.loads(text)["kubeletRegistered"] is False
    assert decode_inventory(text, key=INV).kubelet_registered is False
    assert decode_inventory(encode_inventory(GPUS[:1], heartbeat=NOW, protocol="fp"), key=INV).kubelet_registered
    bad = json.dumps({**inventory_json(), "kubeletRegistered": "no"})
    with pytest.raises(InvalidRequestError, match="kubeletRegistered"):
        decode_inventory(bad, key=INV)


def test_inventory_decoding_sorts_gpus_by_index() -> None:
    data = inventory_json()
    data["gpus"] = list(reversed(data["gpus"]))
    assert [g.index for g in decode_inventory(json.dumps(data), key=INV).gpus] == [0, 1]


@pytest.mark.parametrize(
    ("text", "field", "why"),
    [
        ("{not json", INV, "malformed JSON"),
        ("[1, 2]", INV, "JSON object"),
        (json.dumps(inventory_json(version=3)), f"{INV}.version", "unsupported version"),
        (json.dumps(inventory_json(version="1")), f"{INV}.version", "integer"),
        (json.dumps({k: v for k, v in inventory_json().items() if k != "gpus"}), f"{INV}.gpus", "missing"),
        (json.dumps({k: v for k, v in inventory_json().items() if k != "heartbeat"}), f"{INV}.heartbeat", "missing"),
        (json.dumps(inventory_json(heartbeat="now")), f"{INV}.heartbeat", "finite number"),
        (json.dumps(inventory_json(heartbeat=True)), f"{INV}.heartbeat", "finite number"),
        (json.dumps(inventory_json(protocol="")), f"{INV}.protocol", "non-empty string"),
        (json.dumps(inventory_json(gpus={"0": {}})), f"{INV}.gpus", "JSON array"),
        (json.dumps(inventory_json(gpus=[gpu_entry(index="0")])), f"{INV}.gpus[0].index", "integer"),
        (json.dumps(inventory_json(gpus=[gpu_entry(memoryBytes=True)])), f"{INV}.gpus[0].memoryBytes", "integer"),
        (json.dumps(inventory_json(gpus=[gpu_entry(memoryBytes=0)])), f"{INV}.gpus[0].memoryBytes", "memory > 0"),
        (json.dumps(inventory_json(gpus=[gpu_entry(memoryBytes=1.5e10)])), f"{INV}.gpus[0].memoryBytes", "integer"),
        (json.dumps(inventory_json(gpus=[gpu_entry(health="Sick")])), f"{INV}.gpus[0].health", "Healthy"),
        (json.dumps(inventory_json(gpus=[gpu_entry(migMode="on")])), f"{INV}.gpus[0].migMode", "disabled"),
        (json.dumps(inventory_json(gpus=[gpu_entry(uuid=None)])), f"{INV}.gpus[0].uuid", "non-empty string"),
        (json.dumps(inventory_json(gpus=[gpu_entry(index=1)])), f"{INV}.gpus.index", "0..n-1"),
        (json.dumps(inventory_json(gpus=[gpu_entry(), gpu_entry(index=1)])), f"{INV}.gpus.uuid", "unique"),
        (json.dumps(inventory_json(gpus=[gpu_entry(), gpu_entry(uuid="GPU-x")])), f"{INV}.gpus.index", "0..n-1"),
    ],
)
def test_bad_inventory_names_key_and_field(text: str, field: str, why: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_inventory(text, key=INV)
    assert caught.value.field == field
    assert why in caught.value.reason


def test_inventory_refuses_nan_heartbeat_and_non_string_values() -> None:
    with pytest.raises(InvalidRequestError, match="finite"):
        decode_inventory(json.dumps(inventory_json()).replace(str(NOW), "NaN"), key=INV)
    with pytest.raises(InvalidRequestError, match="must be a string"):
        decode_inventory(b"{}", key=INV)
    with pytest.raises(InvalidRequestError, match="finite"):
        encode_inventory(GPUS, heartbeat=float("inf"), protocol="fp")


# ---------------------------------------------------------------------------------------------- plan
def allocation() -> PodAllocation:
    return PodAllocation(
        "uid-1", "n1",
        (
            ContainerGrant("zeta", (GpuGrant(1, 600, 8 * GiB),)),
            ContainerGrant("alpha", (GpuGrant(0, 1000, GPU16),), whole=True),
            ContainerGrant("setup", (GpuGrant(1, 333, 2 * GiB),), init=True),
        ),
        cpu_milli=1500, memory_bytes=4 * GiB,
    )


def decode(text: str, **changes: object) -> PodAllocation:
    arguments: dict[str, object] = {"key": PLAN, "pod_uid": "uid-1", "node": "n1", "node_gpus": GPUS,
                                    "cpu_milli": 1500, "memory_bytes": 4 * GiB}
    arguments.update(changes)
    return decode_plan(text, **arguments)


def plan_json() -> dict[str, object]:
    return dict(json.loads(encode_plan(allocation(), GPUS)))


def test_plan_round_trip_equals_the_allocation_in_container_order() -> None:
    text = encode_plan(allocation(), GPUS)
    assert decode(text) == allocation()
    assert list(json.loads(text)["containers"]) == ["zeta", "alpha", "setup"]


def test_plan_json_shape_is_the_documented_one() -> None:
    data = plan_json()
    assert list(data)[:4] == ["version", "podUID", "writer", "node"]
    assert data["version"] == 2
    assert data["podUID"] == "uid-1"
    assert data["writer"] == "lj-runtimekit-scheduler"
    assert data["node"] == "n1"
    assert data["containers"]["setup"] == {
        "init": True, "whole": False,
        "gpus": [{"index": 1, "uuid": "GPU-n1-1", "corePercent": 34, "coreMilli": 333, "memoryBytes": 2 * GiB}],
    }


def test_core_percent_rounds_up() -> None:
    assert [core_percent(c) for c in (1, 10, 11, 600, 1000)] == [1, 1, 2, 60, 100]


def test_uuid_is_authoritative_over_index() -> None:
    data = plan_json()
    data["containers"]["zeta"]["gpus"][0]["index"] = 0
    assert decode(json.dumps(data)).containers[0].grants[0].gpu_index == 1
    swapped = (Gpu(0, GPUS[1].uuid, "A100", GPU16), Gpu(1, GPUS[0].uuid, "A100", GPU16))
    moved = decode(encode_plan(allocation(), GPUS), node_gpus=swapped)
    assert moved.containers[0].grants[0].gpu_index == 0  # GPU-n1-1 is index 0 now


def test_whole_grant_takes_the_current_memory_of_its_gpu() -> None:
    bigger = make_gpus("n1", 2, memory=24 * GiB)
    decoded = decode(encode_plan(allocation(), GPUS), node_gpus=bigger)
    assert decoded.containers[1].grants[0].memory_bytes == 24 * GiB


def mutate(path: tuple[object, ...], value: object) -> str:
    data = plan_json()
    target: object = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(data)


G0 = ("containers", "zeta", "gpus", 0)


@pytest.mark.parametrize(
    ("path", "value", "field", "why"),
    [
        (("version",), 7, f"{PLAN}.version", "unsupported version"),
        (("version",), 1, f"{PLAN}.version", "carry no podUID"),
        (("podUID",), "uid-0", f"{PLAN}.podUID", "another pod object"),
        (("podUID",), "", f"{PLAN}.podUID", "non-empty string"),
        (("writer",), 7, f"{PLAN}.writer", "non-empty string"),
        (("node",), "n2", f"{PLAN}.node", "on node 'n1'"),
        (("node",), 3, f"{PLAN}.node", "non-empty string"),
        (("containers",), [], f"{PLAN}.containers", "JSON object"),
        (("containers", "zeta", "init"), "no", f"{PLAN}.containers.zeta.init", "true or false"),
        (("containers", "zeta", "gpus"), [], f"{PLAN}.containers.zeta.gpus", "at least one GPU"),
        ((*G0, "uuid"), "GPU-other", f"{PLAN}.containers.zeta.gpus[0].uuid", "current inventory"),
        ((*G0, "coreMilli"), 0, f"{PLAN}.containers.zeta.gpus[0].coreMilli", "1..1000"),
        ((*G0, "coreMilli"), 1001, f"{PLAN}.containers.zeta.gpus[0].coreMilli", "1..1000"),
        ((*G0, "coreMilli"), "600", f"{PLAN}.containers.zeta.gpus[0].coreMilli", "integer"),
        ((*G0, "corePercent"), 50, f"{PLAN}.containers.zeta.gpus[0].corePercent", "disagrees"),
        ((*G0, "memoryBytes"), 0, f"{PLAN}.containers.zeta.gpus[0].memoryBytes", "at least 1 byte"),
    ],
)
def test_bad_plan_names_key_and_field(path: tuple[object, ...], value: object, field: str, why: str) -> None:
    text = mutate(path, value)
    with pytest.raises(InvalidRequestError) as caught:
        decode(text)
    assert caught.value.field == field
    assert why in caught.value.reason


def test_whole_grant_below_a_full_gpu_is_refused() -> None:
    data = plan_json()
    grant = data["containers"]["alpha"]["gpus"][0]
    grant.update(coreMilli=500, corePercent=50)
    with pytest.raises(InvalidRequestError) as caught:
        decode(json.dumps(data))
    assert caught.value.field == f"{PLAN}.containers.alpha.gpus[0].coreMilli"
    assert "whole-GPU grant holds 1000" in caught.value.reason


def test_plan_with_a_missing_field_or_malformed_json_is_refused() -> None:
    data = plan_json()
    del data["containers"]["zeta"]["gpus"][0]["uuid"]
    with pytest.raises(InvalidRequestError) as caught:
        decode(json.dumps(data))
    assert caught.value.field == f"{PLAN}.containers.zeta.gpus[0].uuid"
    with pytest.raises(InvalidRequestError, match="malformed JSON"):
        decode('{"version": 1,')


def test_plan_with_the_same_gpu_twice_in_one_container_is_refused() -> None:
    data = plan_json()
    grants = data["containers"]["zeta"]["gpus"]
    grants.append(dict(grants[0]))
    with pytest.raises(InvalidRequestError, match="distinct"):
        decode(json.dumps(data))


def test_encoding_a_grant_on_a_missing_gpu_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="no such GPU"):
        encode_plan(allocation(), GPUS[:1])


def test_plan_node_reads_the_node_only() -> None:
    assert plan_node(encode_plan(allocation(), GPUS), key=PLAN) == "n1"
    with pytest.raises(InvalidRequestError, match="unsupported version"):
        plan_node('{"version": 0, "node": "n1"}', key=PLAN)


def test_a_plan_belongs_to_one_pod_object_and_names_its_writer() -> None:
    text = encode_plan(allocation(), GPUS, writer="other-scheduler")
    assert plan_owner(text, key=PLAN) == ("uid-1", "other-scheduler")
    with pytest.raises(InvalidRequestError, match="another pod object"):
        decode(text, pod_uid="uid-2")  # deleted and re-created under the same name: the old plan is not its own
    version1 = {k: v for k, v in plan_json().items() if k not in ("podUID", "writer")} | {"version": 1}
    with pytest.raises(InvalidRequestError, match="not trusted"):
        decode(json.dumps(version1))
    with pytest.raises(InvalidRequestError, match="not trusted"):
        plan_owner(json.dumps(version1), key=PLAN)
    with pytest.raises(InvalidRequestError, match="pod's UID"):
        encode_plan(attrs.evolve(allocation(), pod_uid=""), GPUS)
    with pytest.raises(InvalidRequestError, match="writer"):
        encode_plan(allocation(), GPUS, writer="")
