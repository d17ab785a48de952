#!/usr/bin/env python3
"""Switch the build and the deployment to a Kubernetes version (``hack/download-deps.sh``), and verify it.

``download_deps.py vX.Y.Z`` sets, for that Kubernetes minor (table: ``hack/kubernetes-versions.toml``):

1. ``pyproject.toml``: the ``kubernetes`` requirement becomes ``kubernetes==<client>``, the official Python
   client release of that minor (client majors follow Kubernetes minors); ``make`` reinstalls on the change;
2. ``deploy/scheduler/03-deployment.yaml``: the image becomes ``registry.k8s.io/kube-scheduler:vX.Y.Z``;
3. ``deploy/scheduler/02-configmap.yaml``: the KubeSchedulerConfiguration's ``apiVersion`` becomes the one that
   minor's kube-scheduler reads;

then runs ``deploy/generate.py`` (the ConfigMap's checksum changed) and prints each change. Running it again
changes nothing (idempotent); ``--default`` returns to the committed state (the table's ``[default]``).
``--verify`` (``make build`` runs it) changes nothing and exits 1 naming each disagreement: the selection is read
from the ``kubernetes`` requirement (``==N.*`` → Kubernetes 1.N; the default's requirement → the default), and the
installed client's major (``importlib.metadata`` of this interpreter), the kube-scheduler tag's minor, the
configuration's apiVersion and ``deploy/generate.py --check`` must all agree with it, and the installed client must
be one ``adapters/kubernetes`` works with: the rule is the adapter's own ``client_problems()``, loaded by path from
``src/adapters/kubernetes/compat.py`` (clients 28-35 and >= 37 send merge patches; a client of another shape, or
one requiring urllib3 < 2 beside urllib3 2.x, fails with a message naming it).

Invariants: only those three lines change (each must occur exactly once, else exit 1 and nothing is written);
``pyproject.toml`` is edited as text (its comments stay) and re-read with ``tomllib`` to confirm the edit; all
files are checked before any is written. Standard library only: it runs before ``.venv`` exists (``--verify``
alone imports the installed client, through ``compat.py``).
Exit codes: 0 done (or verified); 1 verification failed or a file is not as expected; 2 bad command line or an
unsupported version (the message lists the supported ones).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = Path("hack/kubernetes-versions.toml")
PYPROJECT = Path("pyproject.toml")
DEPLOYMENT = Path("deploy/scheduler/03-deployment.yaml")
CONFIGMAP = Path("deploy/scheduler/02-configmap.yaml")
GENERATE = Path("deploy/generate.py")
COMPAT = Path("src/adapters/kubernetes/compat.py")

VERSION = re.compile(r"^v(?P<major>1)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)$")
"""A Kubernetes release as ``download-deps.sh`` takes it: ``v1.MINOR.PATCH`` (e.g. ``v1.28.0``)."""
TAG_LINE = re.compile(r"^(?P<head>\s*image: registry\.k8s\.io/kube-scheduler:)(?P<value>\S+)(?P<tail>\s*)$", re.M)
API_LINE = re.compile(r"^(?P<head>    apiVersion: )(?P<value>kubescheduler\.config\.k8s\.io/\S+)(?P<tail>\s*)$", re.M)
"""The KubeSchedulerConfiguration's apiVersion: the first line of the ConfigMap's scheduler-config.yaml block."""
CLIENT_REQ = re.compile(r"^kubernetes\s*(?P<spec>[<>=!~].*)$")
TAG_MINOR = re.compile(r"^v?1\.(?P<minor>[0-9]+)(?:\.|$)")


class DepsError(Exception):
    """A file is not as expected, or a version is unsupported; ``code`` is the exit status (1 or 2)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Target:
    """What a selection sets: the client requirement specifier (``==28.1.0`` or ``>=37``), the kube-scheduler
    tag, the KubeSchedulerConfiguration apiVersion, and a label for messages."""

    client_spec: str
    tag: str
    api: str
    label: str


def load_table(root: Path) -> dict[str, object]:
    """``hack/kubernetes-versions.toml`` under ``root``. Raises :class:`DepsError` when it is missing a part."""
    path = root / TABLE
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DepsError(f"{path}: {error}") from None
    if not isinstance(table.get("default"), dict) or not isinstance(table.get("minors"), dict):
        raise DepsError(f"{path}: needs a [default] table and [minors.\"1.N\"] tables")
    return table


def supported(table: dict[str, object]) -> list[str]:
    """The supported minors, ``["1.28", "1.30", …]`` in version order."""
    minors = table["minors"]
    assert isinstance(minors, dict)
    return sorted(minors, key=lambda m: tuple(int(p) for p in m.split(".")))


