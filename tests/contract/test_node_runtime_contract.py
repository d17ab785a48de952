"""Contract of the node Runtime port (``ports.runtime.NodeRuntime``) and the config port (``ports.node_config``).

Every case runs four times: ``[in-process]`` on ``entrypoints.runtime.inprocess.InProcessRuntime`` (the reference
Runtime wired in this process, health changed synchronously, what the other tests use), ``[reference]`` on the
reference Runtime as ``ljrk runtime`` runs it (``services.runtime.service.RuntimeService`` over simulated GPUs with
its health pump thread), and both again behind gRPC (``[in-process-grpc]``, ``[reference-grpc]``:
GrpcRuntimeServer on a unix socket, GrpcNodeRuntime/GrpcNodeConfig as clients), so the wire adds and loses
nothing.

Behaviours covered:
- GetVersion: version ≥ 1.1.0 with every 1.0 feature and the MIG features advertised; a feature the Runtime lacks
  is refused clearly (``mig-dynamic`` on a static Runtime, below);
- ListDevices returns the inventory;
- Allocate: the env vars (visible devices, LJRK_* and HAMi-core limits), the ledger's default rule for omitted
  memory; identical repeats give the same response and one record; a different plan conflicts; an unknown GPU or
  a wrong index is invalid;
- config: disable refuses new allocations but not repeats, idempotent enable/disable with reason and time,
  record counts;
- Release: one container, a whole pod, nothing;
- ExporterGetDataList: every GPU, idle included, with allocated totals; one row per container with its limits;
- WatchHealth: one initial event per GPU, then a health change (within 1 s), and close ends the stream;
- MIG (a GPU in MIG mode with two pre-created instances; the Runtime runs the dynamic strategy unless marked
  static): GetVersion advertises the 1.1 MIG features, and a static Runtime does not advertise ``mig-dynamic`` and
  refuses to create; ListDevices lists instances with ids, profile, placement, memory, ``MIG-…`` UUID and owner;
  Allocate hands out an existing instance by start, by MIG UUID or by profile alone, answers
  NVIDIA_VISIBLE_DEVICES with the MIG UUID, is idempotent, shares an instance only within its pod; a created
  instance appears with its owner and Release destroys it while a pre-created one turns free; a time-sharing plan
  on the MIG GPU, a MIG plan on a whole GPU, an unknown profile and an overlapping placement are invalid;
  ExporterGetDataList has one row per instance with its owner and the container row names its MIG UUIDs.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from adapters.grpc import GrpcNodeConfig, GrpcNodeRuntime, GrpcRuntimeServer
from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.gpu import MigOwner, PlacementMode
from domain.runtime.features import RUNTIME_FEATURES, SemVer
from domain.runtime.types import (
    ContainerAllocationRequest,
    DeviceInfo,
    HealthChange,
    MigInstanceInfo,
    PlannedGpu,
    PlannedMig,
    RuntimeState,
)
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.node_config import NodeConfig
from ports.runtime import (
    AllocationConflictError,
    HealthStream,
    InvalidAllocationError,
    NodeRuntime,
    RuntimeDisabledError,
    UnsupportedFeatureError,
)
from services.runtime.service import RuntimeService

A = GpuUuid("GPU-0a0a0a0a-0000-4000-8000-000000000000")
B = GpuUuid("GPU-0b0b0b0b-0000-4000-8000-000000000000")
C = GpuUuid("GPU-0c0c0c0c-0000-4000-8000-000000000000")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB),
        Gpu(2, C, "NVIDIA A100-SXM4-80GB", 80 * GiB, mig_mode=MigMode.ENABLED))
LAYOUTS = {2: [("3g.40gb", 0), ("1g.10gb", 4)]}
V1_FEATURES = sorted(name for name, f in RUNTIME_FEATURES.items() if f.minimum == SemVer(1, 0, 0))
MIG_FEATURES = ["mig-allocate", "mig-dynamic", "mig-exporter-data", "mig-inventory", "mig-partitions"]


@attrs.define
class RuntimeUnderTest:
    """The Runtime and config port under test, plus a way to change a GPU's health behind them."""

    kind: str
    runtime: NodeRuntime
    config: NodeConfig
    set_health: Callable[[str, Health, str], None]


