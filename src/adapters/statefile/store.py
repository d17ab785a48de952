"""``JsonRuntimeStateStore``: the Runtime's config state and allocation records in one JSON file.

Format: ``{"version": 1, "snapshot": <RuntimeSnapshot>}`` written by a private cattrs converter (unknown keys
refused). Writes are atomic: a temporary file in the same directory is written, flushed and fsynced, then
renamed over the old one (``os.replace``), and the directory is fsynced, so a crash leaves the old or the new
file, never a torn one. A missing file loads as None; a malformed one raises :class:`StateStoreError` naming the
file, instead of silently starting empty (which would forget live allocations).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import cattrs

from domain.runtime.types import RuntimeSnapshot
from ports.runtime_state import StateStoreError

STATE_VERSION = 1
"""Schema version of the state file."""

FILE_NAME = "runtime-state.json"


def _converter() -> cattrs.Converter:
    return cattrs.Converter(forbid_extra_keys=True)


class JsonRuntimeStateStore:
    """One JSON file (module docstring): ``path`` is the file, or use :meth:`in_dir`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._converter = _converter()

    @classmethod
    def in_dir(cls, directory: Path) -> JsonRuntimeStateStore:
        """The store at ``directory / runtime-state.json`` (the directory is created on the first save)."""
        return cls(directory / FILE_NAME)

    def load(self) -> RuntimeSnapshot | None:
        """The saved snapshot, or None when the file does not exist. Raises :class:`StateStoreError`."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StateStoreError(f"cannot read Runtime state {self.path}: {error}") from error
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION or set(data) != {
                "version", "snapshot"
            }:
                raise ValueError(f"expected {{'version': {STATE_VERSION}, 'snapshot': …}}")
            return self._converter.structure(data["snapshot"], RuntimeSnapshot)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as error:
            detail: object = error
            if isinstance(error, cattrs.BaseValidationError):
                detail = "; ".join(cattrs.transform_error(error))
            raise StateStoreError(f"malformed Runtime state {self.path}: {detail}") from error

    def save(self, snapshot: RuntimeSnapshot) -> None:
        """Write ``snapshot`` atomically. Raises :class:`StateStoreError`."""
        payload = json.dumps(
            {"version": STATE_VERSION, "snapshot": self._converter.unstructure(snapshot)}, indent=1, sort_keys=True
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            try:
                with os.fdopen(handle, "w") as file:
                    file.write(payload)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as error:
            raise StateStoreError(f"cannot write Runtime state {self.path}: {error}") from error
