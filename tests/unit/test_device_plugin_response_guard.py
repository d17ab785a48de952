"""The device plugin's allow-list for the Runtime's Allocate answers (``domain.device_plugin.response_guard``) and
the flags that configure it (``ljrk device-plugin --hami-core-library/--hami-preload-file/--dev-root``).

Behaviours covered:
- unconfigured, no mount passes; configured, exactly the Runtime's own HAMi-core mounts pass (same host paths,
  read-only), and a writable copy, another host path (``/etc/shadow`` at the library path) or the host's ``/`` do
  not;
- device specs: ``/dev/nvidia<N>``, ``nvidiactl``, ``nvidia-uvm`` under the configured device root pass; other
  nodes, a traversal, a host path that differs from the container path, permissions beyond ``rwm`` do not;
- ``check`` raises ``ForbiddenResponseError`` (a device plugin error) naming the container, every refused entry
  and what is allowed; bad configuration is a ValueError naming the field;
- the command line: both HAMi-core paths or neither, absolute paths, and the parsed flags build the allow-list.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from domain.device_plugin.matching import DevicePluginError
from domain.device_plugin.response_guard import ForbiddenResponseError, ResponseAllowList
from domain.runtime.edits import ContainerEdits
from domain.runtime.types import ContainerAllocationResponse, DeviceSpec, Mount
from entrypoints.device_plugin.__main__ import build_parser, settings_from_args
from entrypoints.device_plugin.app import DevicePluginSettings, SettingsError, allowed_answers

LIB, PRELOAD = "/opt/hami/libvgpu.so", "/var/lib/lj-runtimekit/runtime/ld.so.preload"
HAMI = ResponseAllowList(LIB, PRELOAD)
RUNTIME_MOUNTS = ContainerEdits(hami_library=LIB, preload_file=PRELOAD).mounts()


def test_without_configuration_no_mount_passes() -> None:
    assert ResponseAllowList().refused(ContainerAllocationResponse(mounts=RUNTIME_MOUNTS)) == [
        "mount host '/opt/hami/libvgpu.so' at '/usr/local/vgpu/libvgpu.so' (read_only=True)",
        "mount host '/var/lib/lj-runtimekit/runtime/ld.so.preload' at '/etc/ld.so.preload' (read_only=True)"]


def test_the_runtimes_own_hami_mounts_pass() -> None:
    assert HAMI.refused(ContainerAllocationResponse(mounts=RUNTIME_MOUNTS)) == []
    HAMI.check(ContainerAllocationResponse(mounts=RUNTIME_MOUNTS, envs={"A": "1"}), label="ns/p:c")


@pytest.mark.parametrize("mount", [
    Mount("/usr/local/vgpu/libvgpu.so", LIB, read_only=False),
    Mount("/usr/local/vgpu/libvgpu.so", "/etc/shadow", read_only=True),
    Mount("/etc/ld.so.preload", "/tmp/evil.preload", read_only=True),
    Mount("/host", "/", read_only=True),
])
def test_other_mounts_are_refused(mount: Mount) -> None:
    assert HAMI.refused(ContainerAllocationResponse(mounts=(*RUNTIME_MOUNTS, mount))) == [
        f"mount host {mount.host_path!r} at {mount.container_path!r} (read_only={mount.read_only})"]


@pytest.mark.parametrize("spec", [
    DeviceSpec("/dev/nvidia0", "/dev/nvidia0", "rw"), DeviceSpec("/dev/nvidia15", "/dev/nvidia15", "rwm"),
    DeviceSpec("/dev/nvidiactl", "/dev/nvidiactl", "rw"), DeviceSpec("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools"),
])
def test_nvidia_device_nodes_pass(spec: DeviceSpec) -> None:
    assert HAMI.device_allowed(spec)


@pytest.mark.parametrize("spec", [
    DeviceSpec("/dev/sda", "/dev/sda"), DeviceSpec("/dev/nvidia0", "/dev/sda"),
    DeviceSpec("/dev/nvidia0/../sda", "/dev/sda"), DeviceSpec("/dev/nvidia0", "/dev/nvidia0", "rwx"),
    DeviceSpec("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap1"), DeviceSpec("/dev/mem", "/dev/mem"),
])
def test_other_device_nodes_are_refused(spec: DeviceSpec) -> None:
    assert not HAMI.device_allowed(spec)


def test_device_nodes_follow_the_configured_dev_root() -> None:
    rooted = ResponseAllowList(dev_root="/host/dev/")
    assert rooted.device_allowed(DeviceSpec("/dev/nvidia1", "/host/dev/nvidia1"))
    assert not rooted.device_allowed(DeviceSpec("/dev/nvidia1", "/dev/nvidia1"))


def test_check_names_the_container_what_was_refused_and_what_is_allowed() -> None:
    answer = ContainerAllocationResponse(mounts=(Mount("/host", "/"),), devices=(DeviceSpec("/dev/sda", "/dev/sda"),))
    with pytest.raises(ForbiddenResponseError) as error:
        HAMI.check(answer, label="team-a/p:main")
    assert isinstance(error.value, DevicePluginError)
    assert str(error.value) == (
        "team-a/p:main: the node Runtime answered mount host '/' at '/host' (read_only=False); device host "
        "'/dev/sda' at '/dev/sda' ('rw'): not forwarded to the container (allowed mounts: "
        f"{PRELOAD} at /etc/ld.so.preload read-only, {LIB} at /usr/local/vgpu/libvgpu.so read-only; "
        "device nodes: /dev/nvidia* from /dev)")


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(ValueError, match="preload_file='/x' needs hami_library"):
        ResponseAllowList(preload_file="/x")
    with pytest.raises(ValueError, match=r"hami_library='lib\.so'"):
        ResponseAllowList("lib.so", "/x")
    with pytest.raises(ValueError, match="needs preload_file"):
        ResponseAllowList("/lib.so")


def _settings(*flags: str) -> DevicePluginSettings:
    return settings_from_args(build_parser().parse_args(["--node-name", "n1", "--runtime-socket", "/rt.sock", *flags]))


def test_flags_build_the_allow_list() -> None:
    settings = _settings("--hami-core-library", LIB, "--hami-preload-file", PRELOAD)
    assert allowed_answers(settings) == HAMI
    assert allowed_answers(_settings()) == ResponseAllowList()
    with pytest.raises(SettingsError, match="give both"):
        _settings("--hami-core-library", LIB)
    with pytest.raises(SettingsError, match="--dev-root dev: must be an absolute host path"):
        _settings("--dev-root", "dev")
    assert settings.dev_root == Path("/dev")
