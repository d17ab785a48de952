"""The classic → DRA claim mapping of the claim-migrate webhook (:mod:`domain.dra.migrate`).

Behaviours covered:
- a 30 % / 4 units share becomes one claim of the share class asking cores 30 and memory 4Gi (unit 1Gi), another
  unit scales the bytes; the classic resources leave requests and limits, the claim enters the container and the
  pod (``spec.resourceClaims`` added whole, or appended when present);
- ``gpu: N`` becomes ExactCount N of the whole-GPU class with no capacity request; ``gpu: 0`` next to a share is
  removed too;
- equal shapes share one template; template names are a function of the shape; JSON pointers escape ``/``;
- a pod asking nothing classic gets no operation; a container without GPUs is left alone;
- refusals name pod, container, field and value and what to do: bad classic values (the classic parser's
  error), core without memory and the reverse, percent-mode memory, init containers, MIG (naming the MIG
  DeviceClass), selector annotations, containers already using claims, a taken claim name;
- :class:`ClaimShape` refuses what no claim of ours means.
"""

from __future__ import annotations

from typing import Any

import pytest

from domain.dra.migrate import ClaimShape, MigrationRefusedError, PodFacts, describe, plan_migration, quantity
from domain.errors import InvalidRequestError
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants

P = ProtocolConstants()
GPU, CORE, MEM = P.resources.gpu, P.resources.core, P.resources.memory
GI = 2**30


def _facts(*containers: ContainerSpec, annotations: dict[str, str] | None = None,
           pod_claims: tuple[str, ...] | None = None, claimed: frozenset[str] = frozenset()) -> PodFacts:
    pod = PodObject(uid="u1", namespace="team", name="p", containers=containers, annotations=annotations or {})
    return PodFacts(pod, "team/p", pod_claims=pod_claims, claimed=claimed)


def _box(name: str = "main", *, init: bool = False, **limits: str) -> ContainerSpec:
    keys = {"gpu": GPU, "core": CORE, "memory": MEM, "cpu": "cpu"}
    return ContainerSpec(name, limits={keys.get(k, k): v for k, v in limits.items()}, init=init)


def _refusal(facts: PodFacts, protocol: ProtocolConstants = P) -> str:
    with pytest.raises(MigrationRefusedError) as error:
        plan_migration(facts, protocol)
    message = str(error.value)
    assert message.startswith("pod team/p: ")
    assert "docs/migrate.md" in message
    return message


def test_a_share_becomes_a_share_claim_with_capacity_requests() -> None:
    spec = ContainerSpec("main", requests={CORE: "30", MEM: "4", "cpu": "1"}, limits={CORE: "30", MEM: "4"})
    migration = plan_migration(_facts(spec), P)
    shape = ClaimShape(P.dra.device_class_share, cores=30, memory_bytes=4 * GI)
    assert migration.claims == {"main": shape}
    assert migration.templates == (shape,)
    assert shape.template_name == "ljrk-migrate-share-30-4gi"
    assert shape.template_spec()["spec"] == {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu-share.lj-runtimekit.io", "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}}]}}
    assert list(migration.patch) == [
        {"op": "remove", "path": "/spec/containers/0/resources/requests/alibabacloud.com~1gpu-core.percentage"},
        {"op": "remove", "path": "/spec/containers/0/resources/requests/alibabacloud.com~1gpu-memory"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/alibabacloud.com~1gpu-core.percentage"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/alibabacloud.com~1gpu-memory"},
        {"op": "add", "path": "/spec/containers/0/resources/claims", "value": [{"name": "gpu-main"}]},
        {"op": "add", "path": "/spec/resourceClaims",
         "value": [{"name": "gpu-main", "resourceClaimTemplateName": "ljrk-migrate-share-30-4gi"}]},
    ]
    assert migration.changes


def test_the_memory_unit_scales_the_bytes() -> None:
    protocol = ProtocolConstants(memory_unit="512Mi")
    migration = plan_migration(_facts(_box(core="50", memory="3")), protocol)
    assert migration.claims["main"] == ClaimShape(protocol.dra.device_class_share, cores=50, memory_bytes=1536 * 2**20)
    assert migration.templates[0].template_name == "ljrk-migrate-share-50-1536mi"