Parts = tuple[NodeRuntime, NodeConfig, Callable[[str, Health, str], None], Callable[[], None]]
"""(runtime, config, set_health, close)."""


def _in_process(mode: PlacementMode) -> Parts:
    runtime = InProcessRuntime(GPUS, mig_layouts=LAYOUTS, mig_mode=mode)
    return runtime, runtime, runtime.set_health, runtime.close


def _reference(mode: PlacementMode) -> Parts:
    backend = SimulatedGpuBackend(GPUS, mig_layouts=LAYOUTS)
    service = RuntimeService(backend, InMemoryRuntimeStateStore(), health_poll_s=0.05, mig_mode=mode)
    service.start()

    def inject(uuid: str, health: Health, reason: str) -> None:
        backend.inject_health(uuid, health, reason)

    def close() -> None:
        service.close()
        backend.close()

    return service, service, inject, close


KINDS = ["in-process", "in-process-grpc", "reference", "reference-grpc"]


@pytest.fixture(params=KINDS)
def rut(request: pytest.FixtureRequest) -> Iterator[RuntimeUnderTest]:
    """A Runtime with the dynamic MIG strategy."""
    yield from _under_test(request.param, PlacementMode.DYNAMIC)


@pytest.fixture(params=KINDS)
def rut_static(request: pytest.FixtureRequest) -> Iterator[RuntimeUnderTest]:
    """A Runtime with the static MIG strategy."""
    yield from _under_test(request.param, PlacementMode.STATIC)


