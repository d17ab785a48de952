#!/usr/bin/env python3
"""Build the platform the live tests (and users' test beds) run on, from Go modules, pinned and cached.

The programs: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl from the
``k8s.io/kubernetes`` module; etcd from ``go.etcd.io/etcd/server/v3``; containerd, its runc shim and ctr from
``github.com/containerd/containerd/v2``; runc from ``github.com/opencontainers/runc``; helm (the chart tests'
``helm lint`` / ``helm template``) from ``helm.sh/helm/v4``'s ``cmd/helm``. Each is built from a small
build module committed under ``hack/kubebuild/<name>-<version>/`` (``go.mod`` + ``go.sum``): it requires the
upstream module at the pinned version and names the commands as ``tool`` directives, so ``go build`` resolves
exactly the dependency graph that ``go.sum`` pins. For Kubernetes the module also replaces every staging module
(``k8s.io/api`` …) with its published ``v0.<minor>.<patch>`` tag, as out-of-tree schedulers do, because
``k8s.io/kubernetes``'s own ``go.mod`` points them at ``./staging`` paths that do not exist outside its tree.

Versions and checksums (the ``h1:`` module hash ``go.sum`` records) live in ``hack/kubernetes-versions.toml``
(``[platform]``); a build refuses a module whose ``go.sum`` line differs from the table. Binaries land outside the
repository in ``${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}/<name>/<version>/`` with a ``.complete`` stamp holding
the hash of the build module's files, so a second install builds nothing.

Commands (exit 0 done; 1 a build failed or the cache is incomplete; 2 bad command line or an unknown version, the
message listing the supported ones)::

    kube_platform.py install [--version 1.37.2]      build what is missing for that Kubernetes version
    kube_platform.py bin-dir [--version 1.37.2]      print the control plane's folder (kube-*, kubectl, etcd)
    kube_platform.py node-bin-dir                    print containerd/ctr/shim/runc's folder
    kube_platform.py helm-path                       print the helm binary's path (exit 1 if not built)
    kube_platform.py module-dir [--version 1.37.2]   print the k8s.io/kubernetes module's source folder (downloaded
                                                     into Go's module cache when missing; the pause image's source)
    kube_platform.py versions                        the supported Kubernetes versions, the default first
    kube_platform.py gen 1.36.3                      write hack/kubebuild/kubernetes-v1.36.3 (scripts/kubebuild_gen.py)

The version is ``--version``, else ``$LJRK_K8S_VERSION``, else ``hack/kubernetes-version`` (written by
``hack/download-deps.sh``), else the table's ``platform.default``. Go is the
machine's toolchain (``go`` on PATH, at least the table's ``platform.go``), never downloaded
(``GOTOOLCHAIN=local``); modules come from the configured module proxy and are checked against ``go.sum``.
Standard library only: it runs before ``.venv`` exists.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "hack" / "kubernetes-versions.toml"
MODULES = REPO / "hack" / "kubebuild"
KUBE_MODULE = "k8s.io/kubernetes"
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
VERSION = re.compile(r"^v?(?P<minor>1\.[0-9]+)\.[0-9]+$")


class PlatformError(Exception):
    """A build failed, or a version or file is not as expected; ``code`` is the exit status (1 or 2)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def log(message: str) -> None:
    print(f"[kube-platform] {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return Path(os.environ.get("LJRK_K8S_CACHE", "/var/cache/ljrk-k8s"))


@dataclass(frozen=True)
class Component:
    """One build module: ``name`` and ``version`` (its folder ``hack/kubebuild/<name>-<version>`` and its cache
    folder), the upstream ``module`` and its ``sum`` (``h1:`` hash), the Go packages to build as ``{binary:
    package}``, ``cgo`` and build ``tags``, and ``-X`` ldflags (``{variable: value}``)."""

    name: str
    version: str
    module: str
    sum: str
    commands: dict[str, str]
    cgo: bool = False
    tags: tuple[str, ...] = ()
    stamps: tuple[tuple[str, str], ...] = ()

    @property
    def source(self) -> Path:
        return MODULES / f"{self.name}-{self.version}"

    @property
    def out(self) -> Path:
        return cache_root() / self.name / self.version


def load_table() -> dict[str, object]:
    with TABLE.open("rb") as handle:
        table = tomllib.load(handle)
    platform = table.get("platform")
    if not isinstance(platform, dict):
        raise PlatformError(f"{TABLE.relative_to(REPO)} has no [platform] table")
    return platform


def kube_versions(platform: dict[str, object]) -> list[str]:
    """The supported Kubernetes versions (``[platform.kubernetes."X.Y.Z"]``), the default first."""
    kube = platform.get("kubernetes")
    if not isinstance(kube, dict) or not kube:
        raise PlatformError("[platform.kubernetes] lists no version")
    default = str(platform.get("default", ""))
    return sorted(kube, key=lambda v: (v != default, [int(p) for p in v.split(".")]))


def select_version(platform: dict[str, object], wanted: str | None) -> str:
    """``wanted`` (``1.37.2`` or ``v1.37.2``), else ``$LJRK_K8S_VERSION``, else ``hack/kubernetes-version`` (the
    selection ``hack/download-deps.sh`` writes), else the table's default; raises
    :class:`PlatformError` (code 2) listing the supported versions when it is not one of them."""
    selected = REPO / "hack" / "kubernetes-version"
    chosen = selected.read_text().strip() if selected.is_file() else ""
    raw = wanted or os.environ.get("LJRK_K8S_VERSION") or chosen or str(platform.get("default", ""))
    version = raw.removeprefix("v")
    supported = kube_versions(platform)
    if version not in supported:
        raise PlatformError(f"Kubernetes {raw!r} is not supported here; supported: {', '.join(supported)} "
                            f"(hack/kubernetes-versions.toml [platform.kubernetes])", code=2)
    return version


def kube_component(platform: dict[str, object], version: str) -> Component:
    entry = platform["kubernetes"][version]  # type: ignore[index]
    minor = version.split(".")[1]
    base = "k8s.io/component-base/version"
    stamps = (
        (f"{base}.gitVersion", f"v{version}"),
        (f"{base}.gitMajor", "1"),
        (f"{base}.gitMinor", minor),
        (f"{base}.gitTreeState", "clean"),
        (f"{base}.buildDate", "1970-01-01T00:00:00Z"),
    )
    return Component(
        name="kubernetes", version=f"v{version}", module=KUBE_MODULE, sum=str(entry["sum"]),
        commands={c: f"{KUBE_MODULE}/cmd/{c}" for c in KUBE_COMMANDS}, stamps=stamps,
    )


def table_component(platform: dict[str, object], name: str) -> Component:
    """The component of ``[platform.<name>]`` (module, version, sum, commands, optional cgo, tags, stamps)."""
    entry = platform.get(name)
    if not isinstance(entry, dict):
        raise PlatformError(f"hack/kubernetes-versions.toml has no [platform.{name}]")
    stamps = tuple((k, v.replace("{version}", entry["version"])) for k, v in entry.get("stamps", {}).items())
    return Component(
        name=name, version=str(entry["version"]), module=str(entry["module"]), sum=str(entry["sum"]),
        commands=dict(entry["commands"]), cgo=bool(entry.get("cgo", False)), tags=tuple(entry.get("tags", ())),
        stamps=stamps,
    )


def node_components(platform: dict[str, object]) -> list[Component]:
    """etcd, containerd and runc: ``[platform.etcd]``, ``[platform.containerd]``, ``[platform.runc]``."""
    return [table_component(platform, name) for name in ("etcd", "containerd", "runc")]


def helm_component(platform: dict[str, object]) -> Component:
    """helm (``[platform.helm]``): not part of the cluster, the chart tests' renderer and linter."""
    return table_component(platform, "helm")


def source_hash(component: Component) -> str:
    """Hash of the build module's go.mod and go.sum and of how it is built: what the cache stamp records."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.source / name).read_bytes())
    digest.update(json.dumps([component.commands, component.cgo, component.tags, component.stamps]).encode())
    return digest.hexdigest()[:16]


def is_built(component: Component) -> bool:
    stamp = component.out / ".complete"
    if not stamp.is_file() or stamp.read_text().strip() != source_hash(component):
        return False
    return all(os.access(component.out / binary, os.X_OK) for binary in component.commands)


def check_sum(component: Component) -> None:
    """The build module's ``go.sum`` line for the upstream module must carry the table's hash."""
    for path in (component.source / "go.mod", component.source / "go.sum"):
        if not path.is_file():
            raise PlatformError(f"{path.relative_to(REPO)} is missing: run scripts/kube_platform.py gen")
    wanted = f"{component.module} {component.version} {component.sum}"
    lines = (component.source / "go.sum").read_text().splitlines()
    if wanted not in lines:
        have = [line for line in lines if line.startswith(f"{component.module} {component.version} h1:")]
        raise PlatformError(f"{component.source.relative_to(REPO)}/go.sum: {component.module} {component.version} "
                            f"is {have[0].split()[-1] if have else 'absent'}, the table says {component.sum}")


def go_env(cgo: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="1" if cgo else "0",
               GOWORK="off")  # a go.work above the build module would bypass its replaces
    return env


def check_go(platform: dict[str, object]) -> None:
    wanted = str(platform.get("go", "1.0"))
    go = shutil.which("go")
    if go is None:
        raise PlatformError(f"no `go` on PATH: Go >= {wanted} is needed to build the platform")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    have = [int(p) for p in re.findall(r"[0-9]+", out)[:3]]
    if not have or have < [int(p) for p in wanted.split(".")]:
        raise PlatformError(f"{go} is {out or 'unreadable'}; the platform needs Go >= {wanted}")


def build(component: Component) -> None:
    """Build every command of ``component`` into its cache folder (a temporary folder renamed into place). The caller
    has checked its sum (:func:`check_sum`)."""
    if is_built(component):
        log(f"{component.name} {component.version}: cached in {component.out}")
        return
    started = time.monotonic()
    for stale in component.out.parent.glob(f".{component.version}-*"):  # a killed build's staging (under the lock)
        shutil.rmtree(stale, ignore_errors=True)
    log(f"{component.name} {component.version}: building {', '.join(component.commands)} "
        f"(Kubernetes: 7-10 minutes cold on 2 cores, seconds once Go's build cache holds it)")
    component.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{component.version}-", dir=component.out.parent))
    staging.chmod(0o755)  # mkdtemp makes it 0700; the binaries are read by image builds and other users
    ldflags = " ".join(["-s", "-w", *(f"-X {var}={value}" for var, value in component.stamps)])
    try:
        for binary, package in component.commands.items():
            argv = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / binary)]
            if component.tags:
                argv += ["-tags", " ".join(component.tags)]
            result = subprocess.run([*argv, package], cwd=component.source, env=go_env(component.cgo),
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise PlatformError(f"go build {package} ({component.source.relative_to(REPO)}) failed:\n"
                                    + "\n".join(result.stderr.splitlines()[-30:]))
        (staging / ".complete").write_text(source_hash(component) + "\n")
        shutil.rmtree(component.out, ignore_errors=True)
        staging.rename(component.out)
    except OSError as error:
        raise PlatformError(f"cannot put {component.name} {component.version} into {component.out}: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"{component.name} {component.version}: built in {time.monotonic() - started:.0f} s into {component.out}")


def control_plane_dir(version: str) -> Path:
    """The folder the tests read (``bin-dir``): the Kubernetes binaries and a link to etcd."""
    return cache_root() / "kubernetes" / f"v{version}"


def node_bin_dir() -> Path:
    return cache_root() / "node-bin"


def place_link(link: Path, target: Path) -> None:
    """Point ``link`` at ``target``, atomically (a temporary link renamed over it), so concurrent installs of
    cached versions never see it missing nor fail on it."""
    temporary = link.with_name(f".{link.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(target)
    os.replace(temporary, link)


def link_node_tools(platform: dict[str, object]) -> None:
    """``node-bin/``: links to containerd, its shim, ctr and runc (one folder for containerd's PATH)."""
    target = node_bin_dir()
    target.mkdir(parents=True, exist_ok=True)
    for component in node_components(platform):
        if component.name == "etcd":
            continue
        for binary in component.commands:
            place_link(target / binary, component.out / binary)


def cmd_install(platform: dict[str, object], version: str) -> None:
    if os.geteuid() != 0 and not os.access(cache_root().parent, os.W_OK):
        raise PlatformError(f"cannot write {cache_root()}: run as root or set LJRK_K8S_CACHE")
    cache_root().mkdir(parents=True, exist_ok=True)
    kube = kube_component(platform, version)
    components = [kube, *node_components(platform), helm_component(platform)]
    for component in components:  # first: a missing build module is named, not a traceback of is_built
        check_sum(component)
    runc = next(c for c in components if c.name == "runc")
    if not is_built(runc) and not Path("/usr/include/seccomp.h").is_file():
        raise PlatformError("runc is built with seccomp: install libseccomp-dev and gcc first "
                            "(scripts/real-kubelet.sh install does)")
    if not all(is_built(c) for c in components):  # builds serialise on the lock; a cached version needs none
        check_go(platform)
        with (cache_root() / ".build.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for component in components:
                build(component)
    etcd = next(c for c in components if c.name == "etcd")
    place_link(control_plane_dir(version) / "etcd", etcd.out / "etcd")
    link_node_tools(platform)
    checks = [[str(control_plane_dir(version) / b), "--version"] for b in (*KUBE_COMMANDS, "etcd") if b != "kubectl"]
    checks += [[str(control_plane_dir(version) / "kubectl"), "version", "--client"],
               [str(next(c for c in components if c.name == "helm").out / "helm"), "version", "--short"]]
    for argv in checks:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        if out.returncode != 0:
            raise PlatformError(f"{argv[0]} does not run: {out.stderr.strip()[:300]}")
        log(f"  {Path(argv[0]).name}: {out.stdout.splitlines()[0] if out.stdout else '?'}")
    print(control_plane_dir(version))


def cmd_bin_dir(platform: dict[str, object], version: str) -> None:
    kube = kube_component(platform, version)
    etcd = next(c for c in node_components(platform) if c.name == "etcd")
    if not (is_built(kube) and is_built(etcd) and (control_plane_dir(version) / "etcd").exists()):
        raise PlatformError(f"Kubernetes v{version} is not built in {control_plane_dir(version)}; run: "
                            f"bash scripts/k8s-control-plane.sh install (LJRK_K8S_VERSION={version})")
    print(control_plane_dir(version))


def cmd_node_bin_dir(platform: dict[str, object]) -> None:
    missing = [c.name for c in node_components(platform) if c.name != "etcd" and not is_built(c)]
    if missing:
        raise PlatformError(f"{', '.join(missing)} not built; run: bash scripts/k8s-control-plane.sh install")
    print(node_bin_dir())


def cmd_helm_path(platform: dict[str, object]) -> None:
    helm = helm_component(platform)
    if not is_built(helm):
        raise PlatformError(f"helm {helm.version} is not built in {helm.out}; run: bash scripts/k8s-control-plane.sh "
                            f"install")
    print(helm.out / "helm")


def cmd_module_dir(version: str) -> None:
    """Print the ``k8s.io/kubernetes`` module's folder in Go's module cache, downloading it (checked against the
    build module's go.sum) when the cache lacks it: a cached platform does not mean a filled module cache."""
    platform = load_table()
    kube = kube_component(platform, version)
    check_sum(kube)
    check_go(platform)
    found = subprocess.run(["go", "mod", "download", "-json", f"{KUBE_MODULE}@{kube.version}"], cwd=kube.source,
                           capture_output=True, text=True, check=False, env=go_env(False))
    try:
        folder = str(json.loads(found.stdout)["Dir"])
    except (ValueError, KeyError):
        message = f"go mod download {KUBE_MODULE}@{kube.version} failed: {found.stdout}{found.stderr}"
        raise PlatformError(message) from None
    print(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kube_platform.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "bin-dir"):
        sub.add_parser(name).add_argument("--version", default=None, help="Kubernetes version, e.g. 1.37.2")
    sub.add_parser("node-bin-dir")
    sub.add_parser("helm-path")
    sub.add_parser("module-dir").add_argument("--version", default=None, help="Kubernetes version, e.g. 1.37.2")
    sub.add_parser("versions")
    sub.add_parser("gen").add_argument("kube_version")
    args = parser.parse_args(argv)
    try:
        platform = load_table()
        if args.command == "install":
            cmd_install(platform, select_version(platform, args.version))
        elif args.command == "bin-dir":
            cmd_bin_dir(platform, select_version(platform, args.version))
        elif args.command == "node-bin-dir":
            cmd_node_bin_dir(platform)
        elif args.command == "helm-path":
            cmd_helm_path(platform)
        elif args.command == "module-dir":
            cmd_module_dir(select_version(platform, args.version))
        elif args.command == "versions":
            print("\n".join(kube_versions(platform)))
        else:
            import kubebuild_gen  # the sibling script: writes a build module from the module proxy

            kubebuild_gen.generate(args.kube_version)
    except PlatformError as error:
        log(f"ERROR: {error}")
        return error.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
