"""``JsonRuntimeStateStore``: the Runtime's config state and allocation records as a JSON base file plus a
JSON-lines journal, so one Allocate or Release costs one appended line, not a rewrite of every record.

File layouts, the journal's generation rule and compaction: ``docs/runtime-state-files.md``. Invariants: a ``save``
returns only once its line is fsynced; the base is replaced atomically (temporary file, fsync, ``os.replace``,
directory fsync), so a crash leaves the old or the new file; a missing base loads as None, a malformed base or
journal line raises :class:`StateStoreError` naming the file (the file is left for the operator), except a last
line without its newline, a write the crash interrupted, which is dropped.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from domain.runtime.types import ContainerAllocation, RuntimeSnapshot
from ports.runtime_state import StateStoreError

STATE_VERSION = 2
"""Schema version of the base file (1: base only, no generation)."""

FILE_NAME = "runtime-state.json"
JOURNAL_SUFFIX = ".journal"

COMPACT_LINES = 1000
"""Journal lines after which the next save writes a new base."""
COMPACT_MIN_BYTES = 1 << 20
"""The journal may always grow to this many bytes before its size alone triggers a compaction."""


def _converter() -> cattrs.Converter:
    return cattrs.Converter(forbid_extra_keys=True)


Key = tuple[str, str]


class JsonRuntimeStateStore:
    """Base file plus journal (module docstring): ``path`` is the base file, or use :meth:`in_dir`. Not
    thread-safe (the Runtime saves under its own lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.journal_path = path.with_name(path.name.removesuffix(".json") + JOURNAL_SUFFIX)
        self._converter = _converter()
        self._generation = 0
        self._header: Any = None  # non-record fields as last written (None: no base written or loaded yet)
        self._records: dict[Key, tuple[ContainerAllocation, Any]] = {}  # as last written, with their data
        self._journal_lines = 0
        self._journal_bytes = 0
        self._base_bytes = 0

    @classmethod
    def in_dir(cls, directory: Path) -> JsonRuntimeStateStore:
        """The store at ``directory / runtime-state.json`` (the directory is created on the first save)."""
        return cls(directory / FILE_NAME)

    # ------------------------------------------------------------------ load
    def load(self) -> RuntimeSnapshot | None:
        """The saved snapshot (base plus journal), or None when no base exists. Raises :class:`StateStoreError`."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StateStoreError(f"cannot read Runtime state {self.path}: {error}") from error
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:  # a ValueError, but its text names neither the file nor the offset
            raise StateStoreError(f"malformed Runtime state {self.path}: not UTF-8 text (byte "
                                  f"{raw[error.start]:#04x} at offset {error.start})") from error
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") not in (1, STATE_VERSION):
                raise ValueError(f"expected {{'version': {STATE_VERSION}, 'generation': …, 'snapshot': …}}")
            expected = {"version", "snapshot"} | ({"generation"} if data["version"] == STATE_VERSION else set())
            if set(data) != expected:
                raise ValueError(f"expected exactly the keys {sorted(expected)}")
            generation = data.get("generation", 0)
            if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
                raise ValueError(f"generation {generation!r} is not an integer >= 0")
            snapshot_data = data["snapshot"]
            if not isinstance(snapshot_data, dict):
                raise ValueError("snapshot must be a mapping")
            header = {k: v for k, v in snapshot_data.items() if k != "allocations"}
            records = {self._key_of(r): r for r in snapshot_data.get("allocations", [])}
        except (ValueError, TypeError, KeyError, RecursionError) as error:  # RecursionError: absurdly deep nesting
            raise StateStoreError(f"malformed Runtime state {self.path}: {error}") from error
        header, records, lines, size = self._replay(generation, header, records)
        snapshot = self._structure(header, records, self.path)
        self._generation, self._base_bytes = generation, len(raw)
        self._journal_lines, self._journal_bytes = lines, size
        self._header = header
        self._records = {r.key: (r, self._converter.unstructure(r)) for r in snapshot.allocations}
        return snapshot

    @staticmethod
    def _key_of(record: Any) -> Key:
        request = record["request"]
        return (str(request["pod_uid"]), str(request["container"]))

    def _replay(
        self, generation: int, header: dict[str, Any], records: dict[Key, Any]
    ) -> tuple[dict[str, Any], dict[Key, Any], int, int]:
        """Apply the journal lines of ``generation``; returns header, records, lines and bytes kept."""
        try:
            raw = self.journal_path.read_bytes()
        except FileNotFoundError:
            return header, records, 0, 0
        except OSError as error:
            raise StateStoreError(f"cannot read Runtime journal {self.journal_path}: {error}") from error
        complete = raw[: raw.rfind(b"\n") + 1]  # a last line without its newline was never acknowledged
        if len(complete) < len(raw):  # cut it off, or the next append would glue onto it
            try:
                with open(self.journal_path, "r+b") as journal:
                    journal.truncate(len(complete))
                    os.fsync(journal.fileno())
            except OSError as error:
                raise StateStoreError(f"cannot repair Runtime journal {self.journal_path}: {error}") from error
        lines = 0
        for number, line in enumerate(complete.splitlines(), start=1):
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict) or set(entry) - {"g", "header", "put", "drop"}:
                    raise ValueError("expected {'g', 'header'?, 'put', 'drop'}")
                if entry["g"] != generation:
                    continue
                if "header" in entry:
                    header = dict(entry["header"])
                for record in entry["put"]:
                    records[self._key_of(record)] = record
                for pod_uid, container in entry["drop"]:
                    records.pop((str(pod_uid), str(container)), None)
            except (ValueError, TypeError, KeyError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
                where = f"{self.journal_path} line {number}"
                raise StateStoreError(f"malformed Runtime journal {where}: {error}") from error
            lines += 1
        return header, records, lines, len(complete)

    def _structure(self, header: Mapping[str, Any], records: Mapping[Key, Any], source: Path) -> RuntimeSnapshot:
        """The snapshot, records oldest first (ties by key), the order ``AllocationBook.records`` gives."""
        try:
            snapshot = self._converter.structure({**header, "allocations": list(records.values())}, RuntimeSnapshot)
            ordered = tuple(sorted(snapshot.allocations, key=lambda r: (r.allocated_at, r.key)))
            return attrs.evolve(snapshot, allocations=ordered)
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as error:
            detail: object = error
            if isinstance(error, cattrs.BaseValidationError):
                detail = "; ".join(cattrs.transform_error(error))
            raise StateStoreError(f"malformed Runtime state {source}: {detail}") from error

    # ------------------------------------------------------------------ save
    def save(self, snapshot: RuntimeSnapshot) -> None:
        """Persist ``snapshot`` (a journal line, or a new base when due; module docstring). Raises
        :class:`StateStoreError`; after a failure the next save writes a full base."""
        header = self._converter.unstructure(attrs.evolve(snapshot, allocations=()))
        header.pop("allocations", None)
        try:
            if self._header is None or self._compaction_due():
                self._write_base(snapshot, header)
            else:
                self._append(snapshot, header)
        except OSError as error:
            self._header = None  # unknown what reached the disk: rewrite everything next time
            raise StateStoreError(f"cannot write Runtime state {self.path}: {error}") from error

    def _compaction_due(self) -> bool:
        return self._journal_lines >= COMPACT_LINES or self._journal_bytes > max(self._base_bytes, COMPACT_MIN_BYTES)

    def _record_data(self, record: ContainerAllocation) -> Any:
        known = self._records.get(record.key)
        return known[1] if known is not None and known[0] is record else self._converter.unstructure(record)

    def _write_base(self, snapshot: RuntimeSnapshot, header: Any) -> None:
        records = {r.key: (r, self._record_data(r)) for r in snapshot.allocations}
        generation = self._generation + 1
        payload = json.dumps(
            {"version": STATE_VERSION, "generation": generation,
             "snapshot": {**header, "allocations": [data for _, data in records.values()]}},
            sort_keys=True, separators=(",", ":"),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w") as file:
                file.write(payload)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        self._fsync_directory()
        with open(self.journal_path, "wb") as journal:  # old lines carry the old generation anyway
            os.fsync(journal.fileno())
        self._generation, self._header, self._records = generation, header, records
        self._journal_lines = self._journal_bytes = 0
        self._base_bytes = len(payload)

    def _append(self, snapshot: RuntimeSnapshot, header: Any) -> None:
        current = {r.key: r for r in snapshot.allocations}
        put = [r for key, r in current.items()
               if (known := self._records.get(key)) is None or (known[0] is not r and known[0] != r)]
        drop = [key for key in self._records if key not in current]
        if not put and not drop and header == self._header:
            return
        put_data = [(r, self._converter.unstructure(r)) for r in put]
        entry: dict[str, Any] = {"g": self._generation, "put": [d for _, d in put_data],
                                 "drop": [list(k) for k in drop]}
        if header != self._header:
            entry["header"] = header
        line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
        new_file = not self.journal_path.exists()
        with open(self.journal_path, "ab") as journal:
            offset = journal.tell()
            try:
                journal.write(line)
                journal.flush()
                os.fsync(journal.fileno())
            except OSError:
                self._cut(journal, offset)  # the caller rolls the operation back: the line must not replay
                raise
        if new_file:
            self._fsync_directory()
        for key in drop:
            del self._records[key]
        for record, data in put_data:
            self._records[record.key] = (record, data)
        # records kept as they were keep their cached data; a replaced identical record keeps the old data too
        self._header = header
        self._journal_lines += 1
        self._journal_bytes += len(line)

    @staticmethod
    def _cut(journal: Any, offset: int) -> None:
        """Best effort: truncate ``journal`` back to ``offset`` after a failed append (a disk that refused the
        write may refuse this too; then the next save's new base and generation make the line inert)."""
        try:
            journal.truncate(offset)
            os.fsync(journal.fileno())
        except OSError:
            pass

    def _fsync_directory(self) -> None:
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