def _under_test(kind: str, mode: PlacementMode) -> Iterator[RuntimeUnderTest]:
    runtime, config, inject, close = _in_process(mode) if kind.startswith("in-process") else _reference(mode)
    if not kind.endswith("grpc"):
        yield RuntimeUnderTest(kind, runtime, config, inject)
        close()
        return
    directory = Path(tempfile.mkdtemp(prefix="ljrk-", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    server = GrpcRuntimeServer(directory / "runtime.sock", runtime, config, max_workers=8)
    server.start()
    client = GrpcNodeRuntime.connect(server.socket_path, timeout_s=5)
    config_client = GrpcNodeConfig.connect(server.socket_path, timeout_s=5)
    try:
        client.wait_ready(5)
        yield RuntimeUnderTest(kind, client, config_client, inject)
    finally:
        client.close()
        config_client.close()
        server.stop(0.5)
        close()
        shutil.rmtree(directory, ignore_errors=True)


def plan(
    container: str = "main", *gpus: PlannedGpu, pod: str = "uid-1", init: bool = False
) -> ContainerAllocationRequest:
    return ContainerAllocationRequest(pod, "team-a", "trainer", container,
                                      gpus or (PlannedGpu(0, A, core_milli=300, memory_bytes=4 * GiB),), init)


def test_version_and_capabilities(rut: RuntimeUnderTest) -> None:
    info = rut.runtime.get_version()
    assert info.version >= SemVer(1, 1, 0)
    assert set(V1_FEATURES) <= info.capabilities
    info.require(*V1_FEATURES, *MIG_FEATURES)


def test_list_devices(rut: RuntimeUnderTest) -> None:
    devices = rut.runtime.list_devices()
    assert [d.gpu for d in devices] == list(GPUS)
    assert devices[:2] == tuple(DeviceInfo(g) for g in GPUS[:2])


def test_allocate_env_and_limits(rut: RuntimeUnderTest) -> None:
    response = rut.runtime.allocate(plan("main", PlannedGpu(1, B, core_milli=250), PlannedGpu(0, A, core_milli=400,
                                                                                              memory_bytes=6 * GiB)))
    assert response.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{B},{A}",
        "LJRK_POD_UID": "uid-1",
        "LJRK_CONTAINER_NAME": "main",
        "LJRK_GPU_UUID_0": B,
        "LJRK_CORE_MILLI_0": "250",
        "LJRK_CORE_PERCENT_0": "25",
        "LJRK_MEMORY_LIMIT_BYTES_0": str(4 * GiB),  # memory omitted: 16 GiB × 250 / 1000
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
        "LJRK_GPU_UUID_1": A,
        "LJRK_CORE_MILLI_1": "400",
        "LJRK_CORE_PERCENT_1": "40",
        "LJRK_MEMORY_LIMIT_BYTES_1": str(6 * GiB),
        "CUDA_DEVICE_MEMORY_LIMIT_1": "6144m",
        "CUDA_DEVICE_SM_LIMIT": "25",
    }
    assert response.annotations == {"lj-runtimekit.io/runtime-allocation": "uid-1/main"}
    assert response.mounts == ()
    assert response.devices == ()


def test_allocate_is_idempotent_per_pod_and_container(rut: RuntimeUnderTest) -> None:
    first = rut.runtime.allocate(plan())
    assert rut.runtime.allocate(plan()) == first
    assert rut.config.status().active_allocations == 1
    with pytest.raises(AllocationConflictError, match="different plan"):
        rut.runtime.allocate(plan("main", PlannedGpu(1, B, core_milli=300)))


@pytest.mark.parametrize(
    ("planned", "match"),
    [(PlannedGpu(0, GpuUuid("GPU-ffff"), 100), "not on this node"), (PlannedGpu(1, A, 100), "index 0")],
)
def test_allocate_refuses_a_plan_the_node_cannot_serve(
    rut: RuntimeUnderTest, planned: PlannedGpu, match: str
) -> None:
    with pytest.raises(InvalidAllocationError, match=match):
        rut.runtime.allocate(plan("main", planned))
    assert rut.config.status().active_allocations == 0


def test_disable_blocks_new_allocations_only(rut: RuntimeUnderTest) -> None:
    first = rut.runtime.allocate(plan())
    status = rut.config.disable("job agent: label false")
    assert (status.state, status.reason, status.active_allocations) == (
        RuntimeState.DISABLED, "job agent: label false", 1)
    assert status.changed_at > 0
    assert rut.config.disable("again").changed_at == pytest.approx(status.changed_at)  # idempotent: no change
    assert rut.runtime.allocate(plan()) == first
    with pytest.raises(RuntimeDisabledError, match="disabled"):
        rut.runtime.allocate(plan("sidecar"))
    assert rut.config.enable("label true").state is RuntimeState.ENABLED
    rut.runtime.allocate(plan("sidecar"))
    assert rut.config.status().active_allocations == 2


def test_release(rut: RuntimeUnderTest) -> None:
    for container in ("a", "b"):
        rut.runtime.allocate(plan(container))
    rut.runtime.allocate(plan("a", pod="uid-2"))
    assert rut.runtime.release("uid-1", "a") == 1
    assert rut.runtime.release("uid-1", "a") == 0
    assert rut.runtime.release("uid-1") == 1
    assert rut.runtime.release("no-such-pod") == 0
    assert rut.config.status().active_allocations == 1


def test_exporter_data(rut: RuntimeUnderTest) -> None:
    rut.runtime.allocate(plan("init", PlannedGpu(0, A, 500, 2 * GiB), init=True))
    rut.runtime.allocate(plan("main", PlannedGpu(0, A, 300, 4 * GiB)))
    data = rut.runtime.exporter_data()
    assert [row.device.gpu for row in data.gpus] == list(GPUS)
    busy, idle, _ = data.gpus
    assert (busy.allocated_core_milli, busy.allocated_memory_bytes) == (500, 4 * GiB)  # max(init, Σ app)
    assert (idle.allocated_core_milli, idle.allocated_memory_bytes) == (0, 0)
    assert data.sampled_at > 0
    rows = {c.container: c for c in data.containers}
    assert set(rows) == {"init", "main"}
    assert rows["init"].init
    assert (rows["main"].namespace, rows["main"].pod_name, rows["main"].pod_uid) == ("team-a", "trainer", "uid-1")
    [gpu] = rows["main"].gpus
    assert (gpu.index, gpu.uuid, gpu.core_milli, gpu.memory_limit_bytes) == (0, A, 300, 4 * GiB)
    assert rows["main"].allocated_at > 0


def _reader(stream: HealthStream) -> tuple[queue.Queue[HealthChange | None], threading.Thread]:
    received: queue.Queue[HealthChange | None] = queue.Queue()

    def read() -> None:
        for change in stream:
            received.put(change)
        received.put(None)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return received, thread


def test_watch_health(rut: RuntimeUnderTest) -> None:
    stream = rut.runtime.watch_health()
    received, thread = _reader(stream)
    try:
        initial = [received.get(timeout=5) for _ in GPUS]
        assert [(c.uuid, c.health, c.initial) for c in initial if c] == [
            (A, Health.HEALTHY, True), (B, Health.HEALTHY, True), (C, Health.HEALTHY, True)]
        started = time.monotonic()
        rut.set_health(B, Health.UNHEALTHY, "XID 79")
        change = received.get(timeout=1)
        assert time.monotonic() - started < 1.0
        assert change is not None
        assert (change.uuid, change.index, change.health, change.reason, change.initial) == (
            B, 1, Health.UNHEALTHY, "XID 79", False)
        assert rut.runtime.list_devices()[1].gpu.health is Health.UNHEALTHY
        assert rut.runtime.list_devices()[1].health_reason == "XID 79"
    finally:
        stream.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert received.get(timeout=1) is None


# ------------------------------------------------------------------------------------------------------ MIG
def mig_plan(container: str = "main", *planned: PlannedMig, pod: str = "uid-1") -> ContainerAllocationRequest:
    return ContainerAllocationRequest(pod, "team-a", "trainer", container, (),
                                      mig=planned or (PlannedMig(2, C, "3g.40gb", 0),))


def instances(rut: RuntimeUnderTest) -> dict[int, MigInstanceInfo]:
    return {i.start: i for i in rut.runtime.list_devices()[2].mig_instances}


def test_mig_inventory(rut: RuntimeUnderTest) -> None:
    listed = instances(rut)
    assert [(i.profile, i.start, i.size, i.compute_slices, i.memory_bytes) for i in listed.values()] == [
        ("3g.40gb", 0, 4, 3, 40 * GiB), ("1g.10gb", 4, 1, 1, 10 * GiB)]
    assert all(i.uuid.startswith("MIG-") and i.usable for i in listed.values())
    assert all((i.gpu_index, i.gpu_uuid, i.owner, i.created) == (2, C, None, False) for i in listed.values())
    assert len({i.gpu_instance_id for i in listed.values()}) == 2


def test_mig_allocate_hands_out_an_existing_instance(rut: RuntimeUnderTest) -> None:
    big = instances(rut)[0]
    response = rut.runtime.allocate(mig_plan())
    assert response.envs == {
        "NVIDIA_VISIBLE_DEVICES": big.uuid, "LJRK_POD_UID": "uid-1", "LJRK_CONTAINER_NAME": "main",
        "LJRK_MIG_UUID_0": big.uuid, "LJRK_MIG_PROFILE_0": "3g.40gb", "LJRK_MIG_GPU_UUID_0": C,
        "LJRK_MIG_MEMORY_BYTES_0": str(40 * GiB),
    }
    assert response.annotations == {"lj-runtimekit.io/runtime-allocation": "uid-1/main"}
    assert rut.runtime.allocate(mig_plan()) == response
    assert instances(rut)[0].owner == MigOwner("uid-1", "main")
    with pytest.raises(InvalidAllocationError, match="held by pod uid-1 container 'main'"):
        rut.runtime.allocate(mig_plan(pod="uid-2"))
    shared = rut.runtime.allocate(mig_plan("app", PlannedMig(2, C, mig_uuid=big.uuid)))  # same pod: init → app
    assert shared.envs["NVIDIA_VISIBLE_DEVICES"] == big.uuid
    small = rut.runtime.allocate(mig_plan("side", PlannedMig(2, C, "1g.10gb"), pod="uid-2"))
    assert small.envs["NVIDIA_VISIBLE_DEVICES"] == instances(rut)[4].uuid
    with pytest.raises(InvalidAllocationError, match=r"no free 1g\.10gb MIG instance"):
        rut.runtime.allocate(mig_plan("more", PlannedMig(2, C, "1g.10gb"), pod="uid-3"))
    assert rut.config.status().active_allocations == 3
    assert rut.runtime.release("uid-1") == 2
    assert rut.runtime.release("uid-2") == 1
    assert [(i.start, i.owner) for i in instances(rut).values()] == [(0, None), (4, None)]  # pre-created: kept


def test_mig_dynamic_creates_at_allocate_and_destroys_at_release(rut: RuntimeUnderTest) -> None:
    response = rut.runtime.allocate(mig_plan("main", PlannedMig(2, C, "1g.10gb", 5, create=True),
                                             PlannedMig(2, C, "1g.10gb", 4, create=True)))
    listed = instances(rut)
    assert sorted(listed) == [0, 4, 5]
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{listed[5].uuid},{listed[4].uuid}"
    assert (listed[5].owner, listed[5].created) == (MigOwner("uid-1", "main"), True)
    assert listed[4].created  # a free instance of the profile at the start is taken over, as the scheduler books it
    with pytest.raises(InvalidAllocationError, match="overlaps"):
        rut.runtime.allocate(mig_plan("x", PlannedMig(2, C, "2g.20gb", 4, create=True), pod="uid-2"))
    with pytest.raises(InvalidAllocationError, match="not a placement"):
        rut.runtime.allocate(mig_plan("x", PlannedMig(2, C, "4g.40gb", 4, create=True), pod="uid-2"))
    assert rut.runtime.release("uid-1", "main") == 1
    assert sorted(instances(rut)) == [0]
    rut.runtime.allocate(mig_plan("again", PlannedMig(2, C, "3g.40gb", 4, create=True), pod="uid-2"))
    assert [(i.profile, i.start) for i in instances(rut).values()] == [("3g.40gb", 0), ("3g.40gb", 4)]


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (ContainerAllocationRequest("u", "ns", "p", "c", (PlannedGpu(2, C, 100),)), "MIG mode and takes no time"),
        (mig_plan("c", PlannedMig(0, A, "1g.10gb")), "not in MIG mode"),
        (mig_plan("c", PlannedMig(2, C, "1g.5gb")), r"unknown profile.*1g\.5gb.*A100-40GB"),
        (mig_plan("c", PlannedMig(2, C, mig_uuid="MIG-nope")), "no MIG instance MIG-nope"),
        (mig_plan("c", PlannedMig(1, C, "3g.40gb", 0)), "index 2"),
    ],
)
def test_mig_plans_the_node_cannot_serve_are_invalid(
    rut: RuntimeUnderTest, request_: ContainerAllocationRequest, match: str
) -> None:
    with pytest.raises(InvalidAllocationError, match=match):
        rut.runtime.allocate(request_)
    assert rut.config.status().active_allocations == 0
    assert [i.owner for i in instances(rut).values()] == [None, None]


