"""Allocate through the fake kubelet: kubelet's device IDs never decide placement, the scheduler's plan does.

Covers: B17 (plan core=60 mem=8 on GPU1 while kubelet sends 60 IDs of GPU0 → Runtime gets GPU1; pod gpu=2 with two
IDs of one physical GPU → two distinct planned GPUs); B14 (GPU3 unhealthy: pods are admitted on GPU0-2 and the
Runtime never receives GPU3; a plan naming GPU3 is refused); one idempotent Runtime Allocate per container across
its per-resource calls; several pending pods told apart by their requests; multi-container pods in kubelet order;
an init-container-only request; ambiguity, missing plan and unknown requests as clear gRPC errors; a forged plan
naming a GPU another pod holds whole is refused by the Runtime's capacity check (RESOURCE_EXHAUSTED, nothing
recorded); a Runtime answering a mount or device node outside the plugin's allow-list (the host's ``/`` into the
container, ``/dev/sda``) fails the Allocate with a clear error, counted, and nothing of it reaches kubelet.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import grpc
import pytest
from dp_world import NAMES, RecordingRuntime, World, make_world, share, share_plan, whole, whole_plan, world_fixture

from domain.gpu import Health
from domain.runtime.edits import ContainerEdits
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse, DeviceSpec, Mount
from ports.runtime import NodeRuntime

GPU, CORE, MEM = NAMES.values()


@pytest.fixture
def world() -> Iterator[World]:
    yield from world_fixture(2)


@pytest.fixture
def world4() -> Iterator[World]:
    yield from world_fixture(4)


def _ids_of(world: World, resource: str, gpu: int, count: int) -> list[str]:
    uuid = world.gpus[gpu].uuid
    return [i for i in world.kubelet.devices[resource] if i.startswith(uuid)][:count]


def _code(error: pytest.ExceptionInfo[grpc.RpcError]) -> grpc.StatusCode:
    value = error.value
    assert isinstance(value, grpc.Call)
    return value.code()


def test_b17_core_ids_of_gpu0_still_allocate_planned_gpu1(world: World) -> None:
    pod = world.pod("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)])
    response = world.kubelet.allocate(CORE, _ids_of(world, CORE, 0, 60))
    world.kubelet.allocate(MEM, _ids_of(world, MEM, 0, 8))
    assert len(world.runtime.requests) == 1
    request = world.runtime.requests[0]
    assert (request.pod_uid, request.container) == (pod.uid, "main")
    assert [(g.index, g.uuid, g.core_milli, g.memory_bytes) for g in request.gpus] == [
        (1, world.gpus[1].uuid, 600, 8 * 2**30)]
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == world.gpus[1].uuid


def test_b17_whole_gpus_from_one_physical_gpu_map_to_two_planned_gpus(world: World) -> None:
    world.pod("b", [whole("main", 2)], [whole_plan("main", [0, 1])])
    same = _ids_of(world, GPU, 0, 1) * 2
    world.kubelet.allocate(GPU, same)
    [request] = world.runtime.requests
    assert sorted(g.uuid for g in request.gpus) == sorted(g.uuid for g in world.gpus)


def test_one_idempotent_runtime_allocate_per_container(world: World) -> None:
    world.pod("a", [share("main", core=50, memory=4)], [share_plan("main", 0, core=50, memory_gib=4)])
    _, first = world.kubelet.admit(MEM, 4)
    _, second = world.kubelet.admit(CORE, 50)
    assert len(world.runtime.requests) == 1
    assert dict(first.envs) == dict(second.envs)
    assert len(world.in_process_runtime.exporter_data().containers) == 1


def test_device_specs_and_mounts_reach_the_kubelet() -> None:
    edits = ContainerEdits(device_nodes=True, control_devices=("nvidiactl",), hami_library="/opt/libvgpu.so",
                           preload_file="/var/lib/ljrk/ld.so.preload")
    for world in world_fixture(2, edits=edits):
        world.pod("a", [share("main", core=50, memory=4)], [share_plan("main", 1, core=50, memory_gib=4)])
        _, response = world.kubelet.admit(CORE, 50)
        assert [(d.container_path, d.host_path, d.permissions) for d in response.devices] == [
            ("/dev/nvidia1", "/dev/nvidia1", "rw"), ("/dev/nvidiactl", "/dev/nvidiactl", "rw")]
        assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
            ("/usr/local/vgpu/libvgpu.so", "/opt/libvgpu.so", True),
            ("/etc/ld.so.preload", "/var/lib/ljrk/ld.so.preload", True)]
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == world.gpus[1].uuid


def test_several_pending_pods_and_multi_container_pods(world: World) -> None:
    a = world.pod("a", [share("c1", core=30, memory=2), share("c2", core=30, memory=2)],
                  [share_plan("c1", 0, core=30, memory_gib=2), share_plan("c2", 1, core=30, memory_gib=2)])
    b = world.pod("b", [share("main", core=70, memory=5)], [share_plan("main", 1, core=70, memory_gib=5)])
    # kubelet admits b first, then a's containers in order; IDs come from wherever kubelet likes
    world.kubelet.admit(CORE, 70)
    world.kubelet.admit(MEM, 5)
    world.kubelet.admit(CORE, 30)
    world.kubelet.admit(MEM, 2)
    world.kubelet.admit(MEM, 2)
    world.kubelet.admit(CORE, 30)
    got = [(r.pod_uid, r.container, r.gpus[0].index) for r in world.runtime.requests]
    assert got == [(b.uid, "main", 1), (a.uid, "c1", 0), (a.uid, "c2", 1)]


def test_init_container_only_request(world: World) -> None:
    pod = world.pod("i", [share("setup", core=20, memory=1, init=True), share("app")],
                    [share_plan("setup", 1, core=20, memory_gib=1, init=True)])
    world.kubelet.admit(CORE, 20)
    [request] = world.runtime.requests
    assert (request.pod_uid, request.container, request.init, request.gpus[0].index) == (pod.uid, "setup", True, 1)


def test_two_identical_pending_pods_are_ambiguous_not_guessed(world: World) -> None:
    world.pod("a", [share("main", core=50, memory=4)], [share_plan("main", 0, core=50, memory_gib=4)])
    world.pod("b", [share("main", core=50, memory=4)], [share_plan("main", 1, core=50, memory_gib=4)])
    with pytest.raises(grpc.RpcError) as error:
        world.kubelet.allocate(CORE, _ids_of(world, CORE, 0, 50))
    assert _code(error) is grpc.StatusCode.FAILED_PRECONDITION
    assert "refusing to guess" in str(error.value.details())  # type: ignore[attr-defined]
    assert world.runtime.requests == []


def test_pod_without_trusted_plan_and_unknown_amounts_are_errors(world: World) -> None:
    world.pod("p", [share("main", core=40, memory=3)], None)
    with pytest.raises(grpc.RpcError) as error:
        world.kubelet.allocate(CORE, _ids_of(world, CORE, 0, 40))
    assert _code(error) is grpc.StatusCode.FAILED_PRECONDITION
    assert "no trusted plan" in str(error.value.details())  # type: ignore[attr-defined]
    with pytest.raises(grpc.RpcError) as error:
        world.kubelet.allocate(CORE, _ids_of(world, CORE, 0, 41))
    assert _code(error) is grpc.StatusCode.NOT_FOUND
    assert world.runtime.requests == []


def test_b14_unhealthy_gpu3_never_reaches_runtime_allocate(world4: World) -> None:
    world = world4
    bad = world.gpus[3].uuid
    world.in_process_runtime.set_health(bad, Health.UNHEALTHY, "XID 79")
    assert world.kubelet.wait_for(lambda: all(
        h == "Unhealthy" for n in NAMES.values() for i, h in world.kubelet.devices[n].items() if i.startswith(bad)), 3)
    assert len(world.kubelet.healthy(GPU)) == 3
    assert len(world.kubelet.healthy(CORE)) == 300
    world.pod("b", [whole("main", 1)], [whole_plan("main", [0])])
    world.pod("c", [share("main", core=50, memory=8)], [share_plan("main", 1, core=50, memory_gib=8)])
    world.kubelet.admit(GPU, 1)
    world.kubelet.admit(CORE, 50)
    world.kubelet.admit(MEM, 8)
    world.pod("d", [whole("main", 1)], [whole_plan("main", [3])])  # a plan written before GPU3 failed
    with pytest.raises(grpc.RpcError) as error:
        world.kubelet.admit(GPU, 1)
    assert _code(error) is grpc.StatusCode.FAILED_PRECONDITION
    assert "unhealthy" in str(error.value.details())  # type: ignore[attr-defined]
    assert len(world.runtime.requests) == 2
    assert all(g.uuid != bad for r in world.runtime.requests for g in r.gpus)


def test_forged_plan_naming_a_fully_granted_gpu_is_refused_at_the_runtime(world: World) -> None:
    victim = world.pod("victim", [whole("main", 1)], [whole_plan("main", [0])])
    world.kubelet.admit(GPU, 1)
    # a tenant's own plan annotation (it can patch its pod before kubelet admits it) naming the victim's GPU
    world.pod("forger", [share("main", core=50, memory=4)], [share_plan("main", 0, core=50, memory_gib=4)])
    with pytest.raises(grpc.RpcError) as error:
        world.kubelet.admit(CORE, 50)
    assert _code(error) is grpc.StatusCode.RESOURCE_EXHAUSTED
    details = str(error.value.details())  # type: ignore[attr-defined]
    assert world.gpus[0].uuid in details
    assert "1000 milli-GPU core and 17179869184 bytes granted already" in details
    assert [(r.pod_uid, r.container) for r in world.in_process_runtime.exporter_data().containers] == [
        (victim.uid, "main")]


def test_a_deleted_pods_records_do_not_keep_its_successor_out(world: World) -> None:
    """The scheduler places a pod on a GPU as soon as its previous holder is gone, before the release reconciler's
    grace ran out: the Runtime refuses for capacity, the plugin releases the records of pods no longer on the node
    and retries once, and the successor gets its grant."""
    gone = world.pod("gone", [whole("main", 1)], [whole_plan("main", [0])])
    world.kubelet.admit(GPU, 1)
    world.cluster.delete_pod("default", "gone", grace_period_seconds=0)  # gone from the API, as after kubelet
    successor = world.pod("next", [share("main", core=50, memory=4)], [share_plan("main", 0, core=50, memory_gib=4)])
    world.kubelet.admit(CORE, 50)
    held = [(r.pod_uid, r.container) for r in world.in_process_runtime.exporter_data().containers]
    assert held == [(successor.uid, "main")]
    assert gone.uid not in {uid for uid, _ in held}


class HostileRuntime(RecordingRuntime):
    """A Runtime (say, a fake one serving a replaced socket) that adds ``mounts``/``devices`` to every answer."""

    def __init__(self, inner: NodeRuntime, mounts: tuple[Mount, ...], devices: tuple[DeviceSpec, ...]) -> None:
        super().__init__(inner)
        self.mounts, self.devices = mounts, devices

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        answer = super().allocate(request)
        return attrs.evolve(answer, mounts=(*answer.mounts, *self.mounts), devices=(*answer.devices, *self.devices))


@pytest.mark.parametrize(("mounts", "devices", "named"), [
    ((Mount("/host", "/", read_only=False),), (), "mount host '/' at '/host' (read_only=False)"),
    ((Mount("/usr/local/vgpu/libvgpu.so", "/etc/shadow", read_only=True),), (),
     "mount host '/etc/shadow' at '/usr/local/vgpu/libvgpu.so'"),
    ((), (DeviceSpec("/dev/sda", "/dev/sda", "rw"),), "device host '/dev/sda' at '/dev/sda'"),
])
def test_a_hostile_runtime_answer_is_refused_not_forwarded(
    mounts: tuple[Mount, ...], devices: tuple[DeviceSpec, ...], named: str
) -> None:
    edits = ContainerEdits(device_nodes=True, control_devices=("nvidiactl",), hami_library="/opt/libvgpu.so",
                           preload_file="/var/lib/ljrk/ld.so.preload")
    world = make_world(2, edits=edits, wrap=lambda inner: HostileRuntime(inner, mounts=mounts, devices=devices))
    try:
        assert world.wait_registered()
        world.pod("a", [share("main", core=50, memory=4)], [share_plan("main", 1, core=50, memory_gib=4)])
        for attempt in (1, 2):  # a refused answer is not cached: kubelet's retry asks the Runtime again
            with pytest.raises(grpc.RpcError) as error:
                world.kubelet.admit(CORE, 50)
            assert _code(error) is grpc.StatusCode.FAILED_PRECONDITION
            details = str(error.value.details())  # type: ignore[attr-defined]
            assert named in details
            assert "not forwarded to the container" in details
            assert "/opt/libvgpu.so at /usr/local/vgpu/libvgpu.so read-only" in details  # what is allowed
            assert world.service.responses.refused_answers == attempt
        assert world.service.runtime_allocate_calls == 2
    finally:
        world.close()
