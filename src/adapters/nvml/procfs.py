"""Attribute a host process to its pod and container through ``/proc`` (for per-container GPU memory).

* Pod UID: from ``/proc/<pid>/cgroup``; the kubelet puts every container of a pod under a cgroup whose path
  holds ``pod<UID>`` (cgroupfs driver, dashes) or ``pod<UID with underscores>.slice`` (systemd driver). A process
  cannot move itself out of its pod's cgroup, so this is trustworthy.
* Container name: from ``LJRK_CONTAINER_NAME`` in ``/proc/<pid>/environ``, set by our Allocate response. It only
  chooses between containers of the *same* pod (a process could edit its own environment).

The Runtime must see the host's processes (``hostPID``) for NVML's PIDs to resolve. Unreadable or vanished
processes give None; these functions never raise.
"""

from __future__ import annotations

import re
from pathlib import Path

_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
PROC = Path("/proc")


def pod_uid_of_pid(pid: int, *, proc: Path = PROC) -> str | None:
    """The pod UID of ``pid`` (dashed form), or None when it is not in a pod or cannot be read."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    match = _POD_UID.search(text)
    return None if match is None else match.group(1).replace("_", "-")


def container_of_pid(pid: int, *, proc: Path = PROC) -> str | None:
    """``LJRK_CONTAINER_NAME`` from the process environment, or None."""
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"LJRK_CONTAINER_NAME="):
            return item.partition(b"=")[2].decode(errors="replace") or None
    return None
