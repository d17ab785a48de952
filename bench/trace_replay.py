"""Trace-replay benchmark: the published FGD experiment (USENIX ATC '23) against its published per-policy means.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/trace_replay.py [--nodes ../shared/traces/openb/openb_node_list_gpu_node.csv]
        [--pods ../shared/traces/openb/openb_pod_list_default.csv] [--policies published|all|a,b]
        [--seeds 42-51] [--tune 1.3] [--tie-break fixed-order] [--jobs 1]
        [--driver inprocess|extender [--cpu-pods kube|extender] [--extender-naive] [--no-plugin-scores]
         [--limit-arrivals N]]

Every (policy, seed) run happens in a fresh child process (``spawn`` context, one task per child), so the peak
RSS a child reports (``resource.getrusage``: ``ru_maxrss``, KiB on Linux) is the peak of that single run.

Printed: per policy the mean and min–max over seeds of alloc% at x = 100 and x = 130 and the frag ratio (% of
idle) at x = 80, each next to the published 10-seed mean and the difference in percentage points (published
figures exist only for the ``default`` pod file; other files print ``n/a``), the wall time per run (mean/max)
and the peak RSS per run (max); then the curve shape (mean alloc% at x = 50, 80, 90, 95, 98). The last lines are
machine-readable ``key=value`` pairs (``fgd_wall_seconds_max``, ``peak_rss_mib_max``, ...).

**Extender driver** (``--driver extender``: the policy's ranking must survive the production path).
Each run replays the trace twice in its child process: in process (:func:`domain.simulation.replay.replay`, the
reference) and through the production extender. The extender run builds the same arrival stream with the same
seeded generator (:func:`planned_arrivals`), creates every node (inventory annotation, allocatable) and, one
arrival at a time, every pod in an :class:`~adapters.memory.cluster.InMemoryCluster`, and runs the real
``SchedulerApp`` (informers, ``SchedulerService``, extender HTTP listener on 127.0.0.1) with the replay's generator
(tie order) and the trace's typical pods injected (``ServiceConfig.rng`` / ``typical_pods``). An emulated
kube-scheduler 1.20 (:class:`KubeSchedulerEmulator`: NodeResourcesFit, LeastAllocated + BalancedAllocation,
uniformly random choice among equal totals with its own generator, ``percentageOfNodesToScore: 100``) places each
pod: pods the extender is interested in go through ``POST /filter`` (the nodes passing its own fit),
``/prioritize`` (only when more than one node is left, as kube-scheduler skips scoring for one) and ``/bind``;
CPU-only pods are placed by the emulated kube-scheduler itself and bound through the API (``--cpu-pods kube``,
the deployment with ``managedResources``), or go through the extender too (``--cpu-pods extender``: no
``managedResources``, the extender runs with ``rank_all_pods``). The driver waits until the scheduler's informer
shows each binding before the next arrival, and checks at the end that the scheduler's ledger books exactly the
GPU milli the replay counted. ``--extender-naive`` swaps in a bench-only textbook extender (all feasible nodes,
priorities = our score / 10) to measure what kube-scheduler's tie-break costs; ``--no-plugin-scores`` leaves the
default plugins' scores out of the totals of pods the extender ranks. ``--limit-arrivals N`` replays only the
first N arrivals in both drivers (decisions are sequential, so these are the full run's first N decisions).
Printed per run and per policy: alloc@100, alloc@130, frag%@80 and alloc at the last arrival for both drivers
and the difference in pp (target |Δ alloc@130| ≤ 0.3 pp), how many runs gave the identical allocated series, wall
times and extender verb latencies; last lines ``<policy>_extender_alloc130_diff_pp`` and
``extender_alloc130_max_abs_diff_pp``.

Published values: docs/trace-replay.md §5 (``analysis_allo_discrete.csv`` / ``analysis_frag_ratio_discrete.csv``
of the simulator's ``expected_results``). This script is not part of the test run; ``tests/unit/
test_bench_smoke.py`` covers its pure helpers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import math
import multiprocessing
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_TRACES = os.path.join("..", "shared", "traces", "openb")
DEFAULT_NODES = os.path.join(DEFAULT_TRACES, "openb_node_list_gpu_node.csv")
DEFAULT_PODS = os.path.join(DEFAULT_TRACES, "openb_pod_list_default.csv")

PUBLISHED_ORDER = ("random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd")
"""The six policies of the published experiment, in the paper's order (our registry names)."""

CURVE_XS = (50, 80, 90, 95, 98)
"""x values of the published ``default`` curve-shape table (§5)."""

PUBLISHED_DEFAULT: dict[str, dict[str, float]] = {
    # alloc% @x=100, alloc% @x=130: §5 table, workload default; frag80: "default frag ratio at x = 80" line.
    "random": {"alloc100": 86.30, "alloc130": 87.47, "frag80": 74.6},
    "dot-product": {"alloc100": 90.62, "alloc130": 90.85, "frag80": 50.5},
    "gpu-clustering": {"alloc100": 91.65, "alloc130": 91.88, "frag80": 46.9},
    "gpu-packing": {"alloc100": 91.78, "alloc130": 92.00, "frag80": 46.4},
    "best-fit": {"alloc100": 92.86, "alloc130": 93.08, "frag80": 41.5},
    "fgd": {"alloc100": 95.23, "alloc130": 95.39, "frag80": 29.9},
}
"""Published 10-seed means for the ``default`` workload (docs/trace-replay.md §5)."""

PUBLISHED_DEFAULT_CURVE: dict[str, tuple[float, ...]] = {
    "random": (49.97, 78.66, 85.02, 85.72, 86.08),
    "dot-product": (50.01, 80.02, 89.98, 90.58, 90.61),
    "gpu-clustering": (50.01, 80.02, 89.98, 91.61, 91.63),
    "gpu-packing": (50.01, 80.02, 89.98, 91.74, 91.76),
    "best-fit": (50.01, 80.02, 89.99, 92.82, 92.85),
    "fgd": (50.01, 80.02, 89.98, 94.91, 95.21),
}
"""Published ``default`` curve shape: mean alloc% at x = 50, 80, 90, 95, 98 (§5, last table)."""

