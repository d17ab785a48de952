"""Trace replay: the published GPU-sharing scheduling experiment (docs/trace-replay.md §2), in process.

One run (policy P, seed s, tune τ):

1. sort the pods by name; typical pods come from this original workload (§3.1), the same for every seed;
2. shuffle the arrival order with the seeded generator;
3. tune to ``τ × cluster GPU capacity``: while below, append uniform samples (with replacement, CPU-only pods
   included) of the originals, stopping at the first sample whose *per-GPU* milli would cross the target;
   while above, remove uniformly random pods;
4. draw the node order used by the ``fixed-order`` tie rule (§3.4);
5. submit pods one at a time: no departures, no retries; a pod that does not fit is dropped and counted failed
   (its arrival index and size class, :func:`~domain.simulation.breakdown.size_class`, are kept);
   after every arrival record ``(arrived milli, allocated milli, fragmentation, idle milli)``.

With ``ReplayConfig.high_share`` > 0, that share of arrivals is high priority and one that fits nowhere may evict
low-priority pods first (:mod:`domain.simulation.preemption`); evicted pods leave the allocation and are counted.

Typical pods (``ReplayConfig.typical``): ``trace`` — the policy knows the whole trace's (as published);
``online`` — the policy knows only the pods arrived so far (:class:`~domain.simulation.online.OnlineTypical`), and
its scheduler is rebuilt, keeping the run's node order, at each refresh. The recorded fragmentation is always
measured against the whole trace's typical pods, so both modes report the same metric.

With ``ReplayConfig.topology`` naming a simulated machine, nodes with an even GPU count get its topology (told to
the scheduler unless ``topology_known`` is False) and the run reports how multi-GPU pods were connected and how
many NVLink islands stayed whole (:mod:`domain.simulation.topology_tally`).

Any seeded generator gives statistically comparable results (§6.2); this one is numpy's PCG64.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from domain.errors import InvalidRequestError
from domain.ledger import ClusterLedger
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.registry import build_profile, get_policy
from domain.simulation.breakdown import allocation_auc, failed_by_size, failure_curves, size_class
from domain.simulation.curves import allocation_curve, fragmentation_curve
from domain.simulation.online import REFERENCE_SCALE, OnlineTypical
from domain.simulation.preemption import HIGH, LOW, Preemptions
from domain.simulation.synthetic import synthetic_pods
from domain.simulation.topology_tally import TopologyFigures, TopologyTally, node_topologies
from domain.simulation.workload import TraceNode, TracePod
from domain.topology.machines import MACHINE_NAMES
from domain.units import MILLI_PER_GPU

ProgressCallback = Callable[[int], None]
"""Called with the number of arrivals processed since the previous call."""


TYPICAL_MODES = ("trace", "online")
"""Where a policy's typical pods come from (module docstring)."""


@attrs.frozen
class ReplayConfig:
    """One run: ``policy`` (registered name), ``seed``, ``tune`` (target arrived GPU request as a fraction of
    cluster GPU capacity, > 0), ``tie_break`` (``fixed-order`` as published, ``random`` or ``name``), ``typical``
    (one of :data:`TYPICAL_MODES`), ``high_share`` (probability that an arrival is high priority and may preempt,
    0..1; 0 = no priorities, as published), ``topology`` (a simulated machine of
    :data:`~domain.topology.machines.MACHINE_NAMES`; ``none`` = no topology, as published), ``topology_known``
    (whether the scheduler is told it) and ``topology_first`` (the profile's ``topology_first``: multi-GPU pods go
    to the nodes where they are best connected, then the policy chooses; needs a known topology). Raises
    :class:`InvalidRequestError` naming the bad field."""

    policy: str
    seed: int
    tune: float = 1.3
    tie_break: str = "fixed-order"
    typical: str = "trace"
    high_share: float = 0.0
    topology: str = "none"
    topology_known: bool = True
    topology_first: bool = False

    def __attrs_post_init__(self) -> None:
        get_policy(self.policy)
        if self.topology_first and (self.topology == "none" or not self.topology_known):
            raise InvalidRequestError("topology_first", True, "needs a topology known to the scheduler")
        if self.topology not in MACHINE_NAMES:
            raise InvalidRequestError("topology", self.topology, f"must be one of {', '.join(MACHINE_NAMES)}")
        if not self.tune > 0:
            raise InvalidRequestError("tune", self.tune, "must be > 0")
        if self.typical not in TYPICAL_MODES:
            raise InvalidRequestError("typical", self.typical, f"must be one of {', '.join(TYPICAL_MODES)}")
        if not 0 <= self.high_share <= 1:
            raise InvalidRequestError("high_share", self.high_share, "must be within 0..1")


