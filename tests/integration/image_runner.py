"""Run an image from a docker-archive tarball with runc, the OCI runtime containerd uses, without any daemon.

The tarballs come from ``bash scripts/images.sh build`` (``make images``); :func:`images_dir` finds the set that
matches the current inputs. :func:`read_archive` reads the archive's ``manifest.json`` and the image config;
:func:`unpack` extracts the layers in order into a root filesystem, applying the OCI whiteouts (``.wh.NAME`` deletes
NAME from the layers below, ``.wh..wh..opq`` empties its folder); :func:`run` starts one container on it with
``runc run``: the root filesystem read-only, the image's user, environment, working folder and entrypoint, runc's
default namespaces (so no network) and capabilities, and a runc state folder of its own. Needs root. runc is the
one the live node runs (built from its Go module by ``scripts/k8s-control-plane.sh install``), else the one on PATH.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_SCRIPT = REPO_ROOT / "scripts" / "images.sh"
PLATFORM_SCRIPT = REPO_ROOT / "scripts" / "kube_platform.py"


def runc_binary() -> str | None:
    """The node's runc (``kube_platform.py node-bin-dir``/runc) when built, else ``runc`` on PATH, else None."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(["python3", str(PLATFORM_SCRIPT), "node-bin-dir"], capture_output=True, text=True,
                               timeout=30, check=False)
        candidate = Path(found.stdout.strip()) / "runc"
        if found.returncode == 0 and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("runc")


def images_dir() -> tuple[Path | None, str]:
    """The folder holding the current images (``scripts/images.sh dir``), or None and the script's reason (naming
    the build command)."""
    try:
        result = subprocess.run(["bash", str(IMAGES_SCRIPT), "dir"], capture_output=True, text=True, timeout=60,
                                check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{IMAGES_SCRIPT.name} dir could not run ({exc}); build them with: make images (as root)"
    if result.returncode != 0 or not result.stdout.strip():
        why = result.stderr.strip() or f"{IMAGES_SCRIPT.name} dir exited {result.returncode}"
        return None, why if "make images" in why else f"{why}; build them with: make images (as root)"
    return Path(result.stdout.strip()), ""


@dataclass(frozen=True)
class Archive:
    """One image of a docker-archive: its tags, its config's ``config`` object, its layer files (in order) and
    their content digests (the config's ``rootfs.diff_ids``, sha256 of each uncompressed layer, same order)."""

    path: Path
    tags: list[str]
    config: dict[str, Any]
    layers: list[str]
    diff_ids: list[str]


def read_archive(path: Path) -> Archive:
    """Read ``manifest.json`` (exactly one image) and that image's config JSON from the tarball ``path``."""
    with tarfile.open(path) as tar:
        manifest = json.load(_member(tar, "manifest.json"))
        if len(manifest) != 1:
            raise ValueError(f"{path}: manifest.json lists {len(manifest)} images, expected 1")
        entry = manifest[0]
        config = json.load(_member(tar, entry["Config"]))
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    if len(diff_ids) != len(entry["Layers"]):
        raise ValueError(f"{path}: {len(entry['Layers'])} layers but {len(diff_ids)} rootfs.diff_ids in its config")
    return Archive(path, list(entry.get("RepoTags") or []), dict(config.get("config") or {}), list(entry["Layers"]),
                   diff_ids)


def _member(tar: tarfile.TarFile, name: str) -> Any:
    handle = tar.extractfile(name)
    if handle is None:
        raise ValueError(f"{tar.name!r}: {name} is not a regular file")
    return handle


def unpack(archive: Archive, rootfs: Path) -> None:
    """Extract ``archive``'s layers in order into the (new or empty) folder ``rootfs``, owners and modes kept."""
    rootfs.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive.path) as outer:
        for layer_name in archive.layers:
            with tarfile.open(fileobj=_member(outer, layer_name)) as layer:
                members = layer.getmembers()
                for member in members:  # whiteouts act on the layers below, before this layer's files land
                    folder, _, base = member.name.removeprefix("./").lstrip("/").rpartition("/")
                    if base == ".wh..wh..opq":
                        for child in (rootfs / folder).iterdir() if (rootfs / folder).is_dir() else ():
                            _remove(child)
                    elif base.startswith(".wh."):
                        _remove(rootfs / folder / base.removeprefix(".wh."))
                keep = [m for m in members if not m.name.rpartition("/")[2].startswith(".wh.")]
                # the archives are ours (scripts/images.sh): modes (setuid, sticky /tmp) and links kept as built
                layer.extractall(rootfs, members=keep, numeric_owner=True, filter="fully_trusted")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@dataclass(frozen=True)
class Result:
    """A finished container: exit status and its output (text)."""

    returncode: int
    stdout: str
    stderr: str


def run(archive: Archive, rootfs: Path, bundle: Path, args: list[str] | None = None, *,
        entrypoint: list[str] | None = None, timeout: float = 60.0) -> Result:
    """Run the image unpacked in ``rootfs`` once, its bundle (``config.json``) and runc state under ``bundle``.

    The process is ``entrypoint`` (default: the image's Entrypoint) followed by ``args`` (default: its Cmd), as
    the image's ``User`` (``uid[:gid]``, numeric), with its ``Env`` and ``WorkingDir``. Raises ``TimeoutError``
    when it runs longer than ``timeout`` seconds (it is killed), ``subprocess.CalledProcessError`` when runc itself
    cannot make the bundle.
    """
    config = archive.config
    argv = [*(entrypoint if entrypoint is not None else config.get("Entrypoint") or []),
            *(args if args is not None else config.get("Cmd") or [])]
    user = str(config.get("User") or "0")
    uid, _, gid = user.partition(":")
    bundle.mkdir(parents=True, exist_ok=True)
    runc_bin = runc_binary()
    if runc_bin is None:
        raise FileNotFoundError("no runc: run scripts/k8s-control-plane.sh install")
    subprocess.run([runc_bin, "spec", "--bundle", str(bundle)], check=True, capture_output=True, timeout=30)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["process"].update(terminal=False, args=argv, env=list(config.get("Env") or []),
                           cwd=config.get("WorkingDir") or "/", user={"uid": int(uid), "gid": int(gid or uid)})
    (bundle / "config.json").write_text(json.dumps(spec))
    state = bundle / "runc-state"
    container_id = f"ljrk-image-test-{uuid.uuid4().hex[:8]}"
    runc = [runc_bin, "--root", str(state)]
    try:
        done = subprocess.run([*runc, "run", "--bundle", str(bundle), container_id], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"{archive.path.name}: {argv} ran longer than {timeout} s") from exc
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*runc, "delete", "--force", container_id], capture_output=True, timeout=30, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


def runc_available() -> bool:
    """Whether a runc exists (:func:`runc_binary`) and this process is root (runc needs both here)."""
    return runc_binary() is not None and os.geteuid() == 0
