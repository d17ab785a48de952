"""MPS enforcement (``ljrk runtime --mps-pipe-dir``): what a time-shared container gets, what the node announces.

Behaviours covered:

* the MPS client environment of a grant: the smallest core percent of the container's GPUs as the active-thread
  percentage (never 0), ``<ordinal>=<MiB>M`` per GPU in plan order (floored, at least 1), the in-container pipe
  directory; no grant is a ValueError;
* the Runtime's Allocate with ``--mps-pipe-dir``: those variables beside the limit variables, the pipe directory
  mounted read-write; a node all in MIG mode announces ``mig``; an MPS node announces ``share-enforcement-mps``
  and the device plugin labels it ``mps``;
* settings: a relative or missing pipe directory, or MPS with HAMi-core, is refused naming the flags;
* every variable the MPS mode answers is one the environment admission policy refuses in a tenant's pod;
* the device plugin forwards the pipe mount only with ``--mps-pipe-dir`` naming the same host directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from domain.device_plugin.response_guard import ForbiddenResponseError, ResponseAllowList
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.runtime.book import AllocationBook
from domain.runtime.edits import ContainerEdits
from domain.runtime.enforcement import ENFORCEMENT_FEATURES, Enforcement
from domain.runtime.mps import MPS_PIPE_DIRECTORY, mps_envs
from domain.runtime.types import ContainerAllocationRequest, GrantedGpu, PlannedGpu
from domain.units import GiB, MiB
from entrypoints.device_plugin.__main__ import build_parser, settings_from_args
from entrypoints.device_plugin.app import DevicePluginSettings, allowed_answers
from entrypoints.runtime.app import RuntimeSettings, SettingsError
from entrypoints.runtime.containers import RuntimeContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from services.device_plugin.service import DevicePluginService
from support.mig_builders import mig_gpus

A, B = GpuUuid("GPU-mps-a"), GpuUuid("GPU-mps-b")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB))
MPS = ContainerEdits(mps_pipe_dir="/run/nvidia-mps")
REPO = Path(__file__).resolve().parents[2]


def granted(uuid: GpuUuid, core_milli: int, memory_bytes: int) -> GrantedGpu:
    return GrantedGpu(index=0, uuid=uuid, core_milli=core_milli, memory_bytes=memory_bytes)


def test_the_client_environment_of_a_grant() -> None:
    envs = mps_envs([granted(B, 300, 5 * GiB + 123), granted(A, 250, 3 * GiB)])
    assert envs == {"CUDA_MPS_PIPE_DIRECTORY": MPS_PIPE_DIRECTORY, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5120M,1=3072M"}
    tiny = mps_envs([granted(A, 5, MiB - 1)])
    assert tiny["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "1"  # never 0
    assert tiny["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1M"
    with pytest.raises(ValueError, match="at least one grant"):
        mps_envs([])


def test_allocate_on_an_mps_node_hands_out_the_client_environment_and_the_pipes() -> None:
    book = AllocationBook(edits=MPS)
    request = ContainerAllocationRequest("uid-1", "team-a", "pod", "main", (
        PlannedGpu(1, B, core_milli=400, memory_bytes=6 * GiB), PlannedGpu(0, A, core_milli=200, memory_bytes=GiB)))
    response = book.allocate(request, GPUS, now=0)[0].response
    assert response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
    assert response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M,1=1024M"
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"  # the ordinals' order
    assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
        (MPS_PIPE_DIRECTORY, "/run/nvidia-mps", False)]
    plain = AllocationBook().allocate(request, GPUS, now=0)[0].response
    assert not any(name.startswith("CUDA_MPS_") for name in plain.envs)


def test_a_node_all_in_mig_is_mig_not_mps() -> None:
    runtime = InProcessRuntime(mig_gpus("n", 1), edits=MPS)
    try:
        capabilities = runtime.get_version().capabilities
        assert ENFORCEMENT_FEATURES[Enforcement.MIG] in capabilities  # all MIG: the hardware isolates
        assert ENFORCEMENT_FEATURES[Enforcement.MPS] not in capabilities
    finally:
        runtime.close()


def test_an_mps_node_says_so() -> None:
    protocol = ProtocolConstants()
    runtime = InProcessRuntime(list(GPUS), edits=MPS)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject("node-a"))
    try:
        capabilities = runtime.get_version().capabilities
        assert ENFORCEMENT_FEATURES[Enforcement.MPS] in capabilities
        DevicePluginService(node="node-a", runtime=runtime, cluster=cluster, protocol=protocol).publish_inventory()
        assert cluster.get_node("node-a").labels[protocol.enforcement_label] == "mps"
    finally:
        runtime.close()


def test_mps_settings(tmp_path: Path) -> None:
    pipes = tmp_path / "mps"
    with pytest.raises(SettingsError, match="--mps-pipe-dir mps: must be an absolute host path"):
        RuntimeSettings(socket=tmp_path / "r.sock", mps_pipe_dir=Path("mps"))
    library = tmp_path / "libvgpu.so"
    with pytest.raises(SettingsError, match="one enforcement per node, MPS or HAMi-core"):
        RuntimeSettings(socket=tmp_path / "r.sock", mps_pipe_dir=pipes, hami_core_library=library)
    settings = RuntimeSettings(socket=tmp_path / "r.sock", backend="simulated", seed="s", mps_pipe_dir=pipes)
    with pytest.raises(SettingsError, match=r"--mps-pipe-dir .*mps: no such directory on this host"):
        RuntimeContainer(settings=settings).edits()
    pipes.mkdir()
    container = RuntimeContainer(settings=settings)
    container.backend.override(SimulatedGpuBackend(GPUS))
    container.store.override(InMemoryRuntimeStateStore())
    response = container.service().allocate(ContainerAllocationRequest(
        "uid", "ns", "pod", "main", (PlannedGpu(0, A, core_milli=500, memory_bytes=2 * GiB),)))
    assert response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert [(m.container_path, m.host_path) for m in response.mounts] == [(MPS_PIPE_DIRECTORY, str(pipes))]
    with pytest.raises(ValueError, match="one enforcement per node"):
        ContainerEdits(hami_library="/l.so", preload_file="/p", mps_pipe_dir="/run/nvidia-mps")


def test_the_environment_policy_refuses_every_mps_variable_in_a_tenant_pod() -> None:
    data = yaml.safe_load((REPO / "deploy/admission/01-params.yaml").read_text())["data"]
    names = {n.strip() for n in data["denied-env-names"].split(",")}
    prefixes = tuple(p.strip() for p in data["denied-env-prefixes"].split(","))
    for name in mps_envs([granted(A, 100, GiB)]):
        assert name in names or name.startswith(prefixes), name


def test_the_device_plugin_forwards_the_pipe_mount_only_when_told_of_it() -> None:
    response = AllocationBook(edits=MPS).allocate(ContainerAllocationRequest(
        "uid", "ns", "pod", "main", (PlannedGpu(0, A, core_milli=500, memory_bytes=GiB),)), GPUS, now=0)[0].response
    assert ResponseAllowList(mps_pipe_dir="/run/nvidia-mps").refused(response) == []
    assert ResponseAllowList().refused(response) == [
        f"mount host '/run/nvidia-mps' at '{MPS_PIPE_DIRECTORY}' (read_only=False)"]
    elsewhere = ResponseAllowList(mps_pipe_dir="/tmp/other")
    with pytest.raises(ForbiddenResponseError, match=f"/tmp/other at {MPS_PIPE_DIRECTORY};"):
        elsewhere.check(response, label="ns/pod:main")
    settings = settings_from_args(build_parser().parse_args(
        ["--node-name", "n", "--runtime-socket", "/run/r.sock", "--mps-pipe-dir", "/run/nvidia-mps"]))
    assert allowed_answers(settings) == ResponseAllowList(mps_pipe_dir="/run/nvidia-mps")
    with pytest.raises(SettingsError, match="--mps-pipe-dir /run/nvidia-mps and --hami-core-library"):
        DevicePluginSettings(node_name="n", runtime_socket=Path("/run/r.sock"), mps_pipe_dir=Path("/run/nvidia-mps"),
                             hami_core_library=Path("/l.so"), hami_preload_file=Path("/p"))
