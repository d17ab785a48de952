"""scripts/supply_chain.py check (``make lock-check``): the hash-locked requirements agree with pyproject.toml and
each other, and the Dockerfiles' base is hack/base-images.txt's digest pin; the Makefile installs from the lock.

Each failure case edits a copy of the files the check reads (pyproject.toml, requirements/, docker/, hack/) and
asserts the exact problem it names; nothing here needs the network (``make lock`` does, and is not run)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "supply_chain.py"
PIN = next(line for line in (REPO / "hack" / "base-images.txt").read_text().splitlines()
           if line.strip() and not line.startswith("#"))
SHA = "0" * 64


def copy_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    for folder in ("requirements", "docker"):
        shutil.copytree(REPO / folder, root / folder)
    (root / "hack").mkdir()
    shutil.copy2(REPO / "hack" / "base-images.txt", root / "hack" / "base-images.txt")
    return root


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), "check"], capture_output=True,
                          text=True, timeout=120, check=False)


def problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 1, result.stdout + result.stderr
    return [line.removeprefix("supply-chain check: ") for line in result.stderr.splitlines()]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def entry(lock: Path, name: str) -> str:
    """The first line of ``name``'s entry in the lock (``name==version ...``)."""
    found = re.search(rf"^{re.escape(name)}==\S+.*$", lock.read_text(), re.M)
    assert found is not None, name
    return found.group(0)


def test_the_committed_locks_and_pin_pass() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "check"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "locks agree with pyproject.toml" in result.stdout


def test_every_lock_entry_is_pinned_with_hashes() -> None:
    for lock in sorted((REPO / "requirements").glob("*.lock")):
        text = re.sub(r"\\\n", " ", lock.read_text())
        entries = [ln for ln in text.splitlines() if ln and not ln.lstrip().startswith("#")]
        assert entries, lock
        for line in entries:
            assert re.match(r"^[A-Za-z0-9._-]+==[^ ;*]+( ;[^-]+)? +--hash=sha256:[0-9a-f]{64}", line), line


def test_a_changed_requirement_makes_the_lock_stale(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    edit(root / "pyproject.toml", '"tqdm>=4.66",', '"tqdm>=4.66",\n    "rich>=13",')
    said = problems(check(root))
    stale = "was locked from other requirements than pyproject.toml's now: run make lock"
    assert f"requirements/dev.lock {stale}" in said
    assert f"requirements/runtime.lock {stale}" in said
    assert "requirements/runtime.lock lacks rich>=13 on Python 3.11.0: run make lock" in said
    assert not any("build.lock" in p for p in said)  # the build backend and the SBOM tool did not change


def test_a_pin_outside_the_specifier_is_named(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    pinned = entry(root / "requirements" / "runtime.lock", "tqdm").split()[0]
    edit(root / "pyproject.toml", '"tqdm>=4.66",', '"tqdm>=999",')
    said = problems(check(root))
    assert f"requirements/runtime.lock pins {pinned}, outside tqdm>=999 on Python 3.11.0: run make lock" in said


def test_an_entry_without_hashes_is_refused(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    lock = root / "requirements" / "build.lock"
    pinned = entry(lock, "wheel").split()[0]
    text, count = re.subn(r"^(wheel==\S+) \\\n(?:    --hash=\S+(?: \\)?\n)+", r"\1\n", lock.read_text(), flags=re.M)
    assert count == 1
    lock.write_text(text)
    assert problems(check(root)) == [
        f"requirements/build.lock: {pinned}: no --hash=sha256:… (pip --require-hashes would refuse the file)"]


def test_locks_that_disagree_on_a_version_are_named(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    lock = root / "requirements" / "runtime.lock"
    head = entry(lock, "pyyaml")
    version = head.split()[0].split("==")[1]
    edit(lock, head, head.replace(f"=={version}", "==6.0.0", 1))
    said = problems(check(root))
    assert (f"requirements/: pyyaml differs between locks on Python 3.11.0 (6.0.0 in runtime, {version} in dev): "
            "run make lock") in said


def test_an_unpinned_base_image_is_refused(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    edit(root / "hack" / "base-images.txt", PIN, "python:3.11-slim")
    assert problems(check(root)) == [
        "hack/base-images.txt: 'python:3.11-slim' is not pinned by digest (name:tag@sha256:<64 hex>)"]


def test_a_dockerfile_off_the_pin_is_named(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    other = f"python:3.11-slim@sha256:{SHA}"
    edit(root / "docker" / "runtime.Dockerfile", f"ARG PYTHON_IMAGE={PIN}", f"ARG PYTHON_IMAGE={other}")
    edit(root / "docker" / "exporter.Dockerfile", f"ARG PYTHON_IMAGE={PIN}", "ARG PYTHON_IMAGE=python:3.11-slim")
    assert problems(check(root)) == [
        f"docker/exporter.Dockerfile: ARG PYTHON_IMAGE defaults to python:3.11-slim, not hack/base-images.txt's {PIN}",
        f"docker/runtime.Dockerfile: ARG PYTHON_IMAGE defaults to {other}, not "
        f"hack/base-images.txt's {PIN}"]


def test_a_missing_lock_says_how_to_make_it(tmp_path: Path) -> None:
    root = copy_repo(tmp_path)
    (root / "requirements" / "build.lock").unlink()
    assert "requirements/build.lock is missing: run make lock" in problems(check(root))


def test_the_pin_is_printed_for_the_image_builds() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "base-image"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{PIN}\n"
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", PIN)


def test_the_venv_installs_only_from_the_lock_and_make_test_checks_it() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^\$\(STAMP\): (.*)\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None
    assert "$(LOCK)" in recipe.group(1).split()
    assert re.search(r"^LOCK := requirements/dev\.lock$", makefile, re.M)
    installs = [ln for ln in recipe.group(2).splitlines() if "pip install" in ln]
    assert installs == ["\t$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)",
                        "\t$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e ."]
    goal = re.search(r"^test: (.*)$", makefile, re.M)
    assert goal is not None
    assert goal.group(1).split().index("lock-check") < goal.group(1).split().index("unit")


@pytest.mark.parametrize("dockerfile", sorted((REPO / "docker").glob("*.Dockerfile")), ids=lambda p: p.stem)
def test_the_images_install_the_runtime_lock_with_hashes(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert "--require-hashes -r requirements/runtime.lock" in text
    assert "--require-hashes -r requirements/build.lock" in text
    assert "--no-index --no-deps /wheels/*.whl" in text  # the project alone, after the locked dependencies
    commands = [c.strip() for c in re.sub(r"\\\n\s*", " ", text).split("&&")]
    installs = [c for c in commands if "pip " in c and " install " in c]
    assert len(installs) == 3
    for command in installs:  # each install is hash-checked, or the project's own wheel alone
        assert "--require-hashes -r requirements/" in command or command.endswith("--no-deps /wheels/*.whl"), command


def test_images_sh_refuses_an_unpinned_base_image() -> None:
    env = {"PATH": "/usr/bin:/bin", "BASE_IMAGE": "python:3.11-slim"}
    result = subprocess.run(["bash", str(REPO / "scripts" / "images.sh"), "hash"], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert result.returncode == 1
    assert "BASE_IMAGE=python:3.11-slim is not pinned by digest" in result.stderr
    pinned = subprocess.run(["bash", str(REPO / "scripts" / "images.sh"), "hash"], capture_output=True, text=True,
                            timeout=60, check=False, env={**env, "BASE_IMAGE": "pinned"})
    assert pinned.returncode == 0, pinned.stderr
    assert re.fullmatch(r"[0-9a-f]{16}\n", pinned.stdout)
