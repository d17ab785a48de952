"""In-memory twin of the Namespace port (``ports.namespaces``): Namespaces and their labels, put by tests
(:meth:`InMemoryNamespaces.put`, :meth:`InMemoryNamespaces.delete`); thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ports.cluster import NotFoundError


class InMemoryNamespaces:
    """Namespaces by name with their labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] = {}

    def put(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create Namespace ``name`` or replace its labels."""
        with self._lock:
            self._labels[name] = dict(labels or {})

    def delete(self, name: str) -> None:
        """Remove Namespace ``name`` (no error when absent)."""
        with self._lock:
            self._labels.pop(name, None)

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of ``name``. Raises NotFoundError when it was never put (or was deleted)."""
        with self._lock:
            if name not in self._labels:
                raise NotFoundError(f"get namespace {name}: not found")
            return dict(self._labels[name])

    def list_namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every Namespace's labels by name."""
        with self._lock:
            return {name: dict(self._labels[name]) for name in sorted(self._labels)}
