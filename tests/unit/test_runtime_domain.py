"""Domain of the node Runtime contract (``domain.runtime``).

Behaviours covered:
- SemVer parsing (``v`` prefix, pre-release, build metadata) and ordering (pre-release before release);
- the feature table: ``require_feature`` passes at/after the minimum, refuses before it with a message naming the
  feature, the versions and the fix; unknown feature names; ``RuntimeInfo.require`` also refuses a feature the
  Runtime does not advertise and lists every missing one; ``features_at``;
- request validation: empty UID/container, no GPUs, duplicate GPUs, core out of range, neither core nor memory;
- the allocation book: env vars (NVIDIA_VISIBLE_DEVICES by UUID in plan order, LJRK_* exact limits, HAMi-core
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` in floored MiB with ``m`` and one ``CUDA_DEVICE_SM_LIMIT``, the smallest, never 0);
  the ledger's default rule for omitted memory/core (B09); idempotent repeats; conflicts; disabled Runtime; unknown
  GPU, index mismatch, MIG GPU, memory above the GPU; release of a pod, one container, nothing; effective per-GPU
  totals with init containers;
- health: application XIDs counted but harmless, critical XIDs, XIDs without a device, repeats, quiet-period
  recovery (a later fault restarts the clock), explicit reset, recovery disabled;
- the health broadcast: snapshot first, then changes, close from the subscriber and from the broadcast;
- exporter assembly: idle GPUs, a GPU missing from the sample, measured use joined to the records.
"""

from __future__ import annotations

import threading

import pytest

from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.request import resolve_share
from domain.runtime.book import AllocationBook
from domain.runtime.broadcast import HealthBroadcast
from domain.runtime.edits import ContainerEdits
from domain.runtime.errors import (
    AllocationConflictError,
    InvalidAllocationError,
    RuntimeDisabledError,
    UnknownFeatureError,
    UnsupportedFeatureError,
)
from domain.runtime.exporter import build_exporter_data
from domain.runtime.features import RUNTIME_FEATURES, RuntimeInfo, SemVer, features_at, require_feature
from domain.runtime.health import APPLICATION_XIDS, HealthTracker
from domain.runtime.limits import hami_memory_limit
from domain.runtime.types import (
    ContainerAllocationRequest,
    ContainerUsage,
    DeviceInfo,
    DeviceSpec,
    GpuSample,
    HealthChange,
    Mount,
    PlannedGpu,
    UsageSample,
)
from domain.units import GiB, MiB

A = GpuUuid("GPU-aaaa")
B = GpuUuid("GPU-bbbb")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB))


def request(
    container: str = "main", *gpus: PlannedGpu, pod: str = "uid-1", init: bool = False
) -> ContainerAllocationRequest:
    return ContainerAllocationRequest(pod, "ns", "pod", container, gpus or (PlannedGpu(0, A, core_milli=500),), init)


# ------------------------------------------------------------------------------------------------ versions
@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.2.3", SemVer(1, 2, 3)), ("v0.10.0", SemVer(0, 10, 0)), ("1.0.0-rc.1+build.5", SemVer(1, 0, 0, "rc.1"))],
)
def test_semver_parses(text: str, expected: SemVer) -> None:
    assert SemVer.parse(text) == expected


@pytest.mark.parametrize("text", ["1.2", "1.2.3.4", "01.2.3", "x", ""])
def test_semver_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="semantic version"):
        SemVer.parse(text)


def test_semver_orders_prerelease_before_release() -> None:
    assert SemVer.parse("1.0.0-rc.1") < SemVer(1, 0, 0) < SemVer(1, 0, 1) < SemVer(1, 1, 0) < SemVer(2, 0, 0)
    assert str(SemVer(1, 2, 3, "rc1")) == "1.2.3-rc1"


def test_require_feature_passes_at_and_after_the_minimum() -> None:
    require_feature("1.0.0", "allocate")
    require_feature(SemVer(3, 0, 0), "mig-partitions")


