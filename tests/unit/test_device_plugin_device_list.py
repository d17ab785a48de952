"""The device plugin's device-list strategies (``domain.device_plugin.device_list``), the shaper that applies them
to the Runtime's answers (``services.device_plugin.responses``) and the flag that chooses them
(``ljrk device-plugin --device-list-strategy``, ``$DEVICE_LIST_STRATEGY``).

Behaviours covered:
- parsing: names and comma lists, repeats and whitespace, canonical order; an unknown name (NVIDIA's
  ``cdi-annotations`` with a hint), an empty item or nothing at all is an ``InvalidRequestError`` naming the flag
  and value; the default is ``envvar`` plus ``cdi-cri`` with a CDI spec;
- ``envvar``: the Runtime's answer unchanged, no CDI names; ``envvar,cdi-cri``: that answer plus the names;
- ``volume-mounts``: one read-only ``/dev/null`` mount per granted GPU or MIG UUID at
  ``/var/run/nvidia-container-devices/<uuid>`` in the Runtime's order (several GPUs; duplicates once),
  ``NVIDIA_VISIBLE_DEVICES`` the folder, so no UUID is left in it; it wins over ``envvar``; the Runtime's own
  mounts stay first; HAMi-core's limit variables and the ``LJRK_*`` ones stay;
- ``volume-mounts`` refuses (``DeviceListError``, a device plugin error naming the container) an answer without
  device IDs and IDs that are no plain names (``all``, ``void``, a path, ``..``);
- ``cdi-cri`` alone: ``NVIDIA_VISIBLE_DEVICES=void``, the names in ``cdi_devices``; refused before the Runtime is
  asked for a MIG container or a planned GPU the written spec does not name;
- the shaper: the allow-list judges the Runtime's answer only (the plugin's ``/dev/null`` mounts pass), refused
  answers are counted; ``cdi-cri`` without a spec is a ValueError;
- the command line: default by ``--cdi``, flag and env, the flag over the env, bad values and ``cdi-cri`` with
  ``--no-cdi`` are settings errors naming the flag and value; ``main`` turns them into exit code 2.
"""

from __future__ import annotations

import pytest

from domain.device_plugin.cdi import qualified_name
from domain.device_plugin.device_list import (
    VOID,
    VOLUME_MOUNTS_ROOT,
    DeviceListError,
    DeviceListStrategies,
    DeviceListStrategy,
    check_cdi_only,
    container_response,
    default_strategies,
    device_ids,
    parse_strategies,
)
from domain.device_plugin.matching import DevicePluginError
from domain.device_plugin.response_guard import ForbiddenResponseError, ResponseAllowList
from domain.errors import InvalidRequestError
from domain.gpu import GpuUuid
from domain.runtime.edits import ContainerEdits
from domain.runtime.limits import limit_envs, mig_envs
from domain.runtime.types import (
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    GrantedGpu,
    MigInstanceInfo,
    Mount,
    PlannedGpu,
    PlannedMig,
)
from entrypoints.device_plugin.__main__ import build_parser, main, settings_from_args
from entrypoints.device_plugin.app import DevicePluginSettings, SettingsError, device_list
from services.device_plugin.responses import ResponseShaper

A = GpuUuid("GPU-aaaaaaaa-0001-0002-0003-000000000004")
B = GpuUuid("GPU-bbbbbbbb-0001-0002-0003-000000000004")
MIG_1 = "MIG-11111111-2222-3333-4444-555555555555"
MIG_2 = "MIG-66666666-2222-3333-4444-555555555555"
LABEL = "default/p:main"
ENVVAR, VOLUMES, CDI = DeviceListStrategy.ENVVAR, DeviceListStrategy.VOLUME_MOUNTS, DeviceListStrategy.CDI_CRI


def strategies(*chosen: DeviceListStrategy) -> DeviceListStrategies:
    return DeviceListStrategies(chosen)


