"""Trace replay with priorities (domain.simulation.preemption via ReplayConfig.high_share): without priorities the
run is the published one; with them high-priority arrivals that fit nowhere evict low-priority pods, the evicted
pods leave the allocation, the counts add up and the run is a function of the seed; the CLI flag is checked."""

from __future__ import annotations

import pytest

from domain.errors import InvalidRequestError
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from domain.simulation.workload import TraceNode, TracePod
from entrypoints.simulate.__main__ import main

NODES, PODS = synthetic_nodes(0.05), synthetic_pods(0.05)


def test_no_priorities_is_the_published_run() -> None:
    plain = replay(NODES, PODS, ReplayConfig("fgd", 42))
    zero = replay(NODES, PODS, ReplayConfig("fgd", 42, high_share=0.0))
    assert (zero.used_milli, zero.failures) == (plain.used_milli, plain.failures)
    assert (zero.high_arrivals, zero.preemptions, zero.evicted_pods, zero.evicted_milli) == (0, 0, 0, 0)


def test_high_priority_arrivals_preempt_and_evicted_pods_leave_the_allocation() -> None:
    plain = replay(NODES, PODS, ReplayConfig("best-fit", 42))
    run = replay(NODES, PODS, ReplayConfig("best-fit", 42, high_share=0.2))
    assert run.arrivals == plain.arrivals
    assert 0.1 * run.arrivals < run.high_arrivals < 0.3 * run.arrivals
    assert run.preemptions > 0
    assert run.evicted_pods >= run.preemptions
    assert run.evicted_milli > 0
    assert run.failed_pods < plain.failed_pods  # preemptors placed instead of failing
    # allocation bookkeeping: every step's change is the arrival's grant minus what its preemption evicted
    assert all(0 <= used <= run.total_gpus * 1000 for used in run.used_milli)
    again = replay(NODES, PODS, ReplayConfig("best-fit", 42, high_share=0.2))
    assert (again.used_milli, again.evicted_pods) == (run.used_milli, run.evicted_pods)


def test_one_gpu_cluster_evicts_the_low_priority_share() -> None:
    nodes = [TraceNode("n1", 8000, 32 * 1024, 1, "A100")]
    pods = [TracePod(f"p{i}", 100, 100, 1, 600) for i in range(2)]
    everyone_high = replay(nodes, pods, ReplayConfig("best-fit", 1, tune=1.2, high_share=1.0))
    assert everyone_high.preemptions == 0  # no pod has a lower priority than another
    half = [replay(nodes, pods, ReplayConfig("best-fit", seed, tune=1.2, high_share=0.5)) for seed in range(8)]
    preempted = [r for r in half if r.preemptions]
    assert preempted  # some seed draws a low arrival, then a high one
    for run in preempted:
        assert (run.evicted_pods, run.evicted_milli, run.failed_pods) == (1, 600, 0)
        assert run.used_milli[-1] == 600


def test_high_share_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidRequestError, match="high_share"):
        ReplayConfig("fgd", 1, high_share=1.5)
    assert main(["--high-priority-share", "2", "--no-progress"]) == 2
    assert "--high-priority-share: '2' must be within 0..1" in capsys.readouterr().err
