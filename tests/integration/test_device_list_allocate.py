"""Device-list strategies through kubelet's Allocate: the fake kubelet, the device plugin and the in-process Runtime
behind gRPC (``dp_world``), so the response is what kubelet would hand to the container runtime.

Covers: ``volume-mounts`` gives a whole two-GPU container one read-only ``/dev/null`` mount per planned GPU in plan
order and ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` (no UUID in it), beside the Runtime's
HAMi-core mounts, with the limit variables kept; ``cdi-cri`` alone gives ``void`` and the CDI names the written
spec resolves, which the fake kubelet resolves; the default with a CDI spec is the UUIDs plus the names; with
``cdi-cri`` alone and no spec written, Allocate fails before the Runtime is asked; a Runtime answering
``NVIDIA_VISIBLE_DEVICES=all`` under ``volume-mounts`` is refused and counted, nothing reaches kubelet.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import grpc
import pytest
from dp_world import NAMES, RecordingRuntime, make_world, share, share_plan, whole, whole_plan

from domain.device_plugin.cdi import qualified_name
from domain.device_plugin.device_list import DeviceListStrategies, DeviceListStrategy, parse_strategies
from domain.runtime.edits import ContainerEdits
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse, Mount

GPU, CORE, MEM = NAMES.values()
LIB, PRELOAD = "/opt/libvgpu.so", "/var/lib/ljrk/ld.so.preload"


def only(strategy: DeviceListStrategy) -> DeviceListStrategies:
    return DeviceListStrategies((strategy,))


def test_volume_mounts_give_dev_null_mounts_in_plan_order_and_no_uuid_in_the_env() -> None:
    edits = ContainerEdits(hami_library=LIB, preload_file=PRELOAD)
    world = make_world(3, edits=edits, device_list=only(DeviceListStrategy.VOLUME_MOUNTS))
    try:
        assert world.wait_registered()
        world.pod("a", [whole("main", 2)], [whole_plan("main", [2, 0])])
        _, response = world.kubelet.admit(GPU, 2)
        uuids = [world.gpus[2].uuid, world.gpus[0].uuid]
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
        assert not any(u in response.envs["NVIDIA_VISIBLE_DEVICES"] for u in uuids)
        assert response.mounts == (*edits.mounts(), *(
            Mount(f"/var/run/nvidia-container-devices/{u}", "/dev/null", read_only=True) for u in uuids))
        assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "16384m"
        assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "100"
        assert response.cdi_devices == ()
    finally:
        world.close()


def test_cdi_cri_alone_gives_void_and_the_resolved_names() -> None:
    world = make_world(2, cdi=True, device_list=only(DeviceListStrategy.CDI_CRI))
    try:
        assert world.wait_registered()
        pod = world.pod("a", [share("main", core=40, memory=4)], [share_plan("main", 1, core=40, memory_gib=4)])
        assert world.app.cdi is not None
        assert world.kubelet.wait_for(lambda: world.app.cdi is not None and world.app.cdi.written is not None, 5)
        result = world.kubelet.admit_pod(pod)
        assert result.admitted, result.message
        assert result.admission is not None
        [container] = result.admission.containers
        envs = dict(container.runtime.envs)
        assert envs["NVIDIA_VISIBLE_DEVICES"] == "void"
        assert envs["CUDA_DEVICE_SM_LIMIT"] == "40"
        assert container.runtime.cdi_devices == (qualified_name(world.gpus[1].uuid),)
        assert container.cdi_env == {"LJRK_CDI_DEVICE_1": world.gpus[1].uuid}  # the runtime resolved the name
        assert container.runtime.mounts == ()
    finally:
        world.close()


def test_default_with_a_cdi_spec_is_uuids_plus_names() -> None:
    world = make_world(2, cdi=True)
    try:
        assert world.wait_registered()
        assert world.kubelet.wait_for(lambda: world.app.cdi is not None and world.app.cdi.written is not None, 5)
        assert str(world.service.responses.strategies) == "envvar,cdi-cri"
        world.pod("a", [share("main", core=40, memory=4)], [share_plan("main", 1, core=40, memory_gib=4)])
        _, response = world.kubelet.admit(CORE, 40)
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == world.gpus[1].uuid
        assert response.cdi_devices == (qualified_name(world.gpus[1].uuid),)
    finally:
        world.close()


def test_cdi_cri_alone_without_a_written_spec_fails_before_the_runtime(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    world = make_world(2, cdi=True, cdi_dir=blocker / "cdi", device_list=only(DeviceListStrategy.CDI_CRI))
    try:
        assert world.wait_registered()
        assert world.app.cdi is not None
        assert world.app.cdi.written is None  # the folder cannot be made
        world.pod("a", [share("main", core=40, memory=4)], [share_plan("main", 0, core=40, memory_gib=4)])
        with pytest.raises(grpc.RpcError) as error:
            world.kubelet.admit(CORE, 40)
        assert "with device list strategy cdi-cri alone the container would get no GPU" in str(
            error.value.details())  # type: ignore[attr-defined]
        assert world.runtime.requests == []
    finally:
        world.close()


class AllRuntime(RecordingRuntime):
    """A Runtime (say, a fake one on a replaced socket) that answers ``NVIDIA_VISIBLE_DEVICES=all``."""

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        answer = super().allocate(request)
        return attrs.evolve(answer, envs={**answer.envs, "NVIDIA_VISIBLE_DEVICES": "all"})


def test_volume_mounts_refuse_a_runtime_answering_all() -> None:
    world = make_world(2, wrap=AllRuntime, device_list=parse_strategies(["envvar,volume-mounts"]))
    try:
        assert world.wait_registered()
        world.pod("a", [share("main", core=40, memory=4)], [share_plan("main", 0, core=40, memory_gib=4)])
        with pytest.raises(grpc.RpcError) as error:
            world.kubelet.admit(CORE, 40)
        assert "device ID 'all'" in str(error.value.details())  # type: ignore[attr-defined]
        assert world.service.responses.refused_answers == 1
    finally:
        world.close()
