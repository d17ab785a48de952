"""The kubelet DRA plugin's handler port: what the gRPC server (``adapters.grpc.dra_plugin``) calls.

Implementation: ``services.dra.plugin.ClaimPreparer``. ``prepare`` answers every claim by UID with its devices or
an error message, ``unprepare`` with an error message (empty = done); neither raises for one claim's failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from domain.dra.claims import ClaimRef
from domain.dra.prepared import ClaimOutcome

__all__ = ["DraPluginHandler"]


class DraPluginHandler(Protocol):
    """Prepares and unprepares claims (module docstring)."""

    def prepare(self, claims: Iterable[ClaimRef]) -> dict[str, ClaimOutcome]:
        """Every claim's outcome by UID."""
        ...

    def unprepare(self, claims: Iterable[ClaimRef]) -> dict[str, str]:
        """Every claim's error by UID (empty = done)."""
        ...