def two_gpu_answer(mounts: tuple[Mount, ...] = ()) -> ContainerAllocationResponse:
    """What the Runtime answers for B then A (plan order), 30 % and 4 GiB each."""
    grants = [GrantedGpu(1, B, 300, 4 << 30), GrantedGpu(0, A, 300, 4 << 30)]
    return ContainerAllocationResponse(envs=limit_envs(pod_uid="u1", container="main", grants=grants), mounts=mounts)


def mig_answer() -> ContainerAllocationResponse:
    instances = [MigInstanceInfo(0, A, 1, 0, "1g.10gb", 0, 1, 1, 10 << 30, uuid=MIG_2),
                 MigInstanceInfo(0, A, 2, 0, "1g.10gb", 1, 1, 1, 10 << 30, uuid=MIG_1)]
    return ContainerAllocationResponse(envs=mig_envs(pod_uid="u1", container="main", instances=instances))


def request(*uuids: GpuUuid, mig: bool = False) -> ContainerAllocationRequest:
    if mig:
        return ContainerAllocationRequest("u1", "default", "p", "main", (), mig=(PlannedMig(0, uuids[0], "1g.10gb"),))
    return ContainerAllocationRequest("u1", "default", "p", "main",
                                      tuple(PlannedGpu(i, u, core_milli=300) for i, u in enumerate(uuids)))


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(("values", "expected"), [
    (["envvar"], "envvar"),
    (["volume-mounts"], "volume-mounts"),
    (["cdi-cri"], "cdi-cri"),
    (["cdi-cri,envvar"], "envvar,cdi-cri"),
    (["volume-mounts", "envvar, cdi-cri"], "envvar,volume-mounts,cdi-cri"),
    (["envvar", "envvar"], "envvar"),
])
def test_parse_names_and_comma_lists_in_canonical_order(values: list[str], expected: str) -> None:
    assert str(parse_strategies(values)) == expected


