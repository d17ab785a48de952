"""Replace a file's contents atomically: the adapters that keep small files a crash must not tear (CDI specs, the
DRA plugin's checkpoint) write through :func:`write_atomically`.

Invariant: after a crash the path holds the old or the new contents, never a mix: the text goes to a temporary file
in the same folder, is fsynced, renamed over the path (``os.replace``), and the folder is fsynced so the rename
itself survives. The folder is created if missing; on any failure the temporary file is removed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str, *, mode: int | None = None) -> None:
    """Make ``path`` hold ``text`` (UTF-8), with permission bits ``mode`` if given (else ``mkstemp``'s 0600).
    Raises ``OSError`` from the file system (the caller names the file in its own error)."""
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
        temporary = None
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
