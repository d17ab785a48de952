"""scripts/image_sbom.py: an image's SBOM = cyclonedx-py's Python environment + the image's Debian packages + its
base, validated as CycloneDX (the images' own SBOMs are checked by tests/integration/test_images.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "image_sbom.py"
DIGEST = "sha256:" + "ab" * 32


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_sbom", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["image_sbom"] = module
    spec.loader.exec_module(module)
    return module


image_sbom = load()


def python_sbom() -> dict[str, Any]:
    """The shape cyclonedx-py environment writes (reproducible: no serial number, no timestamp)."""
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json", "bomFormat": "CycloneDX", "specVersion": "1.6",
        "version": 1,
        "metadata": {"component": {"bom-ref": "root-component", "name": "lj-runtimekit", "type": "application",
                                   "version": "1.1.0"}},
        "components": [{"bom-ref": "attrs==26.1.0", "name": "attrs", "purl": "pkg:pypi/attrs@26.1.0",
                        "type": "library", "version": "26.1.0"}],
    }


def write(tmp_path: Path, dpkg: str) -> list[str]:
    (tmp_path / "python.cdx.json").write_text(json.dumps(python_sbom()))
    (tmp_path / "dpkg.tsv").write_text(dpkg)
    (tmp_path / "os-release").write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    return ["--python-sbom", str(tmp_path / "python.cdx.json"), "--dpkg", str(tmp_path / "dpkg.tsv"),
            "--os-release", str(tmp_path / "os-release"), "--base-name", "ljrk.local/python:3.11-bookworm",
            "--base-digest", DIGEST, "--base-sources", "deb http://deb.debian.org/debian bookworm main",
            "--output", str(tmp_path / "out.json")]


def test_debian_packages_and_the_base_join_the_python_environment(tmp_path: Path) -> None:
    args = write(tmp_path, "libc6\t2.36-9+deb12u13\tamd64\npython3.11\t3.11.2-6+deb12u6\tamd64\n")
    assert image_sbom.main(args) == 0
    sbom = json.loads((tmp_path / "out.json").read_text())
    assert sbom["metadata"]["component"]["name"] == "lj-runtimekit"
    by_name = {c["name"]: c for c in sbom["components"]}
    assert by_name["attrs"]["purl"] == "pkg:pypi/attrs@26.1.0"  # cyclonedx-py's components stay as they were
    assert by_name["libc6"]["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u13?arch=amd64&distro=debian-12"
    assert by_name["python3.11"]["version"] == "3.11.2-6+deb12u6"
    assert by_name["debian"] == {"type": "operating-system", "bom-ref": "os:debian-12", "name": "debian",
                                 "version": "12", "description": "Debian GNU/Linux 12 (bookworm)"}
    assert {p["name"]: p["value"] for p in sbom["metadata"]["properties"]} == {
        "lj-runtimekit:base:name": "ljrk.local/python:3.11-bookworm", "lj-runtimekit:base:digest": DIGEST,
        "lj-runtimekit:base:sources": "deb http://deb.debian.org/debian bookworm main"}


@pytest.mark.parametrize(("dpkg", "said"), [
    ("libc6 2.36 amd64\n", "--dpkg line 1: 'libc6 2.36 amd64' is not name<TAB>version<TAB>arch"),
    ("\n", "--dpkg lists no package"),
])
def test_bad_dpkg_input_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], dpkg: str, said: str) -> None:
    assert image_sbom.main(write(tmp_path, dpkg)) == 1
    assert capsys.readouterr().err == f"image_sbom.py: {said}\n"
    assert not (tmp_path / "out.json").exists()


def test_an_invalid_result_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = write(tmp_path, "libc6\t2.36\tamd64\n")
    broken = python_sbom()
    broken["components"][0]["type"] = "not-a-type"
    (tmp_path / "python.cdx.json").write_text(json.dumps(broken))
    assert image_sbom.main(args) == 1
    assert capsys.readouterr().err.startswith("image_sbom.py: the merged SBOM is not valid CycloneDX 1.6: ")
    assert not (tmp_path / "out.json").exists()
