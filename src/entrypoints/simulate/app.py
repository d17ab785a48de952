"""The ``simulate`` use case: load a workload, replay it under every policy × seed, report.

Order of work is chosen so every mistake surfaces before the first replay: settings (policy names, tie rule,
tune, seeds) are validated on construction; then the plot backend is checked, the trace files are read and
checked, and the output folder is created — only then do the runs start. Typical pods (§3.1 of
docs/trace-replay.md) are computed once per workload and shared by all runs, as the published experiment does.

The progress total is exact: a run's arrival stream (shuffle + tune, §2.2 steps 4–6) depends only on the pods,
the cluster capacity, ``tune`` and the seed — not on the policy — so it is rebuilt once per seed with
:func:`planned_arrivals`, the function :func:`replay` itself starts with.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import attrs

from domain.scheduling.framework.tiebreak import TIE_BREAKS
from domain.scheduling.registry import PUBLISHED_POLICIES, validate_policy_names
from domain.simulation.compare import BASELINE_POLICY, CANDIDATE_POLICY, paired_seeds, regressions_between, x_ranges
from domain.simulation.replay import (
    TYPICAL_MODES,
    ReplayConfig,
    ReplayResult,
    planned_arrivals,
    replay,
    typical_pods,
)
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods
from domain.simulation.workload import TraceNode, TracePod
from domain.topology import Tier
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.command import SettingsError as SettingsError
from ports.progress import ProgressBar
from ports.report import CurvePlotter, ReportError, SimulationReport
from ports.trace import TraceReader

SYNTHETIC_WORKLOAD = "synthetic"
"""Workload name of the embedded default in reports."""


@attrs.frozen
class SimulateSettings:
    """Validated settings of one ``ljrk simulate`` invocation.

    ``nodes``/``pods``: trace CSV paths, both or neither (neither = embedded synthetic workload at ``scale``);
    ``policies``: registered policy names (default: the six published ones); ``seeds``: non-negative ints,
    distinct; ``tune``: arrived GPU request target as a fraction of capacity (> 0, 1.3 published);
    ``tie_break``: one of :data:`TIE_BREAKS`; ``output_dir``: report folder; ``plot``: optional chart file;
    ``progress``: ``None`` = bar only on a terminal, ``False`` = never, ``True`` = always; ``typical``: where the
    policies' typical pods come from, one of :data:`TYPICAL_MODES` (``trace``: the whole pod file, as published;
    ``online``: only the pods arrived so far, as the production scheduler learns them); ``high_share``: share of
    arrivals that are high priority and may preempt (0..1, 0 = none); ``topology``: a simulated machine of
    :data:`~domain.topology.machines.MACHINE_NAMES` given to every node with an even GPU count (``none``: no
    topology, as published); ``topology_known``: whether the scheduler is told it (the figures are judged against
    the machine either way); ``topology_first``: multi-GPU pods go to the nodes where they are best connected,
    then the policy chooses (needs a known ``topology``).

    Raises :class:`SettingsError`, or :class:`domain.errors.UnknownPolicyError` (message lists known policies).
    """

    policies: tuple[str, ...] = PUBLISHED_POLICIES
    seeds: tuple[int, ...] = (42,)
    tune: float = 1.3
    tie_break: str = "fixed-order"
    output_dir: Path = Path("out/simulate")
    nodes: Path | None = None
    pods: Path | None = None
    plot: Path | None = None
    progress: bool | None = None
    scale: float = 0.1
    typical: str = "trace"
    high_share: float = 0.0
    topology: str = "none"
    topology_known: bool = True
    topology_first: bool = False

    def __attrs_post_init__(self) -> None:
        validate_policy_names(list(self.policies))
        if len(set(self.policies)) != len(self.policies):
            raise SettingsError(f"policies: a policy is named twice in {','.join(self.policies)}")
        if self.tie_break not in TIE_BREAKS:
            raise SettingsError(f"tie-break: unknown rule {self.tie_break!r}; known rules: {', '.join(TIE_BREAKS)}")
        if self.typical not in TYPICAL_MODES:
            raise SettingsError(f"typical: unknown mode {self.typical!r}; known: {', '.join(TYPICAL_MODES)}")
        if not self.seeds:
            raise SettingsError("seeds: name at least one seed")
        if any(s < 0 for s in self.seeds) or len(set(self.seeds)) != len(self.seeds):
            raise SettingsError("seeds: seeds must be distinct integers ≥ 0")
        if not (math.isfinite(self.tune) and self.tune > 0):
            raise SettingsError(f"tune: {self.tune} must be a finite number > 0 (1.3 = 130 % of GPU capacity)")
        if (self.nodes is None) != (self.pods is None):
            raise SettingsError("nodes and pods: give both trace files, or neither for the embedded workload")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise SettingsError(f"scale: {self.scale} must be > 0")
        if not (math.isfinite(self.high_share) and 0 <= self.high_share <= 1):
            raise SettingsError(f"high-priority-share: {self.high_share} must be within 0..1 (0.1 = 10 % of arrivals)")
        if self.topology not in MACHINE_NAMES:
            raise SettingsError(f"topology: unknown machine {self.topology!r}; known: {', '.join(MACHINE_NAMES)}")
        if not self.topology_known and self.topology == "none":
            raise SettingsError("topology-blind: needs --topology MACHINE (the machine the placements are judged on)")
        if self.topology_first and (self.topology == "none" or not self.topology_known):
            raise SettingsError("gpu-topology-first: needs --topology MACHINE, told to the scheduler (not "
                                "--topology-blind)")

    def configs(self) -> list[ReplayConfig]:
        """One :class:`ReplayConfig` per policy × seed, policy-major (the report order)."""
        return [ReplayConfig(p, s, tune=self.tune, tie_break=self.tie_break, typical=self.typical,
                             high_share=self.high_share, topology=self.topology,
                             topology_known=self.topology_known, topology_first=self.topology_first)
                for p in self.policies for s in self.seeds]


@attrs.frozen
class Workload:
    """A named node list and pod list."""

    name: str
    nodes: list[TraceNode]
    pods: list[TracePod]


class Simulation:
    """Runs one simulation (module docstring) and writes its reports through the injected ports."""

    def __init__(
        self, settings: SimulateSettings, *, trace: TraceReader, report: SimulationReport, plotter: CurvePlotter,
        progress: ProgressBar, stdout: TextIO,
    ) -> None:
        self.settings = settings
        self.trace = trace
        self.report = report
        self.plotter = plotter
        self.progress = progress
        self.stdout = stdout

    def run(self) -> list[ReplayResult]:
        """Validate, replay every policy × seed, write the reports and print the table; returns the results in
        report order. Raises the ports' errors (:class:`ports.trace.TraceError`,
        :class:`ports.report.ReportError`), :class:`SettingsError` or domain errors."""
        configs = self.settings.configs()
        if self.settings.plot is not None:
            self.plotter.check_available()
            _check_plot_target(self.settings.plot)
        workload = self.load()
        try:
            self.report.prepare()
        except ReportError as error:
            raise SettingsError(f"--output-dir {error}") from error
        typical = typical_pods(workload.pods)
        results: list[ReplayResult] = []
        self.progress.start(self._arrivals_total(workload, configs), unit="pod")
        try:
            for config in configs:
                self.progress.describe(f"{config.policy} seed {config.seed}")
                results.append(replay(workload.nodes, workload.pods, config, typical=typical,
                                      progress=self.progress.advance))
        finally:
            self.progress.finish()
        written = self.report.write(results, workload=workload.name)
        self.stdout.write(format_table(results, workload=workload.name))
        self.stdout.write(format_regressions(results))
        self.stdout.write(format_preemptions(results))
        self.stdout.write(format_topology(results))
        if self.settings.plot is not None:
            written.append(self.plotter.plot(results, self.settings.plot, title=workload.name))
        for path in written:
            self.stdout.write(f"wrote {path}\n")
        return results

    def load(self) -> Workload:
        """The trace files' workload (named after the pods file) or the embedded one. Raises
        :class:`ports.trace.TraceError` or :class:`SettingsError` for a node list without GPUs."""
        s = self.settings
        if s.nodes is None or s.pods is None:
            return Workload(SYNTHETIC_WORKLOAD, synthetic_nodes(s.scale), synthetic_pods(s.scale))
        nodes = self.trace.read_nodes(s.nodes)
        pods = self.trace.read_pods(s.pods)
        if not any(n.gpus for n in nodes):
            raise SettingsError(f"{s.nodes}: no node has a GPU; a replay needs GPU capacity")
        return Workload(s.pods.stem, nodes, pods)

    def _arrivals_total(self, workload: Workload, configs: Sequence[ReplayConfig]) -> int:
        per_seed = {
            c.seed: len(planned_arrivals(workload.nodes, workload.pods, c)[0]) for c in configs
        }
        return sum(per_seed[c.seed] for c in configs)


TABLE_COLUMNS = ("policy", "seed", "alloc@100", "alloc@130", "frag@80", "arrivals", "failed", "wall s", "auc",
                 "failed by size")


def _number(value: float, digits: int) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def _check_plot_target(path: Path) -> None:
    """Fail before any replay when the ``--plot`` file cannot be written (its folder is a file, say)."""
    folder = path.parent if str(path.parent) else Path(".")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if path.is_dir() or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SettingsError(f"--plot {path}: cannot be written there ({existing} is not a writable folder)")


def format_table(results: Sequence[ReplayResult], *, workload: str = "") -> str:
    """Fixed-width text table, one line per run: allocation % at x = 100 and 130, frag ratio % at x = 80
    (the ``summary.json`` points, 2 decimals; ``-`` when the run never reached that x), arrivals, failed pods,
    wall seconds, the allocation AUC (mean allocation % over x = 0..130, 2 decimals) and the failed pods by size
    class (``class:count`` for each class with failures, ``-`` for none). A heading names the workload and the
    units."""
    rows = [list(TABLE_COLUMNS)]
    for r in results:
        h = r.headline()
        rows.append([
            r.config.policy, str(r.config.seed), _number(h.alloc_at_100, 2), _number(h.alloc_at_130, 2),
            _number(h.frag_ratio_at_80, 2), str(r.arrivals), str(r.failed_pods), _number(r.wall_seconds, 2),
            _number(r.allocation_auc(), 2), _by_size(r),
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
    lines = [
        "  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))])
        for row in rows
    ]
    heading = (
        f"workload {workload}: " if workload else ""
    ) + "alloc@X = milli-GPU allocated, % of cluster GPU capacity, when X % of it has arrived; frag@80 = % of idle GPU "
    heading += "milli unusable by typical pods at X = 80; auc = mean alloc % over X = 0..130\n"
    return heading + "\n".join(lines) + "\n"


def format_preemptions(results: Sequence[ReplayResult]) -> str:
    """With high-priority arrivals: one line per run, ``policy seed: H high-priority arrivals, P placed by
    preemption, E pods evicted (M milli-GPU)``; otherwise the empty string."""
    lines = [f"{r.config.policy} seed {r.config.seed}: {r.high_arrivals} high-priority arrivals "
             f"({r.config.high_share:.0%}), {r.preemptions} placed by preemption, {r.evicted_pods} pods evicted "
             f"({r.evicted_milli} milli-GPU)\n" for r in results if r.config.high_share > 0]
    return "".join(lines)


def _by_size(result: ReplayResult) -> str:
    return ",".join(f"{cls}:{n}" for cls, n in result.failed_by_size().items() if n) or "-"


def format_regressions(results: Sequence[ReplayResult]) -> str:
    """When both fgd-plus and fgd ran on a common seed: one line per size class that fails more often under
    fgd-plus than under fgd (paired sign rule, :mod:`domain.simulation.compare`) naming the x points, or one line
    saying none does; otherwise the empty string."""
    if not paired_seeds(results, candidate=CANDIDATE_POLICY, baseline=BASELINE_POLICY):
        return ""
    found = regressions_between(results, candidate=CANDIDATE_POLICY, baseline=BASELINE_POLICY)
    prefix, rule = f"{CANDIDATE_POLICY} vs {BASELINE_POLICY}:", "fails more often on every common seed"
    if not found:
        return f"{prefix} no size class {rule}\n"
    lines: list[str] = []
    for cls in dict.fromkeys(f.size_class for f in found):
        mine = [f for f in found if f.size_class == cls]
        last = mine[-1]
        lines.append(f"{prefix} class {cls} {rule} at x = {x_ranges([f.x for f in mine])} (by x = {last.x}: "
                     f"{last.candidate_mean:.1f} vs {last.baseline_mean:.1f} pods, mean)\n")
    return "".join(lines)


def format_topology(results: Sequence[ReplayResult]) -> str:
    """On a simulated machine: one line per run, ``policy seed (machine, topology known|blind): 2-GPU pods N
    placed, P % NVLink-connected; 4-GPU …; 8-GPU …; whole NVLink islands at x = 80: F of I``; otherwise the empty
    string. ``P`` counts pods whose GPUs form one connected NVLink set (:class:`~domain.topology.Tier`)."""
    lines: list[str] = []
    for r in results:
        f = r.topology
        if f is None:
            continue
        sizes = "; ".join(f"{size}-GPU pods {f.placed(size)} placed, {f.share(size, Tier.NVLINK):.1f} % "
                          "NVLink-connected" for size in sorted(f.tiers))
        free = "-" if f.islands_free_at_80 is None else str(f.islands_free_at_80)
        known = ("topology known" if f.known else "topology blind") + (", topology first" if f.first else "")
        lines.append(f"{r.config.policy} seed {r.config.seed} ({f.machine}, {known}): {sizes}; whole NVLink "
                     f"islands at x = 80: {free} of {f.islands}\n")
    return "".join(lines)
