"""The exporter's metric specs and the series built from a :class:`~domain.exporter.snapshot.Snapshot`.

Names, units, label sets, the MIG and missing-GPU families, and how to add a metric: ``docs/metrics.md``.
Invariants: every series is rebuilt from the snapshot at each scrape, so a pod that is gone is gone at the next scrape
and the series count depends only on what exists now (failure case B20); every GPU row yields its series whatever its
allocation, free MIG instances included (B22); a value the Runtime does not know (None) yields no sample, never 0;
the label sets of the time-sharing container families never change (MIG containers get their own families).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import attrs

from domain.gpu import Health, MigMode
from domain.runtime.types import ContainerData, ContainerGpuData, ExporterData, GpuData, MigInstanceData
from domain.units import MILLI_PER_GPU

from .snapshot import Snapshot
from .topology import topology_families_spec, topology_samples

PREFIX = "lj_runtimekit_"
"""Prefix of every series the exporter serves."""

GPU_LABELS = ("node", "gpu_index", "gpu_uuid", "model")
CONTAINER_LABELS = (*GPU_LABELS, "namespace", "pod", "container", "claim_namespace", "claim_name")
"""A container's series: its GPU, its pod and container, and the DRA claim whose grant it uses (empty for a
device-plugin container; ``domain.exporter.attribution``)."""
NODE_LABELS = ("node",)
MIG_LABELS = (*GPU_LABELS, "profile", "gpu_instance_id", "compute_instance_id", "mig_uuid")
CONTAINER_MIG_LABELS = (*GPU_LABELS, "namespace", "pod", "container", "profile", "mig_uuid")
"""A container's series on a MIG instance (no claim labels: DRA claims are not prepared on MIG devices yet)."""
NODE_MIG_LABELS = (*NODE_LABELS, "profile")

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


@attrs.frozen
class MigMetric:
    """A per-MIG-instance gauge: ``value`` of a MIG instance row."""

    name: str
    help: str
    value: Callable[[MigInstanceData], Value]


@attrs.frozen
class ContainerMigMetric:
    """A per-container-per-MIG-instance gauge: ``value`` of (container row, the row of a MIG instance it holds)."""

    name: str
    help: str
    value: Callable[[ContainerData, MigInstanceData], Value]


@attrs.frozen
class NodeMigMetric:
    """A per-node-per-profile gauge: ``value`` of the MIG instance rows of one profile."""

    name: str
    help: str
    value: Callable[[Sequence[MigInstanceData]], Value]


def _percent(value: float | None) -> Value:
    return None if value is None else value / 100.0


def _milli(value: int) -> float:
    return value / MILLI_PER_GPU


def _int(value: int | None) -> Value:
    return None if value is None else float(value)


def _healthy(row: GpuData) -> bool:
    return row.device.gpu.health is Health.HEALTHY


def _allocated(row: MigInstanceData) -> bool:
    return row.instance.owner is not None


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
    GpuMetric("gpu_mig_enabled", "1 when the GPU is in MIG mode (no time-sharing grants), else 0",
              lambda g: 1.0 if g.device.gpu.mig_mode is MigMode.ENABLED else 0.0),
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
    NodeMetric("node_gpu_core_allocatable_gpus",
               "GPU compute the node can grant (healthy GPUs not in MIG mode), in GPUs",
               lambda d: float(sum(1 for g in d.gpus if g.device.gpu.schedulable))),
    NodeMetric("node_gpu_core_allocated_gpus", "GPU compute granted on the node, in GPUs",
               lambda d: sum(_milli(g.allocated_core_milli) for g in d.gpus)),
    NodeMetric("node_gpu_memory_allocatable_bytes",
               "GPU memory the node can grant (healthy GPUs not in MIG mode), bytes",
               lambda d: float(sum(g.device.gpu.memory_bytes for g in d.gpus if g.device.gpu.schedulable))),
    NodeMetric("node_gpu_memory_allocated_bytes", "GPU memory granted on the node, bytes",
               lambda d: float(sum(g.allocated_memory_bytes for g in d.gpus))),
    NodeMetric("node_gpus", "GPUs the Runtime reports", lambda d: float(len(d.gpus))),
    NodeMetric("node_containers", "Attributed containers holding GPUs", lambda d: float(len(d.containers))),
)
"""Per-node series (labels :data:`NODE_LABELS`)."""

