"""Proto contracts: generated code, drift, compatibility policy "only add, never change", vendored kubelet APIs.

Behaviours covered:
- the committed ``src/adapters/grpc/_pb`` equals a fresh generation (drift check), and generation is
  byte-identical run to run; the generator refuses other generator versions;
- the current protos are compatible with the committed baseline ``proto/baseline/runtime_v1.binpb``;
- the checker, on a mutated copy of the baseline: removed / renumbered / renamed fields, changed type, label or
  proto3 presence, removed messages, enums and enum values, removed services and RPCs, changed request or response
  type or streaming, changed package, removed file each fail with a line naming them; additions pass; the CLI
  exits 1 on a break and 0 when compatible;
- vendored kubelet protos keep their wire names (``/v1beta1.Registration/Register``, ``/v1.PodResourcesLister/List``)
  and documented field numbers; the generated modules import (under ``-W error``) from ``adapters.grpc._pb``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
PROTO_ROOT = SCRIPTS.parent / "proto"
VENDORED_MD = PROTO_ROOT / "VENDORED.md"


def _script(name: str) -> ModuleType:
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


gen_proto = _script("gen_proto")
compat = _script("check_proto_compat")
Field = descriptor_pb2.FieldDescriptorProto


@pytest.fixture(scope="module")
def fresh_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("gen") / "_pb"
    gen_proto.generate(target)
    return target


def test_committed_code_is_up_to_date(fresh_tree: Path) -> None:
    assert gen_proto.diff_trees(fresh_tree, gen_proto.OUTPUT) == [], "run `make proto` and commit"


def test_generation_is_byte_identical(fresh_tree: Path, tmp_path: Path) -> None:
    again = tmp_path / "_pb"
    gen_proto.generate(again)
    assert gen_proto.diff_trees(fresh_tree, again) == []
    assert (again / "__init__.py").read_text().startswith('"""Generated protobuf')
    stub = (again / "ljrk" / "runtime" / "v1" / "runtime_pb2_grpc.pyi").read_text()
    assert "from adapters.grpc._pb.ljrk.runtime.v1 import runtime_pb2" in stub


def test_generator_refuses_other_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gen_proto.PINS, "mypy-protobuf", "0.0.1")
    with pytest.raises(gen_proto.GeneratorError, match=r"mypy-protobuf 5\.1\.0 \(need 0\.0\.1\)"):
        gen_proto.check_pins()


def test_current_protos_are_compatible_with_the_baseline() -> None:
    assert compat.compare(compat.load(compat.BASELINE), compat.current_set()) == []
    assert compat.main([]) == 0


# ------------------------------------------------------------------------------------------- mutations
def _file(fds: descriptor_pb2.FileDescriptorSet, suffix: str) -> descriptor_pb2.FileDescriptorProto:
    return next(f for f in fds.file if f.name.endswith(suffix))


def _message(fds: descriptor_pb2.FileDescriptorSet, name: str) -> descriptor_pb2.DescriptorProto:
    return next(m for m in _file(fds, "runtime.proto").message_type if m.name == name)


def _field(fds: descriptor_pb2.FileDescriptorSet, message: str, name: str) -> descriptor_pb2.FieldDescriptorProto:
    return next(f for f in _message(fds, message).field if f.name == name)


def _method(fds: descriptor_pb2.FileDescriptorSet, name: str) -> descriptor_pb2.MethodDescriptorProto:
    return next(m for m in _file(fds, "runtime.proto").service[0].method if m.name == name)


def _remove_field(fds: descriptor_pb2.FileDescriptorSet) -> None:
    fields = _message(fds, "PlannedGpu").field
    fields.remove(next(f for f in fields if f.name == "core_milli"))


def _remove_message(fds: descriptor_pb2.FileDescriptorSet) -> None:
    messages = _file(fds, "runtime.proto").message_type
    messages.remove(next(m for m in messages if m.name == "Mount"))


def _remove_enum_value(fds: descriptor_pb2.FileDescriptorSet) -> None:
    values = _file(fds, "runtime.proto").enum_type[0].value
    values.remove(next(v for v in values if v.name == "HEALTH_UNHEALTHY"))


def _remove_rpc(fds: descriptor_pb2.FileDescriptorSet) -> None:
    methods = _file(fds, "runtime.proto").service[0].method
    methods.remove(_method(fds, "Release"))


def _remove_file(fds: descriptor_pb2.FileDescriptorSet) -> None:
    fds.file.remove(_file(fds, "config_service.proto"))


def _set(getter: Callable[[descriptor_pb2.FileDescriptorSet], object], attr: str, value: object) -> Callable[
    [descriptor_pb2.FileDescriptorSet], None
]:
    def mutate(fds: descriptor_pb2.FileDescriptorSet) -> None:
        setattr(getter(fds), attr, value)

    return mutate


