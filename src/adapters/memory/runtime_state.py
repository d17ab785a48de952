"""In-memory ``ports.runtime_state.RuntimeStateStore``: the Runtime's snapshot kept in the object.

For tests and the in-process Runtime (``entrypoints.runtime.inprocess``): ``load`` returns the last snapshot
``save`` was given (None before the first), which lasts as long as the object; nothing can fail. The contract suite
``tests/contract/test_runtime_state_store_contract.py`` checks it against the JSON state file.
"""

from __future__ import annotations

from domain.runtime.types import RuntimeSnapshot


class InMemoryRuntimeStateStore:
    """``ports.runtime_state.RuntimeStateStore`` in memory, starting from ``snapshot`` (None: nothing saved);
    ``saves`` counts writes (for tests)."""

    def __init__(self, snapshot: RuntimeSnapshot | None = None) -> None:
        self._snapshot = snapshot
        self.saves = 0

    def load(self) -> RuntimeSnapshot | None:
        """The last saved snapshot, or None."""
        return self._snapshot

    def save(self, snapshot: RuntimeSnapshot) -> None:
        """Keep ``snapshot`` (snapshots are immutable: no copy needed)."""
        self._snapshot = snapshot
        self.saves += 1