MIG_METRICS: tuple[MigMetric, ...] = (
    MigMetric("mig_instance_info", "1 for every MIG instance the Runtime lists, free or allocated",
              lambda m: 1.0),
    MigMetric("mig_memory_total_bytes", "MIG instance memory size, bytes",
              lambda m: float(m.instance.memory_bytes)),
    MigMetric("mig_memory_used_bytes", "MIG instance memory in use, bytes", lambda m: _int(m.memory_used_bytes)),
    MigMetric("mig_utilization_ratio", "MIG instance compute utilization, 0-1 of the instance",
              lambda m: _percent(m.utilization_percent)),
    MigMetric("mig_allocated", "1 when a live container holds the MIG instance, else 0",
              lambda m: 1.0 if _allocated(m) else 0.0),
)
"""Per-MIG-instance series, free instances included (labels :data:`MIG_LABELS`)."""

CONTAINER_MIG_METRICS: tuple[ContainerMigMetric, ...] = (
    ContainerMigMetric("container_mig_memory_limit_bytes",
                       "Memory of the MIG instance granted to the container (its limit), bytes",
                       lambda c, m: float(m.instance.memory_bytes)),
    ContainerMigMetric("container_mig_memory_used_bytes", "Memory the container uses on its MIG instance, bytes",
                       lambda c, m: _int(m.memory_used_bytes)),
    ContainerMigMetric("container_mig_utilization_ratio",
                       "Compute utilization of the container's MIG instance, 0-1 of the instance",
                       lambda c, m: _percent(m.utilization_percent)),
)
"""Per-container series, one per MIG instance of the container (labels :data:`CONTAINER_MIG_LABELS`); a MIG
instance belongs to one pod, so the instance's measurements are its container's."""

NODE_MIG_METRICS: tuple[NodeMigMetric, ...] = (
    NodeMigMetric("node_mig_instances", "MIG instances the Runtime lists on the node, by profile",
                  lambda rows: float(len(rows))),
    NodeMigMetric("node_mig_allocated_instances", "MIG instances live containers hold on the node, by profile",
                  lambda rows: float(sum(1 for m in rows if _allocated(m)))),
)
"""Per-node-per-profile series, one per profile listed on the node (labels :data:`NODE_MIG_LABELS`)."""


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


def _who(c: ContainerData) -> tuple[str, str, str, str, str]:
    """The container's labels after its GPU's: namespace, pod, container, claim namespace, claim name."""
    return c.namespace, c.pod_name, c.container, c.claim_namespace, c.claim_name