MUTATIONS = {
    "removed field": (_remove_field, "field ljrk.runtime.v1.PlannedGpu.core_milli = 5 removed"),
    "renumbered field": (_set(lambda f: _field(f, "PlannedGpu", "core_milli"), "number", 9),
                         "field ljrk.runtime.v1.PlannedGpu.core_milli renumbered 5 -> 9"),
    "renamed field": (_set(lambda f: _field(f, "PlannedGpu", "core_milli"), "name", "core"),
                      "field ljrk.runtime.v1.PlannedGpu number 5 renamed core_milli -> core"),
    "changed type": (_set(lambda f: _field(f, "PlannedGpu", "memory_bytes"), "type", Field.TYPE_INT64),
                     "changed type uint64 -> int64"),
    "changed message type": (_set(lambda f: _field(f, "AllocateResponse", "mounts"), "type_name",
                                  ".ljrk.runtime.v1.DeviceSpec"),
                             "changed type message .ljrk.runtime.v1.Mount -> message .ljrk.runtime.v1.DeviceSpec"),
    "changed label": (_set(lambda f: _field(f, "AllocateRequest", "pod_uid"), "label", Field.LABEL_REPEATED),
                      "field ljrk.runtime.v1.AllocateRequest.pod_uid = 1 changed label singular -> repeated"),
    "dropped presence": (_set(lambda f: _field(f, "GpuData", "power_watts"), "proto3_optional", False),
                         "changed label optional singular -> singular"),
    "removed message": (_remove_message, "message ljrk.runtime.v1.Mount removed"),
    "removed nested map entry": (
        lambda f: _message(f, "AllocateResponse").nested_type.remove(_message(f, "AllocateResponse").nested_type[0]),
        "message ljrk.runtime.v1.AllocateResponse.EnvsEntry removed",
    ),
    "removed enum value": (_remove_enum_value, "enum value ljrk.runtime.v1.Health.HEALTH_UNHEALTHY = 2 removed"),
    "removed rpc": (_remove_rpc, "rpc ljrk.runtime.v1.Runtime.Release removed"),
    "changed request type": (_set(lambda f: _method(f, "Allocate"), "input_type", ".ljrk.runtime.v1.ReleaseRequest"),
                             "rpc ljrk.runtime.v1.Runtime.Allocate changed request type"),
    "changed response type": (_set(lambda f: _method(f, "Release"), "output_type", ".ljrk.runtime.v1.Device"),
                              "rpc ljrk.runtime.v1.Runtime.Release changed response type"),
    "changed streaming": (_set(lambda f: _method(f, "WatchHealth"), "server_streaming", False),
                          "rpc ljrk.runtime.v1.Runtime.WatchHealth changed server streaming True -> False"),
    "changed package": (_set(lambda f: _file(f, "config_service.proto"), "package", "ljrk.config.v2"),
                        "changed package ljrk.config.v1 -> ljrk.config.v2"),
    "removed service": (lambda f: _file(f, "config_service.proto").service.pop(),
                        "service ljrk.config.v1.ConfigService removed"),
    "removed file": (_remove_file, "file ljrk/config/v1/config_service.proto removed"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_checker_fails_on_an_incompatible_change(name: str) -> None:
    baseline = compat.load(compat.BASELINE)
    current = compat.load(compat.BASELINE)
    mutate, expected = MUTATIONS[name]
    mutate(current)
    problems = compat.compare(baseline, current)
    assert any(expected in line for line in problems), problems


def test_checker_accepts_additions() -> None:
    baseline = compat.load(compat.BASELINE)
    current = compat.load(compat.BASELINE)
    _message(current, "PlannedGpu").field.add(name="priority", number=6, type=Field.TYPE_UINT32,
                                              label=Field.LABEL_OPTIONAL)
    _file(current, "runtime.proto").message_type.add(name="NewThing")
    _file(current, "runtime.proto").enum_type[0].value.add(name="HEALTH_DEGRADED", number=3)
    _file(current, "runtime.proto").service[0].method.add(
        name="Drain", input_type=".ljrk.runtime.v1.ReleaseRequest", output_type=".ljrk.runtime.v1.ReleaseResponse"
    )
    current.file.add(name="ljrk/extra/v1/extra.proto", package="ljrk.extra.v1")
    assert compat.compare(baseline, current) == []


def test_cli_exits_1_on_a_break(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    current = compat.load(compat.BASELINE)
    _remove_rpc(current)
    path = tmp_path / "current.binpb"
    path.write_bytes(current.SerializeToString())
    assert compat.main(["--current", str(path)]) == 1
    assert "rpc ljrk.runtime.v1.Runtime.Release removed" in capsys.readouterr().err
    assert compat.main(["--current", str(path), "--write-baseline", "--baseline", str(compat.BASELINE)]) == 1


def test_write_baseline_records_a_new_file(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.binpb"
    assert compat.main(["--baseline", str(baseline)]) == 2  # no baseline yet
    assert compat.main(["--baseline", str(baseline), "--write-baseline"]) == 0
    assert compat.compare(compat.load(baseline), compat.current_set()) == []  # records the current protos
    assert compat.compare(compat.load(compat.BASELINE), compat.load(baseline)) == []  # which only add to the old


# ------------------------------------------------------------------------------------------- kubelet APIs
def test_vendored_kubelet_protos_keep_their_wire_names() -> None:
    from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
    from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
    from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
    from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc

    assert dp.DESCRIPTOR.package == "v1beta1"
    assert pr.DESCRIPTOR.package == "v1"
    methods = {
        m.full_name for s in dp.DESCRIPTOR.services_by_name.values() for m in s.methods
    } | {m.full_name for s in pr.DESCRIPTOR.services_by_name.values() for m in s.methods}
    assert {
        "v1beta1.Registration.Register", "v1beta1.DevicePlugin.GetDevicePluginOptions",
        "v1beta1.DevicePlugin.ListAndWatch", "v1beta1.DevicePlugin.GetPreferredAllocation",
        "v1beta1.DevicePlugin.Allocate", "v1beta1.DevicePlugin.PreStartContainer",
        "v1.PodResourcesLister.List", "v1.PodResourcesLister.GetAllocatableResources", "v1.PodResourcesLister.Get",
    } == methods
    source = Path(dp_grpc.__file__).read_text() + Path(pr_grpc.__file__).read_text()
    assert "'/v1beta1.Registration/Register'" in source
    assert "'/v1.PodResourcesLister/List'" in source
    assert "'/v1.PodResourcesLister/Get'" in source
    numbers = {f.name: f.number for f in dp.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert numbers == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    assert {f.name: f.number for f in dp.CDIDevice.DESCRIPTOR.fields} == {"name": 1}
    assert {f.name: f.number for f in dp.ContainerAllocateRequest.DESCRIPTOR.fields} == {"devices_ids": 1}
    assert {f.name: f.number for f in dp.PreStartContainerRequest.DESCRIPTOR.fields} == {"devices_ids": 1}
    assert {f.name: f.number for f in dp.ContainerPreferredAllocationRequest.DESCRIPTOR.fields} == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert {f.name: f.number for f in pr.PodResources.DESCRIPTOR.fields} == {
        "name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5}
    assert {f.name: f.number for f in pr.ContainerResources.DESCRIPTOR.fields} == {
        "name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}
    assert {f.name: f.number for f in pr.GetPodResourcesRequest.DESCRIPTOR.fields} == {
        "pod_name": 1, "pod_namespace": 2}
    assert {f.name: f.number for f in pr.GetPodResourcesResponse.DESCRIPTOR.fields} == {"pod_resources": 1}
    assert {f.name: f.number for f in pr.ContainerDevices.DESCRIPTOR.fields} == {
        "resource_name": 1, "device_ids": 2, "topology": 3}
    assert dp.RegisterRequest.__module__ == "adapters.grpc._pb.kubelet.deviceplugin.v1beta1.api_pb2"


def _vendored_table() -> dict[str, str]:
    """``{path under proto/: sha256}`` from the table in proto/VENDORED.md."""
    rows = re.findall(r"^\| `([^`]+\.proto)` \|[^|]*\| `([0-9a-f]{64})` \|$", VENDORED_MD.read_text(), re.MULTILINE)
    return dict(rows)


def test_vendored_files_are_byte_identical_to_the_recorded_upstream() -> None:
    table = _vendored_table()
    assert set(table) == {
        "kubelet/deviceplugin/v1beta1/api.proto", "kubelet/podresources/v1/api.proto",
        "kubelet/dra/v1/api.proto", "kubelet/pluginregistration/v1/api.proto",
    }
    for relative, digest in table.items():
        data = (PROTO_ROOT / relative).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, f"proto/{relative} differs from upstream v1.37.2"
    every = {str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto")}
    assert every - set(table) == {"ljrk/runtime/v1/runtime.proto", "ljrk/config/v1/config_service.proto"}


def test_vendored_kubelet_protos_import_nothing_and_keep_their_packages() -> None:
    for relative, package in (("kubelet/deviceplugin/v1beta1/api.proto", "v1beta1"),
                              ("kubelet/podresources/v1/api.proto", "v1"),
                              ("kubelet/dra/v1/api.proto", "k8s.io.kubelet.pkg.apis.dra.v1"),
                              ("kubelet/pluginregistration/v1/api.proto", "pluginregistration")):
        text = (PROTO_ROOT / relative).read_text()
        assert f"package {package};" in text
        assert "import " not in text, f"proto/{relative}: v1.37.2 imports nothing (no gogo.proto to vendor)"
    assert not (PROTO_ROOT / "github.com").exists()


def test_generated_package_resolves_inside_src() -> None:
    import adapters.grpc._pb as generated

    assert generated.__file__ is not None
    assert Path(generated.__file__).resolve().parent == gen_proto.OUTPUT