def test_whole_gpus_become_an_exact_count_of_the_gpu_class() -> None:
    migration = plan_migration(_facts(_box("a", cpu="1"), _box("b", gpu="2")), P)
    shape = migration.claims["b"]
    assert shape == ClaimShape(P.dra.device_class_gpu, count=2)
    assert shape.template_name == "ljrk-migrate-gpu-2"
    exactly = shape.template_spec()["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {"deviceClassName": "gpu.lj-runtimekit.io", "allocationMode": "ExactCount", "count": 2}
    assert "a" not in migration.claims  # no GPU: untouched
    assert {"op": "add", "path": "/spec/containers/1/resources/claims", "value": [{"name": "gpu-b"}]} in migration.patch
    assert not any(op["path"].startswith("/spec/containers/0/") for op in migration.patch)


def test_gpu_zero_beside_a_share_is_removed_and_equal_shapes_share_a_template() -> None:
    migration = plan_migration(_facts(_box("a", gpu="0", core="30", memory="4"), _box("b", core="30", memory="4")),
                               P)
    assert len(migration.templates) == 1
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/alibabacloud.com~1gpu"} in migration.patch
    value = migration.patch[-1]["value"]
    assert [e["name"] for e in value] == ["gpu-a", "gpu-b"]
    assert {e["resourceClaimTemplateName"] for e in value} == {"ljrk-migrate-share-30-4gi"}


def test_existing_pod_claims_are_appended_to() -> None:
    migration = plan_migration(_facts(_box(core="10", memory="1"), pod_claims=("other",)), P)
    entry = {"name": "gpu-main", "resourceClaimTemplateName": "ljrk-migrate-share-10-1gi"}
    assert migration.patch[-1] == {"op": "add", "path": "/spec/resourceClaims/-", "value": entry}


def test_a_pod_without_classic_resources_gets_nothing() -> None:
    migration = plan_migration(_facts(_box(cpu="2"), ContainerSpec("x", limits={"example.com/fpga": "1"})), P)
    assert not migration.changes
    assert migration.templates == ()


def test_a_long_container_name_gets_an_index_claim_name() -> None:
    name = "c" * 63
    migration = plan_migration(_facts(_box("x", cpu="1"), _box(name, gpu="1")), P)
    assert migration.patch[-1]["value"] == [{"name": "gpu-1", "resourceClaimTemplateName": "ljrk-migrate-gpu-1"}]


@pytest.mark.parametrize(("limits", "expected"), [
    ({"core": "150", "memory": "4"}, f"container[main].{CORE}: 150: must be an integer 1..100"),
    ({"core": "0", "memory": "4"}, f"container[main].{CORE}: 0: must be an integer 1..100"),
    ({"core": "30.5", "memory": "4"}, f"container[main].{CORE}: '30.5'"),
    ({"gpu": "1", "core": "30", "memory": "4"}, f"container[main].{GPU}: 1: whole GPUs cannot be combined"),
])
def test_what_the_classic_path_refuses_is_refused_with_its_reason(limits: dict[str, str], expected: str) -> None:
    message = _refusal(_facts(_box(**limits)))
    assert expected in message
    assert "fix the request" in message


def test_one_half_of_a_share_is_refused_naming_the_other() -> None:
    message = _refusal(_facts(_box(core="30")))
    assert f"container main: {CORE}=30 without {MEM}" in message
    assert f"add {MEM} (units of 1Gi)" in message
    message = _refusal(_facts(_box(memory="4")))
    assert f"container main: {MEM}=4 without {CORE}" in message
    assert f"add {CORE} (percent of one GPU, 1..100)" in message


def test_percent_mode_memory_is_refused() -> None:
    protocol = ProtocolConstants(memory_unit="1%", resources=type(P.resources)(memory="example.com/mem.percentage"))
    spec = ContainerSpec("main", limits={CORE: "30", "example.com/mem.percentage": "20"})
    message = _refusal(_facts(spec), protocol)
    assert "container main: example.com/mem.percentage=20" in message
    assert "memory-unit 1%" in message


def test_init_containers_with_gpus_are_refused() -> None:
    message = _refusal(_facts(_box("setup", init=True, gpu="1"), _box(core="30", memory="4")))
    assert "init container setup: asks GPU resources" in message
    assert "move the GPU request to an app container" in message


def test_mig_is_refused_naming_the_mig_device_class() -> None:
    spec = ContainerSpec("main", limits={"alibabacloud.com/mig-1g.10gb": "2"})
    message = _refusal(_facts(spec))
    assert "container main: alibabacloud.com/mig-1g.10gb=2" in message
    assert "ask a ResourceClaim of DeviceClass mig-1g-10gb.lj-runtimekit.io (count 2)" in message


@pytest.mark.parametrize("key", [P.annotations.pod_gpu_models, P.annotations.pod_gpu_uuids,
                                 P.annotations.pod_gpu_uuids_exclude, P.annotations.pod_gpu_topology])
def test_gpu_selector_annotations_are_refused(key: str) -> None:
    value = "nvlink" if key == P.annotations.pod_gpu_topology else "A100"
    message = _refusal(_facts(_box(gpu="2"), annotations={key: value}))
    assert f"annotation {key}={value!r}" in message
    assert "remove the annotation" in message


def test_topology_system_and_selectors_without_gpus_are_fine() -> None:
    facts = _facts(_box(gpu="1"), annotations={P.annotations.pod_gpu_topology: "system"})
    assert plan_migration(facts, P).changes
    facts = _facts(_box(cpu="1"), annotations={P.annotations.pod_gpu_models: "A100"})
    assert not plan_migration(facts, P).changes


def test_containers_already_using_claims_and_taken_names_are_refused() -> None:
    message = _refusal(_facts(_box(core="30", memory="4"), claimed=frozenset({"main"})))
    assert "container main: resources.claims: already uses ResourceClaims" in message
    message = _refusal(_facts(_box(core="30", memory="4"), pod_claims=("gpu-main",)))
    assert "spec.resourceClaims[gpu-main]" in message
    assert "rename that claim" in message


def test_claim_shape_refuses_what_no_claim_means() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"count": 0}, "claim.count"),
        ({"cores": 30}, "claim.capacity"),
        ({"cores": 101, "memory_bytes": 1}, "claim.cores"),
        ({"cores": 1, "memory_bytes": 0}, "claim.memory_bytes"),
        ({"cores": 1, "memory_bytes": 1, "count": 2}, "claim.count"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidRequestError) as error:
            ClaimShape("c", **kwargs)
        assert error.value.field == field


def test_quantities_are_exact() -> None:
    assert [quantity(v) for v in (4 * GI, 1536 * 2**20, 1000)] == ["4Gi", "1536Mi", "1000"]


def test_shapes_in_words() -> None:
    assert describe(ClaimShape("c", count=2)) == "class c, 2 devices"
    assert describe(ClaimShape("s", cores=30, memory_bytes=4 * GI)) == "class s, 1 device, cores 30, memory 4Gi"