def _container_families(node: str, data: ExporterData) -> Iterator[Family]:
    models = {g.device.gpu.uuid: g.device.gpu.model for g in data.gpus}
    rows = [
        ((node, str(g.index), g.uuid, models.get(g.uuid, ""), *_who(c)), c, g)
        for c in data.containers for g in c.gpus
    ]
    for spec in CONTAINER_METRICS:
        samples = tuple((labels, v) for labels, c, g in rows if (v := spec.value(c, g)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", CONTAINER_LABELS, samples)


def _missing_families(node: str, data: ExporterData) -> Iterator[Family]:
    """GPUs containers hold that the Runtime no longer lists (module docstring, "Missing GPUs")."""
    listed = {g.device.gpu.uuid for g in data.gpus}
    held = [(c, g) for c in data.containers for g in c.gpus if g.uuid not in listed]
    gpus = sorted({(str(g.index), g.uuid) for _, g in held})
    yield Family(PREFIX + "gpu_missing", "1 for a GPU a container holds that the Runtime no longer lists (model "
                 "unknown)", "gauge", GPU_LABELS, tuple(((node, index, uuid, ""), 1.0) for index, uuid in gpus))
    yield Family(PREFIX + "container_gpu_missing", "1 for a container holding a GPU the Runtime no longer lists",
                 "gauge", CONTAINER_LABELS, tuple(((node, str(g.index), g.uuid, "", *_who(c)), 1.0)
                                                    for c, g in held))
    yield Family(PREFIX + "node_missing_gpus", "GPUs containers hold that the Runtime no longer lists", "gauge",
                 NODE_LABELS, (((node,), float(len(gpus))),))


def _mig_labels(node: str, row: MigInstanceData, model: str) -> tuple[str, ...]:
    i = row.instance
    compute = "" if i.compute_instance_id is None else str(i.compute_instance_id)
    return (node, str(i.gpu_index), i.gpu_uuid, model, i.profile, str(i.gpu_instance_id), compute, i.uuid)


def _mig_families(node: str, data: ExporterData) -> Iterator[Family]:
    models = {g.device.gpu.uuid: g.device.gpu.model for g in data.gpus}
    rows = [(_mig_labels(node, m, models.get(m.instance.gpu_uuid, "")), m) for m in data.mig]
    for spec in MIG_METRICS:
        samples = tuple((labels, v) for labels, m in rows if (v := spec.value(m)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", MIG_LABELS, samples)


def _container_mig_families(node: str, data: ExporterData) -> Iterator[Family]:
    models = {g.device.gpu.uuid: g.device.gpu.model for g in data.gpus}
    by_uuid = {m.instance.uuid: m for m in data.mig if m.instance.uuid}
    rows = [
        ((node, str(m.instance.gpu_index), m.instance.gpu_uuid, models.get(m.instance.gpu_uuid, ""), *_who(c)[:3],
          m.instance.profile, m.instance.uuid), c, m)
        for c in data.containers for u in c.mig_uuids if (m := by_uuid.get(u)) is not None
    ]
    for spec in CONTAINER_MIG_METRICS:
        samples = tuple((labels, v) for labels, c, m in rows if (v := spec.value(c, m)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", CONTAINER_MIG_LABELS, samples)


def _node_mig_families(node: str, data: ExporterData) -> Iterator[Family]:
    by_profile: dict[str, list[MigInstanceData]] = {}
    for row in data.mig:
        by_profile.setdefault(row.instance.profile, []).append(row)
    for spec in NODE_MIG_METRICS:
        samples = tuple(((node, profile), v) for profile, rows in sorted(by_profile.items())
                        if (v := spec.value(rows)) is not None)
        yield Family(PREFIX + spec.name, spec.help, "gauge", NODE_MIG_LABELS, samples)


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
    if snapshot.pod_api_errors is not None:
        yield one("exporter_pod_api_errors", "Failed Kubernetes API list or watch requests of the node's pods (which "
                  "tell ended pods apart; each retry counts)", float(snapshot.pod_api_errors), "counter")
    age = snapshot.age_s(now)
    if age is not None:
        yield one("exporter_data_age_seconds", "Seconds since the served data was pulled", age)
    yield one("exporter_attribution_mismatched_containers",
              "Runtime container rows not served because kubelet's pod-resources lists other GPUs for the container",
              float(snapshot.attribution_mismatches))
    if snapshot.enforcement:
        yield Family(PREFIX + "share_enforcement", "1 for what enforces a GPU share on the node (mode: none = "
                     "accounting only, hami-core, mps, mig, unknown = a Runtime that does not say)", "gauge",
                     (*NODE_LABELS, "mode"), (((node, snapshot.enforcement), 1.0),))
    if snapshot.events is not None:
        yield Family(PREFIX + "exporter_events", "Kubernetes Events the exporter created on the node, by reason",
                     "counter", (*NODE_LABELS, "reason"),
                     tuple(((node, reason), float(count)) for reason, count in snapshot.events.sent))
        yield one("exporter_event_errors", "Kubernetes Events the exporter could not create (logged)",
                  float(snapshot.events.errors), "counter")


def build_data_families(data: ExporterData, *, node: str) -> Iterator[Family]:
    """The families that depend only on the Runtime's ``data``: GPU, MIG instance, container, missing GPUs,
    container on MIG, then node, node MIG and the GPU topology (:mod:`domain.exporter.topology`)."""
    yield from _gpu_families(node, data)
    yield from _mig_families(node, data)
    yield from _container_families(node, data)
    yield from _missing_families(node, data)
    yield from _container_mig_families(node, data)
    for spec in NODE_METRICS:
        value = spec.value(data)
        yield Family(PREFIX + spec.name, spec.help, "gauge", NODE_LABELS, () if value is None else (((node,), value),))
    yield from _node_mig_families(node, data)
    for (name, help, labels), samples in zip(topology_families_spec(), topology_samples(data, node=node),
                                             strict=True):
        yield Family(PREFIX + name, help, "gauge", labels, samples)


def build_health_families(snapshot: Snapshot, *, node: str, now: float) -> Iterator[Family]:
    """The exporter's own health families at ``now`` (epoch seconds; data age)."""
    yield from _exporter_families(node, snapshot, now)


def build_families(snapshot: Snapshot, *, node: str, now: float) -> Iterator[Family]:
    """Every family for ``snapshot`` (module docstring): the data families (:func:`build_data_families`), then
    the exporter's own health."""
    yield from build_data_families(snapshot.data, node=node)
    yield from build_health_families(snapshot, node=node, now=now)
