"""The agreement check of ``ljrk up`` (entrypoints.up.agreement) on hand-made observations.

Covers: three sources telling the same story give no disagreement (ratios converted back to milli-GPU, init
containers, CPU-only pods); a GPU whose allocation differs in one source, a GPU one source lacks, a Runtime record
that outlived its pod, a container the exporter does not serve and a grant whose memory differs are each reported
with every source's value; ``describe`` and ``to_json`` render them.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from adapters.prometheus.scrape import Sample
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.dra.booking import claim_record_uid
from domain.dra.claims import CLAIM_CONTAINER, ClaimAllocation
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.ledger import GpuUsage
from domain.runtime.types import (
    ContainerData,
    ContainerGpuData,
    DeviceInfo,
    ExporterData,
    GpuData,
    GpuSample,
)
from entrypoints.up.agreement import Observation, compare

GIB = 2**30
NODE = "n0"
U0, U1 = GpuUuid("GPU-0"), GpuUuid("GPU-1")


def usage(index: int, uuid: str, core: int, memory: int) -> GpuUsage:
    return GpuUsage(index, uuid, "A100", 1000, core, 16 * GIB, memory, True)


def gpu_row(index: int, uuid: GpuUuid, core: int, memory: int) -> GpuData:
    return GpuData(DeviceInfo(Gpu(index, uuid, "A100", 16 * GIB)), GpuSample(uuid=uuid), core, memory)


def container_row(pod: str, uid: str, grants: Sequence[tuple[int, GpuUuid, int, int]]) -> ContainerData:
    return ContainerData(uid, "default", pod, "main", False,
                         tuple(ContainerGpuData(i, u, c, m) for i, u, c, m in grants))


def page(gpus: Sequence[tuple[GpuUuid, int, int]], containers: Sequence[tuple[str, GpuUuid, int, int]]
         ) -> list[Sample]:
    samples = []
    for uuid, core, memory in gpus:
        labels = {"node": NODE, "gpu_uuid": uuid}
        samples += [Sample("lj_runtimekit_gpu_core_allocated_ratio", labels, core / 1000),
                    Sample("lj_runtimekit_gpu_memory_allocated_bytes", labels, float(memory))]
    for pod, uuid, core, memory in containers:
        labels = {"node": NODE, "gpu_uuid": uuid, "namespace": "default", "pod": pod, "container": "main"}
        samples += [Sample("lj_runtimekit_container_gpu_core_limit_ratio", labels, core / 1000),
                    Sample("lj_runtimekit_container_gpu_memory_limit_bytes", labels, float(memory))]
    return samples


def running(name: str, uid: str) -> PodObject:
    return PodObject(uid, "default", name, node_name=NODE, phase=PodPhase.RUNNING)


def agreeing() -> Observation:
    a = PodAllocation("uid-a", NODE, (ContainerGrant("main", (GpuGrant(0, 300, 4 * GIB),)),))
    b = PodAllocation("uid-b", NODE, (ContainerGrant("main", (GpuGrant(1, 1000, 16 * GIB),), whole=True),))
    cpu = PodAllocation("uid-c", NODE, (ContainerGrant("main", ()),), cpu_milli=1000)
    return Observation(
        ledger_gpus={NODE: [usage(0, U0, 300, 4 * GIB), usage(1, U1, 1000, 16 * GIB)]},
        ledger_pods={"uid-a": a, "uid-b": b, "uid-c": cpu},
        pods=[running("a", "uid-a"), running("b", "uid-b"), running("c", "uid-c")],
        runtime={NODE: ExporterData(
            gpus=(gpu_row(0, U0, 300, 4 * GIB), gpu_row(1, U1, 1000, 16 * GIB)),
            containers=(container_row("a", "uid-a", [(0, U0, 300, 4 * GIB)]),
                        container_row("b", "uid-b", [(1, U1, 1000, 16 * GIB)])))},
        exporter={NODE: page([(U0, 300, 4 * GIB), (U1, 1000, 16 * GIB)],
                             [("a", U0, 300, 4 * GIB), ("b", U1, 1000, 16 * GIB)])},
    )


def test_three_sources_that_agree() -> None:
    assert compare(agreeing()) == []


def test_a_gpu_allocation_that_differs_in_one_source() -> None:
    observation = agreeing()
    observation = attrs.evolve(observation, exporter={NODE: page(
        [(U0, 290, 4 * GIB), (U1, 1000, 16 * GIB)], [("a", U0, 300, 4 * GIB), ("b", U1, 1000, 16 * GIB)])})
    (found,) = compare(observation)
    assert (found.kind, found.node, found.subject) == ("gpu", NODE, U0)
    assert found.values == {"ledger": (300, 4 * GIB), "runtime": (300, 4 * GIB), "exporter": (290, 4 * GIB)}
    four = 4 * GIB
    assert found.describe() == f"{NODE}: gpu {U0}: ledger=300m/{four}B runtime=300m/{four}B exporter=290m/{four}B"
    assert found.to_json()["values"] == {"ledger": {"core_milli": 300, "memory_bytes": 4 * GIB},
                                         "runtime": {"core_milli": 300, "memory_bytes": 4 * GIB},
                                         "exporter": {"core_milli": 290, "memory_bytes": 4 * GIB}}


def test_a_runtime_record_that_outlived_its_pod() -> None:
    observation = agreeing()
    done = attrs.evolve(observation.pods[0], phase=PodPhase.SUCCEEDED)
    pods = [done, *observation.pods[1:]]
    ledger_pods = {k: v for k, v in observation.ledger_pods.items() if k != "uid-a"}
    ledger_gpus = {NODE: [usage(0, U0, 0, 0), usage(1, U1, 1000, 16 * GIB)]}
    runtime = {NODE: attrs.evolve(observation.runtime[NODE], gpus=(gpu_row(0, U0, 300, 4 * GIB),
                                                                   gpu_row(1, U1, 1000, 16 * GIB)))}
    exporter = {NODE: page([(U0, 300, 4 * GIB), (U1, 1000, 16 * GIB)], [("b", U1, 1000, 16 * GIB)])}
    found = compare(attrs.evolve(observation, pods=pods, ledger_pods=ledger_pods, ledger_gpus=ledger_gpus,
                                 runtime=runtime, exporter=exporter))
    assert [(f.kind, f.subject) for f in found] == [("gpu", U0), ("container", f"default/a/main on {U0}")]
    assert found[0].values == {"ledger": (0, 0), "runtime": (300, 4 * GIB), "exporter": (300, 4 * GIB)}
    assert found[1].values == {"ledger": None, "runtime": (300, 4 * GIB), "exporter": None}


def test_missing_gpu_and_differing_grant() -> None:
    observation = agreeing()
    runtime = {NODE: attrs.evolve(observation.runtime[NODE], gpus=(gpu_row(0, U0, 300, 4 * GIB),),
                                  containers=(container_row("a", "uid-a", [(0, U0, 300, 5 * GIB)]),
                                              container_row("b", "uid-b", [(1, U1, 1000, 16 * GIB)])))}
    found = compare(attrs.evolve(observation, runtime=runtime))
    assert [(f.kind, f.subject, f.values["runtime"]) for f in found] == [
        ("gpu", U1, None), ("container", f"default/a/main on {U0}", (300, 5 * GIB))]


# ---------------------------------------------------------------- DRA claims (ljrk up --dra)
CLAIM_UID = "c-uid"


def claim_row(claim: str, grants: Sequence[tuple[int, GpuUuid, int, int]]) -> ContainerData:
    """The Runtime's record of a prepared claim: pod = the claim, container dra-claim (domain.dra.claims)."""
    return ContainerData(CLAIM_UID, "default", claim, CLAIM_CONTAINER, False,
                         tuple(ContainerGpuData(i, u, c, m) for i, u, c, m in grants))


