#!/usr/bin/env python3
"""Switch the build, the deployment and the live tests to a Kubernetes version (``hack/download-deps.sh``), and
verify it.

``download_deps.py vX.Y.Z`` sets, for that Kubernetes minor (table: ``hack/kubernetes-versions.toml``):

1. ``pyproject.toml``: the ``kubernetes`` requirement becomes ``kubernetes==<client>``, the table's Python client
   for that minor (its major follows the minor, except 1.36 on client 37); ``make lock`` re-locks
   ``requirements/`` and ``make`` reinstalls from it;
2. ``deploy/scheduler/03-deployment.yaml``: the image becomes ``registry.k8s.io/kube-scheduler:vX.Y.Z``;
3. ``deploy/scheduler/02-configmap.yaml``: the KubeSchedulerConfiguration's ``apiVersion`` becomes the one that
   minor's kube-scheduler reads;
4. ``hack/kubernetes-version`` (the live tests' Kubernetes, ``scripts/kube_platform.py``): ``X.Y.Z`` when the
   table's ``[platform.kubernetes]`` has it, else the platform's version of that minor; a minor the platform cannot
   build leaves it as it is, and one printed line says the live tests stay there;

then runs ``deploy/generate.py`` (the ConfigMap's checksum changed) and prints each change. Running it again
changes nothing (idempotent); ``--default`` returns to the committed state (the table's ``[default]``, and
``platform.default`` for the live tests). ``--verify`` (``make build`` and ``make test`` run it) changes nothing and
exits 1 naming each disagreement: the selection is read from the ``kubernetes`` requirement (a minor's pin → that
minor, a pin two minors share → the one ``hack/kubernetes-version`` names, else the newer; the default's
requirement → the default), and the installed client's major (``importlib.metadata`` of this interpreter) must be
the pin's, the kube-scheduler tag's minor, the configuration's apiVersion, ``hack/kubernetes-version`` (a platform
version; of the selected minor when the platform builds it; ``platform.default`` for the default) and
``deploy/generate.py --check`` must all agree with it, and the installed client must be one ``adapters/kubernetes``
works with: the rule is the adapter's own ``client_problems()``, loaded by path from
``src/adapters/kubernetes/compat.py`` (clients 28-35 and >= 37 send merge patches; a client of another shape, or
one requiring urllib3 < 2 beside urllib3 2.x, fails with a message naming it).

Invariants: only those four lines change (each must occur exactly once, else exit 1 and nothing is written);
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
RELOCK = "run make lock build, which re-locks requirements/ and reinstalls from the lock"
SELECTED = Path("hack/kubernetes-version")
"""The live tests' Kubernetes version, one ``X.Y.Z`` line (``scripts/kube_platform.py``'s ``select_version``)."""

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
    tag, the KubeSchedulerConfiguration apiVersion, a label for messages, and the live tests' Kubernetes
    (``cluster``: a ``[platform.kubernetes]`` version, None when the platform cannot build that minor)."""

    client_spec: str
    tag: str
    api: str
    label: str
    cluster: str | None = None


def load_table(root: Path) -> dict[str, object]:
    """``hack/kubernetes-versions.toml`` under ``root``. Raises :class:`DepsError` when it is missing a part."""
    path = root / TABLE
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DepsError(f"{path}: {error}") from None
    if not isinstance(table.get("default"), dict) or not isinstance(table.get("minors"), dict):
        raise DepsError(f"{path}: needs a [default] table and [minors.\"1.N\"] tables")
    platform = table.get("platform")
    if not (isinstance(platform, dict) and isinstance(platform.get("kubernetes"), dict)
            and platform.get("default") in platform["kubernetes"]):
        raise DepsError(f"{path}: needs [platform.kubernetes.\"X.Y.Z\"] tables and a platform.default among them")
    return table


def platform_versions(table: dict[str, object]) -> tuple[list[str], str]:
    """The versions the live-test platform builds (``[platform.kubernetes]``, in version order) and its default."""
    platform = table["platform"]
    assert isinstance(platform, dict)
    return sorted(platform["kubernetes"], key=lambda v: tuple(map(int, v.split(".")))), str(platform["default"])


def cluster_of(table: dict[str, object], minor: str, exact: str | None = None) -> str | None:
    """The platform version the live tests run for ``minor`` (``1.36``): ``exact`` (``1.36.3``) when the platform
    has it, else its newest of that minor; None when it builds none of that minor."""
    versions, _ = platform_versions(table)
    same = [v for v in versions if v.rsplit(".", 1)[0] == minor]
    return exact if exact in same else same[-1] if same else None


