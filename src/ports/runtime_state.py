"""The Runtime state port: where the reference Runtime persists its config state and allocation records.

``load`` returns None when nothing was saved yet, else a snapshot equal to the last one saved (every field);
``save`` replaces the whole snapshot atomically (a crash leaves either the old or the new snapshot, never a torn
one). Errors: :class:`StateStoreError`. Implementations: ``adapters.statefile.JsonRuntimeStateStore`` (durable:
a new store over the same directory loads it) and ``adapters.memory.runtime_state.InMemoryRuntimeStateStore`` (the
snapshot lives in the object, for the process only: tests and the in-process Runtime). The contract suite
``tests/contract/test_runtime_state_store_contract.py`` checks both.
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
