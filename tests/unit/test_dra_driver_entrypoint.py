"""Composition smoke test of ``ljrk dra-driver``: the container's dependencies are declared and every provider
resolves with in-memory overrides; the app publishes and stops; ``--withdraw`` deletes the node's slices without a
Runtime; settings reject bad values; ``ljrk`` lists the command."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from dependency_injector import providers

from domain.gpu import Gpu, GpuUuid
from entrypoints.cli import COMMANDS
from entrypoints.dra_driver.__main__ import main
from entrypoints.dra_driver.app import DraDriverApp, DraDriverSettings, SettingsError
from entrypoints.dra_driver.containers import DraDriverContainer
from entrypoints.runtime.inprocess import InProcessRuntime


def test_container_resolves_and_the_app_publishes_until_stopped(tmp_path: Path) -> None:
    short = Path(tempfile.mkdtemp(prefix="ljrk-dra-", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    settings = DraDriverSettings(node_name="n1", runtime_socket=tmp_path / "rt.sock", in_memory=True,
                                 plugins_registry=short / "reg", plugins_dir=short / "plugins",
                                 cdi_dir=tmp_path / "cdi")
    container = DraDriverContainer(settings=settings)
    container.check_dependencies()
    runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 16 * 2**30)])
    with container.runtime.override(providers.Object(runtime)):
        app = container.app()
        assert isinstance(app, DraDriverApp)
        app.publisher.publish()  # what the app's thread does first; done here so the test never waits on it
        stop = threading.Event()
        stop.set()
        app.run(stop)  # returns at once: already stopped
    assert not (short / "reg" / "gpu.lj-runtimekit.io-reg.sock").exists()  # served, then removed at stop
    shutil.rmtree(short)
    (stored,) = container.api().slices.list_resource_slices(driver="gpu.lj-runtimekit.io", node="n1")
    assert [d.name for d in stored.content.devices] == ["gpu-0"]


def test_withdraw_needs_no_runtime(tmp_path: Path) -> None:
    code = main(["--node-name", "n1", "--runtime-socket", str(tmp_path / "none.sock"), "--in-memory", "--withdraw"])
    assert code == 0


def test_settings_validation(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--node-name"):
        DraDriverSettings(node_name="", runtime_socket=tmp_path)
    with pytest.raises(SettingsError, match="taint or withdraw"):
        DraDriverSettings(node_name="n", runtime_socket=tmp_path, unhealthy="ignore")
    with pytest.raises(SettingsError, match="--runtime-wait"):
        DraDriverSettings(node_name="n", runtime_socket=tmp_path, runtime_wait_s=0)
    with pytest.raises(SettingsError, match="--hami-preload-file None: give both"):
        DraDriverSettings(node_name="n", runtime_socket=tmp_path, hami_core_library=Path("/opt/libvgpu.so"))
    with pytest.raises(SettingsError, match="--mps-pipe-dir mps: must be an absolute host path"):
        DraDriverSettings(node_name="n", runtime_socket=tmp_path, mps_pipe_dir=Path("mps"))
    settings = DraDriverSettings(node_name="n", runtime_socket=tmp_path, hami_core_library=Path("/opt/libvgpu.so"),
                                 hami_preload_file=Path("/var/lib/ljrk/ld.so.preload"))
    assert {m.host_path for m in settings.allowed_mounts.mounts} == {"/opt/libvgpu.so", "/var/lib/ljrk/ld.so.preload"}
    assert DraDriverSettings(node_name="n", runtime_socket=tmp_path).allowed_mounts.mounts == frozenset()


def test_ljrk_lists_the_command() -> None:
    assert "dra-driver" in COMMANDS
