"""CDI in the device plugin: names, the spec (domain), its JSON file and the host scan (``adapters.cdifiles``), the
publisher (``services.device_plugin.cdi``), and the emulated runtime's resolution (``kubelet_emulator.cdi``).

Behaviours covered:
- names: ``lj-runtimekit.io/gpu=<uuid>`` of the plan's GPUs in plan order, each once; a MIG container gets its
  instances' parent GPUs; a UUID that is no CDI device name is refused;
- spec: one device per GPU by index with its env edit; device nodes only for GPUs the driver lists; control nodes
  spec-wide and only when some GPU is real; a simulated node's spec is env-only;
- JSON: the CDI field names, empty edits left out, parsing gives the spec back;
- host scan: minors from ``/proc/driver/nvidia/gpus/*/information``, control nodes that exist, no driver = empty;
- publisher: writes on the first refresh and on GPU-set changes only, retries after a store failure, removes;
- resolution: names resolve against the directory's JSON specs and yield their env; unknown names are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from adapters.cdifiles import SPEC_FILE_NAME, CdiSpecDirectory, ProcfsGpuDevices, spec_from_json, spec_to_json
from adapters.grpc.kubelet_emulator.cdi import UnresolvableCdiDevicesError, resolve
from adapters.memory.cdi import InMemoryCdiSpecStore, StaticHostGpuDevices
from domain.device_plugin.cdi import (
    CDI_KIND,
    CdiDeviceNode,
    HostGpuNodes,
    build_spec,
    container_devices,
    qualified_name,
)
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health
from domain.runtime.types import ContainerAllocationRequest, Mount, PlannedGpu, PlannedMig
from services.device_plugin.cdi import CdiPublisher

A, B = GpuUuid("GPU-aaaa-0001"), GpuUuid("GPU-bbbb-0002")
GPUS = [Gpu(1, B, "A100", 40 << 30), Gpu(0, A, "A100", 40 << 30)]


def test_names_follow_the_plan_not_kubelet_ids() -> None:
    request = ContainerAllocationRequest("uid", "ns", "p", "main", (PlannedGpu(1, B, 500), PlannedGpu(0, A, 500)))
    assert container_devices(request) == (f"{CDI_KIND}={B}", f"{CDI_KIND}={A}")
    mig = ContainerAllocationRequest("uid", "ns", "p", "main", (), mig=(
        PlannedMig(0, A, profile="1g.10gb", start=0), PlannedMig(0, A, profile="1g.10gb", start=1)))
    assert container_devices(mig) == (f"lj-runtimekit.io/gpu={A}",)
    with pytest.raises(InvalidRequestError):
        qualified_name(GpuUuid("GPU bad/uuid"))


def test_spec_of_a_simulated_node_is_env_only() -> None:
    spec = build_spec(GPUS, HostGpuNodes(control_nodes=("nvidiactl",)))
    assert [d.name for d in spec.devices] == [A, B]
    assert [d.env for d in spec.devices] == [(("LJRK_CDI_DEVICE_0", A),), (("LJRK_CDI_DEVICE_1", B),)]
    assert all(d.device_nodes == () for d in spec.devices)
    assert spec.device_nodes == ()  # no real GPU: no control nodes
    assert spec.qualified_names() == (f"{CDI_KIND}={A}", f"{CDI_KIND}={B}")


def test_spec_of_real_gpus_has_device_nodes_and_control_nodes() -> None:
    spec = build_spec(GPUS, HostGpuNodes({B: 3}, ("nvidiactl", "nvidia-uvm")))
    assert [d.device_nodes for d in spec.devices] == [(), (CdiDeviceNode("/dev/nvidia3"),)]
    assert spec.device_nodes == (CdiDeviceNode("/dev/nvidiactl"), CdiDeviceNode("/dev/nvidia-uvm"))
    assert spec.version == "0.6.0"


def test_json_uses_the_cdi_field_names_and_parses_back() -> None:
    spec = build_spec(GPUS, HostGpuNodes({A: 0}, ("nvidiactl",)))
    document = json.loads(spec_to_json(spec))
    assert document["cdiVersion"] == "0.6.0"
    assert document["kind"] == "lj-runtimekit.io/gpu"
    assert document["devices"][0] == {"name": A, "containerEdits": {
        "env": [f"LJRK_CDI_DEVICE_0={A}"],
        "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/nvidia0", "permissions": "rw"}]}}
    assert document["devices"][1]["containerEdits"] == {"env": [f"LJRK_CDI_DEVICE_1={B}"]}
    assert document["containerEdits"] == {"deviceNodes": [
        {"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl", "permissions": "rw"}]}
    assert spec_from_json(spec_to_json(spec)) == spec
    assert "containerEdits" not in json.loads(spec_to_json(build_spec(GPUS, HostGpuNodes())))
    with pytest.raises(ValueError, match="not a CDI spec"):
        spec_from_json('{"kind": "x"}')


def test_spec_wide_mounts_are_bind_mounts_with_their_access_and_parse_back() -> None:
    mounts = (Mount(container_path="/usr/local/vgpu/libvgpu.so", host_path="/opt/libvgpu.so", read_only=True),
              Mount(container_path="/tmp/nvidia-mps", host_path="/run/nvidia-mps", read_only=False))
    spec = attrs.evolve(build_spec(GPUS, HostGpuNodes()), mounts=mounts)
    document = json.loads(spec_to_json(spec))
    assert document["containerEdits"] == {"mounts": [
        {"hostPath": "/opt/libvgpu.so", "containerPath": "/usr/local/vgpu/libvgpu.so", "type": "bind",
         "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]},
        {"hostPath": "/run/nvidia-mps", "containerPath": "/tmp/nvidia-mps", "type": "bind",
         "options": ["rw", "nosuid", "nodev", "rbind", "rprivate"]}]}
    assert spec_from_json(spec_to_json(spec)) == spec


def test_host_scan_reads_minors_and_existing_control_nodes(tmp_path: Path) -> None:
    gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
    for bus, uuid, minor in (("0000:3b:00.0", A, 2), ("0000:86:00.0", B, 5)):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(
            f"Model: \t\t A100\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n")
    (gpus / "0000:99:00.0").mkdir()  # unreadable entry: skipped
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    scan = ProcfsGpuDevices(proc=tmp_path / "proc", dev=dev).scan()
    assert scan == HostGpuNodes({A: 2, B: 5}, ("nvidiactl",))
    assert ProcfsGpuDevices(proc=tmp_path / "none", dev=tmp_path / "none").scan() == HostGpuNodes()


def test_publisher_writes_on_changes_only_retries_and_removes() -> None:
    store = InMemoryCdiSpecStore()
    publisher = CdiPublisher(store, StaticHostGpuDevices())
    assert publisher.refresh(GPUS)
    assert not publisher.refresh([GPUS[0], attrs.evolve(GPUS[1], health=Health.UNHEALTHY)])  # health: same spec
    assert store.writes == 1
    assert publisher.resolvable() == {f"{CDI_KIND}={g.uuid}" for g in GPUS}
    store.fail("disk full")
    assert not publisher.refresh(GPUS[:1])
    assert publisher.resolvable() == {f"{CDI_KIND}={g.uuid}" for g in GPUS}  # what the file on disk still says
    store.fail("")
    assert publisher.refresh(GPUS[:1])  # retried at the next refresh
    spec = store.read()
    assert spec is not None
    assert spec.qualified_names() == (f"{CDI_KIND}={B}",)
    assert publisher.resolvable() == {f"{CDI_KIND}={B}"}
    publisher.remove()
    assert store.read() is None
    assert publisher.written is None
    assert publisher.resolvable() == frozenset()


def test_emulated_runtime_resolves_names_and_refuses_unknown_ones(tmp_path: Path) -> None:
    CdiSpecDirectory(tmp_path).write(build_spec(GPUS, HostGpuNodes()))
    (tmp_path / "broken.json").write_text("{")  # skipped, as the CDI library does
    assert resolve([f"{CDI_KIND}={B}"], tmp_path) == {"LJRK_CDI_DEVICE_1": B}
    assert resolve([], tmp_path / "missing") == {}
    with pytest.raises(UnresolvableCdiDevicesError, match="GPU-cccc"):
        resolve([f"{CDI_KIND}={A}", f"{CDI_KIND}=GPU-cccc"], tmp_path)
    assert (tmp_path / SPEC_FILE_NAME).exists()