PUBLISHED_FGD: dict[str, tuple[float, float]] = {
    "default": (95.23, 95.39), "cpu050": (95.00, 95.21), "cpu100": (95.21, 95.35), "cpu200": (94.82, 95.05),
    "cpu250": (93.20, 93.41), "gpushare40": (93.96, 94.15), "gpushare60": (91.25, 91.40),
    "gpushare80": (89.08, 89.30), "gpushare100": (86.64, 86.90), "gpuspec10": (94.66, 94.95),
    "gpuspec20": (94.66, 94.84), "gpuspec25": (93.91, 94.74), "gpuspec33": (87.84, 94.55),
    "multigpu20": (95.53, 95.65), "multigpu30": (96.36, 96.46), "multigpu40": (96.91, 96.99),
    "multigpu50": (97.09, 97.18),
}
"""Published FGD 10-seed means (alloc% at x = 100, x = 130) per pod file ``openb_pod_list_<name>.csv``
(docs/trace-replay.md §5), the bar any new policy is measured against."""


def published_fgd(pods_path: str) -> tuple[float, float] | None:
    """FGD's published ``(alloc@100, alloc@130)`` for the pod file, or None for a file without them."""
    name = os.path.basename(pods_path).removeprefix("openb_pod_list_").removesuffix(".csv")
    return PUBLISHED_FGD.get(name)


def versus_fgd_lines(runs: Sequence[dict[str, Any]], pods_path: str) -> list[str]:
    """``<policy>_vs_published_fgd_alloc{100,130}_pp=<mean − published FGD>`` per policy, when published."""
    bar = published_fgd(pods_path)
    if bar is None:
        return []
    lines = [f"published_fgd_alloc100={bar[0]:.2f}", f"published_fgd_alloc130={bar[1]:.2f}"]
    for policy in dict.fromkeys(r["policy"] for r in runs):
        for key, value in (("alloc100", bar[0]), ("alloc130", bar[1])):
            mean = spread([r[key] for r in runs if r["policy"] == policy])[0]
            lines.append(f"{policy}_vs_published_fgd_{key}_pp={mean - value:+.3f}")
    return lines


METRICS = (("alloc100", "alloc@100"), ("alloc130", "alloc@130"), ("frag80", "frag%@80"))

RECORD_POLICIES = ("fgd", "fgd-plus")
RECORD_HEADER = ("| pod file | seeds | published FGD @100 / @130 | bar @130 | `fgd` @100 / @130 "
                 "| `fgd-plus` @100 / @130 | `fgd-plus` − published @130 |\n|---|---|---|---|---|---|---|")
"""``--record``'s table: mean alloc % of :data:`RECORD_POLICIES` beside published FGD (bar = published + 0.5 pp)."""


def record_cells(runs: Sequence[dict[str, Any]], pods_path: str, seeds: Sequence[int]) -> list[str]:
    """The cells after the pod file of ``--record``'s row: seeds, published FGD, the bar, each policy of
    :data:`RECORD_POLICIES` as mean alloc % at x = 100 / 130, and fgd-plus − published at 130 (pp; n/a where the
    pod file has no published figure). Raises KeyError when a policy of RECORD_POLICIES has no run."""
    from adapters.reportfiles.results_table import seeds_label

    means = {p: (spread([r["alloc100"] for r in runs if r["policy"] == p])[0],
                 spread([r["alloc130"] for r in runs if r["policy"] == p])[0]) for p in RECORD_POLICIES}
    bar = published_fgd(pods_path)
    plus130 = means["fgd-plus"][1]
    return [
        seeds_label(seeds),
        f"{bar[0]:.2f} / {bar[1]:.2f}" if bar else "n/a",
        f"{bar[1] + 0.5:.2f}" if bar else "n/a",
        *(f"{means[p][0]:.2f} / {means[p][1]:.2f}" for p in RECORD_POLICIES),
        f"{plus130 - bar[1]:+.3f}" if bar else "n/a",
    ]


# ---------------------------------------------------------------------------------------------- pure helpers
def parse_seeds(text: str) -> list[int]:
    """``"42-51"`` → 42..51; also comma lists of numbers and ranges (``"42,45-46"``). Order kept, duplicates
    dropped. Raises ValueError for an empty or malformed spec or a descending range."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"empty seed in {text!r}")
        low, sep, high = part.partition("-")
        if sep:
            start, stop = int(low), int(high)
            if stop < start:
                raise ValueError(f"descending seed range {part!r}")
            values: Iterable[int] = range(start, stop + 1)
        else:
            values = (int(part),)
        seeds.extend(v for v in values if v not in seeds)
    return seeds


def parse_policies(text: str, known: Sequence[str]) -> list[str]:
    """``published`` (the six published policies), ``all`` (every registered policy) or a comma list of names.
    Raises ValueError naming an unknown policy."""
    if text == "published":
        return list(PUBLISHED_ORDER)
    if text == "all":
        return [*PUBLISHED_ORDER, *(k for k in known if k not in PUBLISHED_ORDER)]
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no policy named")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(known)}")
    return names


def published_for(pods_path: str) -> dict[str, dict[str, float]] | None:
    """The published means when ``pods_path`` is the ``default`` pod file, else None."""
    return PUBLISHED_DEFAULT if os.path.basename(pods_path) == "openb_pod_list_default.csv" else None


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, min, max)``; NaN values are ignored; all NaN (or empty) gives NaNs."""
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return math.nan, math.nan, math.nan
    return statistics.fmean(clean), min(clean), max(clean)


def fmt(value: float | None, digits: int = 2, *, signed: bool = False) -> str:
    """A number with ``digits`` decimals, ``n/a`` for None or NaN."""
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: columns padded to their widest cell, first column left-aligned, others right."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        padded = (str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in pairs)
        return "  ".join(padded)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def summary_rows(
    runs: Sequence[dict[str, Any]], policies: Sequence[str], published: dict[str, dict[str, float]] | None
) -> list[list[str]]:
    """One row per policy: runs, then per metric ``mean (min–max)``, published mean and Δ pp; wall mean/max; RSS."""
    rows: list[list[str]] = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        row = [policy, str(len(mine))]
        for key, _ in METRICS:
            mean, low, high = spread([r[key] for r in mine])
            pub = published.get(policy, {}).get(key) if published else None
            diff = mean - pub if pub is not None else None
            row += [f"{fmt(mean)} ({fmt(low)}–{fmt(high)})", fmt(pub), fmt(diff, signed=True)]
        wall_mean, _, wall_max = spread([r["wall_seconds"] for r in mine])
        row += [
            f"{fmt(wall_mean, 1)}/{fmt(wall_max, 1)}",
            fmt(max(r["rss_mib"] for r in mine), 0),
            fmt(statistics.fmean(r["failed"] for r in mine), 0),
            fmt(statistics.fmean(r["arrivals"] for r in mine), 0),
        ]
        rows.append(row)
    return rows