def test_require_feature_refuses_an_older_runtime_clearly() -> None:
    with pytest.raises(UnsupportedFeatureError) as caught:
        require_feature("1.0.0", "mig-partitions")
    message = str(caught.value)
    assert "1.0.0" in message
    assert "'mig-partitions'" in message
    assert ">= 1.1.0" in message
    assert "upgrade the node Runtime" in message


def test_unknown_feature_is_a_programming_error() -> None:
    with pytest.raises(UnknownFeatureError, match="not in RUNTIME_FEATURES"):
        require_feature("9.9.9", "teleport")


def test_runtime_info_refuses_features_it_does_not_advertise() -> None:
    info = RuntimeInfo("third-party", SemVer(2, 0, 0), frozenset({"allocate", "inventory"}))
    info.require("allocate", "inventory")
    assert info.supports("allocate")
    assert not info.supports("hami-core-env")
    with pytest.raises(UnsupportedFeatureError) as caught:
        info.require("hami-core-env", "exporter-data")
    assert "'hami-core-env'" in str(caught.value)
    assert "'exporter-data'" in str(caught.value)
    assert "does not advertise" in str(caught.value)


def test_features_at_lists_what_a_version_serves() -> None:
    assert "mig-partitions" not in features_at(SemVer(1, 0, 0))
    assert features_at(SemVer(1, 1, 0)) == frozenset(RUNTIME_FEATURES)
    assert "hami-core-env" not in features_at(SemVer(1, 0, 0), exclude=["hami-core-env"])


# ------------------------------------------------------------------------------------------------ requests
@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ContainerAllocationRequest("", "ns", "p", "c", (PlannedGpu(0, A, 10),)), "pod_uid"),
        (lambda: ContainerAllocationRequest("u", "ns", "p", "", (PlannedGpu(0, A, 10),)), "container_name"),
        (lambda: ContainerAllocationRequest("u", "ns", "p", "c", ()), "at least one GPU"),
        (lambda: ContainerAllocationRequest("u", "ns", "p", "c", (PlannedGpu(0, A, 10), PlannedGpu(1, A, 10))),
         "distinct"),
        (lambda: PlannedGpu(0, A, core_milli=1001), "1..1000"),
        (lambda: PlannedGpu(0, A, core_milli=0), "1..1000"),
        (lambda: PlannedGpu(0, A), "core or memory"),
        (lambda: PlannedGpu(-1, A, 10), "index"),
        (lambda: PlannedGpu(0, GpuUuid(""), 10), "uuid"),
        (lambda: PlannedGpu(0, A, memory_bytes=0), "at least 1 byte"),
    ],
)
def test_malformed_requests_are_refused(build: object, match: str) -> None:
    with pytest.raises(InvalidAllocationError, match=match):
        build()  # type: ignore[operator]


# ------------------------------------------------------------------------------------------------ book
def test_allocate_returns_visible_devices_and_limits() -> None:
    book = AllocationBook()
    plan = request("main", PlannedGpu(1, B, core_milli=305, memory_bytes=3 * GiB + 5),
                   PlannedGpu(0, A, core_milli=500, memory_bytes=8 * GiB))
    record, created = book.allocate(plan, GPUS, now=10.0)
    envs = record.response.envs
    assert created
    assert envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"  # plan order = CUDA ordinal order in the container
    assert envs["LJRK_GPU_UUID_0"] == B
    assert envs["LJRK_CORE_MILLI_0"] == "305"
    assert envs["LJRK_CORE_PERCENT_0"] == "30"
    assert envs["LJRK_MEMORY_LIMIT_BYTES_0"] == str(3 * GiB + 5)
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3072m"  # floored to whole MiB
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "8192m"
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "30"  # one value per container: the smallest grant
    assert envs["LJRK_POD_UID"] == "uid-1"
    assert envs["LJRK_CONTAINER_NAME"] == "main"
    assert record.response.annotations == {"lj-runtimekit.io/runtime-allocation": "uid-1/main"}
    assert record.allocated_at == 10.0


def test_default_edits_add_no_device_nodes_and_no_mounts() -> None:
    record, _ = AllocationBook().allocate(request(), GPUS, now=1.0)
    assert (record.response.mounts, record.response.devices) == ((), ())


