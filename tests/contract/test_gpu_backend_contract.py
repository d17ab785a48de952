"""The GPU backend port (``ports.gpu_backend``) against every backend: the simulated one, NVML over the fake
``pynvml`` module (``tests/support/fake_pynvml.py``) and, with ``LJRK_GPU_TESTS=1`` (marker ``gpu``), real NVML.

Node under test (both steerable backends): GPU 0 ``GPU-0000`` whole, GPU 1 ``GPU-1111`` in MIG mode with
``3g.20gb`` at slice 0 and ``1g.5gb`` at slice 4, both A100-SXM4-40GB; a clock the test advances; timed recovery
after 60 s. The fake NVML reports utilization NotSupported on the MIG GPU, as real NVML does in MIG mode.

Behaviours: listing (index order, identity, MIG mode, instances by start with ids, ``MIG-`` UUIDs and owner
None, healthy at start), device minors; health events (a critical XID marks its GPU at once, application XIDs are
counted but change nothing, an XID without a device marks every GPU, recovery after the quiet period, an idle poll
returns nothing); usage samples (one per GPU in order, at the clock's time, memory within the GPU's, a metric that
cannot be read is None with its reason, one per MIG instance, containers attributed to their grants); MIG changes
(create returns the instance as listed, destroy removes it, destroying again is fine; refusals are
:class:`GpuBackendError` naming the GPU, the profile and the start); close is idempotent. Real NVML runs the
read-only part (listing, minors, sample, idle poll, close) and never changes the MIG layout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from adapters.nvml import NvmlGpuBackend
from adapters.simulated import SimulatedGpuBackend
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.profiles import resolve_profile
from domain.runtime.book import AllocationBook
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from domain.units import GiB
from ports.gpu_backend import GpuBackend, GpuBackendError
from support.fake_pynvml import NOT_SUPPORTED, XID, FakeNvml

WHOLE, MIG = GpuUuid("GPU-0000"), GpuUuid("GPU-1111")
MODEL = "NVIDIA A100-SXM4-40GB"
INVENTORY = (Gpu(0, WHOLE, MODEL, 40 * GiB), Gpu(1, MIG, MODEL, 40 * GiB, mig_mode=MigMode.ENABLED))
LAYOUT = (("3g.20gb", 0), ("1g.5gb", 4))
QUIET_S = 60.0
START = 1000.0


class Clock:
    """Epoch seconds the test advances; ``sleep`` only records."""

    def __init__(self) -> None:
        self.now = START
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@attrs.define
class BackendUnderTest:
    """A backend and the hooks the behaviours need. ``xid(uuid or None, code)`` makes the driver report an XID
    (None: real NVML, which cannot be steered); ``attribute(pid, pod_uid, bytes)`` makes a process of the pod use
    GPU 0's memory (None where usage is modelled from the grants)."""

    kind: str
    backend: GpuBackend
    clock: Clock | None
    xid: Callable[[GpuUuid | None, int], None] | None
    attribute: Callable[[int, str, int], None] | None = None


def _simulated() -> Iterator[BackendUnderTest]:
    clock = Clock()
    backend = SimulatedGpuBackend(INVENTORY, mig_layouts={1: LAYOUT}, clock=clock, quiet_period_s=QUIET_S)

    def xid(uuid: GpuUuid | None, code: int) -> None:
        backend.inject_xid(uuid, code)

    try:
        yield BackendUnderTest("simulated", backend, clock, xid)
    finally:
        backend.close()


def _fake_nvml() -> Iterator[BackendUnderTest]:
    profile_ids = {"3g.20gb": 2, "1g.5gb": 0}  # NVML GPU instance profile constants (fake_pynvml's table)
    gpus: list[dict[str, Any]] = [
        {"uuid": WHOLE, "name": MODEL, "memory": 40 * GiB, "util": 10, "temp": 35, "power_mw": 60_000},
        {"uuid": MIG, "name": MODEL, "memory": 40 * GiB, "mig": 1,
         "mig_layout": [(profile_ids[name], start) for name, start in LAYOUT]},
    ]
    fake, clock = FakeNvml(gpus), Clock()
    fake.errors[("utilization", 1)] = NOT_SUPPORTED  # what NVML answers for a GPU in MIG mode
    pods: dict[int, str] = {}
    backend = NvmlGpuBackend(fake.module, clock=clock, sleep=clock.sleep, quiet_period_s=QUIET_S,
                             pod_uid_of=pods.get, container_of=lambda pid: None)

    def xid(uuid: GpuUuid | None, code: int) -> None:
        fake.event(None if uuid is None else [g.uuid for g in INVENTORY].index(uuid), XID, code)

    def attribute(pid: int, pod_uid: str, used: int) -> None:
        gpus[0].setdefault("procs", []).append((pid, used))
        pods[pid] = pod_uid

    try:
        yield BackendUnderTest("fake-nvml", backend, clock, xid, attribute)
    finally:
        backend.close()