SUMMARY_HEADER = (
    "policy", "runs", "alloc@100 mean (min–max)", "pub", "Δpp", "alloc@130 mean (min–max)", "pub", "Δpp",
    "frag%@80 mean (min–max)", "pub", "Δpp", "wall s mean/max", "RSS MiB max", "failed", "arrivals",
)


def curve_rows(
    runs: Sequence[dict[str, Any]], policies: Sequence[str], published: bool
) -> list[list[str]]:
    """Mean alloc% at each x of :data:`CURVE_XS`, ``ours / published`` per cell."""
    rows: list[list[str]] = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        pub_curve = PUBLISHED_DEFAULT_CURVE.get(policy) if published else None
        cells = [policy]
        for i, x in enumerate(CURVE_XS):
            mean = spread([r["curve"][str(x)] for r in mine])[0]
            cells.append(f"{fmt(mean)} / {fmt(pub_curve[i] if pub_curve else None)}")
        rows.append(cells)
    return rows


def closing_lines(runs: Sequence[dict[str, Any]], published: dict[str, dict[str, float]] | None) -> list[str]:
    """Machine-readable ``key=value`` lines printed last."""
    fgd = [r["wall_seconds"] for r in runs if r["policy"] == "fgd"]
    lines = [
        f"runs={len(runs)}",
        f"wall_seconds_max={max((r['wall_seconds'] for r in runs), default=math.nan):.3f}",
        f"fgd_wall_seconds_max={max(fgd, default=math.nan):.3f}",
        f"peak_rss_mib_max={max((r['rss_mib'] for r in runs), default=math.nan):.1f}",
    ]
    if published:
        diffs = []
        for policy in {r["policy"] for r in runs} & set(published):
            mean = spread([r["alloc130"] for r in runs if r["policy"] == policy])[0]
            diffs.append(abs(mean - published[policy]["alloc130"]))
        lines.append(f"alloc130_max_abs_diff_pp={max(diffs, default=math.nan):.3f}")
    return lines


# ---------------------------------------------------------------------------------------------- trace reading
def read_nodes(path: str) -> list[Any]:
    """Trace nodes from a ``openb_node_list_*.csv`` file (columns sn, cpu_milli, memory_mib, gpu, model)."""
    from domain.simulation.workload import TraceNode

    with open(path, newline="") as handle:
        return [
            TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


def read_pods(path: str) -> list[Any]:
    """Trace pods from a ``openb_pod_list_*.csv`` file; ``gpu_spec`` split on ``|`` with empty tokens dropped."""
    from domain.simulation.workload import TracePod

    with open(path, newline="") as handle:
        return [
            TracePod(
                row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["num_gpu"]),
                int(row["gpu_milli"]), tuple(t for t in (row.get("gpu_spec") or "").split("|") if t),
            )
            for row in csv.DictReader(handle)
        ]


