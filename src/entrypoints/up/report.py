"""The end-of-run report of ``ljrk up``: a table on stdout and ``report.json`` in the output folder.

``report.json`` keys (times in seconds, core in milli-GPU, memory in bytes):

* ``settings``: nodes, GPUs per node, workload, pods, arrival window, speedup, seed, policy, cluster;
* ``timing``: ``startup_s`` (until every node takes pods), ``arrivals_s``, ``settle_s`` (arrivals done → quiescent
  point), ``wall_s`` (first arrival → quiescent point), ``pods_per_s`` (pods placed ÷ ``wall_s``), ``total_s``;
* ``pods``: counts ``submitted``, ``placed`` (bound to a node), ``running``, ``succeeded``, ``failed``, ``pending``
  (never bound), and ``pending_by_reason`` / ``failed_by_reason`` (reason → count; the scheduler's last
  ``FailedScheduling`` message, kubelet's rejection reason);
* ``gpus``: per GPU the scheduler ledger's capacity and allocation;
* ``endpoints``: the ``/metrics`` URLs of the scheduler, the controller, every exporter and every device plugin;
* ``agreement``: ``settled`` (a quiescent point was reached), ``in_flight`` (what still moved otherwise),
  ``gpus_compared``, ``containers_compared`` and ``disagreements`` (:class:`~.agreement.Disagreement` as JSON);
* ``components``: per node the kubelet emulator's counts and the Runtime records released; the toggle Jobs run.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import attrs

from domain.kube.objects import ClusterEvent, PodObject, PodPhase
from domain.ledger import GpuUsage
from domain.units import MILLI_PER_GPU, GiB

from .agreement import Disagreement

REPORT_FILE = "report.json"


@attrs.frozen
class PodSummary:
    """Counts over the workload's pods and the reasons of the pending and failed ones (reason → count)."""

    submitted: int = 0
    placed: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    pending: int = 0
    pending_by_reason: Mapping[str, int] = attrs.field(factory=dict)
    failed_by_reason: Mapping[str, int] = attrs.field(factory=dict)


def summarize_pods(pods: Sequence[PodObject], *, submitted: int,
                   last_event: Mapping[str, ClusterEvent | None]) -> PodSummary:
    """:class:`PodSummary` of ``pods`` (the workload's pods as listed now); ``last_event``: pod key → the latest
    Event about it (the scheduler's or kubelet's)."""
    phases = Counter(p.phase for p in pods)
    pending: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for pod in pods:
        event = last_event.get(pod.key)
        if pod.phase is PodPhase.PENDING and not pod.node_name:
            reason = event.message if event is not None and event.reason == "FailedScheduling" else "not attempted"
            pending[reason] += 1
        elif pod.phase is PodPhase.FAILED:
            reason = event.reason if event is not None and event.type == "Warning" else "unknown"
            failed[reason] += 1
    return PodSummary(
        submitted=submitted, placed=sum(1 for p in pods if p.node_name), running=phases[PodPhase.RUNNING],
        succeeded=phases[PodPhase.SUCCEEDED], failed=phases[PodPhase.FAILED],
        pending=sum(1 for p in pods if p.phase is PodPhase.PENDING and not p.node_name),
        pending_by_reason=dict(pending.most_common()), failed_by_reason=dict(failed.most_common()),
    )


@attrs.frozen
class Timing:
    """Seconds: ``startup_s``, ``arrivals_s``, ``settle_s``, ``total_s``; ``wall_s`` = arrivals + settle."""

    startup_s: float = 0.0
    arrivals_s: float = 0.0
    settle_s: float = 0.0
    total_s: float = 0.0

    @property
    def wall_s(self) -> float:
        """First arrival → quiescent point, seconds."""
        return self.arrivals_s + self.settle_s


@attrs.frozen
class Report:
    """Everything the run reports (module docstring)."""

    settings: Mapping[str, object]
    timing: Timing
    pods: PodSummary
    gpus: Mapping[str, Sequence[GpuUsage]]
    endpoints: Mapping[str, object]
    settled: bool
    in_flight: Sequence[str]
    disagreements: Sequence[Disagreement]
    gpus_compared: int
    containers_compared: int
    components: Mapping[str, object]

    @property
    def pods_per_s(self) -> float:
        """Pods placed per second of :attr:`Timing.wall_s` (0 when no time passed)."""
        return self.pods.placed / self.timing.wall_s if self.timing.wall_s > 0 else 0.0

    @property
    def agrees(self) -> bool:
        """True when the run settled and no disagreement was found."""
        return self.settled and not self.disagreements

    def to_json(self) -> dict[str, object]:
        """The ``report.json`` document (module docstring)."""
        timing = self.timing
        return {
            "settings": dict(self.settings),
            "timing": {"startup_s": round(timing.startup_s, 3), "arrivals_s": round(timing.arrivals_s, 3),
                       "settle_s": round(timing.settle_s, 3), "wall_s": round(timing.wall_s, 3),
                       "pods_per_s": round(self.pods_per_s, 2), "total_s": round(timing.total_s, 3)},
            "pods": attrs.asdict(self.pods),
            "gpus": [{"node": node, "index": g.index, "uuid": g.uuid, "model": g.model,
                      "core_capacity_milli": g.core_capacity, "core_allocated_milli": g.core_used,
                      "memory_capacity_bytes": g.memory_capacity, "memory_allocated_bytes": g.memory_used,
                      "schedulable": g.schedulable}
                     for node, gpus in self.gpus.items() for g in gpus],
            "endpoints": dict(self.endpoints),
            "agreement": {"settled": self.settled, "in_flight": list(self.in_flight),
                          "gpus_compared": self.gpus_compared, "containers_compared": self.containers_compared,
                          "disagreements": [d.to_json() for d in self.disagreements]},
            "components": dict(self.components),
        }