@pytest.mark.parametrize(("values", "named"), [
    (["bogus"], "unknown strategy 'bogus'"),
    (["envvar,bogus"], "unknown strategy 'bogus'"),
    (["cdi-annotations"], "not offered: use cdi-cri"),
    (["envvar,,cdi-cri"], "unknown strategy ''"),
    ([""], "unknown strategy ''"),
    ([], "choose one or more of envvar, volume-mounts, cdi-cri"),
])
def test_parse_refuses_unknown_and_empty_names_naming_the_flag_and_value(values: list[str], named: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        parse_strategies(values)
    assert error.value.field == "--device-list-strategy"
    assert named in str(error.value)
    assert str(error.value).startswith(f"--device-list-strategy={','.join(values)!r}")


def test_default_is_envvar_plus_cdi_cri_with_a_spec() -> None:
    assert str(default_strategies(cdi=True)) == "envvar,cdi-cri"
    assert str(default_strategies(cdi=False)) == "envvar"
    with pytest.raises(ValueError, match="at least one"):
        DeviceListStrategies(())


# ------------------------------------------------------------------ per strategy
def test_envvar_keeps_the_runtimes_answer_and_names_no_cdi_device() -> None:
    answer = two_gpu_answer()
    response = container_response(answer, strategies=strategies(ENVVAR), cdi_names=[qualified_name(B)], label=LABEL)
    assert response == answer
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"


def test_envvar_with_cdi_cri_is_the_runtimes_answer_plus_the_names() -> None:
    names = (qualified_name(B), qualified_name(A))
    response = container_response(two_gpu_answer(), strategies=default_strategies(cdi=True), cdi_names=names,
                                  label=LABEL)
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{B},{A}"
    assert response.cdi_devices == names
    assert response.mounts == ()


def test_volume_mounts_mount_dev_null_per_gpu_in_plan_order_and_leave_no_uuid_in_the_env() -> None:
    answer = two_gpu_answer()
    response = container_response(answer, strategies=strategies(VOLUMES), cdi_names=(), label=LABEL)
    assert response.mounts == (
        Mount(f"/var/run/nvidia-container-devices/{B}", "/dev/null", read_only=True),
        Mount(f"/var/run/nvidia-container-devices/{A}", "/dev/null", read_only=True),
    )
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == VOLUME_MOUNTS_ROOT == "/var/run/nvidia-container-devices"
    limits = {k: v for k, v in answer.envs.items() if k != "NVIDIA_VISIBLE_DEVICES"}
    assert {k: response.envs[k] for k in limits} == limits  # HAMi-core's and our limit variables stay
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert response.cdi_devices == ()


def test_volume_mounts_pass_mig_uuids() -> None:
    response = container_response(mig_answer(), strategies=strategies(VOLUMES), cdi_names=(), label=LABEL)
    assert [m.container_path for m in response.mounts] == [f"{VOLUME_MOUNTS_ROOT}/{MIG_2}",
                                                           f"{VOLUME_MOUNTS_ROOT}/{MIG_1}"]
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == VOLUME_MOUNTS_ROOT
    assert response.envs["LJRK_MIG_UUID_0"] == MIG_2


def test_volume_mounts_win_over_envvar_and_follow_the_runtimes_own_mounts() -> None:
    hami = ContainerEdits(hami_library="/opt/libvgpu.so", preload_file="/var/lib/ljrk/ld.so.preload").mounts()
    names = (qualified_name(B), qualified_name(A))
    response = container_response(two_gpu_answer(hami), strategies=strategies(ENVVAR, VOLUMES, CDI), cdi_names=names,
                                  label=LABEL)
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == VOLUME_MOUNTS_ROOT
    assert response.mounts[:2] == hami
    assert [m.host_path for m in response.mounts[2:]] == ["/dev/null", "/dev/null"]
    assert response.cdi_devices == names


def test_a_device_id_listed_twice_is_mounted_once() -> None:
    assert device_ids({"NVIDIA_VISIBLE_DEVICES": f"{A}, {B},{A}"}, label=LABEL) == (A, B)


@pytest.mark.parametrize("value", ["", " , ", "all", "VOID", "none", "../etc", "GPU-1/../../x", ".", "-a", "a b"])
def test_volume_mounts_refuse_what_is_no_device_id(value: str) -> None:
    answer = ContainerAllocationResponse(envs={"NVIDIA_VISIBLE_DEVICES": value})
    with pytest.raises(DeviceListError) as error:
        container_response(answer, strategies=strategies(VOLUMES), cdi_names=(), label=LABEL)
    assert isinstance(error.value, DevicePluginError)
    assert str(error.value).startswith(f"{LABEL}: ")


def test_volume_mounts_refuse_an_answer_without_the_device_env() -> None:
    with pytest.raises(DeviceListError, match="names no device in NVIDIA_VISIBLE_DEVICES"):
        container_response(ContainerAllocationResponse(envs={"X": "1"}), strategies=strategies(VOLUMES),
                           cdi_names=(), label=LABEL)


def test_cdi_cri_alone_sets_void_and_names_the_devices() -> None:
    names = (qualified_name(B), qualified_name(A))
    answer = two_gpu_answer()
    response = container_response(answer, strategies=strategies(CDI), cdi_names=names, label=LABEL)
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == VOID == "void"
    assert response.cdi_devices == names
    assert response.mounts == ()
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == answer.envs["CUDA_DEVICE_MEMORY_LIMIT_1"]


def test_cdi_cri_alone_refuses_mig_and_unwritten_names_before_the_runtime() -> None:
    only = strategies(CDI)
    with pytest.raises(DeviceListError, match="MIG instances cannot be passed"):
        check_cdi_only(request(A, mig=True), {qualified_name(A)}, only)
    with pytest.raises(DeviceListError, match=f"does not name {qualified_name(B)}"):
        check_cdi_only(request(A, B), {qualified_name(A)}, only)
    check_cdi_only(request(A, B), {qualified_name(A), qualified_name(B)}, only)
    check_cdi_only(request(A, mig=True), set(), strategies(CDI, VOLUMES))  # another path exists: no check


# ------------------------------------------------------------------ the shaper
def test_shaper_guards_the_runtimes_part_only_and_counts_refusals() -> None:
    hami = ContainerEdits(hami_library="/opt/libvgpu.so", preload_file="/var/lib/ljrk/ld.so.preload").mounts()
    shaper = ResponseShaper(allowed=ResponseAllowList("/opt/libvgpu.so", "/var/lib/ljrk/ld.so.preload"),
                            strategies=strategies(VOLUMES))
    response = shaper.finish(two_gpu_answer(hami), names=(), label=LABEL)
    assert len(response.mounts) == 4  # the plugin's /dev/null mounts are never judged as the Runtime's
    with pytest.raises(ForbiddenResponseError):  # the same mount answered by the Runtime is refused
        shaper.finish(two_gpu_answer((Mount(f"{VOLUME_MOUNTS_ROOT}/{A}", "/dev/null", read_only=True),)), names=(),
                      label=LABEL)
    with pytest.raises(DeviceListError):
        shaper.finish(ContainerAllocationResponse(envs={"NVIDIA_VISIBLE_DEVICES": "all"}), names=(), label=LABEL)
    assert shaper.refused_answers == 2


def test_shaper_names_follow_the_strategy() -> None:
    spec = {qualified_name(A), qualified_name(B)}
    assert ResponseShaper(cdi=lambda: spec).names(request(B, A)) == (qualified_name(B), qualified_name(A))
    assert ResponseShaper(cdi=lambda: spec, strategies=strategies(VOLUMES)).names(request(A)) == ()
    assert ResponseShaper(cdi=lambda: {qualified_name(A)}).names(request(A, B)) == (qualified_name(A),)
    with pytest.raises(DeviceListError):
        ResponseShaper(cdi=lambda: {qualified_name(A)}, strategies=strategies(CDI)).names(request(A, B))
    with pytest.raises(ValueError, match="cdi-cri needs"):
        ResponseShaper(strategies=strategies(CDI))
    assert str(ResponseShaper().strategies) == "envvar"


# ------------------------------------------------------------------ the command line
REQUIRED = ["--node-name", "n1", "--runtime-socket", "/run/rt.sock"]


def settings(*argv: str) -> DevicePluginSettings:
    return settings_from_args(build_parser().parse_args([*REQUIRED, *argv]))


def test_flag_default_follows_cdi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVICE_LIST_STRATEGY", raising=False)
    assert str(device_list(settings())) == "envvar,cdi-cri"
    assert str(device_list(settings("--no-cdi"))) == "envvar"


def test_flag_is_repeatable_and_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVICE_LIST_STRATEGY", raising=False)
    chosen = settings("--device-list-strategy", "volume-mounts", "--device-list-strategy=cdi-cri,envvar")
    assert chosen.device_list_strategy == ("volume-mounts", "cdi-cri", "envvar")
    assert str(device_list(chosen)) == "envvar,volume-mounts,cdi-cri"


def test_env_sets_the_default_and_the_flag_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICE_LIST_STRATEGY", "volume-mounts,cdi-cri")
    assert str(device_list(settings())) == "volume-mounts,cdi-cri"
    assert str(device_list(settings("--device-list-strategy", "envvar"))) == "envvar"


@pytest.mark.parametrize(("argv", "named"), [
    (["--device-list-strategy", "volume_mounts"], "--device-list-strategy='volume_mounts': unknown strategy"),
    (["--device-list-strategy="], "--device-list-strategy='': unknown strategy ''"),
    (["--device-list-strategy", "cdi-cri", "--no-cdi"], "--device-list-strategy cdi-cri: cdi-cri needs --cdi"),
])
def test_bad_flag_values_are_settings_errors_naming_flag_and_value(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DEVICE_LIST_STRATEGY", raising=False)
    with pytest.raises(SettingsError) as error:
        settings(*argv)
    assert named in str(error.value)
    assert main([*REQUIRED, *argv]) == 2
    assert named in capsys.readouterr().err


def test_a_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICE_LIST_STRATEGY", "env")
    with pytest.raises(SettingsError, match=r"--device-list-strategy='env'.*\$DEVICE_LIST_STRATEGY"):
        settings()
