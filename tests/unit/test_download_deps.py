"""``hack/download-deps.sh``: switching the build, the deployment and the live tests to a Kubernetes version, and
verifying it.

Every case runs the script on a copy of the repository's ``pyproject.toml``, ``hack/`` (with
``hack/kubernetes-version``, the live tests' version), ``scripts/`` and ``deploy/`` under ``tmp_path`` (the real
tree is never written). Behaviours covered:

* the table follows the rule and the documentation: one entry per documented minor (1.28, 1.30, 1.32, 1.34,
  1.35) and per current one (1.36, 1.37), each client's major equal to its Kubernetes minor except 1.36, which
  pins 1.37's client 37.0.2 (36 is refused by the adapter), kubescheduler.config.k8s.io/v1 for each (>= 1.25);
  the committed default is the live tests' version (kube-scheduler v1.37.2 = ``platform.default`` =
  ``hack/kubernetes-version``);
* ``vX.Y.Z`` of each supported minor pins ``kubernetes==<client>`` in pyproject.toml, sets the kube-scheduler
  image tag and the configuration apiVersion, sets ``hack/kubernetes-version`` (X.Y.Z when the platform builds
  it, else the platform's version of that minor, saying so; a minor the platform cannot build, 1.28-1.32, leaves
  it and prints one line saying the live tests stay there and why), leaves every other line and file alone, keeps
  deploy/generate.py current and prints each change; a second run changes nothing; ``--default`` restores the
  committed files, ``platform.default`` in ``hack/kubernetes-version`` included; ``--list`` shows each minor's
  client and test-cluster version;
* malformed and unsupported versions (1.29, 1.33, the older 1.20, the newer 1.38, v2) exit 2 listing the supported
  minors, writing nothing; a manifest without the line to edit exits 1, writing nothing;
* ``--verify`` (``make build``, ``make test``) passes when pyproject.toml, the installed client (this interpreter's,
  or a given distribution's metadata first on PYTHONPATH), the manifests and ``hack/kubernetes-version`` agree, and
  exits 1 naming each disagreement: client major (the pin's: 37 for 1.36), a client the adapter cannot send merge
  patches with (neither 37's per-call ``_content_type`` nor 28-35's ``call_api(response_type=…)``: 36's shape), a
  client requiring urllib3 < 2 beside urllib3 2.x, kube-scheduler tag, stale generated files, a requirement no
  table entry pins, and ``hack/kubernetes-version`` naming a version the platform does not build, one of another
  minor than a selected minor the platform builds, anything but ``platform.default`` for the default, or nothing;
  the pin 1.36 and 1.37 share resolves to the minor ``hack/kubernetes-version`` names;
* ``make test`` runs that verification before the suite;
* the wrapper is shellcheck-clean and refuses a missing Python.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED = ("1.28", "1.30", "1.32", "1.34", "1.35")
"""The product documentation, section 2: pre-built images support Kubernetes v1.28, v1.30, v1.32, v1.34, v1.35."""
SUPPORTED = (*DOCUMENTED, "1.36", "1.37")
"""The documented minors and the current ones the live tests run (the platform's 1.36.3 and 1.37.2)."""
LIVE = {"1.34": "1.34.4", "1.35": "1.35.4", "1.36": "1.36.3", "1.37": "1.37.2"}
"""The test cluster of each minor the platform builds from Go modules (build modules exist from 1.34 on)."""
TABLE = tomllib.loads((REPO / "hack" / "kubernetes-versions.toml").read_text())
EDITED = ("pyproject.toml", "deploy/scheduler/03-deployment.yaml", "deploy/scheduler/02-configmap.yaml")
SELECTED = "hack/kubernetes-version"
STAY = ("the platform builds only 1.34.4, 1.35.4, 1.36.3, 1.37.2, not {minor} (hack/kubernetes-versions.toml "
        "[platform.kubernetes] has no build module of it before 1.34)")


def copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    for folder in ("hack", "scripts", "deploy"):  # hack/ holds hack/kubernetes-version: the switch writes it
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "kubebuild"))
    assert (root / SELECTED).read_text() == (REPO / SELECTED).read_text()
    compat = Path("src/adapters/kubernetes/compat.py")  # --verify applies the adapter's own client rule
    (root / compat).parent.mkdir(parents=True)
    shutil.copy2(REPO / compat, root / compat)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def deps(root: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / "hack" / "download-deps.sh"), *args], capture_output=True, text=True,
                          timeout=60, check=False, cwd=root,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def verify(root: Path, installed: str | None = None, tmp_path: Path | None = None,
           requires: str = "") -> subprocess.CompletedProcess[str]:
    """``--verify`` under this interpreter; ``installed`` puts a ``kubernetes`` distribution of that version first
    on the path (metadata only, with ``requires`` as its ``Requires-Dist`` lines: verify reads them, as it would
    after ``make`` installed it)."""
    env = dict(os.environ)
    if installed is not None:
        assert tmp_path is not None
        dist = tmp_path / "site" / f"kubernetes-{installed}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: kubernetes\nVersion: {installed}\n{requires}")
        env["PYTHONPATH"] = str(tmp_path / "site")
    return subprocess.run([sys.executable, str(root / "scripts" / "download_deps.py"), "--verify"],
                          capture_output=True, text=True, timeout=60, check=False, cwd=root, env=env)