def write_json(report: Report, output_dir: Path) -> Path:
    """Write ``<output_dir>/report.json`` (folders created); returns its path. Raises OSError."""
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / REPORT_FILE
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return path


REASON_WIDTH = 110
"""Characters of a pending or failure reason per line of the text report; longer reasons wrap."""


def _reasons(title: str, reasons: Mapping[str, int], out: TextIO, *, limit: int = 8) -> None:
    print(title, file=out)
    if not reasons:
        print("  (none)", file=out)
        return
    for reason, count in list(reasons.items())[:limit]:
        lines = textwrap.wrap(reason, REASON_WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
        print(f"  {count:>5}  {lines[0]}", file=out)
        for line in lines[1:]:  # a long reason wraps: nothing of it is cut
            print(f"         {line}", file=out)
    if len(reasons) > limit:
        print(f"  … {len(reasons) - limit} more reasons in the JSON report", file=out)


def render(report: Report, out: TextIO, *, json_path: Path | None = None) -> None:
    """The report as text tables on ``out``."""
    settings, pods, timing = report.settings, report.pods, report.timing
    print(f"ljrk up: {settings.get('nodes')} node(s) x {settings.get('gpus_per_node')}, workload "
          f"{settings.get('workload')} ({settings.get('pods')} pods, arrivals over {settings.get('duration_s')} s, "
          f"speedup {float(str(settings.get('speedup', 1))):g}x), policy {settings.get('policy')}, "
          f"cluster {settings.get('cluster')}", file=out)
    print(file=out)
    header = ("submitted", "placed", "running", "succeeded", "failed", "pending")
    values = (pods.submitted, pods.placed, pods.running, pods.succeeded, pods.failed, pods.pending)
    print("pods  " + "  ".join(f"{h:>9}" for h in header), file=out)
    print("      " + "  ".join(f"{v:>9}" for v in values), file=out)
    _reasons("pending by reason (the scheduler's last FailedScheduling event):", pods.pending_by_reason, out)
    _reasons("failed by reason (kubelet):", pods.failed_by_reason, out)
    print(file=out)
    print("GPU allocation (scheduler ledger)", file=out)
    width = max([4, *(len(node) for node in report.gpus)])
    print(f"  {'node':<{width}}  gpu  {'model':<14}  {'core':>6}  {'memory (GiB)':>14}", file=out)
    for node, gpus in report.gpus.items():
        for g in gpus:
            core = f"{100 * g.core_used / MILLI_PER_GPU:.0f} %"
            memory = f"{g.memory_used / GiB:.1f}/{g.memory_capacity / GiB:.1f}"
            print(f"  {node:<{width}}  {g.index:>3}  {g.model[:14]:<14}  {core:>6}  {memory:>14}", file=out)
    print(file=out)
    endpoints = report.endpoints
    print("metrics endpoints (up while the stack runs; --hold keeps it running after the report)", file=out)
    print(f"  {'scheduler':<13} {endpoints.get('scheduler')}", file=out)
    print(f"  {'controller':<13} {endpoints.get('controller')}", file=out)
    for key, what in (("exporters", "exporter"), ("device_plugins", "device plugin")):
        urls = endpoints.get(key)
        if isinstance(urls, Mapping):
            for node, url in urls.items():
                if url:  # none with --dra: no device plugin runs
                    print(f"  {what:<13} {url}  ({node})", file=out)
    print(file=out)
    compared = f"{report.gpus_compared} GPUs, {report.containers_compared} container grants compared"
    if report.agrees:
        print(f"agreement (ledger = Runtime records = exporter /metrics, at a quiescent point): OK, {compared}",
              file=out)
    else:
        print(f"agreement: {len(report.disagreements)} DISAGREEMENT(S), {compared}"
              + ("" if report.settled else f"; not settled: {'; '.join(report.in_flight)}"), file=out)
        for disagreement in report.disagreements[:20]:
            print(f"  {disagreement.describe()}", file=out)
        if len(report.disagreements) > 20:
            print(f"  … {len(report.disagreements) - 20} more in the JSON report", file=out)
    print(f"time: startup {timing.startup_s:.1f} s, arrivals {timing.arrivals_s:.1f} s, settle "
          f"{timing.settle_s:.1f} s, total {timing.total_s:.1f} s; {pods.placed} pods placed in {timing.wall_s:.1f} s "
          f"({report.pods_per_s:.1f} pods/s)", file=out)
    if json_path is not None:
        print(f"report: {json_path}", file=out)
