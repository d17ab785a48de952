"""A deterministic MIG workload replay: how many requests fit under static versus dynamic placement.

Workload (:func:`synthetic_jobs`, seeded, numpy PCG64): ``requests`` single-instance pods, each asking one
profile drawn from ``mix`` (weights over canonical names of the 80 GB tables, which A100-80GB and H100-80GB
share), arriving as a Poisson process and staying an exponentially distributed time (mean ``mean_duration``).
The arrival rate makes the offered load ``load × cluster compute slices``: ``λ = load × slices /
(mean_duration × E[compute slices per request])``. The default mix is ours (it leans to small instances, the
regime MIG is sold for, with a tail of 4g/7g training pods); it is **not** a reproduction of a published trace,
so the figures compare the two placement modes with each other only.

Cluster (:func:`mig_cluster`): ``nodes`` × ``gpus_per_node`` GPUs, node ``i`` of model ``models[i % len]``.

Modes:

* ``static:<layout>`` — every GPU is pre-partitioned by a layout of :data:`STATIC_LAYOUTS` (sizes placed on an
  empty GPU by the plugin's own planner, so the layout is valid and well packed); pods take free instances.
* ``dynamic`` — GPUs start empty; the :class:`MigPlugin` chooses profile placement per pod.

Replay: events in time order, departures before an arrival at the same instant; a pod that does not fit is
rejected (no queue, no retry, no migration). Counted: requests placed and rejected, overall and per profile.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from domain.errors import InvalidRequestError
from domain.mig.ledger import MigGpu, MigNodeLedger, PlacementMode
from domain.mig.profiles import MigGpuModel, mig_model, resolve_profile
from domain.mig.requests import MigContainerRequest, MigPodRequest
from domain.scheduling.mig.plugin import MigPlugin, plan_pod

Size = tuple[int, int]
"""A profile size ``(compute slices, memory slices)``; layouts are given in sizes so they fit any 7/8 model."""

STATIC_LAYOUTS: Mapping[str, tuple[tuple[Size, ...], ...]] = {
    # NVIDIA mig-parted's "all-balanced" for 80 GB parts: 2 × 1g.10gb, 1 × 2g.20gb, 1 × 3g.40gb per GPU.
    "all-balanced": (((3, 4), (2, 2), (1, 1), (1, 1)),),
    # A hand-picked mix per 8 GPUs so every profile of the default mix exists somewhere.
    "mixed": (
        ((7, 8),),
        ((4, 4), (3, 4)),
        ((4, 4), (2, 2), (1, 1)),
        ((3, 4), (3, 4)),
        ((3, 4), (2, 2), (1, 1), (1, 1)),
        ((2, 2), (2, 2), (2, 2), (1, 1)),
        ((3, 4), (1, 2), (1, 2)),
        ((1, 1),) * 7,
    ),
    "all-1g": (((1, 1),) * 7,),
}
"""Static layouts by name: per GPU (cycled over a node's GPU indexes) the instance sizes it is cut into."""

DEFAULT_MIX: tuple[tuple[str, float], ...] = (
    ("1g.10gb", 0.35),
    ("1g.20gb", 0.10),
    ("2g.20gb", 0.20),
    ("3g.40gb", 0.15),
    ("4g.40gb", 0.10),
    ("7g.80gb", 0.10),
)
"""Profile weights of the synthetic workload (ours; see module docstring)."""


@attrs.frozen
class MigReplayConfig:
    """Cluster and workload shape: ``nodes`` × ``gpus_per_node`` GPUs of ``models`` (keys or product names),
    ``requests`` pods, offered ``load`` (fraction of compute slices, > 0), ``mix`` (profile, weight > 0) and
    ``mean_duration`` (time units, > 0). Raises :class:`InvalidRequestError` naming the bad field."""

    nodes: int = 4
    gpus_per_node: int = 8
    models: tuple[str, ...] = ("A100-80GB", "H100-80GB")
    requests: int = 2000
    load: float = 1.0
    mix: tuple[tuple[str, float], ...] = DEFAULT_MIX
    mean_duration: float = 100.0

    def __attrs_post_init__(self) -> None:
        for field in ("nodes", "gpus_per_node", "requests"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidRequestError(field, value, "must be an integer ≥ 1")
        for field in ("load", "mean_duration"):
            if not getattr(self, field) > 0:
                raise InvalidRequestError(field, getattr(self, field), "must be > 0")
        if not self.models:
            raise InvalidRequestError("models", self.models, "need at least one model")
        if not self.mix or any(weight <= 0 for _, weight in self.mix):
            raise InvalidRequestError("mix", self.mix, "need at least one profile, weights > 0")
        for model in self.models:
            for name, _ in self.mix:
                resolve_profile(model, name)


@attrs.frozen
class MigJob:
    """One synthetic request: pod ``uid``, ``profile`` name, ``arrival`` and ``duration`` (time units)."""

    uid: str
    profile: str
    arrival: float
    duration: float


@attrs.frozen
class MigReplayResult:
    """One run: ``mode``, ``seed``, ``placed`` and ``rejected`` counts, and per profile ``(name, placed,
    rejected)`` in mix order."""

    mode: str
    seed: int
    placed: int
    rejected: int
    per_profile: tuple[tuple[str, int, int], ...]

    @property
    def placed_ratio(self) -> float:
        """Placed requests over all requests (0..1)."""
        total = self.placed + self.rejected
        return self.placed / total if total else 0.0


def synthetic_jobs(config: MigReplayConfig, *, seed: int) -> tuple[MigJob, ...]:
    """The seeded workload of the module docstring, sorted by arrival (same seed → same jobs)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    names = [name for name, _ in config.mix]
    weights = np.array([weight for _, weight in config.mix], dtype=np.float64)
    weights /= weights.sum()
    table = mig_model(config.models[0])
    slices = np.array([resolve_profile(table, name).compute_slices for name in names], dtype=np.float64)
    total_slices = config.nodes * config.gpus_per_node * table.compute_slots
    rate = config.load * total_slices / (config.mean_duration * float(weights @ slices))
    picks = rng.choice(len(names), size=config.requests, p=weights)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=config.requests))
    durations = rng.exponential(config.mean_duration, size=config.requests)
    return tuple(
        MigJob(f"job-{n:06d}", names[int(picks[n])], float(arrivals[n]), float(durations[n]))
        for n in range(config.requests)
    )


def layout_starts(model: MigGpuModel, sizes: Sequence[Size]) -> tuple[tuple[str, int], ...]:
    """``(profile name, start)`` for instance ``sizes`` on an empty GPU of ``model``, placed by the plugin's
    planner. Raises :class:`InvalidRequestError` for a size the model lacks and :class:`NoMigCapacityError`
    when the sizes do not fit one GPU."""
    by_size = {p.size: p for p in model.family}
    containers = []
    for n, size in enumerate(sizes):
        if size not in by_size:
            raise InvalidRequestError("layout.size", size, f"{model.key} has no profile of this size")
        containers.append(MigContainerRequest(f"i{n}", by_size[size].name))
    empty = MigGpu(0, "GPU-layout", model, PlacementMode.DYNAMIC)
    plan = plan_pod(MigPodRequest("layout", tuple(containers)), MigNodeLedger("layout", [empty]))
    return tuple((b.profile, b.start) for b in plan.allocation.bookings)


def mig_cluster(config: MigReplayConfig, mode: str) -> MigPlugin:
    """A :class:`MigPlugin` over the config's cluster in ``mode`` (``dynamic`` or ``static:<layout>``).

    Raises :class:`InvalidRequestError` (field ``mode``) for an unknown mode or layout.
    """
    layout: tuple[tuple[Size, ...], ...] | None = None
    if mode.startswith("static:"):
        layout = STATIC_LAYOUTS.get(mode.removeprefix("static:"))
        if layout is None:
            raise InvalidRequestError("mode", mode, f"known layouts: {', '.join(STATIC_LAYOUTS)}")
    elif mode != "dynamic":
        raise InvalidRequestError("mode", mode, "must be dynamic or static:<layout>")
    placement = PlacementMode.DYNAMIC if layout is None else PlacementMode.STATIC
    nodes = []
    for n in range(config.nodes):
        model = mig_model(config.models[n % len(config.models)])
        gpus = []
        for g in range(config.gpus_per_node):
            starts = layout_starts(model, layout[g % len(layout)]) if layout is not None else ()
            gpus.append(MigGpu.from_layout(g, f"GPU-{n:03d}-{g}", model, mode=placement, layout=starts))
        nodes.append(MigNodeLedger(f"node-{n:03d}", gpus))
    return MigPlugin(nodes)


def run_replay(config: MigReplayConfig, *, seed: int, mode: str) -> MigReplayResult:
    """Replay the seeded workload on a fresh cluster in ``mode`` (module docstring); deterministic."""
    plugin = mig_cluster(config, mode)
    placed = dict.fromkeys((name for name, _ in config.mix), 0)
    rejected = dict(placed)
    departures: list[tuple[float, str]] = []
    for job in synthetic_jobs(config, seed=seed):
        while departures and departures[0][0] <= job.arrival:
            plugin.unreserve(heapq.heappop(departures)[1])
        result = plugin.schedule(MigPodRequest(job.uid, (MigContainerRequest("main", job.profile),)))
        if result.scheduled:
            placed[job.profile] += 1
            heapq.heappush(departures, (job.arrival + job.duration, job.uid))
        else:
            rejected[job.profile] += 1
    per_profile = tuple((name, placed[name], rejected[name]) for name, _ in config.mix)
    return MigReplayResult(mode, seed, sum(placed.values()), sum(rejected.values()), per_profile)
