"""The DRA plugin's checkpoint as one JSON file (``ports.resource_claims.PreparedClaimsStore``).

Format: :func:`domain.dra.prepared.to_document`. Atomic replace: written to ``<file>.<random>.tmp`` in the same
folder, fsynced, renamed over the file, then the folder is fsynced, so a crash leaves the old or the new
checkpoint. The folder is created when missing. Every OSError and a malformed file become
:class:`ports.resource_claims.CheckpointError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from adapters.atomicfile import write_atomically
from domain.dra.prepared import PreparedClaim, from_document, to_document
from ports.resource_claims import CheckpointError

CHECKPOINT_FILE = "checkpoint.json"
"""The file name under the plugin folder (``<plugins>/<driver>/checkpoint.json``)."""


class JsonPreparedClaims:
    """The checkpoint in ``path`` (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, PreparedClaim]:
        """Every saved claim by UID; empty when the file does not exist. Raises :class:`CheckpointError`."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise CheckpointError(f"cannot read DRA checkpoint {self.path}: {error}") from error
        try:
            return from_document(json.loads(text))
        except ValueError as error:
            raise CheckpointError(f"DRA checkpoint {self.path} is malformed: {error}") from error

    def save(self, claims: Mapping[str, PreparedClaim]) -> None:
        """Replace the file atomically. Raises :class:`CheckpointError`."""
        text = json.dumps(to_document(claims), indent=2) + "\n"
        try:
            write_atomically(self.path, text)
        except OSError as error:
            raise CheckpointError(f"cannot write DRA checkpoint {self.path}: {error}") from error
