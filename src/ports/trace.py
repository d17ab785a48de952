"""Trace input port: where a replay's nodes and pods come from.

A reader turns a node list and a pod list (the Alibaba GPU trace schema, ``docs/trace-replay.md`` §1) into domain
:class:`TraceNode` / :class:`TracePod` values, or fails with a :class:`TraceError` that names the file and, where
one applies, the 1-based file line (header = line 1) and 1-based column at fault — so an operator can open the
file at the right spot without reading code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from domain.simulation.workload import TraceNode, TracePod


class TraceError(Exception):
    """Base class of every trace-reading error. ``path`` is the file as the caller named it."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(message)


class TraceFileError(TraceError):
    """The file cannot be opened (missing, a directory, no permission). ``reason`` says which."""

    def __init__(self, path: Path, reason: str) -> None:
        self.reason = reason
        super().__init__(path, f"{path}: {reason}")


class TraceFormatError(TraceError):
    """The file's content is malformed at ``line`` (1-based, header = 1) and ``column`` (1-based, ``None`` when
    the fault is not in one field, e.g. a missing header column); ``column_name`` is the header name there.

    Message shape: ``FILE:LINE:COLUMN: column 'NAME': REASON`` (or ``FILE:LINE: REASON``), the compiler
    convention editors and terminals turn into a link.
    """

    def __init__(
        self, path: Path, *, line: int, reason: str, column: int | None = None, column_name: str | None = None
    ) -> None:
        self.line = line
        self.column = column
        self.column_name = column_name
        self.reason = reason
        where = f"{path}:{line}" if column is None else f"{path}:{line}:{column}"
        what = f"column {column_name!r}: {reason}" if column_name is not None else reason
        super().__init__(path, f"{where}: {what}")


class TraceReader(Protocol):
    """Reads a trace's node list and pod list into domain values.

    Both methods return the rows in file order and raise :class:`TraceFileError` when the file cannot be
    opened and :class:`TraceFormatError` for malformed content (missing required column, non-integer or
    negative quantity, out-of-range GPU share, duplicate name, no data rows).
    """

    def read_nodes(self, path: Path) -> list[TraceNode]:
        """Nodes of a node list (columns ``sn, cpu_milli, memory_mib, gpu, model``)."""
        ...

    def read_pods(self, path: Path) -> list[TracePod]:
        """Pods of a pod list (columns ``name, cpu_milli, memory_mib, num_gpu, gpu_milli``, optional
        ``gpu_spec``)."""
        ...