def supported(table: dict[str, object]) -> list[str]:
    """The supported minors, ``["1.28", "1.30", …]`` in version order."""
    minors = table["minors"]
    assert isinstance(minors, dict)
    return sorted(minors, key=lambda m: tuple(map(int, m.split("."))))


def target_for(table: dict[str, object], version: str | None) -> Target:
    """The :class:`Target` of ``version`` (``vX.Y.Z``), or of the default for None. Raises :class:`DepsError`
    (code 2) for a malformed version or a minor not in the table, naming the supported ones."""
    names = ", ".join(f"v{m}" for m in supported(table))
    if version is None:
        default = table["default"]
        assert isinstance(default, dict)
        return Target(default["client"], default["kube-scheduler-tag"], default["scheduler-config-api"], "the default",
                      platform_versions(table)[1])
    match = VERSION.match(version)
    if match is None:
        raise DepsError(f"version '{version}' is not vMAJOR.MINOR.PATCH (e.g. v1.28.0); supported: {names}", 2)
    minor = f"1.{match['minor']}"
    entries = table["minors"]
    assert isinstance(entries, dict)
    if minor not in entries:
        raise DepsError(f"Kubernetes {minor} ({version}) is not supported; supported: {names} (any patch)", 2)
    entry = entries[minor]
    return Target(f"=={entry['client']}", version, entry["scheduler-config-api"], f"Kubernetes {version}",
                  cluster_of(table, minor, version.removeprefix("v")))


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


def read_selected(root: Path) -> str | None:
    """The version ``hack/kubernetes-version`` under ``root`` names; None when it is missing or empty."""
    path = root / SELECTED
    text = path.read_text().strip() if path.is_file() else ""
    return text or None


def cluster_plan(table: dict[str, object], target: Target, current: str | None) -> tuple[str, str | None]:
    """``(what hack/kubernetes-version becomes, a note for the printed line or None)``. A minor the platform cannot
    build keeps ``current`` (``platform.default`` when ``current`` is missing or none of the platform's: the live
    tests could not run it) and the note says why."""
    versions, default = platform_versions(table)
    wanted = target.tag.removeprefix("v")
    if target.cluster is not None:
        return target.cluster, (None if target.cluster == wanted
                                else f"the platform builds {target.cluster}, not {wanted}")
    keep = current if current in versions else default
    return keep, (f"the platform builds only {', '.join(versions)}, not {wanted.rsplit('.', 1)[0]} ({TABLE} "
                  f"[platform.kubernetes] has no build module of it before "
                  f"{versions[0].rsplit('.', 1)[0]})")


def plan(root: Path, target: Target, table: dict[str, object]) -> tuple[dict[Path, str], list[str]]:
    """The new text of each file that changes under ``root`` and one line per change (plus one about the live
    tests' version when it is not the one asked for). Raises :class:`DepsError` when a file lacks the line it
    should have (nothing is written then)."""
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
    current = read_selected(root)
    cluster, why = cluster_plan(table, target, current)
    if cluster != current:
        changed[root / SELECTED] = f"{cluster}\n"
        notes.append(f"{SELECTED}: {current or '(none)'} -> {cluster} (the live tests' Kubernetes"
                     + (f"; {why})" if why else ")"))
    elif why is not None:
        notes.append(f"{SELECTED}: stays {cluster} ({why})" if target.cluster else
                     f"{SELECTED}: the live tests stay on Kubernetes {cluster}: {why}")
    return changed, notes


def _generate(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / GENERATE), "--root", str(root / "deploy"), *extra],
                          capture_output=True, text=True, check=False, timeout=60)


def switch(root: Path, target: Target, table: dict[str, object]) -> list[str]:
    """Apply :func:`plan`, then ``deploy/generate.py``; the lines to print. Raises :class:`DepsError` when
    generate.py fails."""
    changed, notes = plan(root, target, table)
    for path, text in changed.items():
        path.write_text(text)
    done = _generate(root)
    if done.returncode != 0:
        raise DepsError(f"deploy/generate.py failed: {done.stderr.strip()}")
    notes += [line.replace(str(root) + "/", "") for line in done.stdout.splitlines()]
    if not changed:
        return [f"already set for {target.label}: nothing changed"]
    return [f"switched to {target.label}:", *(f"  {n}" for n in notes),
            "next: make lock build (re-locks requirements/ for kubernetes" + target.client_spec
            + ", installs it into .venv and verifies)"]


