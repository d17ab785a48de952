"""The exporter's MIG series over the in-process Runtime with a MIG GPU and the in-memory pod-resources (no I/O).

Covers: every MIG instance is on the page while idle, with exact labels (parent GPU's node, gpu_index, gpu_uuid,
model plus profile, NVML GPU and compute instance ids, MIG UUID), memory total and ``mig_allocated`` 0, and the
node's instances per profile (B22); a GPU in MIG mode is flagged and left out of the node's allocatable compute and
memory; after Allocate and kubelet listing the pod, the instance is allocated and the container gets its MIG
families (profile and MIG UUID labels) while the time-sharing container families stay without its row; when
kubelet no longer lists the pod (the Runtime still holds it) the instance is reported free and the container's
series vanish, back to the idle series count (B20); a pod-resources list never read yet shows no owner; an instance
shared by a pod's init and app containers stays held while either is listed; measured memory and utilization
become samples (unknown ones none); a GPU instance without compute instance gets empty id/UUID labels; MIG device
IDs (``<gpu uuid>::mig-<profile>::<gi id>``) name their parent GPU, and a container whose MIG device IDs name
another GPU is not served but its instance stays held; dynamic create/release cycles keep the series count flat;
the data part (MIG families included) is rendered once per pull; a node without MIG still prints the MIG
families' HELP/TYPE and no sample.
"""

from __future__ import annotations

import attrs
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.podresources import InMemoryPodResources
from adapters.prometheus.exporter import PrometheusExporterMetrics
from adapters.simulated.miglayout import simulated_mig_uuid
from domain.exporter.attribution import (
    AttributionMismatch,
    PodContainerDevices,
    attribute,
    attribute_checked,
    device_uuid,
)
from domain.exporter.metrics import (
    CONTAINER_METRICS,
    CONTAINER_MIG_METRICS,
    MIG_METRICS,
    NODE_MIG_METRICS,
    PREFIX,
    build_families,
)
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.gpu import MigOwner, PlacementMode
from domain.runtime.types import ContainerAllocationRequest, MigInstanceData, MigInstanceInfo, PlannedMig
from entrypoints.runtime.inprocess import InProcessRuntime
from services.exporter.collector import SnapshotCollector

GIB = 1 << 30
NODE = "node-a"
A = GpuUuid("GPU-0a0a0a0a-0000-4000-8000-000000000000")
C = GpuUuid("GPU-0c0c0c0c-0000-4000-8000-000000000000")
MODEL = "NVIDIA A100-SXM4-80GB"
GPUS = (Gpu(0, A, "A100", 16 * GIB), Gpu(1, C, MODEL, 80 * GIB, mig_mode=MigMode.ENABLED))
LAYOUTS = {1: [("3g.40gb", 0), ("1g.10gb", 4)]}
BIG = simulated_mig_uuid(C, "3g.40gb", 0)  # GPU instance id 1 (start + 1), compute instance 0
SMALL = simulated_mig_uuid(C, "1g.10gb", 4)  # GPU instance id 5

Parsed = dict[str, list[tuple[dict[str, str], float]]]


def _runtime(mode: PlacementMode = PlacementMode.STATIC) -> InProcessRuntime:
    return InProcessRuntime(GPUS, mig_layouts=LAYOUTS, mig_mode=mode)


def _request(pod: str, *planned: PlannedMig, container: str = "main", init: bool = False) -> ContainerAllocationRequest:
    return ContainerAllocationRequest(f"uid-{pod}", "ns", pod, container, (), init=init,
                                      mig=planned or (PlannedMig(1, C, "3g.40gb", 0),))


def _listed(pod: str, *, container: str = "main", gpu: GpuUuid = C, gi: int = 1) -> PodContainerDevices:
    return PodContainerDevices("ns", pod, container, [f"{gpu}::mig-3g.40gb::{gi}", "nic0"])


def _parse(text: bytes) -> Parsed:
    out: Parsed = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def _count(parsed: Parsed) -> int:
    return sum(len(rows) for rows in parsed.values())


def _mig_labels(mig_uuid: str) -> dict[str, str]:
    profile, gi = {BIG: ("3g.40gb", "1"), SMALL: ("1g.10gb", "5")}[mig_uuid]
    return {"node": NODE, "gpu_index": "1", "gpu_uuid": C, "model": MODEL, "profile": profile,
            "gpu_instance_id": gi, "compute_instance_id": "0", "mig_uuid": mig_uuid}


