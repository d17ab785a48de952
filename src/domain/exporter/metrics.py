"""The exporter's metric specs and the series built from a :class:`~domain.exporter.snapshot.Snapshot`.

Naming: one prefix :data:`PREFIX`, snake_case, base units (``_bytes``, ``_ratio`` 0–1, ``_celsius``,
``_watts``, ``_seconds``, ``_total``). Labels: ``node``, ``gpu_index``, ``gpu_uuid``, ``model`` per GPU;
per-container series add ``namespace``, ``pod``, ``container``; per-node series carry ``node`` only.

Every series is rebuilt from the snapshot at each scrape, so a pod that is gone is gone at the next scrape and
the series count depends only on what exists now, never on history (failure case B20); every GPU row yields its
series whatever its allocation (B22). A value the Runtime does not know (None) yields no sample, never 0.

Extension point — to add a metric from the Runtime data, append one spec to :data:`GPU_METRICS`,
:data:`CONTAINER_METRICS` or :data:`NODE_METRICS`: a name (without the prefix), a help text and a function from
the row to the value (None = no sample). Nothing else changes: :func:`build_families` and the Prometheus
adapter render every spec in those tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import attrs

from domain.gpu import Health
from domain.runtime.types import ContainerData, ContainerGpuData, ExporterData, GpuData
from domain.units import MILLI_PER_GPU

from .snapshot import Snapshot

PREFIX = "lj_runtimekit_"
"""Prefix of every series the exporter serves."""

GPU_LABELS = ("node", "gpu_index", "gpu_uuid", "model")
CONTAINER_LABELS = (*GPU_LABELS, "namespace", "pod", "container")
NODE_LABELS = ("node",)

MetricKind = Literal["gauge", "counter"]
Value = float | None


@attrs.frozen
class GpuMetric:
    """A per-GPU gauge: ``name`` (without prefix), ``help``, ``value`` of a GPU row."""

    name: str
    help: str
    value: Callable[[GpuData], Value]


@attrs.frozen
class ContainerMetric:
    """A per-container-per-GPU gauge: ``value`` of (container row, its GPU row)."""

    name: str
    help: str
    value: Callable[[ContainerData, ContainerGpuData], Value]


@attrs.frozen
class NodeMetric:
    """A per-node gauge: ``value`` of the whole Runtime data."""

    name: str
    help: str
    value: Callable[[ExporterData], Value]


def _percent(value: float | None) -> Value:
    return None if value is None else value / 100.0


def _milli(value: int) -> float:
    return value / MILLI_PER_GPU


def _int(value: int | None) -> Value:
    return None if value is None else float(value)


def _healthy(row: GpuData) -> bool:
    return row.device.gpu.health is Health.HEALTHY


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("gpu_utilization_ratio", "GPU compute utilization, 0-1",
              lambda g: _percent(g.sample.utilization_percent)),
    GpuMetric("gpu_memory_used_bytes", "GPU memory in use, bytes", lambda g: _int(g.sample.memory_used_bytes)),
    GpuMetric("gpu_memory_total_bytes", "GPU memory size, bytes", lambda g: float(g.device.gpu.memory_bytes)),
    GpuMetric("gpu_temperature_celsius", "GPU temperature, degrees Celsius", lambda g: g.sample.temperature_celsius),
    GpuMetric("gpu_power_watts", "GPU power draw, watts", lambda g: g.sample.power_watts),
    GpuMetric("gpu_healthy", "1 when the Runtime reports the GPU healthy, else 0",
              lambda g: 1.0 if _healthy(g) else 0.0),
    GpuMetric("gpu_core_allocated_ratio", "GPU compute granted to containers, 0-1 of the GPU",
              lambda g: _milli(g.allocated_core_milli)),
    GpuMetric("gpu_memory_allocated_bytes", "GPU memory granted to containers, bytes",
              lambda g: float(g.allocated_memory_bytes)),
)
"""Per-GPU series (labels :data:`GPU_LABELS`)."""

CONTAINER_METRICS: tuple[ContainerMetric, ...] = (
    ContainerMetric("container_gpu_core_limit_ratio", "GPU compute granted to the container (its limit), 0-1",
                    lambda c, g: _milli(g.core_milli)),
    ContainerMetric("container_gpu_memory_limit_bytes", "GPU memory granted to the container (its limit), bytes",
                    lambda c, g: float(g.memory_limit_bytes)),
    ContainerMetric("container_gpu_utilization_ratio", "GPU compute the container uses, 0-1 of the GPU",
                    lambda c, g: _percent(g.utilization_percent)),
    ContainerMetric("container_gpu_memory_used_bytes", "GPU memory the container uses, bytes",
                    lambda c, g: _int(g.memory_used_bytes)),
)
"""Per-container series, one per GPU of the container (labels :data:`CONTAINER_LABELS`)."""

NODE_METRICS: tuple[NodeMetric, ...] = (
    NodeMetric("node_gpu_core_allocatable_gpus", "GPU compute the node can grant (healthy GPUs), in GPUs",
               lambda d: float(sum(1 for g in d.gpus if _healthy(g)))),
    NodeMetric("node_gpu_core_allocated_gpus", "GPU compute granted on the node, in GPUs",
               lambda d: sum(_milli(g.allocated_core_milli) for g in d.gpus)),
    NodeMetric("node_gpu_memory_allocatable_bytes", "GPU memory the node can grant (healthy GPUs), bytes",
               lambda d: float(sum(g.device.gpu.memory_bytes for g in d.gpus if _healthy(g)))),
    NodeMetric("node_gpu_memory_allocated_bytes", "GPU memory granted on the node, bytes",
               lambda d: float(sum(g.allocated_memory_bytes for g in d.gpus))),
    NodeMetric("node_gpus", "GPUs the Runtime reports", lambda d: float(len(d.gpus))),
    NodeMetric("node_containers", "Attributed containers holding GPUs", lambda d: float(len(d.containers))),
)
"""Per-node series (labels :data:`NODE_LABELS`)."""


@attrs.frozen
class Family:
    """One metric family ready to render: full ``name`` (a counter's without ``_total``: the client library
    appends it), ``help``, ``kind``, ``labels`` and ``samples`` (label values, value)."""

    name: str
    help: str
    kind: MetricKind
    labels: tuple[str, ...]
    samples: tuple[tuple[tuple[str, ...], float], ...]


def _gpu_families(node: str, data: ExporterData) -> Iterator[Family]:
    rows = [((node, str(g.device.gpu.index), g.device.gpu.uuid, g.device.gpu.model), g) for g in data.gpus]
    for spec in GPU_METRICS:
        samples = tuple((labels, v) for labels, g in rows if (v := spec.value(g)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", GPU_LABELS, samples)
    xids = tuple(((*labels, str(xid)), float(count)) for labels, g in rows
                 for xid, count in sorted(g.sample.xid_counts.items()))
    yield Family(PREFIX + "gpu_xid_errors", "XID errors the Runtime saw on the GPU since it started, by code",
                 "counter", (*GPU_LABELS, "xid"), xids)


def _container_families(node: str, data: ExporterData) -> Iterator[Family]:
    models = {g.device.gpu.uuid: g.device.gpu.model for g in data.gpus}
    rows = [
        ((node, str(g.index), g.uuid, models.get(g.uuid, ""), c.namespace, c.pod_name, c.container), c, g)
        for c in data.containers for g in c.gpus
    ]
    for spec in CONTAINER_METRICS:
        samples = tuple((labels, v) for labels, c, g in rows if (v := spec.value(c, g)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", CONTAINER_LABELS, samples)


def _exporter_families(node: str, snapshot: Snapshot, now: float) -> Iterator[Family]:
    def one(name: str, help: str, value: float, kind: MetricKind = "gauge") -> Family:
        return Family(PREFIX + name, help, kind, NODE_LABELS, (((node,), value),))

    yield one("exporter_runtime_up", "1 when the latest pull from the node Runtime succeeded, else 0",
              1.0 if snapshot.runtime_up else 0.0)
    yield one("exporter_data_stale", "1 when the series are from an older pull than the latest attempt",
              1.0 if snapshot.stale else 0.0)
    yield one("exporter_runtime_errors", "Failed pulls from the node Runtime", float(snapshot.runtime_errors),
              "counter")
    yield one("exporter_pod_resources_up", "1 when the latest kubelet pod-resources List succeeded, else 0",
              1.0 if snapshot.pod_resources_up else 0.0)
    yield one("exporter_pod_resources_errors", "Failed kubelet pod-resources List calls",
              float(snapshot.pod_resources_errors), "counter")
    age = snapshot.age_s(now)
    if age is not None:
        yield one("exporter_data_age_seconds", "Seconds since the served data was pulled", age)
    yield one("exporter_attribution_mismatched_containers",
              "Runtime container rows not served because kubelet's pod-resources lists other GPUs for the container",
              float(snapshot.attribution_mismatches))
    if snapshot.events is not None:
        yield Family(PREFIX + "exporter_events", "Kubernetes Events the exporter created on the node, by reason",
                     "counter", (*NODE_LABELS, "reason"),
                     tuple(((node, reason), float(count)) for reason, count in snapshot.events.sent))
        yield one("exporter_event_errors", "Kubernetes Events the exporter could not create (logged)",
                  float(snapshot.events.errors), "counter")


def build_data_families(data: ExporterData, *, node: str) -> Iterator[Family]:
    """The families that depend only on the Runtime's ``data``: GPU, container, then node."""
    yield from _gpu_families(node, data)
    yield from _container_families(node, data)
    for spec in NODE_METRICS:
        value = spec.value(data)
        yield Family(PREFIX + spec.name, spec.help, "gauge", NODE_LABELS, () if value is None else (((node,), value),))


def build_health_families(snapshot: Snapshot, *, node: str, now: float) -> Iterator[Family]:
    """The exporter's own health families at ``now`` (epoch seconds; data age)."""
    yield from _exporter_families(node, snapshot, now)


def build_families(snapshot: Snapshot, *, node: str, now: float) -> Iterator[Family]:
    """Every family for ``snapshot`` (module docstring): GPU, container, node, then the exporter's own health."""
    yield from build_data_families(snapshot.data, node=node)
    yield from build_health_families(snapshot, node=node, now=now)
