"""DRA claims in the exporter's attribution (``domain.exporter.attribution``): a claim's grant, recorded by the
Runtime as pod = the claim with container ``dra-claim``, is served for the containers pod-resources lists as using
the claim, with the claim's namespace and name as labels; through the collector and the Prometheus page with the
in-process Runtime (the grant made by the DRA plugin's own ``plan_claim``) and in-memory pod-resources.

Covers: one container using the claim gets the claim's row under its pod and container names with the claim labels;
two containers (of two pods) sharing it each get it; a claim no listed container uses is not served; a
device-plugin row beside it is unchanged (empty claim labels); without pod-resources the claim's row is served as
the Runtime has it, claim labels set; the collector's ended-pods check leaves claim rows alone; the /metrics page
carries ``claim_namespace``/``claim_name`` on the container series.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.podresources import InMemoryPodResources
from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.dra.claims import CLAIM_CONTAINER, AllocationResult, ClaimRef, plan_claim
from domain.exporter.attribution import PodContainerDevices, attribute_checked
from domain.exporter.metrics import PREFIX
from domain.gpu import Gpu, GpuUuid
from domain.runtime.types import ContainerAllocationRequest, ExporterData, PlannedGpu
from entrypoints.runtime.inprocess import InProcessRuntime
from services.exporter.collector import SnapshotCollector

GIB = 1 << 30
DRIVER = "gpu.lj-runtimekit.io"
CLAIM = ClaimRef("team", "claim-uid-1", "shared-gpu")


def _runtime() -> InProcessRuntime:
    runtime = InProcessRuntime([Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(2)])
    share = AllocationResult("share", DRIVER, "node-1", "gpu-1", {"cores": "30", "memory": "4Gi"})
    runtime.allocate(plan_claim(CLAIM, [share], runtime.list_devices()))
    planned = (PlannedGpu(0, GpuUuid("GPU-0"), core_milli=250),)
    runtime.allocate(ContainerAllocationRequest("uid-dp", "ns", "dp-pod", "main", planned))
    return runtime


def _who(data: ExporterData) -> list[tuple[str, str, str, str, str]]:
    return sorted((c.namespace, c.pod_name, c.container, c.claim_namespace, c.claim_name) for c in data.containers)


def _user(pod: str, container: str = "main", *claims: tuple[str, str]) -> PodContainerDevices:
    return PodContainerDevices("team", pod, container, (), claims or (("team", "shared-gpu"),))


DP = PodContainerDevices("ns", "dp-pod", "main", ["GPU-0::core::0"])


def test_the_claims_grant_is_served_for_the_container_using_it() -> None:
    data = _runtime().exporter_data()
    result = attribute_checked(data, [_user("trainer"), DP])
    assert _who(result.data) == [("ns", "dp-pod", "main", "", ""), ("team", "trainer", "main", "team", "shared-gpu")]
    (row,) = [c for c in result.data.containers if c.claim_name]
    assert row.pod_uid == "claim-uid-1"
    assert [(g.uuid, g.core_milli, g.memory_limit_bytes) for g in row.gpus] == [("GPU-1", 300, 4 * GIB)]
    assert result.mismatches == ()


def test_every_container_sharing_the_claim_gets_it_and_an_unused_claim_is_not_served() -> None:
    data = _runtime().exporter_data()
    shared = attribute_checked(data, [_user("a"), _user("b", "side"), _user("b", "side"), DP]).data
    assert [w for w in _who(shared) if w[3]] == [("team", "a", "main", "team", "shared-gpu"),
                                                 ("team", "b", "side", "team", "shared-gpu")]
    other = _user("c", "main", ("team", "another-claim"))
    assert _who(attribute_checked(data, [other, DP]).data) == [("ns", "dp-pod", "main", "", "")]


def test_without_pod_resources_the_claim_row_is_served_as_recorded_with_claim_labels() -> None:
    data = attribute_checked(_runtime().exporter_data(), None).data
    assert _who(data) == [("ns", "dp-pod", "main", "", ""), ("team", "shared-gpu", CLAIM_CONTAINER, "team",
                                                            "shared-gpu")]


class _AllEnded:
    """An ended-pods view that calls every UID it is asked about ended (records what it was asked)."""

    def __init__(self) -> None:
        self.asked: set[str] = set()
        self.errors = 0

    def update(self, uids: Collection[str]) -> frozenset[str]:
        self.asked |= set(uids)
        return frozenset(uids)

    def start(self) -> None: ...

    def close(self) -> None: ...


def test_collector_and_page_carry_the_claim_labels_and_ended_pods_leave_claims_alone() -> None:
    ended = _AllEnded()
    collector = SnapshotCollector(_runtime(), InMemoryPodResources([_user("trainer"), DP]), deadline_s=2,
                                  ended_pods=ended)  # type: ignore[arg-type]
    metrics = PrometheusExporterMetrics(collector.snapshot, node="node-1")
    try:
        assert collector.refresh()
        assert ended.asked == {"uid-dp"}  # the claim's UID is no pod's
        assert _who(collector.snapshot().data) == [("team", "trainer", "main", "team", "shared-gpu")]
        samples = [s for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples
                   if s.name == PREFIX + "container_gpu_core_limit_ratio"]
        assert [(s.labels["pod"], s.labels["container"], s.labels["claim_namespace"], s.labels["claim_name"],
                 s.labels["gpu_uuid"], s.value) for s in samples] == [
            ("trainer", "main", "team", "shared-gpu", "GPU-1", 0.3)]
    finally:
        collector.close()
