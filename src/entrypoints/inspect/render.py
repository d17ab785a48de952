"""Text forms of the inspection report: the default table and ``-o wide`` (the JSON form is
:func:`domain.inspection.encode.report_json`).

Table: one row per GPU (``NODE``, ``GPU`` index, ``MODEL``, ``HEALTH``, ``CORE`` allocated in % of that GPU,
``MEMORY`` allocated/capacity in GiB, ``PODS`` holding a share of it, ``FLAGS``: the node's flag codes on its first
row); a node without GPUs gets one row of dashes. A MIG GPU shows ``mig`` as its core and the instances held of
those listed as its memory. Then the cluster totals, and one line counting the flags and disagreements that
``-o wide`` details.

Then one ``CLAIM QUOTA`` line per namespace with a DRA claim quota: cores used of the limit (percent of one GPU),
memory used of the limit (GiB), claims counted, ``OVER`` when the use exceeds a limit, or the label error.

Wide: also the GPU's ``UUID``; under each GPU its holders (``namespace/pod/container``, core %, memory GiB, where
the books took it from) and MIG instances (profile@start, UUID, holder or free); then every flag's message and
every disagreement with the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.inspection.quota import ClaimQuotaReport
from domain.inspection.report import GpuReport, InspectionReport, NodeReport
from domain.units import MILLI_PER_PERCENT, GiB


def _gib(value: int) -> str:
    return f"{value / GiB:.1f}"


def _percent(milli: int) -> str:
    value = milli / MILLI_PER_PERCENT
    return f"{value:.0f}%" if value == int(value) else f"{value:.1f}%"


def _ratio(used: int, capacity: int) -> str:
    return f"{100 * used / capacity:.1f}%" if capacity else "-"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _gpu_cells(gpu: GpuReport, *, wide: bool) -> list[str]:
    if gpu.mig:
        held = sum(1 for m in gpu.mig_instances if m.holder or m.free is False)
        core, memory = "mig", f"{held}/{len(gpu.mig_instances)} held"
    else:
        core, memory = _percent(gpu.core_used_milli), f"{_gib(gpu.memory_used_bytes)}/{_gib(gpu.memory_bytes)} GiB"
    pods = len({h.pod_key for h in gpu.holders} | {m.holder.rsplit("/", 1)[0] for m in gpu.mig_instances if m.holder})
    cells = [str(gpu.index), gpu.model, gpu.health, core, memory, str(pods)]
    return cells[:1] + ([gpu.uuid] if wide else []) + cells[1:]


def _details(gpu: GpuReport) -> list[str]:
    lines = [f"{h.pod_key}/{h.container}{' (init)' if h.init else ''}  {_percent(h.core_milli)}  "
             f"{_gib(h.memory_bytes)} GiB  {h.source}" for h in gpu.holders]
    for m in gpu.mig_instances:
        state = f"held by {m.holder}" if m.holder else ("free" if m.free else "to be created" if m.free is None
                                                         else "held by no pod the books count")
        lines.append(f"mig {m.profile}@{m.start}  {m.uuid or '-'}  {state}")
    return lines


def _node_rows(node: NodeReport, *, wide: bool) -> list[tuple[list[str], list[str]]]:
    flags = ",".join(dict.fromkeys(f.code for f in node.flags)) or "-"
    if not node.gpus:
        blank = ["-"] * (7 if wide else 6)
        return [([node.name, *blank, flags], [])]
    return [([node.name if i == 0 else "", *_gpu_cells(g, wide=wide), flags if i == 0 else ""],
             _details(g) if wide else []) for i, g in enumerate(node.gpus)]


def totals_line(report: InspectionReport) -> str:
    """``TOTAL  4 nodes (1 flagged), 8 GPUs (8 healthy, 0 MIG): core 160% of 800% (20.0%), memory …``."""
    t = report.totals
    line = (f"TOTAL  {t.nodes} nodes ({t.flagged_nodes} flagged), {t.gpus} GPUs ({t.healthy_gpus} healthy, "
            f"{t.mig_gpus} MIG): core {_percent(t.core_used_milli)} of {_percent(t.core_capacity_milli)} "
            f"({_ratio(t.core_used_milli, t.core_capacity_milli)}), memory {_gib(t.memory_used_bytes)}/"
            f"{_gib(t.memory_capacity_bytes)} GiB ({_ratio(t.memory_used_bytes, t.memory_capacity_bytes)}), "
            f"{t.gpu_pods} GPU pods")
    if t.mig_gpus:
        line += f", MIG instances {t.mig_held}/{t.mig_instances} held"
    return line


ENFORCEMENT_MEANING = {"none": "accounting only", "unknown": "not stated by the node's Runtime"}
"""What an enforcement mode means for a share, where its name does not say it."""


def enforcement_line(report: InspectionReport) -> str:
    """``ENFORCEMENT  hami-core: 3 nodes; none (accounting only): 1 node (node-d)`` — what holds a pod to its
    share, per mode (node names listed for the modes without enforcement)."""
    modes: dict[str, list[str]] = {}
    for node in report.nodes:
        modes.setdefault(node.enforcement, []).append(node.name)
    parts = []
    for mode, names in sorted(modes.items()):
        meaning = f" ({ENFORCEMENT_MEANING[mode]})" if mode in ENFORCEMENT_MEANING else ""
        listed = f" ({', '.join(names)})" if mode in ENFORCEMENT_MEANING else ""
        parts.append(f"{mode}{meaning}: {len(names)} node{'s' if len(names) != 1 else ''}{listed}")
    return "ENFORCEMENT  " + "; ".join(parts)


def quota_line(quota: ClaimQuotaReport) -> str:
    """``CLAIM QUOTA  team-a: cores 120/150, memory 48.0/64.0 GiB, 3 claims`` (``-`` for no limit)."""
    if quota.error:
        return f"CLAIM QUOTA  {quota.namespace}: invalid label ({quota.error}); allocations there are refused"
    limits, used = quota.limits, quota.used
    cores = "-" if limits.cores is None else str(limits.cores)
    memory = "-" if limits.memory_bytes is None else _gib(limits.memory_bytes)
    line = (f"CLAIM QUOTA  {quota.namespace}: cores {used.cores}/{cores}, memory {_gib(used.memory_bytes)}/{memory} "
            f"GiB, {quota.claims} claim{'s' if quota.claims != 1 else ''}")
    return line + (" OVER" if quota.over else "")


def render(report: InspectionReport, *, wide: bool = False) -> str:
    """The table (module docstring), ``wide`` for ``-o wide``; ends with a newline."""
    header = ["NODE", "GPU", *(["UUID"] if wide else []), "MODEL", "HEALTH", "CORE", "MEMORY", "PODS", "FLAGS"]
    entries = [row for node in report.nodes for row in _node_rows(node, wide=wide)]
    lines = _columns([header, *(cells for cells, _ in entries)])
    out = [lines[0]]
    indent = " " * (lines[0].index("GPU") + 2)  # details sit under the GPU column
    for text, (_, details) in zip(lines[1:], entries, strict=True):
        out.append(text)
        out += [f"{indent}{d}" for d in details]
    if not report.nodes:
        out.append("(no nodes)")
    out.append(totals_line(report))
    if report.nodes:
        out.append(enforcement_line(report))
    for quota in report.claim_quotas:
        out.append(quota_line(quota))
        if wide:
            out += [f"  {problem}" for problem in quota.problems]
    if report.scheduler_serving is not None:
        agree = "agrees" if not report.disagreements else f"disagrees on {len(report.disagreements)} item(s)"
        out.append(f"SCHEDULER  {'serving' if report.scheduler_serving else 'not serving'}, {agree}")
    flags = [(n.name, f) for n in report.nodes for f in n.flags] + [("cluster", f) for f in report.flags]
    if wide:
        if flags:
            out += ["", "FLAGS", *(f"  {where}: {f.code}: {f.message}" for where, f in flags)]
        if report.disagreements:
            out += ["", "DISAGREEMENTS (API objects vs scheduler)"]
            out += [f"  {d.describe()}" for d in report.disagreements]
    elif flags or report.disagreements:
        out.append(f"{len(flags)} flag(s), {len(report.disagreements)} disagreement(s): -o wide for details")
    return "\n".join(out) + "\n"
