"""Simulated GPUs (``adapters.simulated``).

Behaviours covered:
- spec grammar ``[COUNTx]MEMORY[:MODEL]`` (several items, default model, default count) and its errors;
- at most 64 GPUs in all, in a spec (``99999999999x16Gi``, ``40x16Gi,40x16Gi``) or a YAML file, refused with the
  item or file named (they were accepted and grew memory without limit);
- YAML inventories: counts, fixed UUIDs, health and MIG mode; unknown keys, a fixed UUID with count > 1, missing
  memory, unreadable files are refused with the file and item named;
- UUIDs are stable for one seed and differ between seeds (two simulated nodes never share one); indexes dense;
- the deterministic usage model (container and GPU utilization, memory, temperature, power, caps);
- injected health changes reach ``poll_health`` at once; application XIDs are counted and harmless; timed
  recovery with a quiet period; an unknown UUID is a KeyError; ``close`` wakes a poller;
- MIG: ``:mig[=PROFILE@START/…]`` in the spec and ``migMode``/``migInstances`` in YAML; instances without MIG mode,
  malformed entries, models without a MIG table, unknown profiles and overlapping layouts are refused with the
  item named; instances are listed with deterministic ids and ``MIG-…`` UUIDs (stable across builds); creation and
  destruction in dynamic use (a placement that does not fit is a GpuBackendError); the per-instance usage model
  and the MIG GPU's own sample (no utilization, memory summed over instances).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from adapters.simulated import SimulatedGpuBackend, SpecError, build_inventory, load_file, mig_layouts, parse_spec
from domain.gpu import GpuUuid, Health, MigMode
from domain.mig.gpu import PlacementMode
from domain.mig.profiles import resolve_profile
from domain.runtime.book import AllocationBook
from domain.runtime.mig import MigNode
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu, PlannedMig
from domain.units import GiB
from ports.gpu_backend import GpuBackendError


def test_spec_parses_counts_memory_and_models() -> None:
    groups = parse_spec("2x16Gi:A100, 80Gi:H100,1X24000Mi")
    assert [(g.count, g.memory_bytes, g.model) for g in groups] == [
        (2, 16 * GiB, "A100"), (1, 80 * GiB, "H100"), (1, 24000 * 2**20, "Simulated-GPU")
    ]
    gpus = build_inventory(groups, seed="node-a")
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert all(g.uuid.startswith("GPU-") for g in gpus)


@pytest.mark.parametrize("spec", ["", "2x", "x16Gi", "0x16Gi", "2x0", "2x16GiB", "2x1.5Gi", "2x16Gi:"])
def test_spec_errors_name_the_item(spec: str) -> None:
    with pytest.raises(SpecError, match="simulated GPUs"):
        parse_spec(spec)


@pytest.mark.parametrize(("spec", "match"), [
    ("99999999999x16Gi", r"'99999999999x16Gi': count 99999999999 is above 64"),
    ("9" * 5000 + "x16Gi", r"is above 64"),
    ("65x16Gi", r"'65x16Gi': count 65 is above 64"),
    ("40x16Gi,40x80Gi:H100", r"'40x16Gi,40x80Gi:H100': 80 GPUs in all, above 64"),
])
def test_spec_holds_at_most_64_gpus(spec: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec(spec)
    assert sum(g.count for g in parse_spec("32x16Gi,32x80Gi:H100")) == 64
    assert sum(g.count for g in parse_spec("0000001x16Gi")) == 1  # leading zeros are not a long count


@pytest.mark.parametrize(("entries", "match"), [
    ("  - {memory: 16Gi, count: 99999999999}\n", r"gpus\[0\]: count 99999999999 is above 64"),
    ("  - {memory: 16Gi, count: 40}\n  - {memory: 80Gi, count: 40}\n", r"gpus\.yaml: 80 GPUs in all, above 64"),
])
def test_yaml_holds_at_most_64_gpus(tmp_path: Path, entries: str, match: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n" + entries)
    with pytest.raises(SpecError, match=match):
        load_file(path)


def test_uuids_are_stable_per_seed_and_distinct_across_seeds() -> None:
    groups = parse_spec("2x16Gi:A100")
    assert build_inventory(groups, seed="a") == build_inventory(groups, seed="a")
    assert {g.uuid for g in build_inventory(groups, seed="a")}.isdisjoint(
        g.uuid for g in build_inventory(groups, seed="b")
    )


def test_yaml_inventory(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "gpus:\n"
        "  - {model: A100, memory: 16Gi, count: 2}\n"
        "  - {model: H100, memory: 80Gi, uuid: GPU-fixed, health: Unhealthy, migMode: enabled}\n"
    )
    gpus = build_inventory(load_file(path), seed="s")
    assert [(g.index, g.model, g.memory_bytes) for g in gpus] == [(0, "A100", 16 * GiB), (1, "A100", 16 * GiB),
                                                                   (2, "H100", 80 * GiB)]
    assert gpus[2].uuid == "GPU-fixed"
    assert gpus[2].health is Health.UNHEALTHY
    assert gpus[2].mig_mode is MigMode.ENABLED


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("gpus:\n  - {memory: 16Gi, colour: red}\n", "only"),
        ("gpus:\n  - {memory: 16Gi, count: 2, uuid: GPU-x}\n", "needs count 1"),
        ("gpus:\n  - {model: A100}\n", "'memory'"),
        ("gpus: []\n", "non-empty"),
        ("nodes: 1\n", "one key 'gpus'"),
        ("gpus:\n  - {memory: 16Gi, health: Sick}\n", "Sick"),
        ("gpus: [\n", "gpus.yaml"),
    ],
)
def test_yaml_errors_name_the_file(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=match):
        load_file(path)


def test_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"missing\.yaml"):
        SimulatedGpuBackend.from_file(tmp_path / "missing.yaml")


def test_usage_model_is_deterministic() -> None:
    backend = SimulatedGpuBackend.from_spec("2x16Gi:A100", clock=lambda: 42.0)
    a, b = (d.gpu for d in backend.devices())
    book = AllocationBook()
    for name, core, memory in (("x", 500, 4 * GiB), ("y", 400, 8 * GiB)):
        book.allocate(
            ContainerAllocationRequest("uid", "ns", "p", name, (PlannedGpu(0, a.uuid, core, memory),)), [a, b], now=0
        )
    sample = backend.sample(book.records())
    assert sample.at == 42.0
    gpu_a, gpu_b = sample.gpus
    assert gpu_a.utilization_percent == 72.0  # (50 + 40) % × 0.8
    assert gpu_a.memory_used_bytes == 6 * GiB  # (4 + 8) GiB × 0.5
    assert gpu_a.temperature_celsius == pytest.approx(30 + 0.4 * 72)
    assert gpu_a.power_watts == pytest.approx(50 + 250 * 0.72)
    assert (gpu_b.utilization_percent, gpu_b.memory_used_bytes, gpu_b.power_watts) == (0.0, 0, 50.0)
    usage = {u.container: (u.utilization_percent, u.memory_used_bytes) for u in sample.containers}
    assert usage == {"x": (40.0, 2 * GiB), "y": (32.0, 4 * GiB)}


def test_utilization_is_capped_at_100_percent() -> None:
    [gpu] = build_inventory(parse_spec("16Gi"), seed="s")
    backend = SimulatedGpuBackend([gpu], utilization_factor=2.0)
    book = AllocationBook()
    book.allocate(ContainerAllocationRequest("u", "ns", "p", "c", (PlannedGpu(0, gpu.uuid, 800),)), [gpu], now=0)
    assert backend.sample(book.records()).gpus[0].utilization_percent == 100.0


def test_injected_health_reaches_poll_health_at_once() -> None:
    backend = SimulatedGpuBackend.from_spec("2x16Gi")
    uuid = backend.devices()[1].gpu.uuid
    [change] = backend.inject_health(uuid, Health.UNHEALTHY, "test fault")
    assert backend.inject_health(uuid, Health.UNHEALTHY) == ()  # unchanged: no event
    started = time.monotonic()
    assert backend.poll_health(5.0) == (change,)
    assert time.monotonic() - started < 1.0
    assert backend.devices()[1].gpu.health is Health.UNHEALTHY
    assert backend.devices()[1].health_reason == "test fault"
    assert backend.poll_health(0.01) == ()
    backend.inject_health(uuid, Health.HEALTHY, "repaired")
    assert backend.poll_health(0.01)[0].health is Health.HEALTHY


def test_xids_are_classified_like_nvml() -> None:
    backend = SimulatedGpuBackend.from_spec("2x16Gi")
    uuid = backend.devices()[0].gpu.uuid
    assert backend.inject_xid(uuid, 13) == ()
    assert [c.uuid for c in backend.inject_xid(None, 79)] == [d.gpu.uuid for d in backend.devices()]
    assert backend.sample([]).gpus[0].xid_counts == {13: 1, 79: 1}


def test_quiet_period_recovery() -> None:
    now = [0.0]
    backend = SimulatedGpuBackend.from_spec("16Gi", clock=lambda: now[0], quiet_period_s=30)
    uuid = backend.devices()[0].gpu.uuid
    backend.inject_xid(uuid, 79)
    backend.poll_health(0)
    now[0] = 31.0
    [recovered] = backend.poll_health(0)
    assert recovered.health is Health.HEALTHY


def test_unknown_uuid_and_close() -> None:
    backend = SimulatedGpuBackend.from_spec("16Gi")
    with pytest.raises(KeyError, match="no simulated GPU"):
        backend.inject_health(GpuUuid("GPU-nope"), Health.UNHEALTHY)
    results: list[object] = []
    poller = threading.Thread(target=lambda: results.append(backend.poll_health(10.0)))
    poller.start()
    time.sleep(0.05)
    backend.close()
    poller.join(timeout=2)
    assert results == [()]
    with pytest.raises(ValueError, match="at least one GPU"):
        SimulatedGpuBackend([])


# ------------------------------------------------------------------------------------------------------ MIG
def test_spec_mig_suffix() -> None:
    groups = parse_spec("1x16Gi:A100,2x80Gi:A100:mig=3g.40gb@0/1g.10gb@4,1x40Gi:A100-40GB:mig")
    assert [(g.mig_mode, g.mig_instances) for g in groups] == [
        (MigMode.DISABLED, ()), (MigMode.ENABLED, (("3g.40gb", 0), ("1g.10gb", 4))), (MigMode.ENABLED, ())]
    assert mig_layouts(groups) == {1: (("3g.40gb", 0), ("1g.10gb", 4)), 2: (("3g.40gb", 0), ("1g.10gb", 4))}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("80Gi:A100:mog", "':mig'"),
        ("80Gi:A100:mig=", "':mig'"),
        ("80Gi:A100:mig=3g.40gb", "PROFILE@START"),
        ("80Gi:A100:mig:x", "':mig'"),
    ],
)
def test_spec_mig_errors(spec: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_spec(spec)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("16Gi:Simulated-GPU:mig=1g.10gb@0", "no MIG profile table"),
        ("80Gi:A100:mig=1g.5gb@0", "unknown profile for A100-80GB"),
        ("80Gi:A100:mig=3g.40gb@0/4g.40gb@0", "overlaps"),
        ("80Gi:A100:mig=3g.40gb@2", "not a placement"),
    ],
)
def test_mig_layouts_are_checked_when_the_backend_is_built(spec: str, match: str) -> None:
    with pytest.raises(SpecError, match=rf"simulated GPUs .*MIG: .*{match}"):
        SimulatedGpuBackend.from_spec(spec)


def test_yaml_mig_inventory(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "gpus:\n"
        "  - {model: H100, memory: 80Gi}\n"
        "  - model: NVIDIA H200\n"
        "    memory: 141Gi\n"
        "    migMode: enabled\n"
        "    migInstances: [{profile: 3g.71gb, start: 4}, {profile: 3g.70gb, start: 0}]\n"
    )
    backend = SimulatedGpuBackend.from_file(path, seed="s")
    whole, mig = backend.devices()
    assert whole.mig_instances == ()
    assert [(i.profile, i.start, i.size, i.compute_slices, i.gpu_instance_id) for i in mig.mig_instances] == [
        ("3g.71gb", 0, 4, 3, 1), ("3g.71gb", 4, 4, 3, 5)]
    again = SimulatedGpuBackend.from_file(path, seed="s").devices()[1].mig_instances
    assert [i.uuid for i in again] == [i.uuid for i in mig.mig_instances]
    assert all(i.uuid.startswith("MIG-") for i in again)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("{memory: 80Gi, model: A100, migInstances: [{profile: 3g.40gb, start: 0}]}", "need migMode enabled"),
        ("{memory: 80Gi, model: A100, migMode: enabled, migInstances: {profile: 3g.40gb}}", "must be a list"),
        ("{memory: 80Gi, model: A100, migMode: enabled, migInstances: [{profile: 3g.40gb}]}", r"migInstances\[0\]"),
        ("{memory: 80Gi, model: A100, migMode: enabled, migInstances: [{profile: x, start: -1}]}", "SLICE >= 0"),
    ],
)
def test_yaml_mig_errors_name_the_item(tmp_path: Path, entry: str, match: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(f"gpus:\n  - {entry}\n")
    with pytest.raises(SpecError, match=match):
        load_file(path)


def test_mig_create_destroy_and_usage_model() -> None:
    backend = SimulatedGpuBackend.from_spec("16Gi:A100,80Gi:A100:mig=3g.40gb@0", clock=lambda: 5.0)
    plain, mig_gpu = (d.gpu for d in backend.devices())
    created = backend.create_mig_instance(mig_gpu.uuid, resolve_profile("A100-80GB", "1g.10gb"), 6)
    assert [i.start for i in backend.devices()[1].mig_instances] == [0, 6]
    with pytest.raises(GpuBackendError, match=r"cannot create 4g\.40gb at start 0"):
        backend.create_mig_instance(mig_gpu.uuid, resolve_profile("A100-80GB", "4g.40gb"), 0)
    with pytest.raises(GpuBackendError, match="no GPU in MIG mode"):
        backend.create_mig_instance(plain.uuid, resolve_profile("A100-80GB", "1g.10gb"), 0)
    untabled = SimulatedGpuBackend.from_spec("16Gi:Simulated-GPU:mig")  # any model may be in MIG mode
    [device] = untabled.devices()
    assert (device.gpu.mig_mode, device.mig_instances) == (MigMode.ENABLED, ())
    with pytest.raises(GpuBackendError, match="no MIG profile table"):
        untabled.create_mig_instance(device.gpu.uuid, resolve_profile("A100-80GB", "1g.10gb"), 0)
    book = AllocationBook()
    node = MigNode(backend.devices()[1].mig_instances, PlacementMode.STATIC)
    book.allocate(ContainerAllocationRequest("u", "ns", "p", "c", (), mig=(PlannedMig(1, mig_gpu.uuid, "3g.40gb", 0),)),
                  [plain, mig_gpu], now=0, mig=node)
    sample = backend.sample(book.records())
    usage = {m.uuid: (m.memory_used_bytes, m.utilization_percent) for m in sample.mig}
    big = backend.devices()[1].mig_instances[0]
    assert usage == {big.uuid: (20 * GiB, 80.0), created.uuid: (0, 0.0)}  # 40 GiB × 0.5; 100 % × 0.8
    gpu_sample = sample.gpus[1]
    assert (gpu_sample.utilization_percent, gpu_sample.memory_used_bytes) == (None, 20 * GiB)
    assert gpu_sample.error == "utilization: Not Supported"
    assert gpu_sample.power_watts == pytest.approx(50 + 250 * (80.0 * 3 / 7) / 100)  # compute-slice weighted
    assert sample.gpus[0].error == ""
    backend.destroy_mig_instance(created)
    backend.destroy_mig_instance(created)
    assert [i.start for i in backend.devices()[1].mig_instances] == [0]