@attrs.frozen
class ReplayResult:
    """Per-event series (length = arrivals) and the derived curves/summary of one run.

    ``failures``: (arrival index, size class) of each pod that did not fit, in arrival order; one per failed pod.
    With priorities (``config.high_share`` > 0): ``high_arrivals`` (high-priority arrivals), ``preemptions``
    (those placed by evicting pods), ``evicted_pods`` and ``evicted_milli`` (what they evicted, milli-GPU).
    With a simulated machine (``config.topology``): ``topology``, how multi-GPU pods were connected; else None.
    """

    config: ReplayConfig
    total_gpus: int
    arrived_milli: list[int]
    used_milli: list[int]
    frag_milli: list[float]
    idle_milli: list[int]
    wall_seconds: float
    failures: list[tuple[int, str]]
    high_arrivals: int = 0
    preemptions: int = 0
    evicted_pods: int = 0
    evicted_milli: int = 0
    topology: TopologyFigures | None = None

    @property
    def failed_pods(self) -> int:
        """Pods that fit nowhere (one entry of ``failures`` each)."""
        return len(self.failures)

    @property
    def arrivals(self) -> int:
        """Number of pod arrivals (original plus tuned)."""
        return len(self.arrived_milli)

    def allocation_curve(self) -> list[float]:
        """Allocation % at x = 0..130."""
        return allocation_curve(self.arrived_milli, self.used_milli, self.total_gpus)

    def fragmentation_curve(self) -> list[float]:
        """Frag ratio % at x = 0..130."""
        return fragmentation_curve(self.arrived_milli, self.frag_milli, self.idle_milli, self.total_gpus)

    def failure_curves(self) -> dict[str, list[int]]:
        """Per size class, cumulative failed pods at x = 0..130
        (:func:`~domain.simulation.breakdown.failure_curves`)."""
        return failure_curves(self.arrived_milli, self.total_gpus, self.failures)

    def failed_by_size(self) -> dict[str, int]:
        """Size class → failed pods of the whole run (:func:`~domain.simulation.breakdown.failed_by_size`)."""
        return failed_by_size(self.failures)

    def allocation_auc(self) -> float:
        """Mean allocation % over x = 0..130, trapezoid rule (:func:`~domain.simulation.breakdown.allocation_auc`)."""
        return allocation_auc(self.allocation_curve())

    def headline(self) -> Headline:
        """The published comparison points: allocation % at x = 100 and 130, frag ratio % at x = 80."""
        alloc, frag = self.allocation_curve(), self.fragmentation_curve()
        return Headline(alloc_at_100=alloc[100], alloc_at_130=alloc[130], frag_ratio_at_80=frag[80])


@attrs.frozen
class Headline:
    """Headline figures of one run, in % (NaN when no event falls near the x point)."""

    alloc_at_100: float
    alloc_at_130: float
    frag_ratio_at_80: float


def _online_typical() -> OnlineTypical:
    """The production scheduler's view: the embedded synthetic workload as reference (same size as its default)."""
    return OnlineTypical([p.pod_class for p in synthetic_pods(REFERENCE_SCALE)])


def typical_pods(pods: Sequence[TracePod]) -> TypicalPods:
    """Typical pods of a workload (§3.1), from its original pods."""
    return TypicalPods.from_workload(p.pod_class for p in pods)


def arrival_stream(
    pods: Sequence[TracePod], *, capacity_milli: int, tune: float, rng: np.random.Generator
) -> list[TracePod]:
    """Shuffled originals, tuned up (appended samples) or down (random removals) to ``tune × capacity``."""
    originals = sorted(pods, key=lambda p: p.name)
    stream = [originals[i] for i in rng.permutation(len(originals))]
    target = tune * capacity_milli
    requested = sum(p.total_gpu_milli for p in stream)
    if requested < target:
        extra = 0
        while True:
            pod = originals[int(rng.integers(len(originals)))]
            if requested + pod.per_gpu_milli > target:
                break
            stream.append(attrs.evolve(pod, name=f"{pod.name}-tuned-{extra}"))
            requested += pod.total_gpu_milli
            extra += 1
    else:
        while requested > target and stream:
            removed = stream.pop(int(rng.integers(len(stream))))
            requested -= removed.total_gpu_milli
    return stream


def planned_arrivals(
    nodes: Sequence[TraceNode], pods: Sequence[TracePod], config: ReplayConfig
) -> tuple[list[TracePod], np.random.Generator]:
    """The run's arrival stream (steps 1-3) and its generator, positioned for the later draws (node order,
    random policies). :func:`replay` uses exactly this, so callers may size progress bars with it."""
    rng = np.random.default_rng(config.seed)
    capacity = sum(n.gpus for n in nodes) * MILLI_PER_GPU
    return arrival_stream(pods, capacity_milli=capacity, tune=config.tune, rng=rng), rng


