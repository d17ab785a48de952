"""Smoke test of the MIG replay (``domain.scheduling.mig.replay``) and of ``bench/mig_replay.py``'s helpers.

Behaviours covered:

* the synthetic workload is deterministic per seed, sorted by arrival, draws only profiles of the mix, and a
  different seed gives a different workload;
* every static layout is valid on every 7/8 model and is placed by the planner (``all-balanced`` on A100-80GB:
  2g at 0, 1g at 2 and 3, 3g at 4); a layout size a model lacks is refused;
* a small run counts every request once (placed + rejected = requests), is deterministic, and dynamic places
  at least as many requests as each static layout; ``all-1g`` places only 1g requests;
* configuration and mode errors name the field; the bench's seed parser, table and summary lines.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from domain.errors import InvalidRequestError
from domain.mig.errors import UnknownMigProfileError
from domain.mig.profiles import MIG_MODELS
from domain.scheduling.mig.replay import (
    STATIC_LAYOUTS,
    MigReplayConfig,
    MigReplayResult,
    layout_starts,
    mig_cluster,
    run_replay,
    synthetic_jobs,
)
from support.bench_modules import load_bench

SMALL = MigReplayConfig(nodes=1, gpus_per_node=4, requests=120, load=1.2, mean_duration=50.0)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("mig_replay")


def test_workload_is_seeded() -> None:
    jobs = synthetic_jobs(SMALL, seed=3)
    assert jobs == synthetic_jobs(SMALL, seed=3)
    assert jobs != synthetic_jobs(SMALL, seed=4)
    assert len(jobs) == SMALL.requests
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    assert {j.profile for j in jobs} <= {name for name, _ in SMALL.mix}
    assert all(j.duration > 0 for j in jobs)


def test_static_layouts_are_valid() -> None:
    for model in ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"):
        config = MigReplayConfig(nodes=1, models=(model,), mix=((MIG_MODELS[model].family[0].name, 1.0),))
        for name, layout in STATIC_LAYOUTS.items():
            plugin = mig_cluster(config, f"static:{name}")
            gpus = plugin.node("node-000").gpus()
            assert [len(g.instances) for g in gpus] == [len(layout[i % len(layout)]) for i in range(len(gpus))]
    assert layout_starts(MIG_MODELS["A100-80GB"], STATIC_LAYOUTS["all-balanced"][0]) == (
        ("3g.40gb", 4),
        ("2g.20gb", 0),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
    )
    with pytest.raises(InvalidRequestError, match=r"layout\.size=\(7, 8\)"):
        layout_starts(MIG_MODELS["A30-24GB"], ((7, 8),))


def test_small_run() -> None:
    modes = ["dynamic", *(f"static:{name}" for name in STATIC_LAYOUTS)]
    results = {mode: run_replay(SMALL, seed=1, mode=mode) for mode in modes}
    for result in results.values():
        assert result.placed + result.rejected == SMALL.requests
        assert sum(p + r for _, p, r in result.per_profile) == SMALL.requests
        assert 0 < result.placed_ratio <= 1
    assert run_replay(SMALL, seed=1, mode="dynamic") == results["dynamic"]
    for mode, result in results.items():
        assert results["dynamic"].placed >= result.placed, mode
    only_small = {name: placed for name, placed, _ in results["static:all-1g"].per_profile}
    assert all(placed == 0 for name, placed in only_small.items() if name != "1g.10gb")


def test_errors() -> None:
    with pytest.raises(InvalidRequestError, match="mode='static:nope'"):
        mig_cluster(SMALL, "static:nope")
    with pytest.raises(InvalidRequestError, match="mode='greedy'"):
        mig_cluster(SMALL, "greedy")
    with pytest.raises(InvalidRequestError, match="nodes=0"):
        MigReplayConfig(nodes=0)
    with pytest.raises(InvalidRequestError, match="load=0"):
        MigReplayConfig(load=0)
    with pytest.raises(InvalidRequestError, match="mix"):
        MigReplayConfig(mix=(("1g.10gb", 0.0),))
    with pytest.raises(InvalidRequestError, match="models"):
        MigReplayConfig(models=())
    with pytest.raises(UnknownMigProfileError, match="A30-24GB"):
        MigReplayConfig(models=("A30-24GB",))


def test_bench_helpers(bench: ModuleType) -> None:
    assert bench.parse_seeds("1-3,2,7") == [1, 2, 3, 7]
    for bad in ("", "3-1", "a", "1,,2"):
        with pytest.raises(ValueError, match="seeds"):
            bench.parse_seeds(bad)
    results = [
        MigReplayResult("dynamic", 1, 90, 10, (("1g.10gb", 90, 10),)),
        MigReplayResult("static:all-balanced", 1, 60, 40, (("1g.10gb", 60, 40),)),
    ]
    rows = bench.table(results, {"1g.10gb": 1})
    assert rows[1].split() == ["1", "dynamic", "90", "10", "90.0%", "90.0%", "1.000"]
    assert rows[2].split() == ["1", "static:all-balanced", "60", "40", "60.0%", "60.0%", "1.500"]
    two = MigReplayResult("dynamic", 2, 2, 2, (("1g.10gb", 2, 0), ("4g.40gb", 0, 2)))
    assert bench.slice_share(two, {"1g.10gb": 1, "4g.40gb": 4}) == pytest.approx(0.2)
    assert bench.summary(results) == [
        "mig_dynamic_placed_mean=90.0",
        "mig_dynamic_placed_ratio_mean=0.9000",
        "mig_static_all_balanced_placed_mean=60.0",
        "mig_static_all_balanced_placed_ratio_mean=0.6000",
        "mig_dynamic_over_all_balanced_mean=1.500",
    ]