# ---------------------------------------------------------------------------------------------- one run (child)
def run_one(
    nodes_path: str, pods_path: str, policy: str, seed: int, tune: float, tie_break: str, typical: str = "trace"
) -> dict[str, Any]:
    """One replay in the current (fresh) process; returns its figures and the process's peak RSS (MiB).
    ``typical``: ``trace`` (the whole pod file's typical pods) or ``online`` (learned from the arrivals)."""
    from domain.simulation.replay import ReplayConfig, replay

    started = time.perf_counter()
    config = ReplayConfig(policy, seed, tune, tie_break, typical)
    result = replay(read_nodes(nodes_path), read_pods(pods_path), config)
    alloc = result.allocation_curve()
    frag = result.fragmentation_curve()
    return {
        "policy": policy,
        "seed": seed,
        "alloc100": alloc[100],
        "alloc130": alloc[130],
        "frag80": frag[80],
        "frag100": frag[100],
        "curve": {str(x): alloc[x] for x in CURVE_XS},
        "failed": result.failed_pods,
        "arrivals": result.arrivals,
        "replay_seconds": result.wall_seconds,
        "wall_seconds": time.perf_counter() - started,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


# ---------------------------------------------------------------------------------------------- extender driver
KUBE_SCHEDULER_SEED_SALT = 0x6B756265
"""Mixed into the run's seed for the emulated kube-scheduler's own generator (random tie-break), so its draws
never disturb the replay's generator (arrival stream, tie order)."""

NAMESPACE = "default"
EXTENDER_WEIGHT = 1
"""``weight`` of our extender in the KubeSchedulerConfiguration (as deployed and as in the k8s tests)."""
EXTENDER_SCORE_SCALE = 10
"""kube-scheduler multiplies extender priorities (0..10) by ``MaxNodeScore / MaxExtenderPriority`` = 100 / 10."""
MAX_NODE_SCORE = 100


class ExtenderHttpError(RuntimeError):
    """The extender answered a non-200 status (kube-scheduler treats it as a failed scheduling attempt)."""


def trace_pod_object(pod: Any, number: int, protocol: Any) -> Any:
    """Arrival ``number`` of trace pod ``pod`` as the Pod a user would create: one container ``main`` whose requests
    equal its limits (cpu, memory and, for GPU pods, our extended resources: whole GPUs as ``resources.gpu``, a
    share as ``resources.core`` in percent); the trace's model allow-list as the GPU-models annotation. Raises
    ValueError for a share that is not a whole percent (every openb pod file has whole percents)."""
    from domain.kube.objects import ContainerSpec, PodObject

    if pod.gpu_milli % 10:
        raise ValueError(f"pod {pod.name}: gpu_milli={pod.gpu_milli} is not a whole percent of a GPU")
    resources = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.num_gpu > 0 and pod.gpu_milli == 1000:
        resources[protocol.resources.gpu] = str(pod.num_gpu)
    elif pod.num_gpu > 0:
        resources[protocol.resources.core] = str(pod.gpu_milli // 10)
    annotations = {protocol.annotations.pod_gpu_models: ",".join(pod.gpu_spec)} if pod.gpu_spec else {}
    return PodObject("", NAMESPACE, f"{pod.name}-{number}",
                     containers=(ContainerSpec("main", requests=dict(resources), limits=dict(resources)),),
                     annotations=annotations)


def trace_node_object(node: Any, protocol: Any, *, heartbeat: float) -> Any:
    """Trace node ``node`` as the Node the device plugin publishes: inventory annotation (the simulated GPUs of
    :meth:`TraceNode.inventory`) and allocatable cpu, memory, pods and our three extended resources."""
    from domain.kube.annotations import encode_inventory
    from domain.kube.objects import NodeObject
    from domain.units import GiB

    inventory = node.inventory()
    resources = protocol.resources
    allocatable = {
        "cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": str(inventory.max_pods),
        resources.gpu: str(node.gpus), resources.core: str(100 * node.gpus),
        resources.memory: str(sum(g.memory_bytes for g in inventory.gpus) // GiB),
    }
    annotation = encode_inventory(inventory.gpus, heartbeat=heartbeat, protocol=protocol.fingerprint())
    return NodeObject(node.name, annotations={protocol.annotations.node_inventory: annotation},
                      allocatable=allocatable)


def pod_json(pod: Any) -> dict[str, Any]:
    """A core/v1 Pod JSON object for ``pod`` (a :class:`PodObject`), as kube-scheduler sends it in ExtenderArgs."""
    containers = [{"name": c.name, "resources": {"requests": dict(c.requests), "limits": dict(c.limits)}}
                  for c in pod.containers if not c.init]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                     "resourceVersion": pod.resource_version, "annotations": dict(pod.annotations),
                     "labels": dict(pod.labels)},
        "spec": {"schedulerName": pod.scheduler_name, "containers": containers,
                 "nodeSelector": dict(pod.node_selector)},
        "status": {"phase": pod.phase.value},
    }


class KubeSchedulerEmulator:
    """The parts of kube-scheduler 1.20 (default profile, ``percentageOfNodesToScore: 100``) that decide where a
    pod of the replay goes, over numpy arrays of per-node requested resources (its "scheduler cache").

    * **Filter** — NodeResourcesFit: pod count (``len(pods) + 1 ≤ allocatable pods``), cpu and memory
      (``requested + pod ≤ allocatable``) and, because our ``managedResources`` are *not* ``ignoredByScheduler``,
      the sums of our extended resources (whole GPUs, core percent). The other default filters (NodeUnschedulable,
      NodeName, TaintToleration, NodeAffinity, NodePorts, volume filters, PodTopologySpread, InterPodAffinity) pass
      every node of the replay (no taints, selectors, ports, volumes or affinities), so they are left out.
    * **Score** — the default score plugins whose value differs between nodes for these pods:
      NodeResourcesLeastAllocated (weight 1; cpu and memory, weight 1 each:
      ``((alloc − req) · 100 / alloc)`` per resource, integer arithmetic, averaged) and
      NodeResourcesBalancedAllocation (weight 1: ``(1 − |cpu fraction − memory fraction|) · 100``, 0 when a fraction
      reaches 1), both on *non-zero* requests (unset cpu/memory count 100m / 200 MiB; the replay sets both).
      With ``most_allocated`` the profile swaps LeastAllocated for NodeResourcesMostAllocated (``req · 100 / alloc``
      per resource; a packing configuration an operator can choose, ``--kube-resource-score most``).
      ImageLocality, InterPodAffinity, NodeAffinity, NodePreferAvoidPods, PodTopologySpread and TaintToleration
      give every node the same score here (no images, affinities, avoid annotations, spread constraints or
      PreferNoSchedule taints), so they cannot change the choice and are left out.
    * **Extenders** — ``total += priority × weight × 10``.
    * **Select** — ``selectHost``: uniformly random among the highest totals (kube-scheduler's reservoir
      sampling), with its own generator. One feasible node is taken without scoring (``schedulePod``'s shortcut,
      so ``prioritize`` is not called then).
    """

    def __init__(self, nodes: Sequence[Any], rng: Any, *, most_allocated: bool = False) -> None:
        import numpy as np

        from domain.simulation.workload import TRACE_MAX_PODS

        self.np = np
        self.rng = rng
        self.most_allocated = most_allocated
        ordered = sorted(nodes, key=lambda n: n.name)
        self.names = [n.name for n in ordered]
        self.index = {name: i for i, name in enumerate(self.names)}
        mib = 1024 * 1024
        self.cpu_cap = np.array([n.cpu_milli for n in ordered], np.int64)
        self.mem_cap = np.array([n.memory_mib * mib for n in ordered], np.int64)
        self.pods_cap = np.full(len(ordered), TRACE_MAX_PODS, np.int64)
        self.gpu_cap = np.array([n.gpus for n in ordered], np.int64)
        self.core_cap = 100 * self.gpu_cap
        size = len(ordered)
        self.cpu_req, self.mem_req, self.pods = (np.zeros(size, np.int64) for _ in range(3))
        self.gpu_req, self.core_req = np.zeros(size, np.int64), np.zeros(size, np.int64)

    @staticmethod
    def request(pod: Any) -> tuple[int, int, int, int]:
        """``(cpu milli, memory bytes, whole GPUs, core percent)`` of trace pod ``pod``."""
        whole = pod.num_gpu if pod.num_gpu > 0 and pod.gpu_milli == 1000 else 0
        core = pod.gpu_milli // 10 if pod.num_gpu > 0 and pod.gpu_milli < 1000 else 0
        return pod.cpu_milli, pod.memory_mib * 1024 * 1024, whole, core

    def feasible(self, request: tuple[int, int, int, int]) -> Any:
        """Indexes (ascending, i.e. by node name) of the nodes passing NodeResourcesFit."""
        cpu, mem, gpus, core = request
        mask = ((self.pods + 1 <= self.pods_cap) & (self.cpu_req + cpu <= self.cpu_cap)
                & (self.mem_req + mem <= self.mem_cap) & (self.gpu_req + gpus <= self.gpu_cap)
                & (self.core_req + core <= self.core_cap))
        return self.np.flatnonzero(mask)

    def plugin_scores(self, request: tuple[int, int, int, int], idx: Any) -> Any:
        """LeastAllocated (or MostAllocated) + BalancedAllocation (weights 1) for nodes ``idx`` (class docstring)."""
        np = self.np
        cpu, mem, _, _ = request
        cpu_cap, mem_cap = self.cpu_cap[idx], self.mem_cap[idx]
        cpu_req, mem_req = self.cpu_req[idx] + cpu, self.mem_req[idx] + mem

        def resource(req: Any, cap: Any) -> Any:
            safe = np.maximum(cap, 1)
            kept = req if self.most_allocated else cap - req
            return np.where((cap == 0) | (req > cap), 0, kept * MAX_NODE_SCORE // safe)

        allocated = (resource(cpu_req, cpu_cap) + resource(mem_req, mem_cap)) // 2
        cpu_frac = np.where(cpu_cap == 0, 1.0, cpu_req / np.maximum(cpu_cap, 1))
        mem_frac = np.where(mem_cap == 0, 1.0, mem_req / np.maximum(mem_cap, 1))
        balanced = np.where((cpu_frac >= 1) | (mem_frac >= 1), 0,
                            ((1.0 - np.abs(cpu_frac - mem_frac)) * MAX_NODE_SCORE).astype(np.int64))
        return allocated + balanced

    def select(self, idx: Any, totals: Any) -> int:
        """``selectHost``: uniform among the best totals; returns a node index."""
        tied = idx[totals == totals.max()]
        return int(tied[int(self.rng.integers(len(tied)))])

    def assume(self, node: str, request: tuple[int, int, int, int]) -> None:
        """Count a bound pod on ``node`` (kube-scheduler's assume + the informer's confirmation)."""
        i = self.index[node]
        cpu, mem, gpus, core = request
        self.cpu_req[i] += cpu
        self.mem_req[i] += mem
        self.gpu_req[i] += gpus
        self.core_req[i] += core
        self.pods[i] += 1


class ExtenderClient:
    """kube-scheduler's HTTP extender client: ``POST <urlPrefix>/<verb>`` with a JSON body, one connection per call
    (our listener speaks HTTP/1.0). Records each call's latency per verb."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.latency: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}

    def post(self, verb: str, body: object) -> Any:
        """The decoded reply; raises :class:`ExtenderHttpError` for a non-200 answer."""
        import http.client
        import json

        started = time.perf_counter()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            connection.request("POST", f"/{verb}", body=json.dumps(body, separators=(",", ":")),
                                headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        self.latency[verb].append(time.perf_counter() - started)
        if response.status != 200:
            raise ExtenderHttpError(f"{verb}: HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)


def naive_extender(service: Any) -> Any:
    """Bench-only textbook extender (``--extender-naive``; never used in production): ``filter`` returns *every*
    candidate node where the pod fits (our full filter chain) and reserves nothing, ``prioritize`` returns our
    policy's node score / 10 (integer 0..10), so kube-scheduler's random tie-break (and, unless
    ``--no-plugin-scores``, its default score plugins) decide among nodes our policy ranks differently; ``bind``
    is the production verb (a pod without a reservation gets a cycle restricted to the chosen node first)."""
    from domain.kube.translate import pod_request
    from domain.scheduling.framework.cycle import CycleState
    from domain.scheduling.nodefit import PodConstraints
    from entrypoints.scheduler.extender_json import ExtenderJson
    from services.scheduler.extender import Extender, FilterResult

    class NaiveExtender(Extender):
        def _cycle(self, pod: Any, names: Sequence[str]) -> tuple[list[str], list[int]]:
            """``(feasible names, feasible scores)`` for ``pod`` over the candidates ``names``."""
            service = self.service
            with service.books() as books:  # a cycle of its own: the constraints are its scratch
                request = pod_request(pod, service.protocol)
                sets = service.schedulers
                scheduler = sets.get(sets.policy_for(pod))
                books.constraints[pod.uid] = PodConstraints.of(pod)
                state = CycleState(candidates=frozenset(names))
                slots, _ = scheduler.feasible(request, state)
                scores = scheduler.scores(request, state, slots) if len(slots) else slots
                ledger = scheduler.ledger
                return [ledger.name(int(s)) for s in slots], [int(v) for v in scores]

        def filter(self, pod: Any, names: Sequence[str]) -> FilterResult:
            passed, _ = self._cycle(pod, names)
            keep = set(passed)
            return FilterResult(tuple(passed), {n: "lj-runtimekit: does not fit" for n in names if n not in keep})

        def prioritize(self, pod: Any, names: Sequence[str]) -> list[tuple[str, int]]:
            passed, scores = self._cycle(pod, names)
            by_name = dict(zip(passed, scores, strict=True))
            return [(n, min(by_name.get(n, 0) // EXTENDER_SCORE_SCALE, 10)) for n in names]

    return ExtenderJson(NaiveExtender(service))


class BoundWatch:
    """Pod listener of the service: remembers which pods it has seen bound, so the driver can wait until the
    service's informer has delivered a binding before the next pod arrives."""

    def __init__(self) -> None:
        import threading

        self.cond = threading.Condition()
        self.bound: dict[str, str] = {}

    def __call__(self, pod: Any) -> None:
        if pod.node_name:
            with self.cond:
                self.bound[pod.uid] = pod.node_name
                self.cond.notify_all()

    def wait(self, uid: str, timeout: float = 60.0) -> str:
        """The node the service saw ``uid`` bound to; raises RuntimeError after ``timeout`` s."""
        with self.cond:
            if not self.cond.wait_for(lambda: uid in self.bound, timeout):
                raise RuntimeError(f"the scheduler's informer never showed pod {uid} bound")
            return self.bound.pop(uid)


def extender_replay(
    nodes: Sequence[Any], pods: Sequence[Any], config: Any, *, cpu_pods: str = "kube", naive: bool = False,
    plugin_scores: bool = True, limit: int | None = None, most_allocated: bool = False,
) -> dict[str, Any]:
    """Replay ``config`` through the extender's HTTP verbs with an emulated kube-scheduler (module docstring).

    ``cpu_pods``: ``kube`` — the extender manages our resources only (``managedResources``), kube-scheduler places
    CPU-only pods by its default scoring; ``extender`` — no ``managedResources``, the extender ranks every pod
    (``rank_all_pods``). ``most_allocated``: kube-scheduler scores with MostAllocated instead of LeastAllocated.

    Same arrival stream, typical pods and tie order as :func:`domain.simulation.replay.replay` (the service gets
    the replay's generator, positioned by :func:`planned_arrivals`, and the trace's typical pods). Returns the
    per-arrival series and counters.
    """
    import numpy as np

    from adapters.memory.cluster import InMemoryCluster
    from adapters.prometheus import PrometheusSchedulerMetrics
    from domain.kube.protocol import ProtocolConstants
    from domain.scheduling.policies.fgd.fragmentation import FragmentationModel
    from domain.scheduling.policies.fgd.nodestates import NodeStateCache
    from domain.simulation.replay import planned_arrivals, typical_pods
    from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
    from services.scheduler.service import SchedulerService, ServiceConfig

    started = time.perf_counter()
    protocol = ProtocolConstants()
    typical = typical_pods(pods)
    stream, rng = planned_arrivals(nodes, pods, config)
    if limit is not None:
        stream = stream[:limit]
    now = time.time()
    cluster = InMemoryCluster()
    for node in sorted(nodes, key=lambda n: n.name):
        cluster.create_node(trace_node_object(node, protocol, heartbeat=now))
    metrics = PrometheusSchedulerMetrics()
    service = SchedulerService(
        cluster, protocol, metrics, clock=lambda: now,
        config=ServiceConfig(policy=config.policy, tie_break=config.tie_break, typical_pods=typical, rng=rng,
                             admission_hold_seconds=None))  # no device plugin here to mark pods allocated
    settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=0, policy=config.policy,
                                 tie_break=config.tie_break, resync_seconds=1e9, tick_seconds=3600.0,
                                 assumed_ttl_seconds=3600.0, identity="trace-replay",
                                 rank_all_pods=cpu_pods == "extender")
    app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None,
                       metrics_text=metrics.exposition)
    if naive:
        fake = naive_extender(service)
        app.http.verbs = {"filter": fake.filter, "prioritize": fake.prioritize, "bind": fake.bind}
    watch = BoundWatch()
    service.pod_listeners.append(watch)
    kube = KubeSchedulerEmulator(nodes, np.random.default_rng([config.seed, KUBE_SCHEDULER_SEED_SALT]),
                                 most_allocated=most_allocated)
    app.start()
    try:
        deadline = time.monotonic() + 120
        while not (app.synced and service.serving):
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler never became ready")
            time.sleep(0.01)
        with service.books() as books:
            missing = [n for n in kube.names if not service.knows_node(n)]
            if missing:
                raise RuntimeError(f"{len(missing)} node(s) unknown to the scheduler, e.g. {missing[0]}")
            service.schedulers.get(config.policy)  # draws the tie order now, over every node (as replay does)
            states = NodeStateCache(FragmentationModel(typical, books.ledger))
        host, port = app.http.address
        client = ExtenderClient(host, port)
        setup_seconds = time.perf_counter() - started
        loop_started = time.perf_counter()
        arrived = used = failed = 0
        series: dict[str, list[Any]] = {"arrived": [], "used": [], "frag": [], "idle": []}
        counts = {"cpu_only": 0, "via_extender": 0, "prioritize_calls": 0, "bind_errors": 0, "filter_errors": 0}
        for number, trace_pod in enumerate(stream):
            arrived += trace_pod.total_gpu_milli
            pod = cluster.create_pod(trace_pod_object(trace_pod, number, protocol))
            request = kube.request(trace_pod)
            idx = kube.feasible(request)
            node: str | None = None
            if len(idx) and trace_pod.num_gpu == 0 and cpu_pods == "kube":  # not managed: kube-scheduler alone
                counts["cpu_only"] += 1
                chosen = int(idx[0]) if len(idx) == 1 else kube.select(idx, kube.plugin_scores(request, idx))
                node = kube.names[chosen]
                cluster.bind_pod(NAMESPACE, pod.name, uid=pod.uid, node=node)
            elif len(idx):
                counts["via_extender"] += 1
                node = kube_schedule_via_extender(kube, client, pod, request, idx, plugin_scores, counts)
            if node is None:
                failed += 1
                cluster.delete_pod(NAMESPACE, pod.name, grace_period_seconds=0)
            else:
                seen = watch.wait(pod.uid)
                if seen != node:
                    raise RuntimeError(f"pod {pod.name}: kube-scheduler chose {node}, the API shows {seen}")
                kube.assume(node, request)
                used += trace_pod.total_gpu_milli
            with service.books():
                frag, idle = states.cluster_fragmentation()
            series["arrived"].append(arrived)
            series["used"].append(used)
            series["frag"].append(frag)
            series["idle"].append(idle)
        loop_seconds = time.perf_counter() - loop_started
        with service.books() as books:
            booked = sum(record.gpu_milli for record in books.ledger.records().values())
            assumed = len(books.assumed)
    finally:
        app.stop()
    if booked != used:
        raise RuntimeError(f"the scheduler's ledger books {booked} milli-GPU, the replay counted {used}")
    latency = {verb: values for verb, values in client.latency.items() if values}
    return {
        "series": series, "failed": failed, "arrivals": len(stream), "counts": counts, "assumed_left": assumed,
        "setup_seconds": setup_seconds, "loop_seconds": loop_seconds, "wall_seconds": time.perf_counter() - started,
        "latency_ms": {verb: {"mean": 1000 * statistics.fmean(v), "p99": 1000 * percentile(v, 99)}
                       for verb, v in latency.items()},
    }