def selection(table: dict[str, object], requirement: str, chosen: str | None) -> tuple[str | None, Target]:
    """``(minor or None for the default, its Target)`` named by the pyproject requirement; a pin two minors share
    (1.36 and 1.37 both pin client 37) names the minor of ``chosen`` (``hack/kubernetes-version``) when it is one
    of them, else the newest of them. Raises :class:`DepsError` when the requirement is neither the default's nor
    a table client pin."""
    default = target_for(table, None)
    if requirement == f"kubernetes{default.client_spec}":
        return None, default
    entries = table["minors"]
    assert isinstance(entries, dict)
    pinning = [m for m in supported(table) if requirement == f"kubernetes=={entries[m]['client']}"]
    if pinning:
        chosen_minor = None if chosen is None else chosen.rsplit(".", 1)[0]
        minor = chosen_minor if chosen_minor in pinning else pinning[-1]
        entry = entries[minor]
        return minor, Target(f"=={entry['client']}", f"v{minor}.x", entry["scheduler-config-api"],
                             f"Kubernetes {minor}", cluster_of(table, minor))
    raise DepsError(f"{PYPROJECT}: requirement '{requirement}' is neither the default (kubernetes"
                    f"{default.client_spec}) nor a pin of hack/kubernetes-versions.toml: run hack/download-deps.sh")


def verify(root: Path, installed: str | None) -> list[str]:
    """Every disagreement between the selection, the installed client ``installed`` (None: not installed) and the
    manifests (module docstring); empty when all agree."""
    table = load_table(root)
    chosen = read_selected(root)
    minor, target = selection(table, client_requirement((root / PYPROJECT).read_text()), chosen)
    problems: list[str] = []
    if installed is None:
        problems.append("the kubernetes client is not installed in this interpreter: run make")
    elif minor is not None and installed.split(".")[0] != target.client_spec.removeprefix("==").split(".")[0]:
        problems.append(f"installed kubernetes client {installed} does not follow {target.label} (needs "
                        f"{target.client_spec.removeprefix('==')}): {RELOCK}")
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
    problems += _cluster_problems(table, minor, target, chosen)
    check = _generate(root, "--check")
    if check.returncode != 0:
        problems.append(f"deploy/generate.py --check: {check.stderr.strip()}")
    if any(not line.startswith("installed kubernetes client") for line in problems):
        problems.append("run hack/download-deps.sh vX.Y.Z (or --default) again, then make build")
    return problems


def _cluster_problems(table: dict[str, object], minor: str | None, target: Target, chosen: str | None) -> list[str]:
    """What is wrong with ``hack/kubernetes-version`` (``chosen``) for the selection: it must name a platform
    version, of the selected minor when the platform builds that minor, and ``platform.default`` for the default."""
    versions, default = platform_versions(table)
    if chosen is None:
        return [f"{SELECTED}: missing or empty; it names the live tests' Kubernetes ({target.cluster or default})"]
    if chosen not in versions:
        return [f"{SELECTED}: Kubernetes {chosen} is not one the platform builds ({', '.join(versions)}, "
                f"{TABLE} [platform.kubernetes])"]
    if minor is None and chosen != default:
        return [f"{SELECTED}: Kubernetes {chosen} is not the default's platform.default {default}"]
    if minor is not None and target.cluster is not None and chosen.rsplit(".", 1)[0] != minor:
        return [f"{SELECTED}: Kubernetes {chosen} is not Kubernetes {minor} (the platform builds {target.cluster})"]
    return []


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
                f"{str(error)[:200]}): {RELOCK}"]
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
    which.add_argument("--list", action="store_true", help="print each supported minor, its client and test cluster")
    args = parser.parse_args(argv)
    try:
        table = load_table(root)
        if args.list:
            minors = table["minors"]
            assert isinstance(minors, dict)
            for minor in supported(table):
                print(f"v{minor}  kubernetes=={minors[minor]['client']}  {minors[minor]['scheduler-config-api']}  "
                      f"test cluster {cluster_of(table, minor) or 'none'}")
            return 0
        if args.verify:
            problems = verify(root, _installed_client())
            for line in problems:
                print(f"hack/download-deps.sh --verify: {line}", file=sys.stderr)
            if not problems:
                chosen = read_selected(root)
                _, target = selection(table, client_requirement((root / PYPROJECT).read_text()), chosen)
                print(f"verified: {target.label}, kubernetes client {_installed_client()}, manifests agree, "
                      f"live tests on Kubernetes {chosen}")
            return 1 if problems else 0
        for line in switch(root, target_for(table, None if args.default else args.version), table):
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