def requirement(root: Path) -> str:
    (hit,) = [d for d in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
              if re.match(r"kubernetes\b", d)]
    return str(hit)


def scheduler_tag(root: Path) -> str:
    (tag,) = re.findall(r"image: registry\.k8s\.io/kube-scheduler:(\S+)",
                        (root / "deploy/scheduler/03-deployment.yaml").read_text())
    return str(tag)


def live_version(root: Path) -> str:
    return (root / SELECTED).read_text()


def scheduler_api(root: Path) -> str:
    (api,) = re.findall(r"^    apiVersion: (\S+)$", (root / "deploy/scheduler/02-configmap.yaml").read_text(), re.M)
    return str(api)


# ---------------------------------------------------------------- the table
def test_the_table_covers_the_documented_minors_with_clients_of_the_same_major() -> None:
    minors = TABLE["minors"]
    assert tuple(minors) == SUPPORTED
    for minor, entry in minors.items():
        if minor != "1.36":  # client majors follow minors, except where that client is refused
            assert entry["client"].split(".")[0] == minor.split(".")[1], minor
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", entry["client"])
        assert entry["scheduler-config-api"] == "kubescheduler.config.k8s.io/v1"  # v1 from 1.25 on
    assert minors["1.36"]["client"] == minors["1.37"]["client"] == "37.0.2"  # 36.x: compat.py refuses its shape
    default = TABLE["default"]
    assert requirement(REPO) == f"kubernetes{default['client']}"
    assert scheduler_tag(REPO) == default["kube-scheduler-tag"]
    assert scheduler_api(REPO) == default["scheduler-config-api"]
    platform = TABLE["platform"]
    assert {v.rsplit(".", 1)[0]: v for v in platform["kubernetes"]} == LIVE
    assert default["kube-scheduler-tag"] == f"v{platform['default']}"  # the default is the live tests' version
    assert live_version(REPO) == f"{platform['default']}\n"


# ---------------------------------------------------------------- switching
def live_line(minor: str, version: str) -> str:
    """What the switch from the committed tree (live tests on 1.37.2) prints about ``hack/kubernetes-version``."""
    live = LIVE.get(minor)
    if live is None:
        return f"  {SELECTED}: the live tests stay on Kubernetes 1.37.2: {STAY.format(minor=minor)}"
    note = "" if live == version.removeprefix("v") else f"; the platform builds {live}, not {version[1:]}"
    if live == "1.37.2":
        return f"  {SELECTED}: stays 1.37.2 (the platform builds 1.37.2, not {version[1:]})"
    return f"  {SELECTED}: 1.37.2 -> {live} (the live tests' Kubernetes{note})"