def _real_nvml() -> Iterator[BackendUnderTest]:
    if os.environ.get("LJRK_GPU_TESTS") != "1":
        pytest.skip("needs LJRK_GPU_TESTS=1 and a GPU")
    backend = NvmlGpuBackend.open(quiet_period_s=QUIET_S)
    try:
        yield BackendUnderTest("nvml", backend, None, None)
    finally:
        backend.close()


STEERABLE = {"simulated": _simulated, "fake-nvml": _fake_nvml}


@pytest.fixture(params=list(STEERABLE))
def steered(request: pytest.FixtureRequest) -> Iterator[BackendUnderTest]:
    """A backend whose GPUs are :data:`INVENTORY` and whose driver the test steers."""
    yield from STEERABLE[request.param]()


@pytest.fixture(params=[*STEERABLE, pytest.param("nvml", marks=pytest.mark.gpu)])
def any_backend(request: pytest.FixtureRequest) -> Iterator[BackendUnderTest]:
    """Every backend, real NVML included (read-only behaviours)."""
    yield from (_real_nvml() if request.param == "nvml" else STEERABLE[request.param]())


# ---------------------------------------------------------------------------------------------------- listing
def test_listing_is_in_index_order_with_instances_of_mig_gpus_only(any_backend: BackendUnderTest) -> None:
    devices = any_backend.backend.devices()
    assert devices
    assert [d.gpu.index for d in devices] == list(range(len(devices)))
    assert len({d.gpu.uuid for d in devices}) == len(devices)
    for device in devices:
        assert device.gpu.uuid.startswith("GPU-")
        assert device.gpu.memory_bytes > 0
        if device.gpu.mig_mode is not MigMode.ENABLED:
            assert device.mig_instances == ()
        starts = [i.start for i in device.mig_instances]
        assert starts == sorted(starts)
        for instance in device.mig_instances:
            assert (instance.gpu_uuid, instance.gpu_index, instance.owner) == (device.gpu.uuid, device.gpu.index, None)
            assert 0 < instance.memory_bytes <= device.gpu.memory_bytes
            assert instance.uuid.startswith("MIG-") or not instance.usable
    assert any_backend.backend.name in ("simulated", "nvml")


def test_listing_names_the_node_s_gpus_healthy_with_their_layout(steered: BackendUnderTest) -> None:
    devices = steered.backend.devices()
    assert [d.gpu for d in devices] == list(INVENTORY)
    assert all(d.gpu.health is Health.HEALTHY and d.health_reason == "" for d in devices)
    instances = devices[1].mig_instances
    assert [(i.profile, i.start, i.size, i.compute_slices) for i in instances] == [("3g.20gb", 0, 4, 3),
                                                                                  ("1g.5gb", 4, 1, 1)]
    assert all(i.usable and not i.created for i in instances)
    assert len({i.uuid for i in instances}) == 2
    assert len({i.gpu_instance_id for i in instances}) == 2


def test_device_minors_name_listed_gpus_only(any_backend: BackendUnderTest) -> None:
    minors = any_backend.backend.device_minors()
    listed = {d.gpu.uuid for d in any_backend.backend.devices()}
    assert set(minors) <= listed
    assert all(minor >= 0 for minor in minors.values())
    assert len(set(minors.values())) == len(minors)


def test_device_minors_of_a_node_without_gaps_are_the_indices(steered: BackendUnderTest) -> None:
    assert steered.backend.device_minors() == {WHOLE: 0, MIG: 1}


# ---------------------------------------------------------------------------------------------------- health
def _xid(under: BackendUnderTest, uuid: GpuUuid | None, code: int) -> None:
    assert under.xid is not None
    under.xid(uuid, code)


def test_an_idle_poll_returns_no_change(any_backend: BackendUnderTest) -> None:
    assert any_backend.backend.poll_health(0.01) == ()


def test_a_critical_xid_marks_its_gpu_at_once_and_is_counted(steered: BackendUnderTest) -> None:
    _xid(steered, WHOLE, 79)
    [change] = steered.backend.poll_health(0.01)
    assert (change.uuid, change.index, change.health, change.xid, change.reason, change.at) == (
        WHOLE, 0, Health.UNHEALTHY, 79, "XID 79", START)
    whole, mig = steered.backend.devices()
    assert (whole.gpu.health, whole.health_reason) == (Health.UNHEALTHY, "XID 79")
    assert mig.gpu.health is Health.HEALTHY
    assert steered.backend.sample([]).gpus[0].xid_counts == {79: 1}


def test_application_xids_are_counted_and_change_nothing(steered: BackendUnderTest) -> None:
    for code in (13, 31, 43, 45, 68, 109):
        _xid(steered, MIG, code)
        assert steered.backend.poll_health(0.01) == ()
    assert all(d.gpu.health is Health.HEALTHY for d in steered.backend.devices())
    assert steered.backend.sample([]).gpus[1].xid_counts == {13: 1, 31: 1, 43: 1, 45: 1, 68: 1, 109: 1}


