"""File-backed state of the reference Runtime (``ports.runtime_state``)."""

from .store import FILE_NAME, STATE_VERSION, JsonRuntimeStateStore

__all__ = ["FILE_NAME", "STATE_VERSION", "JsonRuntimeStateStore"]
