#!/usr/bin/env python3
"""The hash-locked requirements and the pinned base image (docs/security.md#supply-chain).

``supply_chain.py lock [--upgrade]`` (``make lock``; needs the package index) regenerates, with ``uv pip compile
--universal --generate-hashes`` (one resolution valid on every Python that ``requires-python`` admits, markers where
a version differs by Python), three files of ``requirements/``:

* ``dev.lock``: the runtime dependencies, the ``dev`` extra and the build backend (``[build-system].requires``):
  what ``make`` installs into ``.venv`` (``pip install --require-hashes``), then the project with ``--no-deps
  --no-build-isolation``; CI (``.ci/run`` → ``make test``) therefore installs it too;
* ``runtime.lock``: the runtime dependencies alone, what the images install (``docker/*.Dockerfile``);
* ``build.lock``: what the images' build stage uses: the build backend and the SBOM generator (``cyclonedx-bom``,
  taken from the ``dev`` extra).

``runtime.lock`` and ``build.lock`` are resolved under ``dev.lock`` as constraints, so a package has one version in
all three: what the tests ran is what the images ship. Each lock's third line records a hash of its inputs (the
requirements above and the Python floor), so any change to them in ``pyproject.toml`` makes the lock stale.

``supply_chain.py check`` (``make lock-check``, one of ``make test``'s gates; no network, nothing written) exits 1
naming each problem:

* a lock whose recorded inputs differ from ``pyproject.toml``'s (run ``make lock``);
* an entry that is not ``name==version`` with at least one ``--hash=sha256:``;
* a requirement of ``pyproject.toml`` that the lock lacks, or pins at a version outside its specifier, or pins twice,
  on any supported Python (3.FLOOR to 3.14, at x.y.0 and a late x.y.N, Linux);
* a package pinned at different versions in two locks for the same Python;
* a Dockerfile whose ``ARG PYTHON_IMAGE=`` is not the digest pin of ``hack/base-images.txt``, or a pin there that
  is not ``name:tag@sha256:<64 hex>``.

Exit codes: 0 fine; 1 a problem (listed); 2 bad command line or a tool missing.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = Path("requirements")
DEV, RUNTIME, BUILD = "dev", "runtime", "build"
IMAGE_BUILD_TOOLS = ("cyclonedx-bom",)
"""Requirements of the ``dev`` extra that the images' build stage also installs (from ``build.lock``)."""
BASE_IMAGES = Path("hack/base-images.txt")
DOCKERFILES = Path("docker")
NEWEST_MINOR = 14
"""The newest Python 3 minor the locks are checked for (with every minor from requires-python's floor up)."""
STAMP = re.compile(r"^# inputs sha256:(?P<hash>[0-9a-f]{64})$", re.M)
PINNED_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?@sha256:[0-9a-f]{64}$")
BASE_ARG = re.compile(r"^ARG PYTHON_IMAGE(?:=(?P<value>\S*))?\s*$", re.M)


class UsageError(Exception):
    """A command-line or environment problem (exit 2)."""


@dataclass(frozen=True)
class Entry:
    """One pinned requirement of a lock: ``name==version ; marker`` with its hashes."""

    name: str
    version: Version
    marker: Marker | None
    hashes: tuple[str, ...]
    line: str