def _by_mig(parsed: Parsed, name: str) -> dict[str, float]:
    return {labels["mig_uuid"]: value for labels, value in parsed.get(PREFIX + name, [])}


def _by_profile(parsed: Parsed, name: str) -> dict[str, float]:
    return {labels["profile"]: value for labels, value in parsed.get(PREFIX + name, [])}


def _node(parsed: Parsed, name: str) -> float:
    [(labels, value)] = parsed[PREFIX + name]
    assert labels == {"node": NODE}
    return value


class Exporter:
    """The in-process Runtime and pod-resources behind a collector and the Prometheus page."""

    def __init__(self, runtime: InProcessRuntime, pods: InMemoryPodResources | None = None) -> None:
        self.runtime = runtime
        self.pods = InMemoryPodResources() if pods is None else pods
        self.collector = SnapshotCollector(runtime, self.pods, deadline_s=2)
        self.metrics = PrometheusExporterMetrics(self.collector.snapshot, node=NODE)

    def page(self) -> Parsed:
        assert self.collector.refresh()
        return _parse(self.metrics.exposition())

    def close(self) -> None:
        self.collector.close()


# ------------------------------------------------------------------------------------------------ the page
def test_idle_instances_are_reported_with_exact_labels() -> None:
    exporter = Exporter(_runtime())
    page = exporter.page()
    assert sorted(page[PREFIX + "mig_instance_info"], key=lambda row: row[0]["gpu_instance_id"]) == [
        (_mig_labels(BIG), 1.0), (_mig_labels(SMALL), 1.0)]
    assert _by_mig(page, "mig_memory_total_bytes") == {BIG: 40 * GIB, SMALL: 10 * GIB}
    assert _by_mig(page, "mig_allocated") == {BIG: 0.0, SMALL: 0.0}
    assert _by_mig(page, "mig_memory_used_bytes") == {BIG: 0.0, SMALL: 0.0}  # simulated: a free instance is idle
    assert _by_mig(page, "mig_utilization_ratio") == {BIG: 0.0, SMALL: 0.0}
    for spec in MIG_METRICS:
        labels = [row[0] for row in page.get(PREFIX + spec.name, [])]
        assert all(set(label) == set(_mig_labels(BIG)) for label in labels), spec.name
    assert _by_profile(page, "node_mig_instances") == {"3g.40gb": 1.0, "1g.10gb": 1.0}
    assert _by_profile(page, "node_mig_allocated_instances") == {"3g.40gb": 0.0, "1g.10gb": 0.0}
    assert all(PREFIX + spec.name not in page for spec in CONTAINER_MIG_METRICS)
    assert {labels["gpu_index"]: v for labels, v in page[PREFIX + "gpu_mig_enabled"]} == {"0": 0.0, "1": 1.0}
    # The MIG GPU takes no time-sharing grants: only GPU 0 is allocatable.
    assert _node(page, "node_gpu_core_allocatable_gpus") == 1.0
    assert _node(page, "node_gpu_memory_allocatable_bytes") == 16 * GIB
    assert _node(page, "node_gpus") == 2.0
    exporter.close()


def test_allocated_instance_then_pod_gone() -> None:
    exporter = Exporter(_runtime())
    idle = exporter.page()
    exporter.runtime.allocate(_request("p1"))
    exporter.pods.set_containers([_listed("p1")])
    page = exporter.page()
    assert _by_mig(page, "mig_allocated") == {BIG: 1.0, SMALL: 0.0}
    assert _by_profile(page, "node_mig_allocated_instances") == {"3g.40gb": 1.0, "1g.10gb": 0.0}
    container = {**{k: v for k, v in _mig_labels(BIG).items() if "instance_id" not in k},
                 "namespace": "ns", "pod": "p1", "container": "main"}
    assert page[PREFIX + "container_mig_memory_limit_bytes"] == [(container, 40.0 * GIB)]
    # the simulated usage model: a held instance uses half its memory (adapters.simulated)
    assert page[PREFIX + "container_mig_memory_used_bytes"] == [(container, 20.0 * GIB)]
    assert all(PREFIX + spec.name not in page for spec in CONTAINER_METRICS)  # no time-sharing GPU row
    assert _node(page, "node_containers") == 1.0
    assert _node(page, "exporter_attribution_mismatched_containers") == 0.0

    exporter.pods.set_containers([])  # terminated; the Runtime has not been told to release yet (B20)
    for _ in range(2):
        gone = exporter.page()
        assert exporter.runtime.exporter_data().mig[0].instance.owner == MigOwner("uid-p1", "main")
        assert _by_mig(gone, "mig_allocated") == {BIG: 0.0, SMALL: 0.0}
        assert _by_profile(gone, "node_mig_allocated_instances") == {"3g.40gb": 0.0, "1g.10gb": 0.0}
        assert all(PREFIX + spec.name not in gone for spec in CONTAINER_MIG_METRICS)
        assert len(gone[PREFIX + "mig_instance_info"]) == 2  # B22
        assert _count(gone) == _count(idle)
    exporter.close()


