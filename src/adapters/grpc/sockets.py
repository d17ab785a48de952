"""Unix-socket housekeeping shared by our gRPC servers (the node Runtime and the device plugin servers)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path


def answers(path: Path) -> bool:
    """True when a process accepts connections on the unix socket ``path`` (a live server, not a stale file)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def prepare_socket_path(path: Path, *, refuse_live: bool, owner: str = "another process") -> None:
    """Make ``path`` free for a server to bind: create its folder, and remove a socket file left there.

    Raises :class:`OSError` when something other than a socket sits at ``path``, or (``refuse_live``) when a
    process still serves it — taking over a live socket would strand that server; ``owner`` names it in the
    message.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise OSError(f"{path} exists and is not a socket; refusing to replace it")
        if refuse_live and answers(path):
            raise OSError(f"{path} is served by {owner}")
        path.unlink()  # a stale socket left by a killed process


def set_socket_mode(path: Path, mode: int) -> None:
    """Set the permission bits of the bound socket ``path`` to ``mode`` (e.g. ``0o660``), whatever the process
    umask left; called between bind and serve, so no client connects under the umask's mode. Connecting to a unix
    socket needs write permission on it, so ``0o660`` admits the owner and the file's group only. Raises
    :class:`OSError` naming the path when the mode cannot be set (the caller must not serve then)."""
    try:
        os.chmod(path, mode)
    except OSError as error:
        raise OSError(f"cannot set mode {mode:#o} on socket {path}: {error}") from error
