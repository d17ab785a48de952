"""CSV trace reader: the Alibaba GPU trace's node and pod lists (``docs/trace-replay.md`` §1) → domain.

Strict by design — a replay silently fed a mangled row gives plausible, wrong curves — so every problem stops
the read with a :class:`TraceFormatError` naming file, 1-based line (header = line 1) and 1-based column:

- the header must contain every required column (extra columns such as ``qos`` or ``creation_time`` are
  ignored; ``gpu_spec`` is optional because the ``multigpu*`` files lack it), and no column twice;
- each data row has exactly as many fields as the header; blank lines are skipped;
- quantities are ASCII whole numbers ≥ 0 of at most 18 digits; ``gpu_milli`` ≤ 1000; CPU, memory and GPU counts
  within what a node can hold (:class:`TraceNode`, :class:`TracePod`); ``num_gpu > 1`` needs ``gpu_milli = 1000``
  (shares are of one GPU, §1.2); names are non-empty and unique;
- the domain's own validation (:class:`TracePod` raising :class:`InvalidRequestError`) is the single source of
  the GPU-share rules; its errors are re-raised at the offending row and column;
- a file with no header or no data row is rejected.

:meth:`CsvTraceReader.read_pod_times` reads the optional timeline columns (``creation_time``, ``deletion_time``)
that :meth:`CsvTraceReader.read_pods` ignores, for replays that follow the trace's arrivals and departures.

``gpu_spec`` is split on ``|`` with empty tokens dropped and duplicates kept, as the published YAML converter
does (§1.2). Files are read as UTF-8 (a leading byte-order mark is accepted) with the stdlib ``csv`` module.
The 8152-pod trace file loads in tens of milliseconds.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from domain.errors import InvalidRequestError
from domain.simulation.workload import TraceNode, TracePod
from ports.trace import TraceFileError, TraceFormatError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""Required columns of a node list, in published order."""

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""Required columns of a pod list; ``gpu_spec`` is read when present."""

TIME_COLUMNS = ("creation_time", "deletion_time")
"""Optional timeline columns of a pod list (seconds since the trace's start; ``deletion_time`` may be empty)."""

PodTimes = tuple[int | None, int | None]
"""``(creation_time, deletion_time)`` of one pod in trace seconds; None where the file has no value."""

_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
_MAX_DIGITS = 18
"""Most digits a quantity cell may have (beyond int64; the domain bounds the values far lower)."""

_T = TypeVar("_T")


class _Row:
    """One data row with its file line, addressed by column name; raises positioned errors."""

    __slots__ = ("columns", "fields", "line", "path")

    def __init__(self, path: Path, columns: dict[str, int], line: int, fields: list[str]) -> None:
        self.path = path
        self.columns = columns
        self.line = line
        self.fields = fields

    def error(self, name: str, reason: str) -> TraceFormatError:
        """A format error at this row's cell ``name``."""
        return TraceFormatError(
            self.path, line=self.line, column=self.columns[name] + 1, column_name=name, reason=reason
        )

    def text(self, name: str) -> str:
        """The stripped cell ``name``."""
        return self.fields[self.columns[name]].strip()

    def name(self, name: str) -> str:
        """The cell ``name`` as a non-empty identifier."""
        value = self.text(name)
        if not value:
            raise self.error(name, "is empty; every row needs a name")
        return value

    def quantity(self, name: str) -> int:
        """The cell ``name`` as a whole number ≥ 0."""
        value = self.text(name)
        if not _WHOLE_NUMBER.fullmatch(value):
            shown = "empty" if not value else f"{value!r} is not a whole number"
            raise self.error(name, f"{shown}; expected an integer ≥ 0")
        if len(value.lstrip("+-")) > _MAX_DIGITS:  # refused before int() reads it (Python stops at 4300 digits)
            raise self.error(name, f"{value[:24]}… has more than {_MAX_DIGITS} digits; no trace value is that large")
        number = int(value)
        if number < 0:
            raise self.error(name, f"{number} is negative; expected an integer ≥ 0")
        return number


class CsvTraceReader:
    """Reads trace CSV files (module docstring); implements :class:`ports.trace.TraceReader`."""

    def read_nodes(self, path: Path) -> list[TraceNode]:
        """Nodes of ``path`` in file order. Raises :class:`TraceFileError` / :class:`TraceFormatError`."""
        return _read(path, NODE_COLUMNS, kind="node", key="sn", build=_node)

    def read_pods(self, path: Path) -> list[TracePod]:
        """Pods of ``path`` in file order. Raises :class:`TraceFileError` / :class:`TraceFormatError`."""
        return _read(path, POD_COLUMNS, kind="pod", key="name", build=_pod)

    def read_pod_times(self, path: Path) -> dict[str, PodTimes]:
        """Pod name → :data:`PodTimes` from the optional :data:`TIME_COLUMNS` of a pod list (both None when the
        file lacks a column, as the ``multigpu`` files do; an empty cell is None). Only the ``name`` column is
        required here. Raises :class:`TraceFileError`, or :class:`TraceFormatError` for a value that is not a
        whole number ≥ 0 or a ``deletion_time`` before the ``creation_time``."""
        return dict(_read(path, ("name",), kind="pod", key="name", build=_times))


def _node(row: _Row) -> TraceNode:
    return TraceNode(
        name=row.name("sn"), cpu_milli=row.quantity("cpu_milli"), memory_mib=row.quantity("memory_mib"),
        gpus=row.quantity("gpu"), model=row.text("model"),
    )


def _pod(row: _Row) -> TracePod:
    spec = tuple(t.strip() for t in row.text("gpu_spec").split("|") if t.strip()) if "gpu_spec" in row.columns else ()
    return TracePod(  # validates gpu_milli against num_gpu (domain rules); _read positions its errors
        name=row.name("name"), cpu_milli=row.quantity("cpu_milli"), memory_mib=row.quantity("memory_mib"),
        num_gpu=row.quantity("num_gpu"), gpu_milli=row.quantity("gpu_milli"), gpu_spec=spec,
    )


def _times(row: _Row) -> tuple[str, PodTimes]:
    values: list[int | None] = []
    for column in TIME_COLUMNS:
        present = column in row.columns and row.text(column) != ""
        values.append(row.quantity(column) if present else None)
    created, deleted = values
    if created is not None and deleted is not None and deleted < created:
        raise row.error("deletion_time", f"{deleted} is before creation_time {created}")
    return row.name("name"), (created, deleted)


def _read(
    path: Path, required: tuple[str, ...], *, kind: str, key: str, build: Callable[[_Row], _T]
) -> list[_T]:
    rows = _records(path)
    header = next(rows, None)
    if header is None:
        raise TraceFormatError(path, line=1, reason=f"empty file: expected a header line with {', '.join(required)}")
    columns = _columns(path, header, required)
    items: list[_T] = []
    first_line: dict[str, int] = {}
    for line, fields in rows:
        if len(fields) != len(columns.names):
            raise _width_error(path, line, fields, columns.names)
        row = _Row(path, columns.index, line, fields)
        name = row.text(key)
        if name in first_line:
            raise row.error(key, f"duplicate {kind} name {name!r} (first on line {first_line[name]})")
        try:
            items.append(build(row))
        except InvalidRequestError as exc:
            field = exc.field.split(".")[0]
            if field in columns.index:
                raise row.error(field, f"{exc.value!r}: {exc.reason}") from exc
            raise TraceFormatError(path, line=line, reason=str(exc)) from exc
        first_line[name] = line
    if not items:
        raise TraceFormatError(
            path, line=header[0] + 1, reason=f"no data rows: a {kind} list needs at least one {kind}"
        )
    return items


class _Header:
    __slots__ = ("index", "names")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}


