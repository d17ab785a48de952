"""The Runtime state store port (``ports.runtime_state``) against both stores: ``adapters.statefile``
(``JsonRuntimeStateStore``, base file plus journal) and ``adapters.memory`` (``InMemoryRuntimeStateStore``).

Behaviours: nothing saved loads as None; a load gives back exactly the last saved snapshot (config state, time,
reason and every record field: grants, environment, device specs, MIG instances with owner and ``created``); a
save replaces the whole snapshot (records left out are gone, the state follows); a store reopened over the same
storage loads the last snapshot (the in-memory store's storage is the object itself: it lasts as long as the
process, by design) and keeps saving from there; a long run of saves loads as its last one; a snapshot that cannot
be read is a :class:`StateStoreError` (file store; memory cannot be corrupted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated.miglayout import MigLayouts
from adapters.statefile import JsonRuntimeStateStore
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.gpu import PlacementMode
from domain.runtime.book import AllocationBook
from domain.runtime.mig import MigNode
from domain.runtime.types import (
    ContainerAllocationRequest,
    PlannedGpu,
    PlannedMig,
    RuntimeSnapshot,
    RuntimeState,
)
from domain.units import GiB, MiB
from ports.runtime_state import RuntimeStateStore, StateStoreError

GPUS = [Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GiB),
        Gpu(1, GpuUuid("GPU-1"), "NVIDIA A100-SXM4-40GB", 40 * GiB, mig_mode=MigMode.ENABLED)]


@attrs.define
class StoreUnderTest:
    """A store, ``reopen()`` (a new store over the same storage) and ``corrupt()`` (None: cannot be)."""

    kind: str
    store: RuntimeStateStore
    reopen: Callable[[], RuntimeStateStore]
    corrupt: Callable[[], None] | None


@pytest.fixture(params=["statefile", "memory"])
def under(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreUnderTest]:
    """Each store, empty."""
    if request.param == "statefile":
        def corrupt() -> None:
            (tmp_path / "runtime-state.json").write_text('{"version": 2, "generation": 1, "snapshot": {"stat')

        yield StoreUnderTest("statefile", JsonRuntimeStateStore.in_dir(tmp_path),
                             lambda: JsonRuntimeStateStore.in_dir(tmp_path), corrupt)
    else:
        store = InMemoryRuntimeStateStore()
        yield StoreUnderTest("memory", store, lambda: store, None)


class Node:
    """An allocation book over :data:`GPUS` (GPU 1 in MIG mode, dynamic strategy) whose snapshots are saved; shares
    are small enough that 60 of them fit GPU 0 (the book refuses over-commit)."""

    def __init__(self) -> None:
        self.book = AllocationBook()
        self.mig = MigLayouts(GPUS, {1: [("3g.20gb", 0)]})
        self.state, self.changed_at, self.reason = RuntimeState.ENABLED, 0.0, ""

    def share(self, n: int) -> None:
        share = PlannedGpu(0, GPUS[0].uuid, core_milli=1 + n % 16, memory_bytes=(n + 1) * MiB)
        request = ContainerAllocationRequest(f"uid-{n}", "ns", f"pod-{n}", "main", (share,))
        self.book.allocate(request, GPUS, now=float(n), minors={g.uuid: g.index for g in GPUS})

    def mig_pod(self, n: int, *, start: int, create: bool) -> None:
        plan = PlannedMig(1, GPUS[1].uuid, "3g.20gb" if not create else "1g.5gb", start, create=create)
        request = ContainerAllocationRequest(f"mig-{n}", "ns", f"mig-{n}", "main", (), mig=(plan,))
        node = MigNode(self.mig.instances(), PlacementMode.DYNAMIC, self.mig)
        self.book.allocate(request, GPUS, now=float(n), minors={g.uuid: g.index for g in GPUS}, mig=node)

    def snapshot(self) -> RuntimeSnapshot:
        return RuntimeSnapshot(self.state, self.changed_at, self.reason, self.book.records())


def test_nothing_saved_loads_as_none(under: StoreUnderTest) -> None:
    assert under.store.load() is None
    assert under.reopen().load() is None


def test_a_load_gives_back_every_field_of_the_last_snapshot(under: StoreUnderTest) -> None:
    node = Node()
    node.share(1)
    node.mig_pod(2, start=0, create=False)
    node.mig_pod(3, start=6, create=True)
    node.state, node.changed_at, node.reason = RuntimeState.DISABLED, 12.5, "draining for MIG"
    snapshot = node.snapshot()
    assert {i.created for r in snapshot.allocations for i in r.mig} == {True, False}  # both kinds are covered
    under.store.save(snapshot)
    assert under.store.load() == snapshot
    assert under.reopen().load() == snapshot


def test_a_save_replaces_the_whole_snapshot(under: StoreUnderTest) -> None:
    node = Node()
    for n in range(3):
        node.share(n)
    under.store.save(node.snapshot())
    node.book.release("uid-0")
    node.book.release("uid-2")
    node.state, node.changed_at = RuntimeState.DISABLED, 3.0
    under.store.save(node.snapshot())
    loaded = under.reopen().load()
    assert loaded == node.snapshot()
    assert loaded is not None
    assert [r.request.pod_uid for r in loaded.allocations] == ["uid-1"]
    under.store.save(RuntimeSnapshot(RuntimeState.ENABLED))
    assert under.reopen().load() == RuntimeSnapshot(RuntimeState.ENABLED)


def test_a_reopened_store_keeps_saving_from_the_last_snapshot(under: StoreUnderTest) -> None:
    node = Node()
    node.share(1)
    under.store.save(node.snapshot())
    reopened = under.reopen()
    assert reopened.load() == node.snapshot()
    node.share(2)
    reopened.save(node.snapshot())
    assert under.reopen().load() == node.snapshot()


def test_a_long_run_of_saves_loads_as_its_last(under: StoreUnderTest) -> None:
    node = Node()
    for n in range(60):
        node.share(n)
        if n % 3 == 0:
            node.book.release(f"uid-{n // 2}")
        under.store.save(node.snapshot())
    assert len(node.book) > 30
    assert under.reopen().load() == node.snapshot()


def test_a_snapshot_that_cannot_be_read_is_a_state_store_error(under: StoreUnderTest) -> None:
    if under.corrupt is None:
        pytest.skip(f"the {under.kind} store holds objects, not bytes: nothing to corrupt")
    under.corrupt()
    with pytest.raises(StateStoreError, match=r"runtime-state\.json"):
        under.reopen().load()
