"""The JSON form of an :class:`~domain.inspection.report.InspectionReport` (``ljrk inspect -o json``).

Layout and units (core in milli-GPU, memory in bytes, times in epoch seconds): ``docs/inspect-json.md``. Keys are
stable: changes are additive only, and ``version`` changes if a key ever changes meaning.
"""

from __future__ import annotations

from domain.inspection.compare import Disagreement
from domain.inspection.flags import Flag
from domain.inspection.quota import ClaimQuotaReport
from domain.inspection.report import GpuReport, InspectionReport, NodeReport

REPORT_VERSION = 1
"""Schema version of the JSON form."""


def _flag(flag: Flag) -> dict[str, object]:
    return {"code": flag.code, "message": flag.message}


def _disagreement(d: Disagreement) -> dict[str, object]:
    return {"node": d.node, "gpu": d.gpu, "field": d.field, "api": d.api, "scheduler": d.scheduler}


def _gpu(gpu: GpuReport) -> dict[str, object]:
    return {
        "index": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "health": gpu.health, "mig": gpu.mig,
        "memoryBytes": gpu.memory_bytes, "coreUsedMilli": gpu.core_used_milli, "corePercent": gpu.core_percent,
        "memoryUsedBytes": gpu.memory_used_bytes,
        "holders": [{"namespace": h.namespace, "pod": h.name, "container": h.container, "init": h.init,
                     "coreMilli": h.core_milli, "memoryBytes": h.memory_bytes, "source": h.source}
                    for h in gpu.holders],
        "migInstances": [{"profile": m.profile, "start": m.start, "uuid": m.uuid, "free": m.free, "holder": m.holder}
                         for m in gpu.mig_instances],
    }


def _node(node: NodeReport) -> dict[str, object]:
    return {"name": node.name, "gate": node.gate, "heartbeat": node.heartbeat, "enforcement": node.enforcement,
            "flags": [_flag(f) for f in node.flags], "gpus": [_gpu(g) for g in node.gpus],
            "pods": list(node.gpu_pods), "disagreements": [_disagreement(d) for d in node.disagreements]}


def _quota(quota: ClaimQuotaReport) -> dict[str, object]:
    return {"namespace": quota.namespace, "claims": quota.claims, "over": quota.over, "error": quota.error,
            "limits": {"cores": quota.limits.cores, "memoryBytes": quota.limits.memory_bytes},
            "used": {"cores": quota.used.cores, "memoryBytes": quota.used.memory_bytes},
            "problems": list(quota.problems)}


def report_json(report: InspectionReport) -> dict[str, object]:
    """The JSON value of ``report`` (module docstring), ready for ``json.dumps``."""
    t = report.totals
    return {
        "version": REPORT_VERSION,
        "generatedAt": report.generated_at,
        "scheduler": None if report.scheduler_serving is None else {"serving": report.scheduler_serving},
        "nodes": [_node(n) for n in report.nodes],
        "flags": [_flag(f) for f in report.flags],
        "disagreements": [_disagreement(d) for d in report.disagreements],
        "totals": {"nodes": t.nodes, "flaggedNodes": t.flagged_nodes, "gpus": t.gpus, "healthyGpus": t.healthy_gpus,
                   "migGpus": t.mig_gpus, "coreUsedMilli": t.core_used_milli,
                   "coreCapacityMilli": t.core_capacity_milli, "memoryUsedBytes": t.memory_used_bytes,
                   "memoryCapacityBytes": t.memory_capacity_bytes, "gpuPods": t.gpu_pods,
                   "migInstances": t.mig_instances, "migHeld": t.mig_held},
        "claimQuotas": [_quota(q) for q in report.claim_quotas],
        "problems": report.problems,
    }