def _columns(path: Path, header: tuple[int, list[str]], required: tuple[str, ...]) -> _Header:
    line, fields = header
    names = [f.strip() for f in fields]
    seen: set[str] = set()
    for number, name in enumerate(names, start=1):
        if name in seen:
            raise TraceFormatError(
                path, line=line, column=number, column_name=name, reason="appears twice in the header"
            )
        seen.add(name)
    missing = [name for name in required if name not in seen]
    if missing:
        raise TraceFormatError(
            path, line=line,
            reason=f"missing required column {missing[0]!r} (header has: {', '.join(names)}; "
            f"required: {', '.join(required)})",
        )
    return _Header(names)


def _width_error(path: Path, line: int, fields: list[str], names: list[str]) -> TraceFormatError:
    if len(fields) < len(names):
        missing = len(fields)
        return TraceFormatError(
            path, line=line, column=missing + 1, column_name=names[missing],
            reason=f"missing value (the row has {len(fields)} fields, the header {len(names)})",
        )
    return TraceFormatError(
        path, line=line, column=len(names) + 1,
        reason=f"unexpected extra field (the row has {len(fields)} fields, the header {len(names)})",
    )


def _records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Non-blank CSV records of ``path`` as ``(line, fields)``; ``line`` is the record's last physical line."""
    text = _text(path)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise TraceFormatError(path, line=reader.line_num, reason=f"malformed CSV: {exc}") from exc
        if fields and any(f.strip() for f in fields):
            yield reader.line_num, fields


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceFileError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFileError(path, "is a directory, not a CSV file") from None
    except PermissionError:
        raise TraceFileError(path, "permission denied") from None
    except OSError as exc:
        raise TraceFileError(path, exc.strerror or str(exc)) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceFormatError(path, line=line, reason=f"not UTF-8 text (byte {data[exc.start]:#04x})") from None
