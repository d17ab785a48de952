"""The ledger's derived arrays and capacity memo stay equal to a from-scratch recomputation.

Behaviours covered, on seeded random sequences over four nodes (mixed GPU counts, memory sizes and models):
reserve (shares, whole GPUs, CPU-only; refused ones included), observe (including over-commit by foreign pods),
release, node upserts that change GPU health, MIG mode, memory and GPU count (growing the columns), node removal and
re-adding (slot reuse, growing the rows), ``copy_node`` from a rebuilt ledger, corruption followed by ``repair``,
quarantine and its lifting, new workload tags. After every step each derived array (per-GPU free core, free memory,
schedulable free, whole-free GPUs; per-node schedulable capacity and free sums, schedulable and whole-free GPU
counts, free CPU, host memory and pod slots) equals the same quantity recomputed from the raw books here, and the
capacity memo (model masks, largest GPU memory, resolved share needs, per-GPU share fit kept row by row) equals a
fresh computation.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import numpy.typing as npt
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError, LedgerCorruptedError
from domain.gpu import Gpu, GpuUuid, Health, MigMode, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest
from domain.scheduling.framework.planner import (
    any_per_row,
    ledger_share_fit,
    ledger_share_needs,
    only_rows,
    share_needs,
)
from domain.scheduling.policies.fgd.score import fit_bits
from domain.units import GiB
from support.ledger_poke import corrupt_core_used

NAMES = ("a", "b", "c", "d")
MODELS = ("A100", "V100", "T4")
MEMORY = (16 * GiB, 24 * GiB, 40 * GiB)


def inventory(rng: random.Random, name: str, gpus: int | None = None) -> NodeInventory:
    count = rng.randint(0, 5) if gpus is None else gpus
    return NodeInventory(
        NodeName(name),
        tuple(
            Gpu(i, GpuUuid(f"GPU-{name}-{i}"), rng.choice(MODELS), rng.choice(MEMORY),
                health=Health.UNHEALTHY if rng.random() < 0.15 else Health.HEALTHY,
                mig_mode=MigMode.ENABLED if rng.random() < 0.1 else MigMode.DISABLED)
            for i in range(count)
        ),
        cpu_milli=8000, memory_bytes=64 * GiB, max_pods=6,
    )


def allocation(rng: random.Random, ledger: ClusterLedger, uid: str, name: str) -> PodAllocation:
    gpus = ledger.inventory(name).gpus
    cpu = rng.choice([0, 500, 4000])
    tag = rng.random()
    if not gpus or tag < 0.2:
        return PodAllocation(uid, name, (), cpu_milli=cpu, memory_bytes=GiB)
    gpu = rng.choice(gpus)
    if tag < 0.45:
        grant = GpuGrant(gpu.index, 1000, gpu.memory_bytes)
        return PodAllocation(uid, name, (ContainerGrant("w", (grant,), whole=True),), cpu_milli=cpu)
    grant = GpuGrant(gpu.index, rng.choice([1, 250, 500, 999, 1000]), rng.choice([1, GiB, 8 * GiB]))
    return PodAllocation(uid, name, (ContainerGrant("s", (grant,)),), cpu_milli=cpu, memory_bytes=GiB)


def recomputed(ledger: ClusterLedger) -> dict[str, npt.NDArray[np.int64] | npt.NDArray[np.bool_]]:
    """Every derived array, from the raw books only."""
    cap, used, mem_cap, mem_used, ok = (
        ledger.core_cap, ledger.core_used, ledger.mem_cap, ledger.mem_used, ledger.gpu_ok)
    free = np.maximum(cap - used, 0)
    sched = np.where(ok, free, 0)
    whole = ok & (used == 0) & (mem_used == 0) & (cap > 0)
    return {
        "free_core": free,
        "free_mem": np.maximum(mem_cap - mem_used, 0),
        "sched_free": sched,
        "free_whole": whole,
        "sched_cap": np.where(ok, cap, 0).sum(axis=1),
        "sched_free_sum": sched.sum(axis=1),
        "sched_gpus": ok.sum(axis=1),
        "free_gpus": whole.sum(axis=1),
        "cpu_free": ledger.cpu_cap - ledger.cpu_used,
        "hostmem_free": ledger.hostmem_cap - ledger.hostmem_used,
        "pods_free": ledger.pods_cap - ledger.pods_used,
    }


def check(ledger: ClusterLedger) -> None:
    for name, expected in recomputed(ledger).items():
        actual = getattr(ledger, name)
        assert actual.shape == expected.shape, name
        assert np.array_equal(actual, expected), name
    for models in (("A100",), ("V100", "T4"), ("H100",)):
        assert np.array_equal(ledger.model_mask(models), np.isin(ledger.gpu_model, ledger.model_ids(models)))
    assert ledger.largest_memory() == int(ledger.mem_cap[ledger.active].max(initial=0))
    for shape in (ContainerRequest("s", core_milli=300), ContainerRequest("m", memory_bytes=5 * GiB),
                  ContainerRequest("p", memory_milli=250), ContainerRequest("b", core_milli=10, memory_bytes=GiB)):
        memo = ledger_share_needs(ledger, shape)
        fresh = share_needs(shape.core_milli, shape.memory_bytes, ledger.mem_cap, memory_milli=shape.memory_milli)
        assert np.array_equal(memo[0], fresh[0])
        assert np.array_equal(memo[1], fresh[1])
        assert not memo[0].flags.writeable
        fit = ledger_share_fit(ledger, shape)  # kept across checks: only rows whose derived arrays moved are redone
        assert np.array_equal(fit, (ledger.sched_free >= fresh[0]) & (ledger.free_mem >= fresh[1]))
        assert not fit.flags.writeable


def step(rng: random.Random, ledger: ClusterLedger, number: int) -> None:
    names = ledger.node_names()
    kind = rng.choice(["reserve", "reserve", "observe", "release", "upsert", "remove", "copy", "repair",
                       "quarantine", "tag", "grow"])
    if kind in ("reserve", "observe") and names:
        name = rng.choice(names)
        record = allocation(rng, ledger, f"p{number}", name)
        with contextlib.suppress(InsufficientResourcesError, InvalidRequestError, LedgerCorruptedError):
            (ledger.reserve if kind == "reserve" else ledger.observe)(record)
    elif kind == "release" and len(ledger):
        ledger.release(rng.choice(sorted(ledger.records())))
    elif kind == "upsert" and names:
        ledger.upsert_node(inventory(rng, rng.choice(names)))
    elif kind == "remove" and names:
        removed = rng.choice(names)
        ledger.remove_node(removed)
        if rng.random() < 0.7:
            ledger.upsert_node(inventory(rng, removed))
    elif kind == "copy" and names:
        name = rng.choice(names)
        records = [r for r in ledger.records().values() if r.node == name]
        for record in records:
            ledger.release(record.pod_uid)
        source = ClusterLedger.rebuild([ledger.inventory(n) for n in names], records, max_gpus=ledger.max_gpus)
        ledger.copy_node(source, name)
    elif kind == "repair" and names:
        name = rng.choice(names)
        gpus = ledger.inventory(name).gpu_count
        if gpus:
            corrupt_core_used(ledger, name, rng.randrange(gpus), delta=rng.choice([-7, 3]))
        ledger.repair(name)
    elif kind == "quarantine" and names:
        name = rng.choice(names)
        ledger.quarantine_node(name, "test")
        if rng.random() < 0.5:
            ledger.lift_quarantine(name)
    elif kind == "tag":
        ledger.tag_id(f"tag-{rng.randint(0, 12)}")
    elif kind == "grow":
        fresh = NodeName(f"x{number}")
        ledger.upsert_node(inventory(rng, fresh, gpus=rng.randint(6, 10)))


@pytest.mark.parametrize("seed", range(12))
def test_derived_arrays_equal_a_recomputation_after_every_change(seed: int) -> None:
    rng = random.Random(seed)
    ledger = ClusterLedger([inventory(rng, n) for n in NAMES], max_gpus=4)
    check(ledger)
    for number in range(120):
        step(rng, ledger, number)
        check(ledger)
    assert ledger.rows > len(NAMES) or ledger.max_gpus > 4  # the sequences do grow the arrays


def test_fit_bits_packs_every_eight_gpu_row() -> None:
    rows = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.bool_)
    slots = np.arange(256, dtype=np.int64)[::-1].copy()
    assert fit_bits(rows)[slots].tolist() == slots.tolist()
    odd = rows[:, :5].copy()
    assert fit_bits(odd)[slots].tolist() == (slots & 31).tolist()
    assert fit_bits(rows).tolist() == list(range(256))  # every row, in order
    assert fit_bits(odd).tolist() == [n & 31 for n in range(256)]


def test_any_per_row_matches_numpy_for_every_width() -> None:
    rng = np.random.default_rng(3)
    for width in range(1, 11):
        mask = rng.random((64, width)) < 0.2
        assert np.array_equal(any_per_row(mask), mask.any(axis=1)), width


def test_only_rows_keeps_the_named_rows_for_every_width() -> None:
    rng = np.random.default_rng(4)
    for width in range(1, 11):
        mask = rng.random((64, width)) < 0.5
        rows = rng.random(64) < 0.5
        kept = only_rows(mask, rows)
        assert np.array_equal(kept, mask & rows[:, None]), width
        assert kept.dtype == np.bool_
        assert not np.shares_memory(kept, mask)
    with pytest.raises(ValueError, match="rows has 3 entries for a mask of 64 rows"):
        only_rows(mask, np.ones(3, np.bool_))
