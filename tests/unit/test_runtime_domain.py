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
- exporter assembly: idle GPUs, a GPU missing from the sample, measured use joined to the records;
- MIG features: 1.1.0 minimum, ``mig_features`` for static, dynamic and exporter use;
- MIG requests: a plan needs GPUs or MIG instances but not both; planned instances need a profile or a MIG UUID,
  creating needs profile and start; duplicates refused;
- the MIG book: an existing instance by start, by MIG UUID or by profile (lowest free start, never a sibling's);
  envs with the MIG UUID and no HAMi limits; parent device nodes with device specs, a missing minor refusing
  before anything is created; idempotent repeat, conflicting plan; an instance held by another pod refused,
  shared within the pod; a GPU not in MIG mode refuses MIG grants; static strategy refuses create; creation
  through the driver, all or nothing (a failing second creation destroys the first, a failed rollback is noted);
  geometry refusals (not a placement, overlap with listed or pending instances); a GPU instance without compute
  instance cannot be handed out; Release's destroy list spares instances still held in the pod;
- MIG views: owners overlaid on listed devices, the scheduler's ``MigGpu`` view, exporter rows per instance joined
  with samples by MIG UUID;
- ``MigLayouts``: deterministic ids and UUIDs, geometry-checked creation, idempotent destruction, layouts only on
  MIG GPUs.
"""

from __future__ import annotations

import threading

import pytest

from adapters.simulated.miglayout import MigLayouts, simulated_mig_uuid
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.errors import MigPlacementError
from domain.mig.gpu import MigOwner, PlacementMode
from domain.mig.profiles import MigProfile, resolve_profile
from domain.request import resolve_share
from domain.runtime.book import AllocationBook
from domain.runtime.edits import ContainerEdits
from domain.runtime.errors import (
    AllocationConflictError,
    InvalidAllocationError,
    RuntimeDisabledError,
    UnknownFeatureError,
    UnsupportedFeatureError,
)
from domain.runtime.exporter import build_exporter_data
from domain.runtime.features import RUNTIME_FEATURES, RuntimeInfo, SemVer, features_at, mig_features, require_feature
from domain.runtime.health import APPLICATION_XIDS, HealthTracker
from domain.runtime.limits import hami_memory_limit
from domain.runtime.mig import MigNode, mig_gpu_of, with_owners
from domain.runtime.types import (
    ContainerAllocationRequest,
    ContainerUsage,
    DeviceInfo,
    DeviceSpec,
    GpuSample,
    HealthChange,
    MigInstanceInfo,
    MigSample,
    Mount,
    PlannedGpu,
    PlannedMig,
    UsageSample,
)
from domain.units import GiB, MiB
from services.runtime.broadcast import HealthBroadcast

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
    assert features_at(SemVer(1, 2, 0)) == frozenset(RUNTIME_FEATURES)
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
    third = PlannedGpu(0, A, core_milli=300)
    for container in ("a", "b"):
        book.allocate(request(container, third), GPUS, now=0)
    book.allocate(request("a", third, pod="uid-2"), GPUS, now=0)
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


# ------------------------------------------------------------------------------------------------ MIG
M = GpuUuid("GPU-mmmm")
MIG_GPU = Gpu(2, M, "NVIDIA A100-SXM4-80GB", 80 * GiB, mig_mode=MigMode.ENABLED)
NODE_GPUS = (*GPUS, MIG_GPU)


def listed(*placed: tuple[str, int], ci: int | None = 0) -> tuple[MigInstanceInfo, ...]:
    """Instances of MIG_GPU as a backend lists them (GI id = start + 1)."""
    profiles = {"3g.40gb": (4, 3, 40), "1g.10gb": (1, 1, 10), "2g.20gb": (2, 2, 20), "7g.80gb": (8, 7, 80)}
    return tuple(
        MigInstanceInfo(2, M, start + 1, ci, name, start, profiles[name][0], profiles[name][1],
                        profiles[name][2] * GiB, f"MIG-{start}" if ci is not None else "")
        for name, start in placed
    )


class Driver:
    """Records creations and destructions; ``fail_at`` makes the n-th creation raise."""

    def __init__(self, fail_at: int | None = None, fail_destroy: bool = False) -> None:
        self.created: list[MigInstanceInfo] = []
        self.destroyed: list[MigInstanceInfo] = []
        self.fail_at, self.fail_destroy = fail_at, fail_destroy

    def create_mig_instance(self, gpu: GpuUuid, profile: MigProfile, start: int) -> MigInstanceInfo:
        if self.fail_at == len(self.created):
            raise RuntimeError("NVML: insufficient resources")
        [instance] = listed((profile.name, start))
        self.created.append(instance)
        return instance

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        if self.fail_destroy:
            raise RuntimeError("NVML: in use")
        self.destroyed.append(instance)

    def node(self, *instances: MigInstanceInfo, mode: PlacementMode = PlacementMode.DYNAMIC) -> MigNode:
        return MigNode(instances, mode, self)


def mig_request(container: str = "main", *planned: PlannedMig, pod: str = "uid-1") -> ContainerAllocationRequest:
    return ContainerAllocationRequest(pod, "ns", "pod", container, (), mig=planned or (PlannedMig(2, M, "3g.40gb", 0),))


def test_mig_features_need_runtime_1_1_and_name_what_each_use_requires() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"lacks feature 'mig-allocate'.*>= 1\.1\.0"):
        require_feature("1.0.0", "mig-allocate")
    assert mig_features() == ("mig-inventory", "mig-allocate")
    assert mig_features(dynamic=True, exporter=True) == ("mig-inventory", "mig-allocate", "mig-dynamic",
                                                         "mig-exporter-data")
    assert {"mig-inventory", "mig-dynamic"} <= features_at(SemVer(1, 1, 0))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: ContainerAllocationRequest("u", "ns", "p", "c", (PlannedGpu(0, A, 10),),
                                            mig=(PlannedMig(2, M, "1g.10gb"),)), "not both"),
        (lambda: PlannedMig(2, M), "profile or a MIG UUID"),
        (lambda: PlannedMig(2, M, "1g.10gb", create=True), "needs a profile and a start"),
        (lambda: PlannedMig(2, M, "1g.10gb", 0, create=True, mig_uuid="MIG-0"), "needs a profile and a start"),
        (lambda: PlannedMig(2, M, "1g.10gb", -1), "memory slice"),
        (lambda: PlannedMig(-1, M, "1g.10gb"), "index"),
        (lambda: PlannedMig(2, GpuUuid(""), "1g.10gb"), "parent GPU"),
        (lambda: mig_request("c", PlannedMig(2, M, "1g.10gb", 4), PlannedMig(2, M, "2g.20gb", 4)), "distinct"),
        (lambda: mig_request("c", PlannedMig(2, M, mig_uuid="MIG-4"), PlannedMig(2, M, mig_uuid="MIG-4")), "distinct"),
    ],
)
def test_malformed_mig_requests_are_refused(build: object, match: str) -> None:
    with pytest.raises(InvalidAllocationError, match=match):
        build()  # type: ignore[operator]


def test_mig_grant_by_start_uuid_or_profile_answers_the_mig_uuid() -> None:
    book, driver = AllocationBook(), Driver()
    node = driver.node(*listed(("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)), mode=PlacementMode.STATIC)
    record, created = book.allocate(mig_request(), NODE_GPUS, now=1.0, mig=node)
    assert created
    assert record.response.envs == {
        "NVIDIA_VISIBLE_DEVICES": "MIG-0", "LJRK_POD_UID": "uid-1", "LJRK_CONTAINER_NAME": "main",
        "LJRK_MIG_UUID_0": "MIG-0", "LJRK_MIG_PROFILE_0": "3g.40gb", "LJRK_MIG_GPU_UUID_0": M,
        "LJRK_MIG_MEMORY_BYTES_0": str(40 * GiB),
    }
    assert [(i.owner, i.created) for i in record.mig] == [(MigOwner("uid-1", "main"), False)]
    assert record.grants == ()
    assert book.allocate(mig_request(), NODE_GPUS, now=2.0, mig=node) == (record, False)
    with pytest.raises(AllocationConflictError):
        book.allocate(mig_request("main", PlannedMig(2, M, "1g.10gb")), NODE_GPUS, now=2.0, mig=node)
    second, _ = book.allocate(mig_request("b", PlannedMig(2, M, "1G.10GB"), PlannedMig(2, M, mig_uuid="MIG-5"),
                                          pod="uid-2"), NODE_GPUS, now=3.0, mig=node)
    assert second.response.envs["NVIDIA_VISIBLE_DEVICES"] == "MIG-4,MIG-5"  # lowest free start, then by UUID
    assert driver.created == []


def test_mig_instances_are_exclusive_to_a_pod_but_shared_within_it() -> None:
    book, driver = AllocationBook(), Driver()
    node = driver.node(*listed(("3g.40gb", 0), ("1g.10gb", 4)), mode=PlacementMode.STATIC)
    book.allocate(mig_request("init"), NODE_GPUS, now=1.0, mig=node)
    with pytest.raises(InvalidAllocationError, match="held by pod uid-1 container 'init'"):
        book.allocate(mig_request("x", pod="uid-2"), NODE_GPUS, now=2.0, mig=node)
    with pytest.raises(InvalidAllocationError, match=r"no free 3g\.40gb"):  # by profile alone: never a sibling's
        book.allocate(mig_request("app", PlannedMig(2, M, "3g.40gb")), NODE_GPUS, now=2.0, mig=node)
    app, _ = book.allocate(mig_request("app"), NODE_GPUS, now=2.0, mig=node)  # named by start: shared in the pod
    assert app.mig[0].uuid == "MIG-0"
    assert book.mig_holders()[app.mig[0].key].owner == MigOwner("uid-1", "init")


@pytest.mark.parametrize(
    ("planned", "gpus", "match"),
    [
        (PlannedMig(0, A, "1g.10gb"), NODE_GPUS, "not in MIG mode and takes no MIG instance"),
        (PlannedMig(2, GpuUuid("GPU-none"), "1g.10gb"), NODE_GPUS, "not on this node"),
        (PlannedMig(1, M, "1g.10gb"), NODE_GPUS, "index 2 on this node"),
        (PlannedMig(2, M, "1g.5gb"), NODE_GPUS, r"unknown profile for A100-80GB.*A100-40GB"),
        (PlannedMig(2, M, "3g.40gb", 4), NODE_GPUS, "no free 3g.40gb MIG instance at start 4"),
        (PlannedMig(2, M, mig_uuid="MIG-4", start=5), NODE_GPUS, "starts at 4, the plan says 5"),
        (PlannedMig(2, M, "2g.20gb", mig_uuid="MIG-4"), NODE_GPUS, "is a 1g.10gb, the plan says 2g.20gb"),
        (PlannedMig(2, M, "1g.10gb", 6, create=True), NODE_GPUS, "static MIG strategy"),
    ],
)
def test_mig_plans_that_do_not_fit_the_node_are_invalid(planned: PlannedMig, gpus: tuple[Gpu, ...], match: str) -> None:
    book = AllocationBook()
    node = Driver().node(*listed(("3g.40gb", 0), ("1g.10gb", 4)), mode=PlacementMode.STATIC)
    with pytest.raises(InvalidAllocationError, match=match):
        book.allocate(mig_request("c", planned), gpus, now=1.0, mig=node)
    assert len(book) == 0


def test_a_gpu_instance_without_compute_instance_is_not_handed_out() -> None:
    node = Driver().node(*listed(("1g.10gb", 4), ci=None))
    with pytest.raises(InvalidAllocationError, match="has no compute instance"):
        AllocationBook().allocate(mig_request("c", PlannedMig(2, M, "1g.10gb", 4)), NODE_GPUS, now=1.0, mig=node)


def test_dynamic_creation_is_checked_then_made_through_the_driver() -> None:
    book, driver = AllocationBook(), Driver()
    node = driver.node(*listed(("3g.40gb", 0), ("1g.10gb", 4)))
    plan = mig_request("c", PlannedMig(2, M, "1g.10gb", 5, create=True), PlannedMig(2, M, "1g.10gb", 4, create=True))
    record, _ = book.allocate(plan, NODE_GPUS, now=1.0, mig=node)
    assert [i.start for i in driver.created] == [5]
    assert [(i.start, i.created) for i in record.mig] == [(5, True), (4, True)]  # taken over, as the ledger books it
    for planned, match in [
        (PlannedMig(2, M, "2g.20gb", 5, create=True), "not a placement"),
        (PlannedMig(2, M, "2g.20gb", 4, create=True), "overlaps"),
        (PlannedMig(2, M, "7g.80gb", 0, create=True), "overlaps"),
    ]:
        with pytest.raises(InvalidAllocationError, match=match):
            book.allocate(mig_request("x", planned, pod="uid-2"), NODE_GPUS, now=2.0, mig=node)
    pending = mig_request("y", PlannedMig(2, M, "1g.10gb", 5, create=True), PlannedMig(2, M, "2g.20gb", 4, create=True),
                          pod="uid-3")
    with pytest.raises(InvalidAllocationError, match="overlaps"):  # the first planned creation takes slice 5
        book.allocate(pending, NODE_GPUS, now=2.0, mig=driver.node(*listed(("3g.40gb", 0))))
    assert [i.start for i in driver.created] == [5]


def test_a_failing_creation_destroys_what_the_request_created_and_records_nothing() -> None:
    book, driver = AllocationBook(), Driver(fail_at=1)
    plan = mig_request("c", PlannedMig(2, M, "1g.10gb", 5, create=True), PlannedMig(2, M, "1g.10gb", 6, create=True))
    with pytest.raises(RuntimeError, match="insufficient resources"):
        book.allocate(plan, NODE_GPUS, now=1.0, mig=driver.node(*listed(("3g.40gb", 0))))
    assert [i.start for i in driver.destroyed] == [5]
    assert len(book) == 0
    stuck = Driver(fail_at=1, fail_destroy=True)
    with pytest.raises(RuntimeError) as caught:
        book.allocate(plan, NODE_GPUS, now=1.0, mig=stuck.node(*listed(("3g.40gb", 0))))
    assert caught.value.__notes__ == ["rollback: could not destroy MIG instance MIG-5: NVML: in use"]


def test_mig_device_specs_name_the_parent_gpu_and_a_missing_minor_creates_nothing() -> None:
    book, driver = AllocationBook(edits=ContainerEdits(device_nodes=True, control_devices=("nvidiactl",))), Driver()
    node = driver.node(*listed(("3g.40gb", 0)))
    plan = mig_request("c", PlannedMig(2, M, "1g.10gb", 5, create=True))
    with pytest.raises(InvalidAllocationError, match="minor number unknown"):
        book.allocate(plan, NODE_GPUS, now=1.0, mig=node, minors={})
    assert driver.created == []
    record, _ = book.allocate(plan, NODE_GPUS, now=1.0, mig=node, minors={M: 7})
    assert record.response.devices == (DeviceSpec("/dev/nvidia7", "/dev/nvidia7", "rw"),
                                       DeviceSpec("/dev/nvidiactl", "/dev/nvidiactl", "rw"))
    assert record.response.mounts == ()


def test_release_destroys_created_instances_only_with_their_last_holder() -> None:
    book, driver = AllocationBook(), Driver()
    node = driver.node(*listed(("3g.40gb", 0)))
    book.allocate(mig_request("init", PlannedMig(2, M, "1g.10gb", 5, create=True)), NODE_GPUS, now=1.0, mig=node)
    node = driver.node(*listed(("3g.40gb", 0), ("1g.10gb", 5)))
    book.allocate(mig_request("app", PlannedMig(2, M, "1g.10gb", 5, create=True)), NODE_GPUS, now=2.0, mig=node)
    book.allocate(mig_request("x", pod="uid-2"), NODE_GPUS, now=3.0, mig=node)
    assert len(driver.created) == 1
    assert book.unreferenced(book.release("uid-1", "init")) == ()
    [doomed] = book.unreferenced(book.release("uid-1", "app"))
    assert (doomed.start, doomed.created) == (5, True)
    assert book.unreferenced(book.release("uid-2")) == ()  # pre-created: turns free, never destroyed


def test_owners_overlay_and_the_scheduler_view_of_a_listed_gpu() -> None:
    book, driver = AllocationBook(), Driver()
    node = driver.node(*listed(("3g.40gb", 0), ("1g.10gb", 4)))
    book.allocate(mig_request("c", PlannedMig(2, M, "1g.10gb", 4, create=True)), NODE_GPUS, now=1.0, mig=node)
    [device] = with_owners([DeviceInfo(MIG_GPU, "", listed(("3g.40gb", 0), ("1g.10gb", 4)))], book.mig_holders())
    assert [(i.owner, i.created) for i in device.mig_instances] == [(None, False), (MigOwner("uid-1", "c"), True)]
    view = mig_gpu_of(device, mode=PlacementMode.DYNAMIC)
    assert (view.model.key, [(i.profile.name, i.start, i.owner, i.created) for i in view.instances]) == (
        "A100-80GB", [("3g.40gb", 0, None, False), ("1g.10gb", 4, MigOwner("uid-1", "c"), True)])
    assert view.free_starts(resolve_profile("A100-80GB", "1g.10gb")) == (5, 6)
    assert [i.instance_id for i in view.instances] == ["1", "5"]
    assert mig_gpu_of(device, mode=PlacementMode.STATIC).instances[1].created is False


def test_exporter_rows_per_mig_instance_join_samples_by_mig_uuid() -> None:
    book = AllocationBook()
    node = Driver().node(*listed(("3g.40gb", 0), ("1g.10gb", 4)), mode=PlacementMode.STATIC)
    book.allocate(mig_request(), NODE_GPUS, now=1.0, mig=node)
    devices = with_owners([DeviceInfo(MIG_GPU, "", [*node.instances, *listed(("1g.10gb", 5), ci=None)])],
                          book.mig_holders())
    sample = UsageSample(mig=(MigSample("MIG-0", 3 * GiB, None),))
    data = build_exporter_data(devices, book.records(), sample, allocated={})
    assert [(r.instance.start, r.instance.owner, r.memory_used_bytes, r.error) for r in data.mig] == [
        (0, MigOwner("uid-1", "main"), 3 * GiB, ""), (4, None, None, "no sample for this MIG instance"),
        (5, None, None, "no compute instance")]
    assert data.containers[0].mig_uuids == ("MIG-0",)


def test_mig_layouts_are_deterministic_and_geometry_checked() -> None:
    layouts = MigLayouts(NODE_GPUS, {2: [("3g.40gb", 4)]})
    [first] = layouts.instances(M)
    assert (first.gpu_instance_id, first.compute_instance_id, first.uuid) == (
        5, 0, simulated_mig_uuid(M, "3g.40gb", 4))
    assert MigLayouts(NODE_GPUS, {2: [("3G.40GB", 4)]}).instances(M) == (first,)
    profile = resolve_profile("A100-80GB", "3g.40gb")
    created = layouts.create_mig_instance(M, profile, 0)
    assert [i.start for i in layouts.instances()] == [0, 4]
    with pytest.raises(MigPlacementError, match="overlaps"):
        layouts.create_mig_instance(M, resolve_profile("A100-80GB", "1g.10gb"), 4)
    layouts.destroy_mig_instance(created)
    layouts.destroy_mig_instance(created)  # gone: fine
    assert layouts.instances(M) == (first,)
    assert layouts.instances(A) == ()
    with pytest.raises(ValueError, match="only a listed GPU in MIG mode"):
        MigLayouts(NODE_GPUS, {0: [("1g.10gb", 0)]})
