"""NVML backend (``adapters.nvml``) through an injected fake ``pynvml`` module, plus ``/proc`` attribution.

Behaviours covered:
- the fake only uses names the real ``pynvml`` (nvidia-ml-py) has, with the same constant values;
- a missing NVML library (nvmlInit → LibraryNotFound) or driver raises GpuBackendUnavailableError; on this
  machine the real module does the same unless a GPU is present;
- inventory: index, UUID, name, memory, MIG mode (NotSupported → disabled);
- health: a critical XID marks its GPU unhealthy; application XIDs 13, 31, 43, 45, 68, 109 do not but are
  counted; an XID without a device marks every GPU; recovery after the quiet period, by ``reset_health`` and by
  a recovery-action-NONE event; a recovery action required marks unhealthy; a GPU without event support stays
  healthy and polling then sleeps instead of spinning; an unexpected event-wait error sleeps too;
- sampling: utilization, memory, temperature, power in W; NotSupported metrics are None with the reason; a lost
  GPU turns unhealthy at the next poll; per-container memory from processes attributed by pod UID (cgroup) and,
  within one pod, by ``LJRK_CONTAINER_NAME``;
- close frees the event set and shuts NVML down once;
- MIG: listing GPU instances × compute instances (ids, canonical profile from the NVML name, placement, memory,
  MIG UUID; a GPU instance without compute instance; a listing error leaves the GPU's instances empty), creation
  with placement + compute instance, destruction (also of an instance already gone), an NVML error mid-creation
  (compute instance, or the lookup after it) destroying what was made, overlap and in-use refusals, per-instance
  memory samples;
- ``/proc`` parsing for cgroupfs and systemd pod cgroups and the process environment;
- real NVML, only with ``LJRK_GPU_TESTS=1`` (marker ``gpu``): inventory (MIG instances read, never changed) and one
  sample.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from adapters.nvml import NvmlGpuBackend, container_of_pid, pod_uid_of_pid
from domain.gpu import GpuUuid, Health, MigMode
from domain.mig.profiles import resolve_profile
from domain.runtime.book import AllocationBook
from domain.runtime.types import ContainerAllocationRequest, MigInstanceInfo, PlannedGpu
from domain.units import GiB, MiB
from ports.gpu_backend import GpuBackendError, GpuBackendUnavailableError
from support.fake_pynvml import (
    CONSTANTS,
    IN_USE,
    NOT_SUPPORTED,
    RECOVERY,
    XID,
    FakeNvml,
    Placement,
)


def two_gpus() -> list[dict[str, Any]]:
    return [
        {"uuid": "GPU-0000", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GiB, "util": 55, "temp": 61,
         "power_mw": 212_500, "used": 3 * GiB},
        {"uuid": "GPU-1111", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GiB, "mig": 1},
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def make(fake: FakeNvml, clock: Clock | None = None, **options: Any) -> NvmlGpuBackend:
    clock = clock or Clock()
    return NvmlGpuBackend(fake.module, clock=clock, sleep=clock.sleep, **options)


def test_fake_matches_the_real_module() -> None:
    import pynvml

    fake = FakeNvml(two_gpus())
    for name in dir(fake.module):
        if name.startswith(("nvml", "NVML", "c_nvml")):
            assert hasattr(pynvml, name), name
    assert [f for f, _ in Placement._fields_] == [f for f, _ in pynvml.c_nvmlGpuInstancePlacement_t._fields_]
    for name, value in CONSTANTS.items():
        assert getattr(pynvml, name) == value, name


@pytest.mark.parametrize("code", [12, 9])
def test_missing_library_or_driver_is_unavailable(code: int) -> None:
    with pytest.raises(GpuBackendUnavailableError, match="NVML is unavailable"):
        make(FakeNvml(two_gpus(), init_error=code))


def test_real_module_without_a_gpu_is_unavailable() -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(GpuBackendUnavailableError, match="nvmlInit failed"):
            NvmlGpuBackend.open()
        return
    pynvml.nvmlShutdown()
    pytest.skip("this machine has NVML; covered by the gpu-marked test")


def test_inventory() -> None:
    fake = FakeNvml(two_gpus())
    fake.errors[("mig", 0)] = 3
    backend = make(fake)
    first, second = (d.gpu for d in backend.devices())
    assert (first.index, first.uuid, first.model, first.memory_bytes) == (0, "GPU-0000", "NVIDIA A100-SXM4-40GB",
                                                                          40 * GiB)
    assert first.mig_mode is MigMode.DISABLED
    assert second.mig_mode is MigMode.ENABLED
    assert backend.name == "nvml"
    assert fake.calls[:3] == ["init", f"register 0 {XID | RECOVERY:#x}", f"register 1 {XID | RECOVERY:#x}"]


def test_device_minor_numbers_come_from_nvml_and_a_failure_leaves_none() -> None:
    gpus = two_gpus()
    gpus[0]["minor"] = 4
    fake = FakeNvml(gpus)
    fake.errors[("minor", 1)] = 3
    assert make(fake).device_minors() == {"GPU-0000": 4}


def test_critical_xid_marks_the_gpu_and_application_xids_do_not() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    for xid in (13, 31, 43, 45, 68, 109):
        fake.event(0, XID, xid)
        assert backend.poll_health(0.1) == ()
    fake.event(0, XID, 79)
    [change] = backend.poll_health(0.1)
    assert (change.uuid, change.health, change.xid, change.reason) == ("GPU-0000", Health.UNHEALTHY, 79, "XID 79")
    assert backend.devices()[0].gpu.health is Health.UNHEALTHY
    assert backend.devices()[1].gpu.health is Health.HEALTHY
    assert backend.sample([]).gpus[0].xid_counts == {13: 1, 31: 1, 43: 1, 45: 1, 68: 1, 109: 1, 79: 1}


def test_xid_without_a_device_marks_every_gpu() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    fake.event(None, XID, 48)
    assert {c.uuid for c in backend.poll_health(0.1)} == {"GPU-0000", "GPU-1111"}


def test_unhealthy_gpu_recovers_after_the_quiet_period() -> None:
    fake, clock = FakeNvml(two_gpus()), Clock()
    backend = make(fake, clock, quiet_period_s=60)
    fake.event(1, XID, 79)
    backend.poll_health(0.1)
    clock.now += 59
    assert backend.poll_health(0.1) == ()
    clock.now += 1
    [recovered] = backend.poll_health(0.1)
    assert (recovered.uuid, recovered.health) == ("GPU-1111", Health.HEALTHY)


def test_explicit_reset_and_recovery_action_events() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake, quiet_period_s=None)
    fake.event(0, RECOVERY, 1)  # GPU reset required
    [fault] = backend.poll_health(0.1)
    assert fault.health is Health.UNHEALTHY
    assert "GPU reset" in fault.reason
    fake.event(0, RECOVERY, 0)  # no action needed any more
    assert backend.poll_health(0.1)[0].health is Health.HEALTHY
    fake.event(0, XID, 79)
    backend.poll_health(0.1)
    [reset] = backend.reset_health("GPU-0000", "operator")
    assert reset.health is Health.HEALTHY
    assert backend.poll_health(0.1) == (reset,)  # also delivered to the health stream


def test_gpu_without_event_support_stays_healthy_and_polling_sleeps() -> None:
    gpus = two_gpus()
    for gpu in gpus:
        gpu["events"] = 0x3  # ECC only
    fake, clock = FakeNvml(gpus), Clock()
    backend = make(fake, clock)
    assert "free" in fake.calls  # no GPU registered: the event set is freed at once
    assert backend.poll_health(0.5) == ()
    assert clock.slept == [0.5]
    assert all(d.gpu.health is Health.HEALTHY for d in backend.devices())


def test_unexpected_wait_error_sleeps_instead_of_spinning() -> None:
    fake, clock = FakeNvml(two_gpus()), Clock()
    backend = make(fake, clock)
    fake.errors[("wait", -1)] = 999
    assert backend.poll_health(0.25) == ()
    assert clock.slept == [0.25]


def test_sample_reads_metrics_and_reports_unsupported_ones() -> None:
    fake = FakeNvml(two_gpus())
    fake.errors[("temperature", 1)] = 3
    fake.errors[("utilization", 1)] = 3
    backend = make(fake)
    sample = backend.sample([])
    first, second = sample.gpus
    assert (first.utilization_percent, first.memory_used_bytes, first.temperature_celsius, first.power_watts) == (
        55.0, 3 * GiB, 61.0, 212.5)
    assert first.error == ""
    assert second.temperature_celsius is None
    assert second.utilization_percent is None
    assert second.error == "utilization: Not Supported; temperature: Not Supported"
    assert sample.at == 1000.0


def test_lost_gpu_turns_unhealthy() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    fake.errors[("memory", 1)] = 15
    assert "GPU is lost" in backend.sample([]).gpus[1].error
    [change] = backend.poll_health(0.1)
    assert (change.uuid, change.health, change.reason) == ("GPU-1111", Health.UNHEALTHY, "NVML: GPU is lost")


def test_per_container_memory_is_attributed_by_pod_and_container() -> None:
    gpus = two_gpus()
    gpus[0]["procs"] = [(100, 2 * GiB), (101, GiB), (102, 512 * MiB), (103, 7), (104, None)]
    pods = {100: "uid-a", 101: "uid-b", 102: "uid-b", 103: "uid-stranger", 104: "uid-a"}
    containers = {101: "first", 102: "second"}
    fake = FakeNvml(gpus)
    backend = make(fake, pod_uid_of=pods.get, container_of=containers.get)
    [gpu0, gpu1] = (d.gpu for d in backend.devices())
    book = AllocationBook()
    plans = [("uid-a", "main"), ("uid-b", "first"), ("uid-b", "second")]
    for pod, container in plans:
        plan = ContainerAllocationRequest(pod, "ns", pod, container, (PlannedGpu(0, GpuUuid("GPU-0000"), 300),))
        book.allocate(plan, [gpu0, gpu1], now=0)
    usage = {(u.pod_uid, u.container): u.memory_used_bytes for u in backend.sample(book.records()).containers}
    assert usage == {("uid-a", "main"): 2 * GiB, ("uid-b", "first"): GiB, ("uid-b", "second"): 512 * MiB}


def test_close_frees_and_shuts_down_once() -> None:
    fake = FakeNvml(two_gpus())
    backend = make(fake)
    backend.close()
    backend.close()
    assert fake.calls.count("free") == 1
    assert fake.calls.count("shutdown") == 1


def test_proc_attribution(tmp_path: Path) -> None:
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    cgroupfs, systemd, plain = tmp_path / "10", tmp_path / "11", tmp_path / "12"
    for directory in (cgroupfs, systemd, plain):
        directory.mkdir()
    (cgroupfs / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid}/abc123\n")
    (systemd / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri\n"
    )
    (plain / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    (cgroupfs / "environ").write_bytes(b"PATH=/bin\0LJRK_CONTAINER_NAME=trainer\0HOME=/\0")
    (systemd / "environ").write_bytes(b"PATH=/bin\0")
    assert pod_uid_of_pid(10, proc=tmp_path) == uid
    assert pod_uid_of_pid(11, proc=tmp_path) == uid
    assert pod_uid_of_pid(12, proc=tmp_path) is None
    assert pod_uid_of_pid(99, proc=tmp_path) is None
    assert container_of_pid(10, proc=tmp_path) == "trainer"
    assert container_of_pid(11, proc=tmp_path) is None
    assert container_of_pid(99, proc=tmp_path) is None


def mig_gpus() -> list[dict[str, Any]]:
    """GPU 1 in MIG mode: 3g.20gb at 0 and 1g.5gb at 4 (each with a compute instance), 1g.5gb at 5 without."""
    gpus = two_gpus()
    gpus[1]["mig_layout"] = [(2, 0), (0, 4), (0, 5, [])]
    return gpus


def test_mig_instances_are_listed_with_ids_placement_and_uuids() -> None:
    fake = FakeNvml(mig_gpus())
    fake.mig[1][1]["cis"][0] = 3 * GiB
    backend = make(fake)
    whole, mig = backend.devices()
    assert whole.mig_instances == ()
    uuid = GpuUuid("GPU-1111")
    assert mig.mig_instances == (
        MigInstanceInfo(1, uuid, 1, 0, "3g.20gb", 0, 4, 3, 19968 * MiB, "MIG-1001000-0000-4000-8000-000000000000"),
        MigInstanceInfo(1, uuid, 2, 0, "1g.5gb", 4, 1, 1, 4864 * MiB, "MIG-1002000-0000-4000-8000-000000000000"),
        MigInstanceInfo(1, uuid, 3, None, "1g.5gb", 5, 1, 1, 4864 * MiB, ""),
    )
    assert [i.usable for i in mig.mig_instances] == [True, True, False]
    samples = {m.uuid: m.memory_used_bytes for m in backend.sample([]).mig}
    assert samples == {"MIG-1001000-0000-4000-8000-000000000000": 3 * GiB,
                       "MIG-1002000-0000-4000-8000-000000000000": 0}


def test_mig_listing_errors_leave_the_gpu_without_instances(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    fake.errors[("list", 1)] = 999
    with caplog.at_level(logging.WARNING):
        assert backend.devices()[1].mig_instances == ()
    assert "listing MIG instances failed" in caplog.text
    fake.errors[("mig_memory", 1)] = NOT_SUPPORTED
    del fake.errors[("list", 1)]
    assert all(m.memory_used_bytes is None and "memory: Not Supported" in m.error for m in backend.sample([]).mig)


def _profile(name: str) -> Any:
    return resolve_profile("A100-40GB", name)


def test_mig_create_places_a_gpu_instance_and_a_compute_instance_then_destroy_removes_both() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    created = backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("1g.5gb"), 6)
    assert (created.gpu_instance_id, created.compute_instance_id, created.profile, created.start, created.size) == (
        4, 0, "1g.5gb", 6, 1)
    assert created.uuid.startswith("MIG-1004000")
    assert created in backend.devices()[1].mig_instances
    assert fake.calls[-2:] == ["create gi 4", "create ci 4/0"]
    backend.destroy_mig_instance(created)
    assert fake.calls[-2:] == ["destroy ci 4/0", "destroy gi 4"]
    assert created not in backend.devices()[1].mig_instances
    backend.destroy_mig_instance(created)  # gone already: fine
    assert fake.calls[-1] == "destroy gi 4"


@pytest.mark.parametrize(("failing", "call"), [("create_ci", "nvmlGpuInstanceCreateComputeInstance"),
                                               ("ci_info", "nvmlComputeInstanceGetInfo")])
def test_an_nvml_error_mid_creation_destroys_what_was_made(failing: str, call: str) -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    before = backend.devices()[1].mig_instances
    fake.errors[(failing, 1)] = 999
    with pytest.raises(GpuBackendError, match=rf"1g\.5gb at start 6: {call} failed.*destroyed again"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("1g.5gb"), 6)
    del fake.errors[(failing, 1)]
    assert backend.devices()[1].mig_instances == before
    assert "destroy gi 4" in fake.calls


def test_mig_create_refusals_name_the_gpu_profile_and_call() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    with pytest.raises(GpuBackendError, match=r"3g\.20gb at start 4: nvmlDeviceCreateGpuInstanceWithPlacement failed"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), _profile("3g.20gb"), 4)  # 1g.5gb instances sit there
    with pytest.raises(GpuBackendError, match="not a GPU in MIG mode"):
        backend.create_mig_instance(GpuUuid("GPU-0000"), _profile("1g.5gb"), 0)
    with pytest.raises(GpuBackendError, match="no such GPU instance profile"):
        backend.create_mig_instance(GpuUuid("GPU-1111"), resolve_profile("H100-80GB", "1g.20gb"), 6)


def test_mig_destroy_in_use_raises_and_keeps_the_instance() -> None:
    fake = FakeNvml(mig_gpus())
    backend = make(fake)
    first = backend.devices()[1].mig_instances[0]
    fake.errors[("destroy_ci", 1)] = IN_USE
    with pytest.raises(GpuBackendError, match="destroying compute instance failed"):
        backend.destroy_mig_instance(first)
    assert first in backend.devices()[1].mig_instances


gpu_only = pytest.mark.skipif(os.environ.get("LJRK_GPU_TESTS") != "1", reason="needs LJRK_GPU_TESTS=1 and a GPU")


@pytest.mark.gpu
@gpu_only
def test_real_nvml_inventory_and_sample() -> None:
    backend = NvmlGpuBackend.open(quiet_period_s=60)
    try:
        devices = backend.devices()
        assert devices
        for device in devices:
            assert device.gpu.uuid.startswith(("GPU-", "MIG-"))
            assert device.gpu.memory_bytes > 0
            if device.gpu.mig_mode is not MigMode.ENABLED:
                assert device.mig_instances == ()
            for instance in device.mig_instances:  # read-only: this test never changes the MIG layout
                assert instance.profile
                assert instance.size > 0
                assert instance.memory_bytes > 0
                assert instance.uuid.startswith("MIG-") or not instance.usable
        sample = backend.sample([])
        assert [s.uuid for s in sample.gpus] == [d.gpu.uuid for d in devices]
        assert all(s.memory_used_bytes is not None for s in sample.gpus)
        backend.poll_health(0.1)
    finally:
        backend.close()