def target_for(table: dict[str, object], version: str | None) -> Target:
    """The :class:`Target` of ``version`` (``vX.Y.Z``), or of the default for None. Raises :class:`DepsError`
    (code 2) for a malformed version or a minor not in the table, naming the supported ones."""
    names = ", ".join(f"v{m}" for m in supported(table))
    if version is None:
        default = table["default"]
        assert isinstance(default, dict)
        return Target(default["client"], default["kube-scheduler-tag"], default["scheduler-config-api"], "the default")
    match = VERSION.match(version)
    if match is None:
        raise DepsError(f"version '{version}' is not vMAJOR.MINOR.PATCH (e.g. v1.28.0); supported: {names}", 2)
    minor = f"1.{match['minor']}"
    entries = table["minors"]
    assert isinstance(entries, dict)
    if minor not in entries:
        raise DepsError(f"Kubernetes {minor} ({version}) is not supported; supported: {names} (any patch)", 2)
    entry = entries[minor]
    return Target(f"=={entry['client']}", version, entry["scheduler-config-api"], f"Kubernetes {version}")


def client_requirement(pyproject: str) -> str:
    """The ``kubernetes`` entry of ``[project] dependencies`` (e.g. ``kubernetes>=37``). Raises :class:`DepsError`
    unless exactly one entry names the distribution ``kubernetes``."""
    deps = tomllib.loads(pyproject).get("project", {}).get("dependencies", [])
    hits = [d for d in deps if CLIENT_REQ.match(d)]
    if len(hits) != 1:
        raise DepsError(f"{PYPROJECT}: expected one 'kubernetes…' entry in [project] dependencies, found {hits}")
    return str(hits[0])


def _replace_one(text: str, pattern: re.Pattern[str], value: str, where: Path, what: str) -> tuple[str, str]:
    """``(new text, old value)`` with the one line ``pattern`` matches set to ``value``."""
    hits = list(pattern.finditer(text))
    if len(hits) != 1:
        raise DepsError(f"{where}: expected one {what} line, found {len(hits)}")
    hit = hits[0]
    return text[:hit.start()] + f"{hit['head']}{value}{hit['tail']}" + text[hit.end():], hit["value"]


def plan(root: Path, target: Target) -> tuple[dict[Path, str], list[str]]:
    """The new text of each file that changes under ``root`` and one line per change. Raises :class:`DepsError`
    when a file lacks the line it should have (nothing is written then)."""
    changed: dict[Path, str] = {}
    notes: list[str] = []
    pyproject = (root / PYPROJECT).read_text()
    old_req = client_requirement(pyproject)
    new_req = f"kubernetes{target.client_spec}"
    if old_req != new_req:
        quoted = f'"{old_req}"'
        if pyproject.count(quoted) != 1:
            raise DepsError(f"{PYPROJECT}: expected the string {quoted} once, found {pyproject.count(quoted)}")
        text = pyproject.replace(quoted, f'"{new_req}"')
        if client_requirement(text) != new_req:
            raise DepsError(f"{PYPROJECT}: the edit did not land on [project] dependencies")
        changed[root / PYPROJECT] = text
        notes.append(f"{PYPROJECT}: {old_req} -> {new_req}")
    for path, pattern, value, what in ((DEPLOYMENT, TAG_LINE, target.tag, "kube-scheduler image"),
                                       (CONFIGMAP, API_LINE, target.api, "KubeSchedulerConfiguration apiVersion")):
        text = (root / path).read_text()
        new, old = _replace_one(text, pattern, value, path, what)
        if new != text:
            changed[root / path] = new
            notes.append(f"{path}: {what} {old} -> {value}")
    return changed, notes


def _generate(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / GENERATE), "--root", str(root / "deploy"), *extra],
                          capture_output=True, text=True, check=False, timeout=60)


def switch(root: Path, target: Target) -> list[str]:
    """Apply :func:`plan`, then ``deploy/generate.py``; the lines to print. Raises :class:`DepsError` when
    generate.py fails."""
    changed, notes = plan(root, target)
    for path, text in changed.items():
        path.write_text(text)
    done = _generate(root)
    if done.returncode != 0:
        raise DepsError(f"deploy/generate.py failed: {done.stderr.strip()}")
    notes += [line.replace(str(root) + "/", "") for line in done.stdout.splitlines()]
    if not changed:
        return [f"already set for {target.label}: nothing changed"]
    return [f"switched to {target.label}:", *(f"  {n}" for n in notes),
            "next: make build (installs kubernetes" + target.client_spec + " into .venv and verifies)"]


def selection(table: dict[str, object], requirement: str) -> tuple[str | None, Target]:
    """``(minor or None for the default, its Target)`` named by the pyproject requirement. Raises
    :class:`DepsError` when the requirement is neither the default's nor a table client pin."""
    default = target_for(table, None)
    if requirement == f"kubernetes{default.client_spec}":
        return None, default
    entries = table["minors"]
    assert isinstance(entries, dict)
    for minor, entry in entries.items():
        if requirement == f"kubernetes=={entry['client']}":
            return minor, Target(f"=={entry['client']}", f"v{minor}.x", entry["scheduler-config-api"],
                                 f"Kubernetes {minor}")
    raise DepsError(f"{PYPROJECT}: requirement '{requirement}' is neither the default (kubernetes"
                    f"{default.client_spec}) nor a pin of hack/kubernetes-versions.toml: run hack/download-deps.sh")