def load_pyproject(root: Path) -> dict[str, object]:
    with (root / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def python_floor(project: dict[str, object]) -> tuple[int, int]:
    spec = str(project.get("requires-python", ""))
    for s in SpecifierSet(spec):
        if s.operator == ">=":
            major, minor = Version(s.version).release[:2]
            return major, minor
    raise UsageError(f"pyproject.toml: requires-python {spec!r} has no '>=X.Y' floor to lock for")


def lock_inputs(root: Path) -> tuple[dict[str, list[str]], tuple[int, int]]:
    """Each lock's input requirements (as in pyproject.toml) and the Python floor."""
    data = load_pyproject(root)
    project = data["project"]
    assert isinstance(project, dict)
    runtime = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    dev = list(extras.get("dev", [])) if isinstance(extras, dict) else []
    build_system = data.get("build-system", {})
    backend = list(build_system.get("requires", [])) if isinstance(build_system, dict) else []
    tools = [r for r in dev if canonicalize_name(Requirement(r).name) in IMAGE_BUILD_TOOLS]
    missing = set(IMAGE_BUILD_TOOLS) - {canonicalize_name(Requirement(r).name) for r in tools}
    if missing:
        raise UsageError(f"pyproject.toml: the dev extra lacks {', '.join(sorted(missing))} (the images' build stage)")
    return {DEV: runtime + dev + backend, RUNTIME: runtime, BUILD: backend + tools}, python_floor(project)


def inputs_hash(requirements: Iterable[str], floor: tuple[int, int]) -> str:
    lines = sorted({str(Requirement(r)) for r in requirements})
    return hashlib.sha256("\n".join([f"python>={floor[0]}.{floor[1]}", *lines]).encode()).hexdigest()


def lock_path(root: Path, name: str) -> Path:
    return root / LOCKS / f"{name}.lock"


# ---------------------------------------------------------------- lock
def uv_binary() -> str:
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        raise UsageError("uv not found: make installs it into .venv (the dev extra); run make lock")
    return found


def compile_lock(root: Path, name: str, requirements: Sequence[str], floor: tuple[int, int],
                 constraints: Path | None, upgrade: bool) -> None:
    out = lock_path(root, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [uv_binary(), "pip", "compile", "-", "--universal", "--python-version", f"{floor[0]}.{floor[1]}",
               "--generate-hashes", "--fork-strategy", "fewest", "--no-config", "--quiet",
               "--custom-compile-command", "make lock", "--output-file", str(out)]
    if constraints is not None:
        command += ["--constraint", str(constraints.relative_to(root))]
    if upgrade:
        command.append("--upgrade")
    result = subprocess.run(command, input="\n".join(requirements) + "\n", text=True, cwd=root,
                            capture_output=True, check=False)
    if result.returncode != 0:
        raise UsageError(f"uv pip compile for {out.relative_to(root)} failed:\n{result.stderr.strip()}")
    # uv's two header lines, then the inputs hash: `check` compares it with pyproject.toml without the network.
    lines = out.read_text().splitlines(keepends=True)
    stamp = f"# inputs sha256:{inputs_hash(requirements, floor)}\n"
    out.write_text("".join([*lines[:2], stamp, *lines[2:]]))
    print(f"{out.relative_to(root)}: {len(parse_lock(out.read_text()))} entries")


def cmd_lock(root: Path, upgrade: bool) -> int:
    inputs, floor = lock_inputs(root)
    compile_lock(root, DEV, inputs[DEV], floor, None, upgrade)
    for name in (RUNTIME, BUILD):
        compile_lock(root, name, inputs[name], floor, lock_path(root, DEV), upgrade=False)
    return 0


# ---------------------------------------------------------------- check
def parse_lock(text: str) -> list[Entry]:
    """The entries of a ``--generate-hashes`` requirements file (continuation lines joined, comments dropped).

    Raises ValueError naming the line for anything but ``name==version [; marker]`` followed by hashes."""
    entries: list[Entry] = []
    logical = re.sub(r"\\\n", " ", text)
    for raw in logical.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        head, *options = re.split(r"\s+(?=--)", line)
        hashes = []
        for option in options:
            m = re.fullmatch(r"--hash=sha256:([0-9a-f]{64})", option.strip())
            if m is None:
                raise ValueError(f"{head}: unexpected option {option.strip()!r} (only --hash=sha256:… is allowed)")
            hashes.append(m.group(1))
        try:
            req = Requirement(head)
        except ValueError as exc:
            raise ValueError(f"{head!r} is not a requirement: {exc}") from None
        pins = list(req.specifier)
        if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version or req.url:
            raise ValueError(f"{head}: not pinned to one version (name==version)")
        if not hashes:
            raise ValueError(f"{head}: no --hash=sha256:… (pip --require-hashes would refuse the file)")
        entries.append(Entry(canonicalize_name(req.name), Version(pins[0].version), req.marker, tuple(hashes), head))
    return entries


def environments(floor: tuple[int, int]) -> list[dict[str, str]]:
    """Linux CPython environments for every supported minor, at its first and a late patch release."""
    envs: list[dict[str, str]] = []
    for minor in range(floor[1], NEWEST_MINOR + 1):
        for patch in (0, 99):
            env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
            env.update(python_version=f"3.{minor}", python_full_version=f"3.{minor}.{patch}", sys_platform="linux",
                       platform_system="Linux", os_name="posix", implementation_name="cpython",
                       platform_python_implementation="CPython")
            envs.append(env)
    return envs


def active(entries: Iterable[Entry], env: dict[str, str]) -> dict[str, list[Entry]]:
    found: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.marker is None or entry.marker.evaluate(env):
            found.setdefault(entry.name, []).append(entry)
    return found


def check_lock(root: Path, name: str, requirements: Sequence[str], floor: tuple[int, int],
               envs: Sequence[dict[str, str]]) -> tuple[list[str], list[Entry]]:
    path = lock_path(root, name)
    rel = path.relative_to(root)
    if not path.is_file():
        return [f"{rel} is missing: run make lock"], []
    text = path.read_text()
    try:
        entries = parse_lock(text)
    except ValueError as exc:
        return [f"{rel}: {exc}"], []
    problems = []
    stamp = STAMP.search(text)
    if stamp is None:
        problems.append(f"{rel} records no '# inputs sha256:' line (not written by make lock): run make lock")
    elif stamp.group("hash") != inputs_hash(requirements, floor):
        problems.append(f"{rel} was locked from other requirements than pyproject.toml's now: run make lock")
    for env in envs:
        pinned = active(entries, env)
        where = f"on Python {env['python_full_version']}"
        for entry_name, found in sorted(pinned.items()):
            if len(found) > 1:
                problems.append(f"{rel} pins {entry_name} {len(found)} times {where}")
        for requirement in map(Requirement, requirements):
            if requirement.marker is not None and not requirement.marker.evaluate(env):
                continue
            found = pinned.get(canonicalize_name(requirement.name), [])
            if not found:
                problems.append(f"{rel} lacks {requirement} {where}: run make lock")
            elif not requirement.specifier.contains(found[0].version, prereleases=True):
                problems.append(f"{rel} pins {found[0].name}=={found[0].version}, outside {requirement} {where}: "
                                "run make lock")
    return sorted(set(problems), key=problems.index), entries


def check_agreement(locks: dict[str, list[Entry]], envs: Sequence[dict[str, str]]) -> list[str]:
    problems = []
    for env in envs:
        versions: dict[str, dict[Version, list[str]]] = {}
        for lock, entries in locks.items():
            for entry_name, found in active(entries, env).items():
                versions.setdefault(entry_name, {}).setdefault(found[0].version, []).append(lock)
        for entry_name, by_version in sorted(versions.items()):
            if len(by_version) > 1:
                said = ", ".join(f"{v} in {'/'.join(ls)}" for v, ls in sorted(by_version.items()))
                problems.append(f"requirements/: {entry_name} differs between locks on Python "
                                f"{env['python_full_version']} ({said}): run make lock")
    return sorted(set(problems), key=problems.index)


def read_base_pin(root: Path) -> tuple[str | None, list[str]]:
    """The one digest-pinned base image reference of hack/base-images.txt (comments and blank lines aside)."""
    path = root / BASE_IMAGES
    if not path.is_file():
        return None, [f"{BASE_IMAGES} is missing (one line: name:tag@sha256:<digest>)"]
    refs = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if len(refs) != 1:
        return None, [f"{BASE_IMAGES} must hold exactly one image reference, found {len(refs)}"]
    if PINNED_IMAGE.fullmatch(refs[0]) is None:
        return None, [f"{BASE_IMAGES}: {refs[0]!r} is not pinned by digest (name:tag@sha256:<64 hex>)"]
    return refs[0], []


def check_base_images(root: Path) -> list[str]:
    pin, problems = read_base_pin(root)
    if pin is None:
        return problems
    dockerfiles = sorted((root / DOCKERFILES).glob("*.Dockerfile"))
    if not dockerfiles:
        return [f"{DOCKERFILES}/ has no *.Dockerfile"]
    for dockerfile in dockerfiles:
        rel = dockerfile.relative_to(root)
        defaults = [m.group("value") for m in BASE_ARG.finditer(dockerfile.read_text()) if m.group("value")]
        if defaults != [pin]:
            problems.append(f"{rel}: ARG PYTHON_IMAGE defaults to {', '.join(defaults) or 'nothing'}, not "
                            f"{BASE_IMAGES}'s {pin}")
    return problems


def cmd_check(root: Path) -> int:
    inputs, floor = lock_inputs(root)
    envs = environments(floor)
    problems: list[str] = []
    locks: dict[str, list[Entry]] = {}
    for name in (DEV, RUNTIME, BUILD):
        found, entries = check_lock(root, name, inputs[name], floor, envs)
        problems += found
        locks[name] = entries
    problems += check_agreement(locks, envs)
    problems += check_base_images(root)
    for problem in problems:
        print(f"supply-chain check: {problem}", file=sys.stderr)
    if problems:
        return 1
    counts = ", ".join(f"{name}.lock {len(entries)}" for name, entries in locks.items())
    print(f"supply-chain check: locks agree with pyproject.toml ({counts} entries; Python 3.{floor[1]}-3."
          f"{NEWEST_MINOR}); base image pinned by digest")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    lock = sub.add_parser("lock", help="regenerate requirements/*.lock with uv (needs the package index)")
    lock.add_argument("--upgrade", action="store_true", help="newest versions allowed, not the locked ones")
    sub.add_parser("check", help="the locks agree with pyproject.toml; the base image is pinned (no network)")
    sub.add_parser("base-image", help="print hack/base-images.txt's pinned reference")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if args.command == "lock":
            return cmd_lock(root, args.upgrade)
        if args.command == "base-image":
            pin, problems = read_base_pin(root)
            for problem in problems:
                print(f"supply-chain: {problem}", file=sys.stderr)
            if pin is None:
                return 1
            print(pin)
            return 0
        return cmd_check(root)
    except UsageError as exc:
        print(f"supply-chain: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
