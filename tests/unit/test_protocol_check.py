"""``ljrk protocol check`` / ``show`` and ``adapters.protocolfile.find_protocols``: bare files, ConfigMaps in
multi-document manifests (``List`` items included), differing constants named with their locations, exit codes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from adapters.protocolfile import ProtocolFileError, find_protocols, protocol_items
from domain.kube.protocol import ProtocolConstants
from entrypoints.cli import main as ljrk

REPO = Path(__file__).resolve().parents[2]
PROTOCOL_YAML = (REPO / "deploy" / "protocol.yaml").read_text()


def configmap(name: str, protocol: str, namespace: str = "kube-system") -> str:
    body = "\n".join("    " + line for line in protocol.splitlines())
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
            f"data:\n  protocol.yaml: |\n{body}\n  other.yaml: 'x: 1'\n")


def manifests(*docs: str) -> str:
    deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n"
    return "---\n".join([deployment, *docs])


def test_bare_file_and_configmaps_in_a_rendered_manifest_are_found() -> None:
    [(where, protocol)] = find_protocols(PROTOCOL_YAML, source="protocol.yaml")
    assert (where, protocol) == ("protocol.yaml", ProtocolConstants())
    text = manifests(configmap("a", PROTOCOL_YAML), configmap("b", "memory-unit: 2Gi\n", "gpu"))
    found = find_protocols(text, source="all.yaml")
    assert [w for w, _ in found] == ["all.yaml: ConfigMap kube-system/a", "all.yaml: ConfigMap gpu/b"]
    assert found[1][1].memory_unit == "2Gi"


def test_list_items_are_searched() -> None:
    import yaml

    items = [yaml.safe_load(configmap("a", PROTOCOL_YAML)), yaml.safe_load(configmap("b", PROTOCOL_YAML))]
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    found = [w for w, _ in find_protocols(text, source="l")]
    assert found == ["l: ConfigMap kube-system/a", "l: ConfigMap kube-system/b"]


def test_invalid_protocol_in_a_configmap_names_it_and_the_key() -> None:
    with pytest.raises(ProtocolFileError, match=r"m\.yaml: ConfigMap kube-system/bad: memory-unit='lots'"):
        find_protocols(manifests(configmap("bad", "memory-unit: lots\n")), source="m.yaml")


def test_protocol_items_are_the_yaml_keys() -> None:
    items = protocol_items(ProtocolConstants())
    assert items["resources.gpu"] == "alibabacloud.com/gpu"
    assert items["memory-unit"] == "1Gi"
    assert items["annotations.pod-plan"] == "lj-runtimekit.io/gpu-plan"


def test_check_agreeing_files_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.yaml").write_text(manifests(configmap("a", PROTOCOL_YAML), configmap("b", PROTOCOL_YAML)))
    assert ljrk(["protocol", "check", str(REPO / "deploy" / "protocol.yaml"), str(tmp_path / "m.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.count(ProtocolConstants().fingerprint()) == 3
    assert "3 protocol(s) agree" in out


def test_check_reports_every_differing_constant_with_locations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = PROTOCOL_YAML.replace("memory-unit: 1Gi", "memory-unit: 2Gi").replace(
        "gpu: alibabacloud.com/gpu", "gpu: example.com/gpu")
    (tmp_path / "m.yaml").write_text(manifests(configmap("dp", PROTOCOL_YAML), configmap("sched", other)))
    assert ljrk(["protocol", "check", str(tmp_path / "m.yaml")]) == 1
    out = capsys.readouterr().out
    m = str(tmp_path / "m.yaml")
    assert (f"memory-unit: {m}: ConfigMap kube-system/dp='1Gi'; {m}: ConfigMap kube-system/sched='2Gi'") in out
    assert f"resources.gpu: {m}: ConfigMap kube-system/dp='alibabacloud.com/gpu'" in out
    assert "2 constant(s) differ across 2 protocol(s)" in out


def test_check_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(manifests(configmap("a", PROTOCOL_YAML))))
    assert ljrk(["protocol", "check", "-"]) == 0
    assert "<stdin>: ConfigMap kube-system/a" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["protocol", "check"], "give FILEs to compare, or --kubeconfig FILE to check a live cluster"),
        (["protocol", "check", "--namespace", "gpu", "a.yaml"], "--namespace and --context need --kubeconfig"),
        (["protocol", "check", "--kubeconfig", "k", "a.yaml"], "give FILEs or --kubeconfig, not both"),
        (["protocol", "check", "--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: "
                                                                           "cannot load it"),
        (["protocol", "check", "/nonexistent/p.yaml"], "/nonexistent/p.yaml: cannot read"),
        (["protocol"], "required: command"),
    ],
)
def test_usage_and_read_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert ljrk(argv) == 2
    assert message in capsys.readouterr().err


def test_no_protocol_found_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.yaml").write_text(manifests())
    assert ljrk(["protocol", "check", str(tmp_path / "m.yaml")]) == 2
    assert "no protocol found" in capsys.readouterr().err


def test_show_prints_fingerprint_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text("memory-unit: 2Gi\n")
    assert ljrk(["protocol", "show", "--protocol", str(tmp_path / "p.yaml")]) == 0
    out = capsys.readouterr().out
    expected = ProtocolConstants(memory_unit="2Gi")
    assert out.startswith(f"# fingerprint: {expected.fingerprint()}\n")
    assert "memory-unit: 2Gi" in out