def replay(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    config: ReplayConfig,
    *,
    typical: TypicalPods | None = None,
    progress: ProgressCallback | None = None,
    limit: int | None = None,
) -> ReplayResult:
    """Run one replay (module docstring); with ``limit``, only the first ``limit`` arrivals of the run's stream
    (decisions are sequential, so its series are the full run's first ``limit`` rows). Raises
    :class:`InvalidRequestError` for an empty node or pod list, a cluster without GPUs or a ``limit`` below 1."""
    if limit is not None and limit < 1:
        raise InvalidRequestError("limit", limit, "must be >= 1")
    if not nodes:
        raise InvalidRequestError("nodes", 0, "the node list is empty")
    if not pods:
        raise InvalidRequestError("pods", 0, "the pod list is empty")
    started = time.perf_counter()
    typical = typical or typical_pods(pods)
    inventories = [n.inventory() for n in sorted(nodes, key=lambda n: n.name)]
    topologies = node_topologies(config.topology, inventories)
    if config.topology_known:
        inventories = [attrs.evolve(i, topology=topologies[i.name]) if i.name in topologies else i
                       for i in inventories]
    total_gpus = sum(n.gpu_count for n in inventories)
    if total_gpus == 0:
        raise InvalidRequestError("nodes.gpu", 0, "the cluster has no GPUs")
    stream, rng = planned_arrivals(nodes, pods, config)
    if limit is not None:
        stream = stream[:limit]
    ledger = ClusterLedger(inventories)
    states = NodeStateCache(FragmentationModel(typical, ledger))
    profile = build_profile(config.policy, ledger, rng=rng, states=states, tie_break=config.tie_break,
                            topology_first=config.topology_first)
    scheduler = Scheduler(ledger, profile)
    online = _online_typical() if config.typical == "online" and get_policy(config.policy).needs_typical_pods else None
    high_rng = np.random.default_rng([config.seed, 36]) if config.high_share > 0 else None
    preempting = Preemptions(ledger) if high_rng is not None else None
    tally = None if config.topology == "none" else TopologyTally(
        config.topology, known=config.topology_known, topologies=topologies, ledger=ledger,
        capacity_milli=total_gpus * MILLI_PER_GPU, first=config.topology_first)
    high_arrivals = 0
    arrived = used = 0
    failures: list[tuple[int, str]] = []
    arrived_series: list[int] = []
    used_series: list[int] = []
    frag_series: list[float] = []
    idle_series: list[int] = []
    tick = max(len(stream) // 200, 1)
    for number, pod in enumerate(stream):
        arrived += pod.total_gpu_milli
        learned = online.observe(pod.pod_class) if online is not None else None
        if learned is not None:
            scheduler = Scheduler(ledger, build_profile(config.policy, ledger, rng=rng, typical=learned,
                                                        topology_first=config.topology_first,
                                                        tie_breaker=profile.tie_breaker))
        request = pod.request(uid=f"{pod.name}#{number}")
        allocation = scheduler.schedule(request).allocation
        high = high_rng is not None and bool(high_rng.random() < config.high_share)
        high_arrivals += high
        if preempting is not None:
            if allocation is None and high:
                before = preempting.evicted_milli
                allocation = preempting.preempt(scheduler, request, number)
                used -= preempting.evicted_milli - before
            if allocation is not None:
                preempting.placed(allocation, HIGH if high else LOW)
        if allocation is None:
            failures.append((number, size_class(pod.num_gpu, pod.gpu_milli)))
        else:
            used += allocation.gpu_milli
        if tally is not None:
            if allocation is not None:
                tally.placed(pod.num_gpu, allocation)
            tally.arrived(arrived)
        frag, idle = states.cluster_fragmentation()
        arrived_series.append(arrived)
        used_series.append(used)
        frag_series.append(frag)
        idle_series.append(idle)
        if progress is not None and (number + 1) % tick == 0:
            progress(tick)
    if progress is not None and len(stream) % tick:
        progress(len(stream) % tick)
    return ReplayResult(
        config=config, total_gpus=total_gpus, arrived_milli=arrived_series, used_milli=used_series,
        frag_milli=frag_series, idle_milli=idle_series,
        wall_seconds=time.perf_counter() - started, failures=failures, high_arrivals=high_arrivals,
        preemptions=0 if preempting is None else preempting.preemptors,
        evicted_pods=0 if preempting is None else len(preempting.evicted),
        evicted_milli=0 if preempting is None else preempting.evicted_milli,
        topology=None if tally is None else tally.figures(),
    )
