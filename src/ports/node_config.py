"""The node config port: enable or disable GPU sharing on a node (``proto/ljrk/config/v1/config_service.proto``).

Called by the job agent. Enable and Disable are idempotent and return the resulting status; the state
persists across Runtime restarts. While disabled the Runtime refuses new allocations and keeps existing ones.
Errors: ``ports.runtime.RuntimeUnavailableError`` / ``NodeRuntimeError`` as for the Runtime port.
"""

from __future__ import annotations

from typing import Protocol

from domain.runtime.types import ConfigStatus


class NodeConfig(Protocol):
    """Enable, disable, status."""

    def enable(self, reason: str = "") -> ConfigStatus:
        """Take new allocations again; ``reason`` (who, why) is recorded with the change."""
        ...

    def disable(self, reason: str = "") -> ConfigStatus:
        """Refuse new allocations; existing ones stay."""
        ...

    def status(self) -> ConfigStatus:
        """Current state, when and why it last changed, and the number of allocation records."""
        ...