def test_pod_list_never_read_shows_no_owner() -> None:
    runtime = _runtime()
    runtime.allocate(_request("p1"))
    pods = InMemoryPodResources()
    pods.fail("not yet")
    exporter = Exporter(runtime, pods)
    page = exporter.page()
    assert _by_mig(page, "mig_allocated") == {BIG: 0.0, SMALL: 0.0}
    assert all(PREFIX + spec.name not in page for spec in CONTAINER_MIG_METRICS)
    exporter.close()


def test_instance_shared_by_init_and_app_container_stays_held_while_either_is_listed() -> None:
    exporter = Exporter(_runtime())
    exporter.runtime.allocate(_request("p1", container="init", init=True))
    exporter.runtime.allocate(_request("p1", PlannedMig(1, C, mig_uuid=BIG)))
    assert exporter.runtime.exporter_data().mig[0].instance.owner == MigOwner("uid-p1", "init")  # oldest record
    for listed, allocated in (([_listed("p1")], 1.0), ([_listed("p1", container="init")], 1.0), ([], 0.0)):
        exporter.pods.set_containers(listed)
        page = exporter.page()
        assert _by_mig(page, "mig_allocated")[BIG] == allocated, listed
        assert [labels["container"] for labels, _ in page.get(PREFIX + "container_mig_memory_limit_bytes", [])] == [
            entry.container for entry in listed]
    exporter.close()


def test_measured_values_and_unknowns() -> None:
    runtime = _runtime()
    runtime.allocate(_request("p1"))
    data = runtime.exporter_data()
    measured = tuple(attrs.evolve(m, memory_used_bytes=12 * GIB, utilization_percent=25.0)
                     if m.instance.uuid == BIG else attrs.evolve(m, memory_used_bytes=None, utilization_percent=None)
                     for m in data.mig)  # SMALL unknown
    snapshot = Snapshot(data=attrs.evolve(data, mig=measured), pulled_at=1.0, runtime_up=True)
    families = {f.name: f for f in build_families(snapshot, node=NODE, now=2.0)}

    def one(name: str) -> dict[str, float]:
        labels = families[PREFIX + name].labels
        return {dict(zip(labels, values, strict=True))["mig_uuid"]: v for values, v in families[PREFIX + name].samples}

    assert one("mig_memory_used_bytes") == {BIG: 12.0 * GIB}
    assert one("mig_utilization_ratio") == {BIG: 0.25}
    assert one("container_mig_memory_used_bytes") == {BIG: 12.0 * GIB}
    assert one("container_mig_utilization_ratio") == {BIG: 0.25}
    assert one("mig_allocated") == {BIG: 1.0, SMALL: 0.0}  # no pod-resources filter: the Runtime's owner counts


def test_gpu_instance_without_compute_instance() -> None:
    data = _runtime().exporter_data()
    bare = MigInstanceInfo(1, C, gpu_instance_id=9, compute_instance_id=None, profile="1g.10gb", start=6, size=1,
                           compute_slices=1, memory_bytes=10 * GIB, uuid="")
    data = attrs.evolve(data, mig=(*data.mig, MigInstanceData(bare, error="no compute instance")))
    families = {f.name: f for f in build_families(Snapshot(data=data, runtime_up=True), node=NODE, now=0.0)}
    info = families[PREFIX + "mig_instance_info"]
    assert ((NODE, "1", C, MODEL, "1g.10gb", "9", "", ""), 1.0) in info.samples
    assert dict(families[PREFIX + "node_mig_instances"].samples) == {(NODE, "1g.10gb"): 2.0, (NODE, "3g.40gb"): 1.0}
    metrics = PrometheusExporterMetrics(lambda: Snapshot(data=data, runtime_up=True), node=NODE)
    assert len(_parse(metrics.exposition())[PREFIX + "mig_allocated"]) == 3