def test_device_specs_name_each_granted_gpu_then_the_control_nodes() -> None:
    edits = ContainerEdits(device_nodes=True, dev_root="/host/dev", control_devices=("nvidiactl", "nvidia-uvm"))
    book = AllocationBook(edits=edits)
    plan = request("main", PlannedGpu(1, B, core_milli=300), PlannedGpu(0, A, core_milli=200))
    record, _ = book.allocate(plan, GPUS, now=1.0, minors={A: 3, B: 7})
    assert record.response.devices == (
        DeviceSpec("/dev/nvidia7", "/host/dev/nvidia7", "rw"), DeviceSpec("/dev/nvidia3", "/host/dev/nvidia3", "rw"),
        DeviceSpec("/dev/nvidiactl", "/host/dev/nvidiactl", "rw"),
        DeviceSpec("/dev/nvidia-uvm", "/host/dev/nvidia-uvm", "rw"),
    )
    assert record.response.mounts == ()


def test_a_gpu_without_a_minor_number_is_refused_and_nothing_is_recorded() -> None:
    book = AllocationBook(edits=ContainerEdits(device_nodes=True))
    with pytest.raises(InvalidAllocationError, match=f"ns/pod:main: GPU {A}: device minor number unknown"):
        book.allocate(request(), GPUS, now=1.0, minors={B: 1})
    assert len(book) == 0