def kube_schedule_via_extender(
    kube: KubeSchedulerEmulator, client: ExtenderClient, pod: Any, request: tuple[int, int, int, int], idx: Any,
    plugin_scores: bool, counts: dict[str, int],
) -> str | None:
    """One kube-scheduler cycle for a pod the extender is interested in: extender filter on the nodes passing
    NodeResourcesFit, then (more than one node left) scores and extender priorities, selection, extender bind.
    Returns the node, or None when the pod stays unscheduled (no node, extender error, bind error)."""
    import numpy as np

    body = {"Pod": pod_json(pod), "NodeNames": [kube.names[int(i)] for i in idx]}
    try:
        reply = client.post("filter", body)
    except ExtenderHttpError:
        counts["filter_errors"] += 1
        return None
    if reply.get("Error"):
        counts["filter_errors"] += 1
        return None
    passed = list(reply.get("NodeNames") or [])
    if not passed:
        return None
    if len(passed) == 1:
        node = passed[0]
    else:
        counts["prioritize_calls"] += 1
        priorities = {h["Host"]: int(h["Score"]) for h in client.post("prioritize", {**body, "NodeNames": passed})}
        kept = np.array([kube.index[n] for n in passed], np.int64)
        totals = np.array([priorities.get(n, 0) * EXTENDER_WEIGHT * EXTENDER_SCORE_SCALE for n in passed], np.int64)
        if plugin_scores:
            totals = totals + kube.plugin_scores(request, kept)
        node = kube.names[kube.select(kept, totals)]
    result = client.post("bind", {"PodName": pod.name, "PodNamespace": pod.namespace, "PodUID": pod.uid,
                                  "Node": node})
    if result.get("Error"):
        counts["bind_errors"] += 1
        return None
    return str(node)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank ``q``-th percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first arrival where two allocated-milli series differ (None when equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_one_both(
    nodes_path: str, pods_path: str, policy: str, seed: int, tune: float, tie_break: str, cpu_pods: str,
    naive: bool, plugin_scores: bool, limit: int | None, most_allocated: bool = False,
) -> dict[str, Any]:
    """One (policy, seed) through both drivers in the current (fresh) process: the in-process replay, then the
    extender replay; the in-process series is cut to ``limit`` arrivals when given (decisions are sequential, so
    its first ``limit`` decisions are those of a ``limit``-arrival run)."""
    from domain.simulation.curves import allocation_curve, fragmentation_curve
    from domain.simulation.replay import ReplayConfig, replay

    nodes, pods = read_nodes(nodes_path), read_pods(pods_path)
    config = ReplayConfig(policy, seed, tune, tie_break)
    reference = replay(nodes, pods, config)
    cut = reference.arrivals if limit is None else min(limit, reference.arrivals)
    ref = {"arrived": reference.arrived_milli[:cut], "used": reference.used_milli[:cut],
           "frag": reference.frag_milli[:cut], "idle": reference.idle_milli[:cut]}
    ext = extender_replay(nodes, pods, config, cpu_pods=cpu_pods, naive=naive, plugin_scores=plugin_scores,
                          limit=limit, most_allocated=most_allocated)
    total_gpus = reference.total_gpus

    def figures(series: dict[str, list[Any]]) -> dict[str, Any]:
        alloc = allocation_curve(series["arrived"], series["used"], total_gpus)
        frag = fragmentation_curve(series["arrived"], series["frag"], series["idle"], total_gpus)
        end = 100.0 * series["used"][-1] / (total_gpus * 1000) if series["used"] else math.nan
        return {"alloc100": alloc[100], "alloc130": alloc[130], "frag80": frag[80], "alloc_end": end,
                "curve": {str(x): alloc[x] for x in CURVE_XS}}

    return {
        "policy": policy, "seed": seed, "arrivals": cut,
        "inprocess": {**figures(ref), "failed": reference.failed_pods if limit is None else None,
                      "wall_seconds": reference.wall_seconds},
        "extender": {**figures(ext["series"]), "failed": ext["failed"], "wall_seconds": ext["wall_seconds"],
                     "loop_seconds": ext["loop_seconds"], "setup_seconds": ext["setup_seconds"],
                     "counts": ext["counts"], "latency_ms": ext["latency_ms"], "assumed_left": ext["assumed_left"]},
        "first_divergence": first_divergence(ref["used"], ext["series"]["used"]),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def comparison_rows(runs: Sequence[dict[str, Any]], policies: Sequence[str]) -> list[list[str]]:
    """Per policy: seeds, then for alloc@100, alloc@130 and frag%@80 the in-process mean, the extender mean and
    Δpp (extender − in-process); mean wall seconds of both drivers; extender arrivals per second."""
    rows: list[list[str]] = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        row = [policy, ",".join(str(r["seed"]) for r in mine)]
        for key in ("alloc100", "alloc130", "frag80"):
            ref = spread([r["inprocess"][key] for r in mine])[0]
            ext = spread([r["extender"][key] for r in mine])[0]
            row += [fmt(ref), fmt(ext), fmt(ext - ref, signed=True)]
        end = spread([r["extender"]["alloc_end"] - r["inprocess"]["alloc_end"] for r in mine])[0]
        row.append(fmt(end, signed=True))
        same = sum(1 for r in mine if r["first_divergence"] is None)
        rate = statistics.fmean(r["arrivals"] / r["extender"]["loop_seconds"] for r in mine)
        row += [f"{same}/{len(mine)}",
                fmt(statistics.fmean(r["inprocess"]["wall_seconds"] for r in mine), 1),
                fmt(statistics.fmean(r["extender"]["wall_seconds"] for r in mine), 1), fmt(rate, 0)]
        rows.append(row)
    return rows


COMPARISON_HEADER = (
    "policy", "seeds", "alloc@100 inproc", "extender", "Δpp", "alloc@130 inproc", "extender", "Δpp",
    "frag%@80 inproc", "extender", "Δpp", "alloc@end Δpp", "identical", "wall s inproc", "wall s ext", "arrivals/s ext",
)


def comparison_closing_lines(runs: Sequence[dict[str, Any]], policies: Sequence[str]) -> list[str]:
    """Machine-readable ``key=value`` lines of a ``--driver extender`` run."""
    lines = [f"runs={len(runs)}"]
    diffs = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        if not mine:
            continue
        diff = spread([r["extender"]["alloc130"] - r["inprocess"]["alloc130"] for r in mine])[0]
        diffs.append(abs(diff))
        lines.append(f"{policy}_extender_alloc130_diff_pp={diff:.3f}")
    lines.append(f"extender_alloc130_max_abs_diff_pp={max(diffs, default=math.nan):.3f}")
    wall = max((r["extender"]["wall_seconds"] for r in runs), default=math.nan)
    lines.append(f"extender_wall_seconds_max={wall:.1f}")
    return lines


# ---------------------------------------------------------------------------------------------- driver
def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run every (policy, seed) in a fresh child process, print the tables."""
    from domain.scheduling.framework.tiebreak import TIE_BREAKS
    from domain.scheduling.registry import POLICIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", default=DEFAULT_NODES, help="node list CSV (default: %(default)s)")
    parser.add_argument("--pods", default=DEFAULT_PODS, help="pod list CSV (default: %(default)s)")
    parser.add_argument("--policies", default="published", help="published (default), all, or a,b,...")
    parser.add_argument("--seeds", default="42-51", help="seeds: N, N,M or A-B (default: %(default)s)")
    parser.add_argument("--tune", type=float, default=1.3, help="arrived GPU target / capacity (default: %(default)s)")
    parser.add_argument(
        "--tie-break", default="fixed-order", choices=TIE_BREAKS, help="tie rule (default: fixed-order)"
    )
    parser.add_argument("--typical", default="trace", choices=("trace", "online"),
                        help="inprocess driver: typical pods of FGD-family policies from the whole pod file (trace, "
                             "default, as published) or learned from the arrivals so far (online)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel, one process each (default: 1)")
    parser.add_argument("--driver", default="inprocess", choices=("inprocess", "extender"),
                        help="inprocess (default): the replay alone; extender: every run also through the extender's "
                             "HTTP verbs with an emulated kube-scheduler, compared with the in-process replay")
    parser.add_argument("--cpu-pods", default="kube", choices=("kube", "extender"),
                        help="extender driver: who places CPU-only pods — kube (default: managedResources keeps "
                             "them from the extender, kube-scheduler's default scoring decides) or extender (no "
                             "managedResources; the extender ranks every pod, --rank-all-pods)")
    parser.add_argument("--kube-resource-score", default="least", choices=("least", "most"),
                        help="extender driver: kube-scheduler's resource score plugin — least (default profile: "
                             "NodeResourcesLeastAllocated) or most (NodeResourcesMostAllocated, packing)")
    parser.add_argument("--extender-naive", action="store_true",
                        help="extender driver: a bench-only textbook extender (all feasible nodes, priorities = our "
                             "score / 10) instead of ours, to measure what kube-scheduler's tie-break costs")
    parser.add_argument("--no-plugin-scores", action="store_true",
                        help="extender driver: rank the pods the extender is called for by its priorities alone "
                             "(leave out kube-scheduler's resource and BalancedAllocation scores)")
    parser.add_argument("--record", metavar="FILE", default=None,
                        help="inprocess driver, policies including fgd and fgd-plus: write the pod file's row of the "
                             "Markdown table in FILE (other rows kept; e.g. bench/results/trace_replay_trace.md)")
    parser.add_argument("--limit-arrivals", type=int, default=None,
                        help="extender driver: replay only the first N arrivals of each run (both drivers)")
    args = parser.parse_args(argv)
    if args.limit_arrivals is not None and args.limit_arrivals < 1:
        parser.error("--limit-arrivals must be >= 1")
    try:
        policies = parse_policies(args.policies, list(POLICIES))
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        parser.error(str(error))
    for path in (args.nodes, args.pods):
        if not os.path.isfile(path):
            parser.error(f"no such file: {path}")
    if args.record is not None and not set(RECORD_POLICIES) <= set(policies):
        parser.error(f"--record needs --policies to include {', '.join(RECORD_POLICIES)}")
    if args.driver == "extender":
        return compare_drivers(args, policies, seeds)
    published = published_for(args.pods)
    tasks = [(p, s) for p in policies for s in seeds]
    print(f"trace replay: nodes={args.nodes} pods={args.pods} tune={args.tune} tie_break={args.tie_break} "
          f"typical={args.typical} policies={','.join(policies)} seeds={args.seeds} jobs={args.jobs} "
          f"runs={len(tasks)}", flush=True)
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(args.jobs, 1), mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = {
            pool.submit(run_one, args.nodes, args.pods, p, s, args.tune, args.tie_break, args.typical): (p, s)
            for p, s in tasks
        }
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            runs.append(run)
            print(f"  [{len(runs)}/{len(tasks)}] {run['policy']:<14} seed={run['seed']} "
                  f"alloc@100={fmt(run['alloc100'])} alloc@130={fmt(run['alloc130'])} "
                  f"frag@80={fmt(run['frag80'])} failed={run['failed']} "
                  f"wall={run['wall_seconds']:.1f}s rss={run['rss_mib']:.0f}MiB", flush=True)
    runs.sort(key=lambda r: (policies.index(r["policy"]), r["seed"]))
    print()
    print(f"Per-policy summary over seeds {args.seeds} (published: "
          f"{'docs/trace-replay.md §5, default' if published else 'n/a for this pod file'})")
    print(render_table(SUMMARY_HEADER, summary_rows(runs, policies, published)))
    print()
    print("Curve shape: mean alloc% ours / published")
    print(render_table(("policy", *(f"x={x}" for x in CURVE_XS)), curve_rows(runs, policies, published is not None)))
    print()
    print(f"total_wall_seconds={time.perf_counter() - started:.1f}")
    for line in closing_lines(runs, published):
        print(line)
    for policy in policies:
        walls = [r["wall_seconds"] for r in runs if r["policy"] == policy]
        if walls:
            print(f"{policy}_wall_seconds_mean={statistics.fmean(walls):.3f}")
    for line in versus_fgd_lines(runs, args.pods):
        print(line)
    if args.record is not None:
        from adapters.reportfiles.results_table import record_row, workload_name

        record_row(Path(args.record), RECORD_HEADER, workload_name(args.pods), record_cells(runs, args.pods, seeds))
    return 0


def compare_drivers(args: argparse.Namespace, policies: Sequence[str], seeds: Sequence[int]) -> int:
    """``--driver extender``: every (policy, seed) through both drivers in a fresh child process; print the
    side-by-side table."""
    tasks = [(p, s) for p in policies for s in seeds]
    variant = "naive extender (all feasible nodes, score/10)" if args.extender_naive else "lj-runtimekit extender"
    allocated = "MostAllocated" if args.kube_resource_score == "most" else "LeastAllocated"
    scores = "extender priorities only" if args.no_plugin_scores else f"extender + {allocated} + BalancedAllocation"
    print(f"trace replay, extender driver vs in-process: nodes={args.nodes} pods={args.pods} tune={args.tune} "
          f"tie_break={args.tie_break} policies={','.join(policies)} seeds={args.seeds} jobs={args.jobs} "
          f"runs={len(tasks)} extender={variant} cpu_pods={args.cpu_pods} kube_scores={scores} "
          f"limit_arrivals={args.limit_arrivals or 'none'}", flush=True)
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(args.jobs, 1), mp_context=context,
                                                max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_one_both, args.nodes, args.pods, p, s, args.tune, args.tie_break,
                               args.cpu_pods, args.extender_naive, not args.no_plugin_scores, args.limit_arrivals,
                               args.kube_resource_score == "most")
                   for p, s in tasks]
        for future in concurrent.futures.as_completed(futures):
            run = future.result()
            runs.append(run)
            ref, ext = run["inprocess"], run["extender"]
            latency = " ".join(f"{verb}={v['mean']:.1f}/{v['p99']:.1f}ms" for verb, v in ext["latency_ms"].items())
            print(f"  [{len(runs)}/{len(tasks)}] {run['policy']:<10} seed={run['seed']} arrivals={run['arrivals']} "
                  f"alloc@130 inproc={fmt(ref['alloc130'])} extender={fmt(ext['alloc130'])} "
                  f"Δ={fmt(ext['alloc130'] - ref['alloc130'], 3, signed=True)}pp "
                  f"alloc@end {fmt(ref['alloc_end'])}/{fmt(ext['alloc_end'])} "
                  f"failed {ref['failed'] if ref['failed'] is not None else 'n/a'}/{ext['failed']} "
                  f"first_divergence={run['first_divergence']} cpu_only_by_kube={ext['counts']['cpu_only']} "
                  f"prioritize_calls={ext['counts']['prioritize_calls']} bind_errors={ext['counts']['bind_errors']} "
                  f"wall {ref['wall_seconds']:.1f}s/{ext['wall_seconds']:.1f}s (verbs mean/p99: {latency})",
                  flush=True)
    runs.sort(key=lambda r: (list(policies).index(r["policy"]), r["seed"]))
    print()
    print("Extender driver vs in-process replay (means over seeds; Δpp = extender − in-process; identical = runs "
          "whose allocated series match at every arrival)")
    print(render_table(COMPARISON_HEADER, comparison_rows(runs, policies)))
    print()
    print(f"total_wall_seconds={time.perf_counter() - started:.1f}")
    for line in comparison_closing_lines(runs, policies):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