def with_claim(reserved_for: tuple[str, ...] = ("uid-d",)) -> Observation:
    """``agreeing()`` plus pod d running on a 200 m / 2 GiB share of GPU 0 through claim ``d``."""
    base = agreeing()
    record = PodAllocation(claim_record_uid(CLAIM_UID), NODE,
                           (ContainerGrant(CLAIM_CONTAINER, (GpuGrant(0, 200, 2 * GIB),)),), pod_slot=False)
    claim = ClaimAllocation("default", "d", CLAIM_UID, allocated=True, reserved_for=reserved_for)
    runtime = base.runtime[NODE]
    pod = attrs.evolve(running("d", "uid-d"), containers=(ContainerSpec("main"),))
    return attrs.evolve(
        base, ledger_gpus={NODE: [usage(0, U0, 500, 6 * GIB), usage(1, U1, 1000, 16 * GIB)]},
        ledger_pods={**base.ledger_pods, record.pod_uid: record}, pods=[*base.pods, pod],
        runtime={NODE: attrs.evolve(runtime, gpus=(gpu_row(0, U0, 500, 6 * GIB), gpu_row(1, U1, 1000, 16 * GIB)),
                                    containers=(*runtime.containers, claim_row("d", [(0, U0, 200, 2 * GIB)])))},
        exporter={NODE: page([(U0, 500, 6 * GIB), (U1, 1000, 16 * GIB)],
                             [("a", U0, 300, 4 * GIB), ("b", U1, 1000, 16 * GIB), ("d", U0, 200, 2 * GIB)])},
        claims=(claim,))


def test_a_claim_is_compared_under_the_container_that_uses_it() -> None:
    assert compare(with_claim()) == []
    observation = with_claim()
    record = observation.ledger_pods[claim_record_uid(CLAIM_UID)]
    wrong = attrs.evolve(record, containers=(ContainerGrant(CLAIM_CONTAINER, (GpuGrant(0, 200, 3 * GIB),)),))
    found = compare(attrs.evolve(observation, ledger_pods={**observation.ledger_pods, record.pod_uid: wrong}))
    assert [(f.kind, f.subject, f.values) for f in found] == [
        ("container", f"default/d/main on {U0}",
         {"ledger": (200, 3 * GIB), "runtime": (200, 2 * GIB), "exporter": (200, 2 * GIB)})]


def test_a_claim_that_outlived_its_pod() -> None:
    observation = with_claim()
    ended = attrs.evolve(observation.pods[-1], phase=PodPhase.SUCCEEDED)
    exporter = {NODE: page([(U0, 500, 6 * GIB), (U1, 1000, 16 * GIB)],
                           [("a", U0, 300, 4 * GIB), ("b", U1, 1000, 16 * GIB)])}
    found = compare(attrs.evolve(observation, pods=[*observation.pods[:-1], ended], exporter=exporter))
    assert [(f.subject, f.values) for f in found] == [
        (f"default/d/{CLAIM_CONTAINER} on {U0}", {"ledger": (200, 2 * GIB), "runtime": (200, 2 * GIB),
                                                  "exporter": None})]
    # the claim object deleted but its grant still booked and recorded: one disagreement, under the ledger's key
    gone = compare(attrs.evolve(observation, pods=[*observation.pods[:-1], ended], exporter=exporter, claims=()))
    assert [(f.subject, f.values) for f in gone] == [
        (f"{claim_record_uid(CLAIM_UID)}/{CLAIM_CONTAINER} on {U0}",
         {"ledger": (200, 2 * GIB), "runtime": (200, 2 * GIB), "exporter": None})]