def test_dynamic_create_release_cycles_keep_the_series_count_flat() -> None:
    exporter = Exporter(_runtime(PlacementMode.DYNAMIC))
    baseline = _count(exporter.page())
    held = None
    for cycle in range(50):
        pod = f"pod-{cycle}"
        exporter.runtime.allocate(_request(pod, PlannedMig(1, C, "1g.10gb", 6, create=True)))
        exporter.pods.set_containers([_listed(pod, gi=7)])
        page = exporter.page()
        assert len(page[PREFIX + "mig_instance_info"]) == 3
        assert held is None or _count(page) == held
        held = _count(page)
        exporter.runtime.release(f"uid-{pod}")
        exporter.pods.set_containers([])
        assert _count(exporter.page()) == baseline
    assert held is not None
    assert held > baseline
    exporter.close()


def test_data_part_with_mig_is_rendered_once_per_pull() -> None:
    exporter = Exporter(_runtime())
    exporter.runtime.allocate(_request("p1"))
    exporter.pods.set_containers([_listed("p1")])
    assert exporter.collector.refresh()
    first = exporter.metrics.exposition()
    second = exporter.metrics.exposition()
    assert exporter.metrics.data_renders == 1
    assert b'lj_runtimekit_mig_allocated{' in first
    assert first.split(b"# HELP lj_runtimekit_exporter_")[0] == second.split(b"# HELP lj_runtimekit_exporter_")[0]
    exporter.page()
    assert exporter.metrics.data_renders == 2
    exporter.close()


def test_node_without_mig_prints_help_and_type_only() -> None:
    runtime = InProcessRuntime([Gpu(0, A, "A100", 16 * GIB)])
    text = PrometheusExporterMetrics(lambda: Snapshot(data=runtime.exporter_data(), runtime_up=True),
                                     node=NODE).exposition().decode()
    for spec in (*MIG_METRICS, *CONTAINER_MIG_METRICS, *NODE_MIG_METRICS):
        assert f"# TYPE {PREFIX}{spec.name} gauge\n" in text, spec.name
        assert f"\n{PREFIX}{spec.name}{{" not in text, spec.name


# ------------------------------------------------------------------------------------------------ attribution
def test_mig_device_ids_name_the_parent_gpu() -> None:
    assert device_uuid(f"{C}::mig-3g.40gb::1") == C
    assert _listed("p1").gpu_uuids == {C}


def test_attribution_clears_owners_only_with_a_pod_list() -> None:
    runtime = _runtime()
    runtime.allocate(_request("p1"))
    data = runtime.exporter_data()
    assert attribute(data, None) is data
    assert attribute(data, [_listed("p1")]) is data  # everything listed and confirmed: nothing to change
    gone = attribute(data, [PodContainerDevices("ns", "other", "main")])
    assert gone.containers == ()
    assert [m.instance.owner for m in gone.mig] == [None, None]
    assert [m.instance for m in gone.mig] == [attrs.evolve(m.instance, owner=None) for m in data.mig]


def test_mig_container_on_another_gpu_is_not_served_but_its_instance_stays_held() -> None:
    runtime = _runtime()
    runtime.allocate(_request("p1"))
    result = attribute_checked(runtime.exporter_data(), [_listed("p1", gpu=A)])
    assert result.data.containers == ()
    assert result.mismatches == (AttributionMismatch("ns", "p1", "main", (C,), (A,)),)
    assert [m.instance.owner for m in result.data.mig] == [MigOwner("uid-p1", "main"), None]
    foreign = attribute_checked(runtime.exporter_data(), [PodContainerDevices("ns", "p1", "main", ["nic0"])])
    assert [c.pod_name for c in foreign.data.containers] == ["p1"]
    assert foreign.mismatches == ()
