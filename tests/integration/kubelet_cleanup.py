"""Process and cgroup clean-up for the real-node harness (kubelet_harness.py).

Container processes live in their own mount namespaces (runc makes one per container), so they are found through
their cgroups: containerd puts every container of kubelet's under ``<controller>/k8s.io/<container id>`` when
kubelet passes no cgroup parent (``cgroupsPerQOS: false``). :func:`kill_cgroup_tree` kills every process in a
cgroup subtree and removes its folders, deepest first; a cgroup that cannot be removed is reported, never ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "k8s.io"
"""Where containerd puts container cgroups when kubelet passes none: ``<controller>/k8s.io``."""


def process_alive(pid: int) -> bool:
    """``pid`` runs (a zombie, killed and waiting for its parent to reap it, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def mount_namespace(pid: int | str) -> str | None:
    """The mount namespace of ``pid`` (``mnt:[<inode>]``), or None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def pids_in_namespace(namespace: str, *, skip: Iterable[int] = ()) -> list[int]:
    """Pids of the processes whose mount namespace is ``namespace``, those in ``skip`` left out."""
    left_out = set(skip)
    return [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and int(e.name) not in left_out and mount_namespace(e.name) == namespace]


def kill_wait(pid: int, sig: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> None:
    """Send ``sig`` to ``pid`` and wait up to ``timeout`` seconds, then SIGKILL; reaps ``popen`` (its Popen)."""
    if pid and process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline and (popen is None or popen.poll() is None):
            time.sleep(0.05)
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)


def controllers() -> list[Path]:
    """Each cgroup v1 controller folder (or the v2 root) once, links to a shared one left out."""
    if not CGROUP_ROOT.is_dir():
        return []
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [d for d in sorted(CGROUP_ROOT.iterdir()) if d.is_dir() and not d.is_symlink()]


def container_cgroups(ids: Iterable[str]) -> list[Path]:
    """Every cgroup folder (any v1 controller, or the v2 tree, three levels deep) named by one of ``ids``."""
    wanted = set(ids)
    found: list[Path] = []
    if not wanted or not CGROUP_ROOT.is_dir():
        return found
    for base, dirs, _files in os.walk(CGROUP_ROOT):
        if len(Path(base).relative_to(CGROUP_ROOT).parts) > 3:
            dirs[:] = []
            continue
        found += [Path(base) / name for name in dirs if name in wanted]
    return found


def kill_cgroup_tree(group: Path, *, keep_root: bool = False) -> list[str]:
    """SIGKILL every process in ``group`` and below, then remove the folders deepest first (``keep_root``: all
    but ``group`` itself). Returns the problems (a folder that stayed), [] when all went."""
    if not group.is_dir():
        return []
    tree = sorted((Path(base) for base, _dirs, _files in os.walk(group)), key=lambda p: -len(p.parts))
    for folder in tree:
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    problems = []
    for folder in tree if not keep_root else [f for f in tree if f != group]:
        for _ in range(50):  # a killed process leaves its cgroup a moment later
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        else:
            problems.append(f"cgroup {folder} could not be removed")
    return problems
