"""``ljrk runtime`` wiring and the reference Runtime service, without sockets.

Behaviours covered:
- the container's dependencies are complete and every provider resolves (memory/simulated overrides);
- settings: the state directory defaults to the socket's directory; flag conflicts are refused;
- backend selection: ``simulated`` as asked; ``auto`` falls back to simulated GPUs when NVML is absent and logs
  why; ``nvml`` without NVML raises GpuBackendUnavailableError;
- the service saves after every change and restores at start; a failed save rolls the change back (allocation,
  release, disable) and raises, so the Runtime never claims what it could lose; records naming GPUs the node no
  longer has are kept and logged; the health pump publishes backend changes and survives a failing poll;
- MIG: ``--mig-strategy`` parses (static by default) and reaches the service, which advertises ``mig-dynamic`` only
  when dynamic; a failed save after a creation destroys the created instance again; Release saves, then destroys,
  and an instance that cannot be destroyed keeps its record (saved) and raises GpuBackendError; a restarted
  Runtime, even static, destroys what the saved records say it created (the JSON state file round-trips MIG
  records); records naming MIG instances the node no longer lists are logged.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from adapters.statefile import JsonRuntimeStateStore
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.mig.gpu import PlacementMode
from domain.runtime.types import (
    ContainerAllocationRequest,
    MigInstanceInfo,
    PlannedGpu,
    PlannedMig,
    RuntimeSnapshot,
    RuntimeState,
)
from domain.units import GiB
from entrypoints.runtime.__main__ import build_parser, settings_from_args
from entrypoints.runtime.app import RuntimeApp, RuntimeSettings, SettingsError, select_backend
from entrypoints.runtime.containers import RuntimeContainer
from ports.gpu_backend import GpuBackendError, GpuBackendUnavailableError
from ports.runtime_state import StateStoreError
from services.runtime.service import RuntimeService

A = GpuUuid("GPU-aaaa")
GPUS = (Gpu(0, A, "A100", 16 * GiB),)


def _nvml_present() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def plan(container: str = "main") -> ContainerAllocationRequest:
    return ContainerAllocationRequest("uid", "ns", "pod", container, (PlannedGpu(0, A, core_milli=100),))


def test_container_resolves_every_provider(tmp_path: Path) -> None:
    settings = RuntimeSettings(socket=tmp_path / "r.sock", backend="simulated", seed="s")
    container = RuntimeContainer(settings=settings)
    container.check_dependencies()
    container.backend.override(SimulatedGpuBackend(GPUS))
    container.store.override(InMemoryRuntimeStateStore())
    assert container.runtime() is container.service()
    assert container.config() is container.service()
    assert container.server().socket_path == tmp_path / "r.sock"
    assert isinstance(container.app(), RuntimeApp)
    assert container.store.overridden


def test_edits_flags_reach_allocate(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()  # nvidia-uvm and nvidia-uvm-tools absent on this "host"
    library = tmp_path / "libvgpu.so"
    library.touch()
    settings = RuntimeSettings(socket=tmp_path / "r.sock", backend="simulated", seed="s", device_specs=True,
                               dev_root=dev, hami_core_library=library)
    container = RuntimeContainer(settings=settings)
    container.backend.override(SimulatedGpuBackend(GPUS))
    container.store.override(InMemoryRuntimeStateStore())
    response = container.service().allocate(plan())
    assert [(d.container_path, d.host_path) for d in response.devices] == [
        ("/dev/nvidia0", f"{dev}/nvidia0"), ("/dev/nvidiactl", f"{dev}/nvidiactl")]
    preload = tmp_path / "ld.so.preload"
    assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
        ("/usr/local/vgpu/libvgpu.so", str(library), True), ("/etc/ld.so.preload", str(preload), True)]
    assert preload.read_text() == "/usr/local/vgpu/libvgpu.so\n"


def test_missing_hami_library_is_a_settings_error(tmp_path: Path) -> None:
    settings = RuntimeSettings(socket=tmp_path / "r.sock", backend="simulated", hami_core_library=tmp_path / "no.so")
    with pytest.raises(SettingsError, match=r"--hami-core-library .*no\.so: no such file on this host"):
        RuntimeContainer(settings=settings).edits()
    with pytest.raises(SettingsError, match="must be an absolute host path"):
        RuntimeSettings(socket=tmp_path / "r.sock", hami_core_library=Path("lib.so"))


def test_settings_defaults_and_conflicts(tmp_path: Path) -> None:
    assert RuntimeSettings(socket=tmp_path / "r.sock").state_directory == tmp_path
    assert RuntimeSettings(socket=tmp_path / "r.sock", state_dir=tmp_path / "s").state_directory == tmp_path / "s"
    with pytest.raises(SettingsError, match="mutually exclusive"):
        RuntimeSettings(socket=tmp_path / "r.sock", simulated_gpus="1x16Gi", simulated_gpus_file=tmp_path / "g.yaml")
    with pytest.raises(SettingsError, match="choose one of"):
        RuntimeSettings(socket=tmp_path / "r.sock", backend="rocm")


def test_simulated_backend_as_asked(tmp_path: Path) -> None:
    backend = select_backend(RuntimeSettings(socket=tmp_path / "r.sock", backend="simulated",
                                             simulated_gpus="3x8Gi:T4", seed="s"))
    assert [d.gpu.model for d in backend.devices()] == ["T4"] * 3


def test_auto_falls_back_to_simulated_without_nvml(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    if _nvml_present():
        pytest.skip("NVML is present on this machine")
    with caplog.at_level(logging.WARNING):
        backend = select_backend(RuntimeSettings(socket=tmp_path / "r.sock", seed="s"))
    assert backend.name == "simulated"
    assert "GPU backend: simulated, 1 GPU(s) (auto: NVML is unavailable" in caplog.text
    with pytest.raises(GpuBackendUnavailableError):
        select_backend(RuntimeSettings(socket=tmp_path / "r.sock", backend="nvml"))


class FailingStore(InMemoryRuntimeStateStore):
    fail = False

    def save(self, snapshot: RuntimeSnapshot) -> None:
        if self.fail:
            raise StateStoreError("disk full")
        super().save(snapshot)


def test_failed_save_rolls_back() -> None:
    store = FailingStore()
    service = RuntimeService(SimulatedGpuBackend(GPUS), store)
    service.allocate(plan("kept"))
    store.fail = True
    with pytest.raises(StateStoreError):
        service.allocate(plan("lost"))
    with pytest.raises(StateStoreError):
        service.release("uid", "kept")
    with pytest.raises(StateStoreError):
        service.disable("maintenance")
    status = service.status()
    assert (status.state, status.active_allocations) == (RuntimeState.ENABLED, 1)
    assert [c.container for c in service.exporter_data().containers] == ["kept"]


def test_state_is_restored_and_unknown_gpus_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryRuntimeStateStore()
    first = RuntimeService(SimulatedGpuBackend(GPUS), store, initial_state=RuntimeState.DISABLED)
    assert first.status().state is RuntimeState.DISABLED
    first.enable("go")
    response = first.allocate(plan())
    assert store.saves == 2
    other_gpu = (Gpu(0, GpuUuid("GPU-other"), "A100", 16 * GiB),)
    with caplog.at_level(logging.WARNING):
        second = RuntimeService(SimulatedGpuBackend(other_gpu), store, initial_state=RuntimeState.DISABLED)
    assert second.status().state is RuntimeState.ENABLED  # the saved state wins over the initial one
    assert second.status().active_allocations == 1
    assert "names GPUs not on this node" in caplog.text
    assert RuntimeService(SimulatedGpuBackend(GPUS), store).allocate(plan()) == response


class FlakyBackend(SimulatedGpuBackend):
    polls = 0

    def poll_health(self, timeout_s: float) -> tuple:  # type: ignore[type-arg]
        self.polls += 1
        if self.polls == 1:
            raise RuntimeError("transient")
        return super().poll_health(timeout_s)


def test_health_pump_survives_a_failing_poll(caplog: pytest.LogCaptureFixture) -> None:
    backend = FlakyBackend(GPUS)
    service = RuntimeService(backend, InMemoryRuntimeStateStore(), health_poll_s=0.02)
    stream = service.watch_health()
    assert next(stream).initial
    with caplog.at_level(logging.ERROR):
        service.start()
        time.sleep(0.1)
        backend.inject_health(A, Health.UNHEALTHY, "XID 79")
        change = next(stream)
    service.close()
    assert change.health is Health.UNHEALTHY
    assert "health poll failed" in caplog.text
    assert list(stream) == []


# ------------------------------------------------------------------------------------------------------ MIG
M = GpuUuid("GPU-mig")
MIG_GPUS = (*GPUS, Gpu(1, M, "A100-80GB", 80 * GiB, mig_mode=MigMode.ENABLED))


def mig_plan(container: str = "main", start: int = 4) -> ContainerAllocationRequest:
    return ContainerAllocationRequest("uid", "ns", "pod", container, (),
                                      mig=(PlannedMig(1, M, "1g.10gb", start, create=True),))


def starts(service: RuntimeService) -> list[int]:
    return [i.start for i in service.list_devices()[1].mig_instances]


class StuckBackend(SimulatedGpuBackend):
    """Destruction fails while ``stuck`` (an instance still in use)."""

    stuck = False

    def destroy_mig_instance(self, instance: MigInstanceInfo) -> None:
        if self.stuck:
            raise GpuBackendError(f"nvmlGpuInstanceDestroy failed: In use by another client ({instance.uuid})")
        super().destroy_mig_instance(instance)


def test_mig_strategy_flag_reaches_the_service(tmp_path: Path) -> None:
    parse = build_parser().parse_args
    assert settings_from_args(parse(["--socket", "r.sock"])).mig_strategy is PlacementMode.STATIC
    settings = settings_from_args(parse(["--socket", str(tmp_path / "r.sock"), "--mig-strategy", "dynamic"]))
    assert settings.mig_strategy is PlacementMode.DYNAMIC
    container = RuntimeContainer(settings=settings)
    container.backend.override(SimulatedGpuBackend(MIG_GPUS))
    container.store.override(InMemoryRuntimeStateStore())
    assert "mig-dynamic" in container.service().get_version().capabilities
    static = RuntimeService(SimulatedGpuBackend(MIG_GPUS), InMemoryRuntimeStateStore())
    assert "mig-dynamic" not in static.get_version().capabilities
    assert "mig-allocate" in static.get_version().capabilities


def test_failed_save_destroys_the_instance_created_for_it() -> None:
    store = FailingStore()
    service = RuntimeService(SimulatedGpuBackend(MIG_GPUS), store, mig_mode=PlacementMode.DYNAMIC)
    store.fail = True
    with pytest.raises(StateStoreError):
        service.allocate(mig_plan())
    assert starts(service) == []
    assert service.status().active_allocations == 0


def test_an_instance_that_cannot_be_destroyed_keeps_its_record() -> None:
    store = InMemoryRuntimeStateStore()
    backend = StuckBackend(MIG_GPUS)
    service = RuntimeService(backend, store, mig_mode=PlacementMode.DYNAMIC)
    service.allocate(mig_plan())
    backend.stuck = True
    with pytest.raises(GpuBackendError, match=r"In use.*their records are kept"):
        service.release("uid")
    assert service.status().active_allocations == 1
    snapshot = store.load()
    assert snapshot is not None
    assert len(snapshot.allocations) == 1  # saved again with the record
    assert starts(service) == [4]
    backend.stuck = False
    assert service.release("uid") == 1
    assert starts(service) == []


def test_a_restarted_runtime_destroys_what_it_created(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = JsonRuntimeStateStore(tmp_path / "state.json")
    backend = SimulatedGpuBackend(MIG_GPUS)
    first = RuntimeService(backend, store, mig_mode=PlacementMode.DYNAMIC)
    response = first.allocate(mig_plan())
    restarted = RuntimeService(backend, store)  # same driver state (a real node keeps its instances), now static
    assert restarted.allocate(mig_plan()) == response
    assert restarted.list_devices()[1].mig_instances[0].created
    assert restarted.release("uid") == 1
    assert starts(restarted) == []
    RuntimeService(backend, store, mig_mode=PlacementMode.DYNAMIC).allocate(mig_plan("again", 5))
    with caplog.at_level(logging.WARNING):
        RuntimeService(SimulatedGpuBackend(MIG_GPUS), store)  # a fresh driver (node reboot) lost the instance
    assert "allocation ns/pod:again names MIG instances not on this node" in caplog.text
