"""The Runtime state port: where the reference Runtime persists its config state and allocation records.

``load`` returns None when nothing was saved yet; ``save`` replaces the whole snapshot atomically (a crash
leaves either the old or the new snapshot, never a torn one). Errors: :class:`StateStoreError`.
"""

from __future__ import annotations

from typing import Protocol

from domain.runtime.types import RuntimeSnapshot


class StateStoreError(Exception):
    """The state could not be read (malformed, unknown version) or written; the message names the file."""


class RuntimeStateStore(Protocol):
    """Load and save one :class:`RuntimeSnapshot`."""

    def load(self) -> RuntimeSnapshot | None:
        """The last saved snapshot, or None. Raises StateStoreError."""
        ...

    def save(self, snapshot: RuntimeSnapshot) -> None:
        """Replace the saved snapshot atomically. Raises StateStoreError."""
        ...