def test_mig_exporter_rows(rut: RuntimeUnderTest) -> None:
    rut.runtime.allocate(mig_plan())
    data = rut.runtime.exporter_data()
    rows = {row.instance.start: row for row in data.mig}
    assert sorted(rows) == [0, 4]
    assert (rows[0].instance.profile, rows[0].instance.owner) == ("3g.40gb", MigOwner("uid-1", "main"))
    assert rows[4].instance.owner is None
    [container] = data.containers
    assert (container.gpus, container.mig_uuids) == ((), (rows[0].instance.uuid,))


def test_static_mig_strategy_creates_nothing(rut_static: RuntimeUnderTest) -> None:
    info = rut_static.runtime.get_version()
    info.require("mig-inventory", "mig-allocate", "mig-exporter-data")
    assert "mig-dynamic" not in info.capabilities
    plan = mig_plan("c", PlannedMig(2, C, "1g.10gb", 5, create=True))
    with pytest.raises(UnsupportedFeatureError if rut_static.kind.endswith("grpc") else InvalidAllocationError,
                       match=r"mig-dynamic|static MIG strategy"):
        rut_static.runtime.allocate(plan)
    assert sorted(instances(rut_static)) == [0, 4]
    assert rut_static.runtime.allocate(mig_plan()).envs["LJRK_MIG_PROFILE_0"] == "3g.40gb"
