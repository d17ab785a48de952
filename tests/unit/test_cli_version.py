"""``ljrk --version``: the component version and the Runtime contract version it speaks (in-process).

Covers: the output is two lines, the installed distribution's version then the contract version with the gRPC
package and the oldest Runtime served; the contract version is the newest minimum of the feature table and the
version the reference and in-process Runtimes report (the components follow the Runtime version, as the product
documentation says); the gRPC package named is the one of ``runtime.proto``; the project version in
``pyproject.toml`` (the wheel's, the Makefile's image tags', the manifests') is the contract version, and so is the
controller's default job-agent image tag.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from domain.gpu import Gpu, GpuUuid
from domain.runtime.features import CONTRACT_VERSION, OLDEST_RUNTIME, RUNTIME_FEATURES, SemVer
from domain.toggle.jobs import DEFAULT_IMAGE
from entrypoints.cli import RUNTIME_GRPC_PACKAGE, main, version_text
from entrypoints.runtime.inprocess import InProcessRuntime
from services.runtime.service import RUNTIME_VERSION

REPO = Path(__file__).resolve().parents[2]


def test_version_prints_the_component_and_the_contract_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    release = importlib.metadata.version("lj-runtimekit")
    assert capsys.readouterr().out == (
        f"ljrk {release}\n"
        "Runtime contract 1.2.0 (gRPC ljrk.runtime.v1): this release follows Runtime 1.2.0 and works with a node "
        "Runtime >= 1.0.0\n"
    )


def test_version_text_names_the_given_release() -> None:
    first, second = version_text("9.9.9").split("\n")
    assert first == "ljrk 9.9.9"
    assert second.startswith(f"Runtime contract {CONTRACT_VERSION} ")


def test_the_contract_version_is_the_newest_feature_minimum_and_what_the_runtimes_report() -> None:
    minimums = [feature.minimum for feature in RUNTIME_FEATURES.values()]
    assert CONTRACT_VERSION == max(minimums) == SemVer(1, 2, 0)
    assert OLDEST_RUNTIME == min(minimums) == SemVer(1, 0, 0)
    in_process = InProcessRuntime([Gpu(0, GpuUuid("GPU-0"), "A100", 2**34)])
    assert RUNTIME_VERSION == in_process.get_version().version == CONTRACT_VERSION


def test_the_grpc_package_is_the_contracts() -> None:
    proto = (REPO / "proto" / "ljrk" / "runtime" / "v1" / "runtime.proto").read_text()
    assert re.findall(r"^package (\S+);$", proto, re.MULTILINE) == [RUNTIME_GRPC_PACKAGE]


def test_the_project_version_is_the_contract_version() -> None:
    """One number: bumping the contract (a new feature row) without the project version fails here, and back."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert SemVer.parse(project) == CONTRACT_VERSION
    assert project == str(CONTRACT_VERSION) == "1.2.0"
    assert f"lj-runtimekit/job-agent:{project}" == DEFAULT_IMAGE
