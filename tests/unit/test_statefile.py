"""``adapters.statefile.JsonRuntimeStateStore``: base file plus journal.

Covers: every save is one journal line and a load gives back the last snapshot; a crash at any byte of the
journal gives back exactly one earlier saved snapshot (hypothesis); a torn last line is cut off so later appends
stay readable; compaction writes a new generation and lines of an older generation are ignored; version 1 files
load; malformed content (also a base or journal line that is not UTF-8, or JSON nested too deep to parse) is an
error naming the file and line, and the base is left untouched; a failed write is an error and the next save
rewrites the base.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adapters.statefile.store as store_module
from adapters.statefile import JsonRuntimeStateStore
from domain.gpu import Gpu, GpuUuid
from domain.runtime.book import AllocationBook
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu, RuntimeSnapshot, RuntimeState
from domain.units import GiB
from ports.runtime_state import StateStoreError

GPUS = [Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GiB) for i in range(2)]


def request(n: int) -> ContainerAllocationRequest:
    gpu = GPUS[n % 2]
    return ContainerAllocationRequest(f"uid-{n}", "ns", f"pod-{n}", "main",
                                      (PlannedGpu(gpu.index, gpu.uuid, core_milli=100, memory_bytes=GiB),))


class Model:
    """A book and config state whose snapshots the tests save."""

    def __init__(self) -> None:
        self.book = AllocationBook()
        self.state = RuntimeState.ENABLED
        self.changed_at = 0.0

    def snapshot(self) -> RuntimeSnapshot:
        return RuntimeSnapshot(self.state, self.changed_at, "", self.book.records())

    def step(self, op: tuple[str, int]) -> None:
        kind, n = op
        if kind == "allocate":
            self.book.allocate(request(n), GPUS, now=float(n))
        elif kind == "release":
            self.book.release(f"uid-{n}")
        else:
            self.state = RuntimeState.DISABLED if self.state is RuntimeState.ENABLED else RuntimeState.ENABLED
            self.changed_at += 1


OPS = st.lists(st.tuples(st.sampled_from(["allocate", "release", "toggle"]), st.integers(0, 7)), max_size=25)


def test_each_save_appends_one_line_and_load_returns_the_last_snapshot(tmp_path: Path) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    model = Model()
    store.save(model.snapshot())  # the base
    for op in [("allocate", 1), ("allocate", 2), ("toggle", 0), ("release", 1)]:
        model.step(op)
        store.save(model.snapshot())
    store.save(model.snapshot())  # nothing changed: nothing written
    lines = store.journal_path.read_text().splitlines()
    assert len(lines) == 4
    assert json.loads(lines[3]) == {"g": 1, "put": [], "drop": [["uid-1", "main"]]}
    assert "header" in json.loads(lines[2])
    assert JsonRuntimeStateStore.in_dir(tmp_path).load() == model.snapshot()


@settings(max_examples=40, deadline=None)
@given(ops=OPS, cut=st.floats(0, 1))
def test_a_crash_anywhere_in_the_journal_loads_one_earlier_snapshot(tmp_path_factory: pytest.TempPathFactory,
                                                                     ops: list[tuple[str, int]], cut: float) -> None:
    directory = tmp_path_factory.mktemp("state")
    store = JsonRuntimeStateStore.in_dir(directory)
    model = Model()
    saved = [model.snapshot()]
    store.save(saved[0])
    for op in ops:
        model.step(op)
        store.save(model.snapshot())
        saved.append(model.snapshot())
    assert JsonRuntimeStateStore.in_dir(directory).load() == saved[-1]
    raw = store.journal_path.read_bytes()
    store.journal_path.write_bytes(raw[: int(len(raw) * cut)])
    reopened = JsonRuntimeStateStore.in_dir(directory)
    loaded = reopened.load()
    assert loaded in saved
    model.step(("allocate", 99))  # the journal still takes appends after the repair
    reopened.save(model.snapshot())
    assert JsonRuntimeStateStore.in_dir(directory).load() == model.snapshot()


def test_compaction_starts_a_new_generation_and_ignores_older_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "COMPACT_LINES", 3)
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    model = Model()
    store.save(model.snapshot())
    for n in range(3):
        model.step(("allocate", n))
        store.save(model.snapshot())
    stale = store.journal_path.read_bytes()
    model.step(("allocate", 5))
    store.save(model.snapshot())  # the fourth save compacts
    assert store.journal_path.read_bytes() == b""
    assert json.loads(store.path.read_text())["generation"] == 2
    store.journal_path.write_bytes(stale)  # a crash between the new base and the truncation
    assert JsonRuntimeStateStore.in_dir(tmp_path).load() == model.snapshot()


def test_version_1_files_still_load(tmp_path: Path) -> None:
    model = Model()
    model.step(("allocate", 1))
    data = store_module._converter().unstructure(model.snapshot())
    (tmp_path / "runtime-state.json").write_text(json.dumps({"version": 1, "snapshot": data}))
    assert JsonRuntimeStateStore.in_dir(tmp_path).load() == model.snapshot()


def test_malformed_journal_line_names_the_file_and_line(tmp_path: Path) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    store.save(Model().snapshot())
    line = '{"g": 1, "put": [], "drop": []}\n'
    store.journal_path.write_text(line + '{"g": 1, "oops": 1}\n' + line)
    with pytest.raises(StateStoreError, match=r"malformed Runtime journal .*runtime-state\.journal line 2"):
        JsonRuntimeStateStore.in_dir(tmp_path).load()


@pytest.mark.parametrize(("content", "problem"), [
    (b"\x00\xffnot json", "not UTF-8 text (byte 0xff at offset 1)"),
    (b"[" * 100_000, "malformed Runtime state"),
])
def test_a_base_that_is_not_utf8_or_absurdly_nested_names_the_file_and_is_left_alone(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "runtime-state.json"
    path.write_bytes(content)
    with pytest.raises(StateStoreError) as caught:  # was a raw UnicodeDecodeError (RecursionError)
        JsonRuntimeStateStore.in_dir(tmp_path).load()
    assert str(caught.value).startswith(f"malformed Runtime state {path}: ")
    assert problem in str(caught.value)
    assert path.read_bytes() == content


def test_a_journal_line_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    store.save(Model().snapshot())
    store.journal_path.write_bytes(b'{"g": 1, "put": [], "drop": []}\n\x00\xff\n')
    with pytest.raises(StateStoreError, match=r"malformed Runtime journal .*runtime-state\.journal line 2"):
        JsonRuntimeStateStore.in_dir(tmp_path).load()


def test_a_failed_write_raises_and_the_next_save_rewrites_the_base(tmp_path: Path) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    model = Model()
    store.save(model.snapshot())
    store.journal_path.unlink()
    store.journal_path.mkdir()  # appending now fails
    model.step(("allocate", 1))
    with pytest.raises(StateStoreError, match="cannot write Runtime state"):
        store.save(model.snapshot())
    store.journal_path.rmdir()
    store.save(model.snapshot())
    assert json.loads(store.path.read_text())["generation"] == 2  # a full base, not a journal line
    assert JsonRuntimeStateStore.in_dir(tmp_path).load() == model.snapshot()


def test_a_failed_fsync_takes_the_line_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path)
    model = Model()
    store.save(model.snapshot())
    saved = model.snapshot()
    model.step(("allocate", 1))
    real_fsync = store_module.os.fsync
    calls = {"n": 0}

    def failing_once(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", failing_once)
    with pytest.raises(StateStoreError, match="cannot write Runtime state"):
        store.save(model.snapshot())  # the Runtime rolls its record back on this error
    assert store.journal_path.read_bytes() == b""  # the line a crash would replay is gone
    assert JsonRuntimeStateStore.in_dir(tmp_path).load() == saved
