"""In-memory twin of the ResourceClaimTemplate port (``ports.claim_templates``): templates by namespace and name;
``fail`` makes every call raise the given error (tests of the fail-closed path). Thread-safe."""

from __future__ import annotations

import threading

from domain.dra.migrate import ClaimShape
from ports.cluster import ClusterError


class InMemoryClaimTemplates:
    """Created templates: ``(namespace, name)`` → shape (a test may store another shape under a name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.templates: dict[tuple[str, str], ClaimShape] = {}
        self.fail: ClusterError | None = None

    def create_template(self, namespace: str, shape: ClaimShape) -> bool:
        """Create the template of ``shape`` in ``namespace``: True, or False when it exists. Raises ``fail``."""
        with self._lock:
            if self.fail is not None:
                raise self.fail
            key = (namespace, shape.template_name)
            if key in self.templates:
                return False
            self.templates[key] = shape
            return True

    def read_template(self, namespace: str, name: str) -> ClaimShape | None:
        """The shape stored as ``name`` in ``namespace``, None when absent. Raises ``fail``."""
        with self._lock:
            if self.fail is not None:
                raise self.fail
            return self.templates.get((namespace, name))