def verify(root: Path, installed: str | None) -> list[str]:
    """Every disagreement between the selection, the installed client ``installed`` (None: not installed) and the
    manifests (module docstring); empty when all agree."""
    table = load_table(root)
    minor, target = selection(table, client_requirement((root / PYPROJECT).read_text()))
    problems: list[str] = []
    major = None if installed is None else installed.split(".", 1)[0]
    if installed is None:
        problems.append("the kubernetes client is not installed in this interpreter: run make")
    elif minor is not None and major != minor.split(".")[1]:
        problems.append(f"installed kubernetes client {installed} does not follow {target.label} (needs "
                        f"{target.client_spec.removeprefix('==')}): run make, which reinstalls from pyproject.toml")
    elif minor is None and not _satisfies_floor(installed, target.client_spec):
        problems.append(f"installed kubernetes client {installed} does not satisfy the default "
                        f"kubernetes{target.client_spec}: run make")
    if installed is not None:
        problems += _adapter_problems(root, installed)
    tag = TAG_LINE.search((root / DEPLOYMENT).read_text())
    api = API_LINE.search((root / CONFIGMAP).read_text())
    tag_value = None if tag is None else tag["value"]
    tag_minor = None if tag_value is None else TAG_MINOR.match(tag_value)
    if minor is None and tag_value != target.tag:
        problems.append(f"{DEPLOYMENT}: kube-scheduler tag {tag_value} is not the default's {target.tag}")
    elif minor is not None and (tag_minor is None or f"1.{tag_minor['minor']}" != minor):
        problems.append(f"{DEPLOYMENT}: kube-scheduler tag {tag_value} is not Kubernetes {minor}")
    if api is None or api["value"] != target.api:
        problems.append(f"{CONFIGMAP}: KubeSchedulerConfiguration apiVersion "
                        f"{None if api is None else api['value']} is not {target.api} ({target.label})")
    check = _generate(root, "--check")
    if check.returncode != 0:
        problems.append(f"deploy/generate.py --check: {check.stderr.strip()}")
    if any(not line.startswith("installed kubernetes client") for line in problems):
        problems.append("run hack/download-deps.sh vX.Y.Z (or --default) again, then make build")
    return problems


def _satisfies_floor(installed: str, spec: str) -> bool:
    """``installed`` (``37.0.2``) meets ``>=N`` (the only form the default uses)."""
    floor = re.fullmatch(r">=([0-9]+)", spec)
    if floor is None:
        raise DepsError(f"{TABLE}: [default] client must be '>=N', not '{spec}'")
    return int(installed.split(".", 1)[0]) >= int(floor.group(1))


def _adapter_problems(root: Path, installed: str) -> list[str]:
    """``client_problems()`` of ``src/adapters/kubernetes/compat.py`` under ``root``, loaded by path (its package
    ``__init__`` imports the whole adapter; this file imports only the standard library and the client), for
    this interpreter's client; a client that does not import is one problem."""
    import importlib.util

    path = root / COMPAT
    spec = importlib.util.spec_from_file_location("_ljrk_kubernetes_compat", path)
    if spec is None or spec.loader is None:
        raise DepsError(f"{COMPAT}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except OSError as error:
        raise DepsError(f"{COMPAT}: {error}") from None
    except Exception as error:  # the client itself fails to import: report it, whatever it raised
        return [f"installed kubernetes client {installed} does not import ({type(error).__name__}: "
                f"{str(error)[:200]}): run make, which reinstalls from pyproject.toml"]
    problems: list[str] = module.client_problems()
    return problems


def _installed_client() -> str | None:
    try:
        return importlib.metadata.version("kubernetes")
    except importlib.metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None, root: Path = REPO) -> int:
    parser = argparse.ArgumentParser(prog="hack/download-deps.sh", description=__doc__.split("\n\n", 1)[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("version", nargs="?", help="Kubernetes release vX.Y.Z of the target cluster, e.g. v1.28.0")
    which.add_argument("--default", action="store_true", help="return to the committed default")
    which.add_argument("--verify", action="store_true", help="change nothing; exit 1 on any disagreement")
    which.add_argument("--list", action="store_true", help="print the supported minors and their clients")
    args = parser.parse_args(argv)
    try:
        table = load_table(root)
        if args.list:
            minors = table["minors"]
            assert isinstance(minors, dict)
            for minor in supported(table):
                print(f"v{minor}  kubernetes=={minors[minor]['client']}  {minors[minor]['scheduler-config-api']}")
            return 0
        if args.verify:
            problems = verify(root, _installed_client())
            for line in problems:
                print(f"hack/download-deps.sh --verify: {line}", file=sys.stderr)
            if not problems:
                _, target = selection(table, client_requirement((root / PYPROJECT).read_text()))
                print(f"verified: {target.label}, kubernetes client {_installed_client()}, manifests agree")
            return 1 if problems else 0
        for line in switch(root, target_for(table, None if args.default else args.version)):
            print(line)
        return 0
    except DepsError as error:
        print(f"hack/download-deps.sh: error: {error}", file=sys.stderr)
        return error.code
    except OSError as error:
        print(f"hack/download-deps.sh: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
