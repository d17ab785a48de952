"""Scheduler metrics on prometheus-client (adapters.prometheus).

Covers: per-GPU allocatable/allocated series come from the ledger at scrape time (a released pod and a removed
node disappear at the next scrape); decisions and failures are counted by result and reason; drift repairs and
leadership are exposed; names follow Prometheus conventions (base units, _total).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.ledger import ClusterLedger
from domain.units import GiB


def samples(metrics: PrometheusSchedulerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_ledger_series_follow_the_ledger_at_scrape_time() -> None:
    node = NodeInventory(NodeName("n1"), (Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GiB),), cpu_milli=8000,
                         memory_bytes=64 * GiB)
    ledger = ClusterLedger([node])
    metrics = PrometheusSchedulerMetrics()
    metrics.watch_ledger(lambda: [(n, g) for n in ledger.node_names() for g in ledger.gpus(n)])
    ledger.reserve(PodAllocation("p", "n1", (ContainerGrant("c", (GpuGrant(0, 600, 8 * GiB),)),)))
    labels = (("gpu_index", "0"), ("gpu_uuid", "GPU-0"), ("model", "A100"), ("node", "n1"))
    got = samples(metrics)
    assert got[("lj_runtimekit_scheduler_gpu_core_allocated_milli", labels)] == 600
    assert got[("lj_runtimekit_scheduler_gpu_memory_allocated_bytes", labels)] == 8 * GiB
    assert got[("lj_runtimekit_scheduler_gpu_core_allocatable_milli", labels)] == 1000
    ledger.release("p")
    assert samples(metrics)[("lj_runtimekit_scheduler_gpu_core_allocated_milli", labels)] == 0
    ledger.remove_node("n1")
    assert not any(name.startswith("lj_runtimekit_scheduler_gpu_") for name, _ in samples(metrics))


def test_decisions_failures_drift_and_leader_are_counted() -> None:
    metrics = PrometheusSchedulerMetrics()
    metrics.decision(scheduled=True)
    metrics.decision(scheduled=False, reason="invalid-request")
    metrics.decision(scheduled=False, reason="invalid-request")
    metrics.drift_repaired(3)
    metrics.set_leader(True)
    got = samples(metrics)
    assert got[("lj_runtimekit_scheduler_decisions_total", (("result", "scheduled"),))] == 1
    assert got[("lj_runtimekit_scheduler_decisions_total", (("result", "unschedulable"),))] == 2
    assert got[("lj_runtimekit_scheduler_failures_total", (("reason", "invalid-request"),))] == 2
    assert got[("lj_runtimekit_scheduler_drift_repairs_total", ())] == 3
    assert got[("lj_runtimekit_scheduler_leader", ())] == 1
