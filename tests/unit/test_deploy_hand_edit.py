"""The documented hand edit of the components' ConfigMaps, carried by ``deploy/generate.py --adopt`` (which
``deploy-all.sh deploy`` runs), on copies of ``deploy/`` (no cluster).

Covers: the documentation's edit — the flat ``resources.*`` keys written into the device plugin's, the exporter's and
the scheduler's ``02-configmap.yaml`` alike — is carried to ``deploy/protocol.yaml`` and every component, every
checksum changes (every component must load the new protocol) and the tree is current afterwards; a settings-only
edit of one ConfigMap changes only that component's checksum (only it rolls); copies edited differently are
refused, exit 1, naming the differing key and both files, nothing written; ``protocol.yaml`` and a copy both
edited are refused; an unedited tree is left alone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPONENTS = ("runtime", "deviceplugin", "exporter", "scheduler", "controller")
DOCUMENTED = ('resources.memory: "alibabacloud.com/gpu-memory.percentage"\n'
              'resources.core: "alibabacloud.com/gpu-core.percentage"\n'
              'resources.gpu: "alibabacloud.com/gpu"\n')
CHECKSUM = re.compile(r'lj-runtimekit\.io/config-checksum: "([0-9a-f]+)"')


def copy_deploy(target: Path) -> Path:
    root = target / "deploy"
    shutil.copytree(DEPLOY, root, ignore=shutil.ignore_patterns("grafana", "__pycache__"))
    return root


def adopt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "generate.py"), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def checksums(root: Path) -> dict[str, str]:
    found = {}
    for component in COMPONENTS:
        [workload] = list((root / component).glob("03-*.yaml"))
        match = CHECKSUM.search(workload.read_text())
        assert match is not None
        found[component] = match[1]
    return found


def edit_protocol(root: Path, component: str, protocol: str) -> None:
    """Replace the protocol block of a component's ConfigMap by ``protocol``, as a user would by hand."""
    path = root / component / "02-configmap.yaml"
    lines = path.read_text().splitlines(keepends=True)
    start = lines.index("  protocol.yaml: |\n")
    end = start + 1
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    block = ["    " + line for line in protocol.splitlines(keepends=True)]
    path.write_text("".join([*lines[: start + 1], *block, *lines[end:]]))


def documented_protocol(root: Path) -> str:
    base = (root / "protocol.yaml").read_text()
    kept = [line for line in base.splitlines(keepends=True)
            if not line.startswith(("resources:", "  gpu:", "  core:", "  memory:"))]
    return DOCUMENTED + "".join(kept)


def test_the_documented_edit_is_carried_everywhere_and_rolls_every_component(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    before = checksums(root)
    edited = documented_protocol(root)
    for component in ("deviceplugin", "exporter", "scheduler"):
        edit_protocol(root, component, edited)
    result = adopt(root, "--adopt")
    assert result.returncode == 0, result.stderr
    assert "carried the protocol edited in deploy/deviceplugin/02-configmap.yaml" in result.stdout
    assert (root / "protocol.yaml").read_text() == edited
    for component in COMPONENTS:
        assert "alibabacloud.com/gpu-memory.percentage" in (root / component / "02-configmap.yaml").read_text()
    after = checksums(root)
    assert all(after[c] != before[c] for c in COMPONENTS)
    assert adopt(root, "--check").returncode == 0
    assert adopt(root, "--adopt").stdout == ""  # nothing more to carry or write


def test_a_settings_only_edit_rolls_only_its_component(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    before = checksums(root)
    path = root / "exporter" / "02-configmap.yaml"
    path.write_text(path.read_text() + "  extra-setting: \"1\"\n")
    result = adopt(root, "--adopt")
    assert result.returncode == 0, result.stderr
    after = checksums(root)
    assert [c for c in COMPONENTS if after[c] != before[c]] == ["exporter"]
    assert (root / "protocol.yaml").read_text() == (DEPLOY / "protocol.yaml").read_text()


def test_copies_edited_differently_are_refused_naming_the_key(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    edited = documented_protocol(root)
    edit_protocol(root, "deviceplugin", edited)
    edit_protocol(root, "scheduler", edited.replace("gpu-memory.percentage", "gpu-mem"))
    files = {p: p.read_text() for p in root.rglob("*.yaml")}
    result = adopt(root, "--adopt")
    assert result.returncode == 1
    assert "resources.memory" in result.stderr
    assert "deploy/deviceplugin/02-configmap.yaml" in result.stderr
    assert "deploy/scheduler/02-configmap.yaml" in result.stderr
    assert {p: p.read_text() for p in root.rglob("*.yaml")} == files  # nothing written


def test_protocol_file_and_a_copy_both_edited_are_refused(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    edit_protocol(root, "exporter", documented_protocol(root))
    base = root / "protocol.yaml"
    base.write_text(base.read_text().replace("lj_runtimekit_enable", "other_enable"))
    result = adopt(root, "--adopt")
    assert result.returncode == 1
    assert "were both changed" in result.stderr


def test_an_unedited_tree_is_left_alone(tmp_path: Path) -> None:
    root = copy_deploy(tmp_path)
    files = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    result = adopt(root, "--adopt")
    assert (result.returncode, result.stdout) == (0, "")
    assert {p: p.read_text() for p in root.rglob("*") if p.is_file()} == files