def test_an_xid_without_a_device_marks_every_gpu(steered: BackendUnderTest) -> None:
    _xid(steered, None, 48)
    changes = steered.backend.poll_health(0.01)
    assert sorted((c.uuid, c.health) for c in changes) == [(WHOLE, Health.UNHEALTHY), (MIG, Health.UNHEALTHY)]


def test_a_gpu_recovers_after_the_quiet_period(steered: BackendUnderTest) -> None:
    assert steered.clock is not None
    _xid(steered, MIG, 79)
    steered.backend.poll_health(0.01)
    steered.clock.now += QUIET_S - 1
    assert steered.backend.poll_health(0.01) == ()
    steered.clock.now += 1
    [recovered] = steered.backend.poll_health(0.01)
    assert (recovered.uuid, recovered.health, recovered.initial) == (MIG, Health.HEALTHY, False)
    assert steered.backend.devices()[1].gpu.health is Health.HEALTHY


# ---------------------------------------------------------------------------------------------------- samples
def test_a_sample_measures_every_gpu_and_mig_instance(any_backend: BackendUnderTest) -> None:
    devices = any_backend.backend.devices()
    sample = any_backend.backend.sample([])
    assert [s.uuid for s in sample.gpus] == [d.gpu.uuid for d in devices]
    for device, measured in zip(devices, sample.gpus, strict=True):
        assert measured.memory_used_bytes is not None
        assert 0 <= measured.memory_used_bytes <= device.gpu.memory_bytes
        if measured.utilization_percent is None:
            assert "utilization" in measured.error
        else:
            assert 0 <= measured.utilization_percent <= 100
    assert {m.uuid for m in sample.mig} == {i.uuid for d in devices for i in d.mig_instances if i.usable}
    assert sample.containers == ()


def test_a_metric_that_cannot_be_read_is_none_with_its_reason(steered: BackendUnderTest) -> None:
    sample = steered.backend.sample([])
    assert sample.at == START
    whole, mig = sample.gpus
    assert whole.utilization_percent is not None
    assert whole.error == ""
    assert mig.utilization_percent is None
    assert mig.error == "utilization: Not Supported"


def test_container_use_is_attributed_to_its_grant(steered: BackendUnderTest) -> None:
    book = AllocationBook()
    request = ContainerAllocationRequest("uid-a", "ns", "pod-a", "main", (PlannedGpu(0, WHOLE, 300, 4 * GiB),))
    book.allocate(request, list(INVENTORY), now=START)
    if steered.attribute is not None:
        steered.attribute(100, "uid-a", 2 * GiB)
        steered.attribute(101, "uid-stranger", GiB)  # a process of no allocated pod: not attributed
    [usage] = steered.backend.sample(book.records()).containers
    assert (usage.pod_uid, usage.container, usage.uuid) == ("uid-a", "main", WHOLE)
    assert usage.memory_used_bytes is not None
    assert 0 < usage.memory_used_bytes <= 4 * GiB


# ---------------------------------------------------------------------------------------------------- MIG
def test_create_returns_the_instance_as_listed_and_destroy_removes_it(steered: BackendUnderTest) -> None:
    before = steered.backend.devices()[1].mig_instances
    created = steered.backend.create_mig_instance(MIG, resolve_profile(MODEL, "1g.5gb"), 6)
    assert (created.gpu_uuid, created.profile, created.start, created.size, created.owner) == (
        MIG, "1g.5gb", 6, 1, None)
    assert created.uuid.startswith("MIG-")
    assert created.uuid not in {i.uuid for i in before}
    listed = steered.backend.devices()[1].mig_instances
    assert created in listed
    assert len(listed) == len(before) + 1
    assert created.uuid in {m.uuid for m in steered.backend.sample([]).mig}
    steered.backend.destroy_mig_instance(created)
    assert steered.backend.devices()[1].mig_instances == before
    steered.backend.destroy_mig_instance(created)  # already gone: not an error
    assert steered.backend.devices()[1].mig_instances == before


@pytest.mark.parametrize(("gpu", "profile", "start"), [
    (MIG, "3g.20gb", 4),  # the 1g.5gb at slice 4 is in the way
    (WHOLE, "1g.5gb", 0),  # not in MIG mode
    (GpuUuid("GPU-none"), "1g.5gb", 0),  # not on this node
], ids=["taken", "not-mig", "unknown-gpu"])
def test_a_refused_create_names_the_gpu_profile_and_start(
    steered: BackendUnderTest, gpu: GpuUuid, profile: str, start: int
) -> None:
    before = steered.backend.devices()
    with pytest.raises(GpuBackendError, match=f"{re.escape(gpu)}.*{re.escape(profile)} at start {start}"):
        steered.backend.create_mig_instance(gpu, resolve_profile(MODEL, profile), start)
    assert steered.backend.devices() == before  # all or nothing


def test_close_is_idempotent(any_backend: BackendUnderTest) -> None:
    any_backend.backend.close()
    any_backend.backend.close()
