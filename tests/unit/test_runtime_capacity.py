"""Node-side capacity admission of the Runtime's allocation book (``domain.runtime.capacity``).

Behaviours covered:
- a grant that would take a GPU beyond 1000 milli-GPU core or beyond its memory is refused with
  ``CapacityExceededError`` naming pod, container, GPU UUID, what is granted already, what is asked and the
  capacity; nothing is recorded;
- exactly full (1000 milli, every byte) is admitted; release frees the capacity again;
- a whole-GPU grant shares its GPU with no other pod, in either order; other GPUs stay free;
- a pod's own init and app containers count by the effective rule ``max(Σ app, max init)``, not twice;
- identical repeats stay idempotent, also on a full GPU;
- restored records above capacity are kept, reported by ``over_capacity``, answered on repeat, and every new
  grant on that GPU is refused until enough is released;
- the gRPC mapping: RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import grpc
import pytest

from adapters.grpc.errors import status_for
from domain.gpu import Gpu, GpuUuid
from domain.runtime.book import AllocationBook
from domain.runtime.capacity import GpuOvercommit
from domain.runtime.errors import CapacityExceededError
from domain.runtime.types import ContainerAllocation, ContainerAllocationRequest, PlannedGpu
from domain.units import GiB

A = GpuUuid("GPU-aaaa")
B = GpuUuid("GPU-bbbb")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB))


def ask(pod: str, container: str, core: int, memory_gib: int, *, gpu: int = 0,
        init: bool = False) -> ContainerAllocationRequest:
    uuid = GPUS[gpu].uuid
    return ContainerAllocationRequest(pod, "team-a", f"pod-{pod}", container,
                                      (PlannedGpu(gpu, uuid, core_milli=core, memory_bytes=memory_gib * GiB),), init)


def test_the_second_80_percent_grant_on_one_gpu_is_refused_and_nothing_is_recorded() -> None:
    book = AllocationBook()
    book.allocate(ask("uid-1", "main", 800, 12), GPUS, now=0)
    with pytest.raises(CapacityExceededError) as error:
        book.allocate(ask("uid-2", "main", 800, 12), GPUS, now=1)
    message = str(error.value)
    for part in ("team-a/pod-uid-2:main", "uid-2", "'main'", A, "800 milli-GPU core and 12884901888 bytes granted",
                 "asked for 800 milli-GPU core and 12884901888 bytes", "capacity 1000 milli-GPU and 17179869184"):
        assert part in message
    assert [r.key for r in book.records()] == [("uid-1", "main")]
    assert book.allocated_per_gpu() == {A: (800, 12 * GiB)}


def test_memory_alone_can_exceed_the_gpu() -> None:
    book = AllocationBook()
    book.allocate(ask("uid-1", "main", 100, 10), GPUS, now=0)
    with pytest.raises(CapacityExceededError, match="10737418240 bytes granted already"):
        book.allocate(ask("uid-2", "main", 100, 7), GPUS, now=0)
    book.allocate(ask("uid-2", "main", 100, 6), GPUS, now=0)
    assert book.allocated_per_gpu() == {A: (200, 16 * GiB)}


def test_exactly_full_is_admitted_and_release_frees_capacity() -> None:
    book = AllocationBook()
    book.allocate(ask("uid-1", "main", 600, 10), GPUS, now=0)
    book.allocate(ask("uid-2", "main", 400, 6), GPUS, now=0)
    assert book.allocated_per_gpu() == {A: (1000, 16 * GiB)}
    with pytest.raises(CapacityExceededError):
        book.allocate(ask("uid-3", "main", 1, 1), GPUS, now=0)
    book.allocate(ask("uid-3", "main", 500, 8, gpu=1), GPUS, now=0)  # the other GPU is untouched
    assert len(book.release("uid-1")) == 1
    book.allocate(ask("uid-3", "side", 600, 10), GPUS, now=0)
    assert book.allocated_per_gpu() == {A: (1000, 16 * GiB), B: (500, 8 * GiB)}


@pytest.mark.parametrize("whole_first", [True, False])
def test_a_whole_gpu_shares_with_no_other_pod(whole_first: bool) -> None:
    book = AllocationBook()
    whole = ContainerAllocationRequest("uid-w", "team-a", "w", "main", (PlannedGpu(0, A, core_milli=1000),))
    small = ask("uid-s", "main", 10, 1)
    first, second = (whole, small) if whole_first else (small, whole)
    book.allocate(first, GPUS, now=0)
    with pytest.raises(CapacityExceededError, match="a whole GPU is granted to one pod only"):
        book.allocate(second, GPUS, now=0)
    assert [r.key for r in book.records()] == [first.key]


def test_init_and_app_containers_of_one_pod_do_not_count_twice() -> None:
    book = AllocationBook()
    book.allocate(ask("uid-1", "setup", 700, 10, init=True), GPUS, now=0)
    book.allocate(ask("uid-1", "app1", 400, 6), GPUS, now=0)
    book.allocate(ask("uid-1", "app2", 300, 4), GPUS, now=0)  # Σ app 700 / 10 GiB = the init's: still 700
    assert book.allocated_per_gpu() == {A: (700, 10 * GiB)}
    book.allocate(ask("uid-2", "main", 300, 6), GPUS, now=0)
    with pytest.raises(CapacityExceededError, match="'app3'"):
        book.allocate(ask("uid-1", "app3", 10, 1), GPUS, now=0)  # now Σ app grows past the init: 1010 milli
    assert book.allocated_per_gpu() == {A: (1000, 16 * GiB)}


def test_a_second_init_container_takes_the_max_not_the_sum() -> None:
    book = AllocationBook()
    book.allocate(ask("uid-2", "main", 300, 4), GPUS, now=0)
    book.allocate(ask("uid-1", "init1", 700, 12, init=True), GPUS, now=0)
    book.allocate(ask("uid-1", "init2", 700, 12, init=True), GPUS, now=0)
    assert book.allocated_per_gpu() == {A: (1000, 16 * GiB)}


def test_identical_repeat_on_a_full_gpu_stays_idempotent() -> None:
    book = AllocationBook()
    record, created = book.allocate(ask("uid-1", "main", 1000, 16), GPUS, now=0)
    again, created_again = book.allocate(ask("uid-1", "main", 1000, 16), GPUS, now=5)
    assert (created, created_again) == (True, False)
    assert again is record


def _over_capacity_records() -> tuple[ContainerAllocation, ...]:
    """Three 80 % / 12 GiB grants on GPU A, as a book without the check (an older Runtime) would have saved them."""
    records = []
    for n in range(3):
        book = AllocationBook()
        record, _ = book.allocate(ask(f"uid-{n}", "main", 800, 12), GPUS, now=float(n))
        records.append(record)
    return tuple(records)


def test_restored_records_over_capacity_are_kept_reported_and_block_new_grants() -> None:
    records = _over_capacity_records()
    book = AllocationBook()
    book.restore(records)
    assert book.records() == records
    assert book.over_capacity(GPUS) == (GpuOvercommit(A, 2400, 36 * GiB, 16 * GiB),)
    repeat, created = book.allocate(ask("uid-1", "main", 800, 12), GPUS, now=9)
    assert (repeat, created) == (records[1], False)
    with pytest.raises(CapacityExceededError, match="2400 milli-GPU core"):
        book.allocate(ask("uid-9", "main", 10, 1), GPUS, now=9)
    book.allocate(ask("uid-9", "main", 10, 1, gpu=1), GPUS, now=9)  # the other GPU still admits
    book.release("uid-0")
    book.release("uid-1")
    assert book.over_capacity(GPUS) == ()
    book.allocate(ask("uid-8", "main", 200, 4), GPUS, now=9)


def test_capacity_errors_are_resource_exhausted_on_the_wire() -> None:
    """The client side (RESOURCE_EXHAUSTED back to CapacityExceededError) is covered over a real socket in
    tests/integration/test_runtime_capacity_grpc.py."""
    assert status_for(CapacityExceededError("GPU-aaaa: full")) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "GPU-aaaa: full")