@pytest.mark.parametrize("minor", SUPPORTED)
def test_a_supported_version_pins_the_client_and_sets_the_scheduler(minor: str, tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    before = snapshot(root)
    version = f"v{minor}.3"  # 1.36.3 is the platform's own; the others are not
    client = TABLE["minors"][minor]["client"]
    result = deps(root, version)
    assert result.returncode == 0, result.stderr
    assert requirement(root) == f"kubernetes=={client}"
    assert scheduler_tag(root) == version
    assert scheduler_api(root) == "kubescheduler.config.k8s.io/v1"
    assert live_version(root) == f"{LIVE.get(minor, '1.37.2')}\n"  # unbuildable minors keep the live version
    assert result.stdout.splitlines() == [
        f"switched to Kubernetes {version}:",
        f"  pyproject.toml: kubernetes>=37 -> kubernetes=={client}",
        f"  deploy/scheduler/03-deployment.yaml: kube-scheduler image v1.37.2 -> {version}",
        live_line(minor, version),
        f"next: make lock build (re-locks requirements/ for kubernetes=={client}, installs it into .venv and verifies)",
    ]
    after = snapshot(root)
    moved = {EDITED[0], EDITED[1]} | ({SELECTED} if minor in ("1.34", "1.35", "1.36") else set())
    assert {name for name in after if after[name] != before[name]} == moved
    for name in moved:  # exactly one line differs in each edited file
        old, new = before[name].decode().splitlines(), after[name].decode().splitlines()
        assert len(old) == len(new)
        assert sum(a != b for a, b in zip(old, new, strict=True)) == 1
    old_deps = tomllib.loads(before["pyproject.toml"].decode())["project"]["dependencies"]
    new_deps = tomllib.loads(after["pyproject.toml"].decode())["project"]["dependencies"]
    assert [d for d in old_deps if not d.startswith("kubernetes")] == [d for d in new_deps
                                                                        if not d.startswith("kubernetes")]
    check = subprocess.run([sys.executable, str(root / "deploy" / "generate.py"), "--check"], capture_output=True,
                           text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stderr


def test_a_second_run_changes_nothing_and_default_restores_the_committed_files(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    committed = snapshot(root)
    assert deps(root, "v1.28.0").returncode == 0
    switched = snapshot(root)
    again = deps(root, "v1.28.0")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "already set for Kubernetes v1.28.0: nothing changed\n"
    assert snapshot(root) == switched
    other = deps(root, "v1.35.1")  # switching between two versions goes straight there
    assert other.returncode == 0
    assert "  pyproject.toml: kubernetes==28.1.0 -> kubernetes==35.0.0" in other.stdout.splitlines()
    assert (f"  {SELECTED}: 1.37.2 -> 1.35.4 (the live tests' Kubernetes; the platform builds 1.35.4, not 1.35.1)"
            in other.stdout.splitlines())
    assert deps(root, "v1.35.1").stdout == "already set for Kubernetes v1.35.1: nothing changed\n"
    back = deps(root, "--default")
    assert back.returncode == 0, back.stderr
    assert back.stdout.splitlines()[0] == "switched to the default:"
    assert f"  {SELECTED}: 1.35.4 -> 1.37.2 (the live tests' Kubernetes)" in back.stdout.splitlines()
    assert snapshot(root) == committed  # platform.default in hack/kubernetes-version again
    assert deps(root, "--default").stdout == "already set for the default: nothing changed\n"


@pytest.mark.parametrize(("version", "why"), [
    ("v1.29.0", "Kubernetes 1.29 (v1.29.0) is not supported"),
    ("v1.20.2", "Kubernetes 1.20 (v1.20.2) is not supported"),  # the tests' control plane, but not the client
    ("v1.33.0", "Kubernetes 1.33 (v1.33.0) is not supported"),  # between the documented and the current ones
    ("v1.38.0", "Kubernetes 1.38 (v1.38.0) is not supported"),
    ("1.28.0", "version '1.28.0' is not vMAJOR.MINOR.PATCH"),
    ("v1.28", "version 'v1.28' is not vMAJOR.MINOR.PATCH"),
    ("v2.28.0", "version 'v2.28.0' is not vMAJOR.MINOR.PATCH"),
    ("v1.28.0-rc.1", "version 'v1.28.0-rc.1' is not vMAJOR.MINOR.PATCH"),
])
def test_unsupported_or_malformed_versions_exit_2_listing_the_supported(version: str, why: str,
                                                                        tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    before = snapshot(root)
    result = deps(root, version)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(f"hack/download-deps.sh: error: {why}")
    assert "supported: v1.28, v1.30, v1.32, v1.34, v1.35, v1.36, v1.37" in result.stderr
    assert snapshot(root) == before


def test_no_argument_or_two_exit_2(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    for args in ([], ["v1.28.0", "--default"]):
        result = deps(root, *args)
        assert result.returncode == 2, args
        assert "usage: hack/download-deps.sh" in result.stderr


def test_a_manifest_without_the_line_to_edit_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    deployment = root / "deploy/scheduler/03-deployment.yaml"
    deployment.write_text(deployment.read_text().replace("image: registry.k8s.io/kube-scheduler:",
                                                         "image: mirror.example.com/kube-scheduler:"))
    before = snapshot(root)
    result = deps(root, "v1.30.0")
    assert result.returncode == 1
    assert result.stderr == ("hack/download-deps.sh: error: deploy/scheduler/03-deployment.yaml: expected one "
                             "kube-scheduler image line, found 0\n")
    assert snapshot(root) == before  # pyproject.toml untouched too


def test_list_prints_each_supported_minor() -> None:
    result = deps(REPO, "--list")  # read-only
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"v{m}  kubernetes=={TABLE['minors'][m]['client']}  kubescheduler.config.k8s.io/v1  "
        f"test cluster {LIVE.get(m, 'none')}" for m in SUPPORTED]
    assert "v1.36  kubernetes==37.0.2  kubescheduler.config.k8s.io/v1  test cluster 1.36.3" in result.stdout


def test_the_platforms_own_version_becomes_the_live_version_as_it_is(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    result = deps(root, "v1.34.4")
    assert result.returncode == 0, result.stderr
    assert f"  {SELECTED}: 1.37.2 -> 1.34.4 (the live tests' Kubernetes)" in result.stdout.splitlines()
    assert live_version(root) == "1.34.4\n"


def test_a_minor_the_platform_cannot_build_keeps_the_live_version_and_says_why(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    assert deps(root, "v1.35.4").returncode == 0
    result = deps(root, "v1.30.0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if SELECTED in line] == [
        f"  {SELECTED}: the live tests stay on Kubernetes 1.35.4: {STAY.format(minor='1.30')}"]
    assert live_version(root) == "1.35.4\n"
    checked = verify(root, "30.1.0", tmp_path)  # any version the platform builds goes with such a minor
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == ("verified: Kubernetes 1.30, kubernetes client 30.1.0, manifests agree, live tests on "
                              "Kubernetes 1.35.4\n")


def test_a_missing_live_version_becomes_the_platform_default_for_a_minor_it_cannot_build(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    (root / SELECTED).unlink()
    result = deps(root, "v1.28.0")
    assert result.returncode == 0, result.stderr
    assert (f"  {SELECTED}: (none) -> 1.37.2 (the live tests' Kubernetes; {STAY.format(minor='1.28')})"
            in result.stdout.splitlines())
    assert live_version(root) == "1.37.2\n"


# ---------------------------------------------------------------- verify (make build)
def test_verify_passes_on_the_committed_tree_with_this_client(tmp_path: Path) -> None:
    result = verify(copy_repo(tmp_path))
    assert result.returncode == 0, result.stderr
    installed = importlib.metadata.version("kubernetes")
    assert result.stdout == (f"verified: the default, kubernetes client {installed}, manifests agree, live tests on "
                             "Kubernetes 1.37.2\n")


def test_verify_needs_the_pinned_clients_major(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    assert deps(root, "v1.28.0").returncode == 0
    installed = importlib.metadata.version("kubernetes")  # the newest client, not 28
    wrong = verify(root)
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines() == [
        f"hack/download-deps.sh --verify: installed kubernetes client {installed} does not follow Kubernetes 1.28 "
        "(needs 28.1.0): run make lock build, which re-locks requirements/ and reinstalls from the lock",
    ]
    right = verify(root, "28.1.0", tmp_path)
    assert right.returncode == 0, right.stderr
    assert right.stdout == ("verified: Kubernetes 1.28, kubernetes client 28.1.0, manifests agree, live tests on "
                            "Kubernetes 1.37.2\n")


def test_verify_passes_a_pinned_client_the_adapter_supports(tmp_path: Path) -> None:
    """Clients 28-35 take no ``_content_type`` but a ``call_api(response_type=…)``, through which the adapter
    sends its merge patches (``adapters.kubernetes.compat``); a package of 28.1.0's shape first on the path stands
    in for the real one (``tests/integration/test_kubernetes_client_versions.py`` runs the real one)."""
    root = copy_repo(tmp_path)
    assert deps(root, "v1.28.0").returncode == 0
    fake_client(tmp_path, "def call_api(self, resource_path, method, path_params=None, response_type=None): ...")
    result = verify(root, "28.1.0", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ("verified: Kubernetes 1.28, kubernetes client 28.1.0, manifests agree, live tests on "
                             "Kubernetes 1.37.2\n")


def test_verify_refuses_a_client_the_adapter_cannot_patch_with(tmp_path: Path) -> None:
    """36.0.3's shape: ``_content_type`` only through ``**kwargs`` and a ``call_api(response_types_map=…)``."""
    root = copy_repo(tmp_path)
    fake_client(tmp_path, "def call_api(self, resource_path, method, response_types_map=None, **kwargs): ...")
    result = verify(root, "37.0.0", tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "hack/download-deps.sh --verify: installed kubernetes client 37.0.0 is not supported by adapters/kubernetes: "
        "its patch methods take no _content_type and its ApiClient.call_api takes no response_type, so it cannot "
        "send merge patches (supported: 28-35 and >= 37, hack/kubernetes-versions.toml)"]


def test_verify_refuses_a_client_requiring_urllib3_1_beside_urllib3_2(tmp_path: Path) -> None:
    urllib3 = importlib.metadata.version("urllib3")
    if int(urllib3.split(".")[0]) < 2:
        pytest.skip(f"this interpreter has urllib3 {urllib3}: the combination needs urllib3 2")
    root = copy_repo(tmp_path)
    assert deps(root, "v1.28.0").returncode == 0
    result = verify(root, "28.1.0", tmp_path, requires="Requires-Dist: urllib3<2.0,>=1.24.2\n")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"hack/download-deps.sh --verify: installed kubernetes client 28.1.0 requires urllib3 < 2 but urllib3 "
        f"{urllib3} is installed (a pair pip would not install, untested): run make, which reinstalls from "
        "pyproject.toml and lets pip pick urllib3"]


def fake_client(tmp_path: Path, call_api: str) -> None:
    """A ``kubernetes`` package first on the path whose ``CoreV1Api.patch_node`` takes ``**kwargs`` (28-36) and
    whose ``ApiClient`` has ``call_api``."""
    package = tmp_path / "site" / "kubernetes" / "client"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("class CoreV1Api:\n    def patch_node(self, name, body, **kwargs): ...\n"
                                         f"class ApiClient:\n    {call_api}\n")


def test_verify_names_a_manifest_that_disagrees_and_stale_generated_files(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    assert deps(root, "v1.30.2").returncode == 0
    deployment = root / "deploy/scheduler/03-deployment.yaml"
    deployment.write_text(deployment.read_text().replace("kube-scheduler:v1.30.2", "kube-scheduler:v1.32.4"))
    configmap = root / "deploy/scheduler/02-configmap.yaml"
    configmap.write_text(configmap.read_text().replace("LJRK_LOG_LEVEL: INFO", "LJRK_LOG_LEVEL: DEBUG"))
    result = verify(root, "30.1.0", tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == ("hack/download-deps.sh --verify: deploy/scheduler/03-deployment.yaml: kube-scheduler tag "
                        "v1.32.4 is not Kubernetes 1.30")
    assert lines[1].startswith("hack/download-deps.sh --verify: deploy/generate.py --check: ")
    assert "03-deployment.yaml (run: python3 deploy/generate.py)" in lines[1]  # its checksum is stale


def test_verify_refuses_a_requirement_no_entry_pins(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"kubernetes>=37"', '"kubernetes==29.0.0"'))
    result = verify(root, "29.0.0", tmp_path)
    assert result.returncode == 1
    assert result.stderr == ("hack/download-deps.sh: error: pyproject.toml: requirement 'kubernetes==29.0.0' is "
                             "neither the default (kubernetes>=37) nor a pin of hack/kubernetes-versions.toml: run "
                             "hack/download-deps.sh\n")


def test_verify_refuses_an_older_client_for_the_default(tmp_path: Path) -> None:
    result = verify(copy_repo(tmp_path), "35.0.0", tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == ("hack/download-deps.sh --verify: installed kubernetes client 35.0.0 "
                                             "does not satisfy the default kubernetes>=37: run make")


def test_1_36_pins_client_37_and_verify_checks_the_pins_major(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    switched = deps(root, "v1.36.3")
    assert switched.returncode == 0, switched.stderr
    assert "  pyproject.toml: kubernetes>=37 -> kubernetes==37.0.2" in switched.stdout.splitlines()
    assert live_version(root) == "1.36.3\n"
    right = verify(root, "37.0.2", tmp_path / "37")
    assert right.returncode == 0, right.stderr
    assert right.stdout == ("verified: Kubernetes 1.36, kubernetes client 37.0.2, manifests agree, live tests on "
                            "Kubernetes 1.36.3\n")
    wrong = verify(root, "36.0.3", tmp_path / "36")  # the minor's own major is not the pin's
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines() == [
        "hack/download-deps.sh --verify: installed kubernetes client 36.0.3 does not follow Kubernetes 1.36 "
        "(needs 37.0.2): run make lock build, which re-locks requirements/ and reinstalls from the lock"]


def test_verify_tells_the_minors_sharing_a_pin_apart_by_the_live_version(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    assert deps(root, "v1.36.3").returncode == 0
    to37 = deps(root, "v1.37.2")
    assert to37.stdout.splitlines() == [
        "switched to Kubernetes v1.37.2:",
        "  deploy/scheduler/03-deployment.yaml: kube-scheduler image v1.36.3 -> v1.37.2",
        f"  {SELECTED}: 1.36.3 -> 1.37.2 (the live tests' Kubernetes)",
        "next: make lock build (re-locks requirements/ for kubernetes==37.0.2, installs it into .venv and verifies)"]
    right = verify(root, "37.0.2", tmp_path / "a")
    assert right.returncode == 0, right.stderr
    assert right.stdout == ("verified: Kubernetes 1.37, kubernetes client 37.0.2, manifests agree, live tests on "
                            "Kubernetes 1.37.2\n")
    (root / SELECTED).write_text("1.36.3\n")  # by hand: the selection now reads as 1.36, against the 1.37 tag
    mixed = verify(root, "37.0.2", tmp_path / "b")
    assert mixed.returncode == 1
    assert mixed.stderr.splitlines() == [
        "hack/download-deps.sh --verify: deploy/scheduler/03-deployment.yaml: kube-scheduler tag v1.37.2 is not "
        "Kubernetes 1.36",
        "hack/download-deps.sh --verify: run hack/download-deps.sh vX.Y.Z (or --default) again, then make build"]


@pytest.mark.parametrize(("version", "client", "live", "problem"), [
    (None, "37.0.2", "1.36.3", "Kubernetes 1.36.3 is not the default's platform.default 1.37.2"),
    (None, "37.0.2", "1.33.0", "Kubernetes 1.33.0 is not one the platform builds (1.34.4, 1.35.4, 1.36.3, 1.37.2, "
                               "hack/kubernetes-versions.toml [platform.kubernetes])"),
    ("v1.34.4", "34.1.0", "1.35.4", "Kubernetes 1.35.4 is not Kubernetes 1.34 (the platform builds 1.34.4)"),
    ("v1.37.2", "37.0.2", "1.35.4", "Kubernetes 1.35.4 is not Kubernetes 1.37 (the platform builds 1.37.2)"),
    ("v1.28.0", "28.1.0", "1.27.3", "Kubernetes 1.27.3 is not one the platform builds (1.34.4, 1.35.4, 1.36.3, "
                                    "1.37.2, hack/kubernetes-versions.toml [platform.kubernetes])"),
    ("v1.28.0", "28.1.0", "", "missing or empty; it names the live tests' Kubernetes (1.37.2)"),
])
def test_verify_names_a_live_version_that_does_not_go_with_the_selection(
        version: str | None, client: str, live: str, problem: str, tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    if version is not None:
        assert deps(root, version).returncode == 0
    (root / SELECTED).write_text(f"{live}\n" if live else "")
    result = verify(root, client, tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"hack/download-deps.sh --verify: {SELECTED}: {problem}",
        "hack/download-deps.sh --verify: run hack/download-deps.sh vX.Y.Z (or --default) again, then make build"]


def test_make_build_verifies_before_the_wheel() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^build: \$\(STAMP\)\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    assert recipe.group(1).splitlines() == [
        "\t$(BIN)/python scripts/download_deps.py --verify",
        "\t$(BIN)/python -m pip wheel --no-deps --no-build-isolation --wheel-dir dist ."]


def test_make_test_verifies_the_selection_before_the_suite() -> None:
    makefile = (REPO / "Makefile").read_text()
    goal = re.search(r"^test: (.*)$", makefile, re.M)
    assert goal is not None
    prerequisites = goal.group(1).split()
    assert prerequisites.index("deps-check") < prerequisites.index("unit")
    recipe = re.search(r"^deps-check: \$\(STAMP\)\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    assert recipe.group(1).splitlines() == ["\t$(BIN)/python scripts/download_deps.py --verify"]


# ---------------------------------------------------------------- the wrapper
def test_the_wrapper_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = subprocess.run([shellcheck, str(REPO / "hack" / "download-deps.sh")], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout


def test_the_wrapper_without_python_says_so(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    result = deps(root, "v1.28.0", env={"PYTHON": str(tmp_path / "no-python")})
    assert result.returncode == 1
    assert result.stderr == (f"download-deps.sh: error: {tmp_path / 'no-python'} not found: install Python >= 3.11 "
                             "or set PYTHON=/path/to/python3\n")