def test_hami_core_edits_mount_the_library_and_the_preload_list_read_only() -> None:
    edits = ContainerEdits(hami_library="/usr/lib/libvgpu.so", preload_file="/var/lib/ljrk/ld.so.preload")
    record, _ = AllocationBook(edits=edits).allocate(request(), GPUS, now=1.0)
    assert record.response.mounts == (
        Mount("/usr/local/vgpu/libvgpu.so", "/usr/lib/libvgpu.so", read_only=True),
        Mount("/etc/ld.so.preload", "/var/lib/ljrk/ld.so.preload", read_only=True),
    )
    assert record.response.devices == ()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dev_root": "dev"}, "dev_root='dev': must be an absolute host path"),
        ({"hami_library": "lib.so", "preload_file": "/p"}, "hami_library='lib.so'"),
        ({"hami_library": "/lib.so"}, "needs preload_file"),
    ],
)
def test_container_edits_reject_bad_paths(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ContainerEdits(**kwargs)  # type: ignore[arg-type]


def test_limits_are_never_zero() -> None:
    book = AllocationBook()
    record, _ = book.allocate(request("c", PlannedGpu(0, A, core_milli=5, memory_bytes=1000)), GPUS, now=0)
    assert record.response.envs["CUDA_DEVICE_SM_LIMIT"] == "1"
    assert record.response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1m"
    assert hami_memory_limit(MiB - 1) == "1m"


def test_omitted_memory_and_core_follow_the_ledger_rule() -> None:
    book = AllocationBook()
    memory_omitted, _ = book.allocate(request("a", PlannedGpu(0, A, core_milli=333)), GPUS, now=0)
    core_omitted, _ = book.allocate(request("b", PlannedGpu(0, A, memory_bytes=5 * GiB + 1)), GPUS, now=0)
    assert (memory_omitted.grants[0].core_milli, memory_omitted.grants[0].memory_bytes) == resolve_share(
        core_milli=333, memory_bytes=None, gpu_memory_bytes=16 * GiB
    )
    assert core_omitted.grants[0].core_milli == 313  # ceil(1000 × (5 GiB + 1) / 16 GiB)
    assert core_omitted.grants[0].memory_bytes == 5 * GiB + 1


def test_identical_repeat_is_idempotent_and_a_different_plan_conflicts() -> None:
    book = AllocationBook()
    first, created = book.allocate(request(), GPUS, now=1.0)
    again, created_again = book.allocate(request(), GPUS, now=2.0)
    assert created
    assert not created_again
    assert again is first
    assert len(book) == 1
    with pytest.raises(AllocationConflictError, match="release it first"):
        book.allocate(request("main", PlannedGpu(1, B, core_milli=500)), GPUS, now=3.0)


def test_disabled_book_refuses_new_keys_but_not_repeats() -> None:
    book = AllocationBook()
    book.allocate(request(), GPUS, now=1.0)
    assert not book.allocate(request(), GPUS, now=2.0, enabled=False)[1]
    with pytest.raises(RuntimeDisabledError, match="disabled"):
        book.allocate(request("other"), GPUS, now=2.0, enabled=False)


@pytest.mark.parametrize(
    ("planned", "gpus", "match"),
    [
        (PlannedGpu(0, GpuUuid("GPU-none"), 100), GPUS, "not on this node"),
        (PlannedGpu(1, A, 100), GPUS, "has index 0 on this node, the plan says 1"),
        (PlannedGpu(0, A, 100), (Gpu(0, A, "A100", 16 * GiB, mig_mode=MigMode.ENABLED),), "MIG mode"),
        (PlannedGpu(0, A, 100, memory_bytes=17 * GiB), GPUS, "exceeds"),
    ],
)
def test_plans_that_do_not_fit_the_node_are_invalid(planned: PlannedGpu, gpus: tuple[Gpu, ...], match: str) -> None:
    with pytest.raises(InvalidAllocationError, match=match):
        AllocationBook().allocate(request("c", planned), gpus, now=0)


def test_release_removes_a_pod_or_one_container() -> None:
    book = AllocationBook()
    for container in ("a", "b"):
        book.allocate(request(container), GPUS, now=0)
    book.allocate(request("a", pod="uid-2"), GPUS, now=0)
    assert book.release("uid-1", "a")[0].key == ("uid-1", "a")
    assert book.release("uid-1", "a") == ()
    assert len(book.release("uid-1")) == 1
    assert book.release("nobody") == ()
    assert [r.key for r in book.records()] == [("uid-2", "a")]


def test_allocated_per_gpu_applies_the_effective_rule_per_pod() -> None:
    book = AllocationBook()
    book.allocate(request("init", PlannedGpu(0, A, 600, GiB), init=True), GPUS, now=0)
    book.allocate(request("app1", PlannedGpu(0, A, 200, 2 * GiB)), GPUS, now=0)
    book.allocate(request("app2", PlannedGpu(0, A, 300, 2 * GiB)), GPUS, now=0)
    book.allocate(request("x", PlannedGpu(0, A, 100, GiB), pod="uid-2"), GPUS, now=0)
    # pod 1: max(Σ app = 500, init 600) core; max(4 GiB, 1 GiB) memory; plus pod 2
    assert book.allocated_per_gpu() == {A: (700, 5 * GiB)}


# ------------------------------------------------------------------------------------------------ health
def test_application_xids_are_counted_but_leave_the_gpu_healthy() -> None:
    tracker = HealthTracker(GPUS, quiet_period_s=60)
    for xid in sorted(APPLICATION_XIDS):
        assert tracker.on_xid(A, xid, now=1.0) == []
    assert tracker.health(A) == (Health.HEALTHY, "")
    assert tracker.xid_counts(A) == dict.fromkeys(APPLICATION_XIDS, 1)
    assert {13, 31, 43, 45, 68, 109} == APPLICATION_XIDS


def test_critical_xid_marks_one_gpu_and_a_deviceless_xid_marks_all() -> None:
    tracker = HealthTracker(GPUS, quiet_period_s=60)
    [change] = tracker.on_xid(A, 79, now=5.0)
    assert change == HealthChange(A, 0, Health.UNHEALTHY, "XID 79", 79, 5.0)
    assert tracker.on_xid(A, 79, now=6.0) == []  # already unhealthy: no new change
    assert [c.uuid for c in tracker.on_xid(None, 48, now=7.0)] == [B]
    assert tracker.xid_counts(A) == {79: 2, 48: 1}


def test_quiet_period_recovers_and_a_later_fault_restarts_the_clock() -> None:
    tracker = HealthTracker(GPUS, quiet_period_s=60)
    tracker.on_xid(A, 79, now=0.0)
    tracker.on_xid(A, 79, now=50.0)
    assert tracker.tick(100.0) == []
    [recovered] = tracker.tick(110.0)
    assert recovered.health is Health.HEALTHY
    assert "no fault for 60 s" in recovered.reason
    assert tracker.health(A) == (Health.HEALTHY, "")


def test_explicit_reset_recovers_and_none_disables_timed_recovery() -> None:
    tracker = HealthTracker(GPUS, quiet_period_s=None)
    tracker.fault(None, "GPU is lost", now=0.0)
    assert tracker.tick(1e9) == []
    assert [c.uuid for c in tracker.reset(B, "operator", now=1.0)] == [B]
    assert tracker.health(A) == (Health.UNHEALTHY, "GPU is lost")
    assert tracker.reset(B, "again", now=2.0) == []


def test_health_tracker_starts_from_inventory_health() -> None:
    tracker = HealthTracker((Gpu(0, A, "A100", GiB, Health.UNHEALTHY),), quiet_period_s=10)
    assert tracker.health(A)[0] is Health.UNHEALTHY
    assert tracker.tick(10.0)[0].health is Health.HEALTHY
    with pytest.raises(ValueError, match="quiet_period_s"):
        HealthTracker(GPUS, quiet_period_s=-1)


# ------------------------------------------------------------------------------------------------ broadcast
def _snapshot() -> list[HealthChange]:
    return [HealthChange(A, 0, Health.HEALTHY, initial=True)]


def test_broadcast_sends_snapshot_then_changes_until_closed() -> None:
    broadcast = HealthBroadcast()
    first, second = broadcast.subscribe(_snapshot), broadcast.subscribe(_snapshot)
    change = HealthChange(A, 0, Health.UNHEALTHY, "XID 79", 79, 1.0)
    broadcast.publish([change])
    assert [next(first), next(first)] == [_snapshot()[0], change]
    first.close()
    assert list(first) == []
    assert broadcast.subscriber_count == 1
    broadcast.close()
    assert list(second) == [_snapshot()[0], change]
    assert list(broadcast.subscribe(_snapshot)) == _snapshot()  # after close: snapshot, then the end


def test_subscription_close_from_another_thread_wakes_the_reader() -> None:
    subscription = HealthBroadcast().subscribe(list)
    seen: list[HealthChange] = []
    reader = threading.Thread(target=lambda: seen.extend(subscription))
    reader.start()
    subscription.close()
    reader.join(timeout=2)
    assert not reader.is_alive()
    assert seen == []


# ------------------------------------------------------------------------------------------------ exporter
def test_exporter_rows_cover_idle_gpus_missing_samples_and_measured_use() -> None:
    book = AllocationBook()
    book.allocate(request("main", PlannedGpu(0, A, 500, 4 * GiB)), GPUS, now=3.0)
    sample = UsageSample(
        gpus=(GpuSample(A, 40.0, 2 * GiB, 50.0, 120.0, {79: 1}),),
        containers=(ContainerUsage("uid-1", "main", A, GiB, 35.0),),
        at=9.0,
    )
    devices = tuple(DeviceInfo(g) for g in GPUS)
    data = build_exporter_data(devices, book.records(), sample, allocated=book.allocated_per_gpu())
    assert data.sampled_at == 9.0
    gpu_a, gpu_b = data.gpus
    assert (gpu_a.allocated_core_milli, gpu_a.allocated_memory_bytes) == (500, 4 * GiB)
    assert gpu_a.sample.xid_counts == {79: 1}
    assert gpu_b.sample.utilization_percent is None
    assert gpu_b.sample.error == "no sample for this GPU"
    assert (gpu_b.allocated_core_milli, gpu_b.allocated_memory_bytes) == (0, 0)
    [container] = data.containers
    assert (container.pod_uid, container.container, container.allocated_at) == ("uid-1", "main", 3.0)
    assert container.gpus[0].memory_limit_bytes == 4 * GiB
    assert container.gpus[0].memory_used_bytes == GiB
    assert container.gpus[0].utilization_percent == 35.0
