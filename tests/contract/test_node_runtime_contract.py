"""Contract of the node Runtime port (``ports.runtime.NodeRuntime``) and the config port (``ports.node_config``).

Every case runs four times: ``[memory]`` on InMemoryNodeRuntime, ``[reference]`` on the reference Runtime
(``entrypoints.runtime.service.RuntimeService`` over simulated GPUs), and both again behind gRPC
(``[memory-grpc]``, ``[reference-grpc]``: GrpcRuntimeServer on a unix socket, GrpcNodeRuntime/GrpcNodeConfig as
clients), so the wire adds and loses nothing.

Behaviours covered:
- GetVersion: version ≥ 1.0.0 with every 1.0 feature advertised; a feature the Runtime lacks is refused clearly;
- ListDevices returns the inventory;
- Allocate: the env vars (visible devices, LJRK_* and HAMi-core limits), the ledger's default rule for omitted
  memory; identical repeats give the same response and one record; a different plan conflicts; an unknown GPU or
  a wrong index is invalid;
- config: disable refuses new allocations but not repeats, idempotent enable/disable with reason and time,
  record counts;
- Release: one container, a whole pod, nothing;
- ExporterGetDataList: every GPU, idle included, with allocated totals; one row per container with its limits;
- WatchHealth: one initial event per GPU, then a health change (within 1 s), and close ends the stream.
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
from adapters.memory.runtime import InMemoryNodeRuntime, InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.features import RUNTIME_FEATURES, SemVer
from domain.runtime.types import ContainerAllocationRequest, DeviceInfo, HealthChange, PlannedGpu, RuntimeState
from domain.units import GiB
from entrypoints.runtime.service import RuntimeService
from ports.node_config import NodeConfig
from ports.runtime import (
    AllocationConflictError,
    HealthStream,
    InvalidAllocationError,
    NodeRuntime,
    RuntimeDisabledError,
    UnsupportedFeatureError,
)

A = GpuUuid("GPU-0a0a0a0a-0000-4000-8000-000000000000")
B = GpuUuid("GPU-0b0b0b0b-0000-4000-8000-000000000000")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB))
V1_FEATURES = sorted(name for name, f in RUNTIME_FEATURES.items() if f.minimum == SemVer(1, 0, 0))


@attrs.define
class RuntimeUnderTest:
    """The Runtime and config port under test, plus a way to change a GPU's health behind them."""

    kind: str
    runtime: NodeRuntime
    config: NodeConfig
    set_health: Callable[[str, Health, str], None]


Parts = tuple[NodeRuntime, NodeConfig, Callable[[str, Health, str], None], Callable[[], None]]
"""(runtime, config, set_health, close)."""


def _memory() -> Parts:
    runtime = InMemoryNodeRuntime(GPUS)
    return runtime, runtime, runtime.set_health, runtime.close


def _reference() -> Parts:
    backend = SimulatedGpuBackend(GPUS)
    service = RuntimeService(backend, InMemoryRuntimeStateStore(), health_poll_s=0.05)
    service.start()

    def inject(uuid: str, health: Health, reason: str) -> None:
        backend.inject_health(uuid, health, reason)

    def close() -> None:
        service.close()
        backend.close()

    return service, service, inject, close


@pytest.fixture(params=["memory", "memory-grpc", "reference", "reference-grpc"])
def rut(request: pytest.FixtureRequest) -> Iterator[RuntimeUnderTest]:
    kind: str = request.param
    runtime, config, inject, close = _memory() if kind.startswith("memory") else _reference()
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
    assert info.version >= SemVer(1, 0, 0)
    assert set(V1_FEATURES) <= info.capabilities
    info.require(*V1_FEATURES)
    with pytest.raises(UnsupportedFeatureError, match=r"lacks feature 'mig-partitions'.*needs Runtime >= 1\.1\.0"):
        info.require("mig-partitions")


def test_list_devices(rut: RuntimeUnderTest) -> None:
    assert rut.runtime.list_devices() == tuple(DeviceInfo(g) for g in GPUS)


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
    busy, idle = data.gpus
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
        assert [(c.uuid, c.health, c.initial) for c in initial if c] == [(A, Health.HEALTHY, True),
                                                                          (B, Health.HEALTHY, True)]
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
