"""The Kubernetes adapter with the oldest and the newest client ``hack/download-deps.sh`` pins (issue 14 §2).

For the oldest pin of ``hack/kubernetes-versions.toml`` and the newest one below the default's client (today 1.28 →
``kubernetes==28.1.0`` and 1.35 → ``kubernetes==35.0.0``; 1.36 and 1.37 pin 37.0.2, the default's client, which
runs the whole suite), each case:

* builds, once, a virtual environment holding only that client and what pip resolves for it (28 pulls urllib3
  1.26: the client itself requires urllib3 < 2), cached in ``$LJRK_CLIENT_VENVS``, else
  ``/var/cache/ljrk-k8s/client-venvs`` when writable, else the temp dir, keyed by client version and Python
  version; everything else (pytest, attrs, grpcio …) comes from this interpreter's site-packages through a
  ``.pth`` placed after the venv's own, and the project from ``src`` (pytest's ``pythonpath``). One
  ``pip install`` per client: about 15-20 s from PyPI, then nothing;
* checks that this interpreter's adapter sees that client and picks the style it needs (``compat.STYLE``:
  ``header`` for 28-35);
* runs the ``kubernetes`` cases of ``tests/contract/test_cluster_contract.py`` and
  ``tests/contract/test_cluster_jobs_contract.py``, and ``tests/contract/test_kubernetes_raw_json.py``, with that
  interpreter, against the real control plane those
  suites start (their fixtures, ``tests/contract/conftest.py``), plus ``test_kubernetes_event_dedup.py`` (the
  Event patch's ``Content-Type: application/merge-patch+json`` on the wire), and requires every one to pass
  (the runs of the two clients go side by side, each against its own control plane: about 30-50 s for both).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TABLE = tomllib.loads((REPO / "hack" / "kubernetes-versions.toml").read_text())
MINORS = sorted(TABLE["minors"], key=lambda m: tuple(int(p) for p in m.split(".")))
_FLOOR = int(TABLE["default"]["client"].removeprefix(">="))
_OLDER = [TABLE["minors"][m]["client"] for m in MINORS if int(TABLE["minors"][m]["client"].split(".")[0]) < _FLOOR]
PINNED = [_OLDER[0], _OLDER[-1]]
CONTRACTS = ("tests/contract/test_cluster_contract.py", "tests/contract/test_cluster_jobs_contract.py",
             "tests/contract/test_kubernetes_raw_json.py", "tests/integration/test_kubernetes_event_dedup.py")
"""The cluster and Job contracts, the raw-JSON LIST/watch path against the client's models, and the Event repeat
patch as it goes on the wire (its Content-Type)."""

pytestmark = pytest.mark.k8s


def _cache_root() -> Path:
    env = os.environ.get("LJRK_CLIENT_VENVS")
    if env:
        return Path(env)
    shared = Path("/var/cache/ljrk-k8s")
    if shared.is_dir() and os.access(shared, os.W_OK):
        return shared / "client-venvs"
    return Path(tempfile.gettempdir()) / "ljrk-client-venvs"


def client_venv(version: str) -> Path:
    """The interpreter of the cached venv for ``kubernetes==version`` (module docstring), built when missing or
    made for another outer site-packages. Built under a unique name and renamed into place, so concurrent
    sessions never see half a venv."""
    outer = sysconfig.get_paths()["purelib"]
    tag = f"py{sys.version_info.major}.{sys.version_info.minor}"
    root = _cache_root()
    venv = root / f"kubernetes-{version}-{tag}"
    marker = venv / "ljrk-outer-site.txt"
    if marker.is_file() and marker.read_text() == outer:
        return venv / "bin" / "python"
    root.mkdir(parents=True, exist_ok=True)
    building = root / f".building-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, timeout=120)
        install = subprocess.run(
            [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             f"kubernetes=={version}"], capture_output=True, text=True, timeout=600, check=False)
        assert install.returncode == 0, install.stderr[-2000:]
        inner = subprocess.run([str(building / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
        (Path(inner) / "zz-ljrk-outer-site.pth").write_text(outer + "\n")  # after the venv's own packages
        (building / "ljrk-outer-site.txt").write_text(outer)
        shutil.rmtree(venv, ignore_errors=True)
        with contextlib.suppress(OSError):  # another session put one in place first: use it
            building.rename(venv)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    # a renamed venv's scripts name the old path; its python (all this uses) finds pyvenv.cfg beside it
    return venv / "bin" / "python"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "LJRK_REQUIRE_K8S": "1"}


@pytest.fixture(scope="module")
def contract_runs(k8s_bin_dir: Path) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """One contract run per pinned client (``pytest`` in its venv, each against its own control plane), all started
    at once: they mostly wait on their API servers, so side by side they take about the time of one. Each is
    killed if still running at the end of the module."""
    env = {key: value for key, value in _env().items() if key != "PYTHONPATH"}  # pytest's pythonpath adds src
    runs: dict[str, subprocess.Popen[str]] = {}
    try:
        for version in PINNED:
            runs[version] = subprocess.Popen(
                [str(client_venv(version)), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "-o", "faulthandler_timeout=120", *CONTRACTS, "-k", "kubernetes"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
        yield runs
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
            run.communicate()


@pytest.mark.parametrize("version", PINNED)
def test_the_cluster_contracts_pass_with_a_pinned_client(
    version: str, contract_runs: dict[str, subprocess.Popen[str]]
) -> None:
    python = client_venv(version)
    code = ("import kubernetes, urllib3; from adapters.kubernetes import compat; "
            "print(kubernetes.__version__, urllib3.__version__, compat.STYLE, compat.client_problems())")
    probe = subprocess.run(
        [str(python), "-c", code],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO, env=_env())
    assert probe.returncode == 0, probe.stderr
    client, urllib3, style, problems = probe.stdout.split(maxsplit=3)
    expected_style = "keyword" if int(version.split(".")[0]) >= 37 else "header"
    assert (client, style, problems.strip()) == (version, expected_style, "[]")
    if version.startswith("28."):
        assert urllib3.startswith("1."), urllib3
    run = contract_runs[version]
    try:
        stdout, stderr = run.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        run.kill()
        stdout, stderr = run.communicate()
        pytest.fail(f"the contract run with kubernetes=={version} ran longer than 900 s: {stdout[-3000:]}")
    summary = stdout.strip().splitlines()[-1] if stdout.strip() else stderr[-2000:]
    assert run.returncode == 0, stdout[-6000:] + stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= 50, summary  # 55 today: every kubernetes case of the four files
    assert "failed" not in summary, summary
    assert "error" not in summary, summary
