"""Attribution of the Runtime's container rows to live pods via the kubelet pod-resources API v1 ``List``.

Kubelet is the authority on which containers exist: a Runtime allocation record outlives its pod until the
device plugin or a resync releases it, so a container row is kept only when pod-resources still lists the
same (namespace, pod, container) — a terminated pod's series vanish at the next scrape even when the Runtime
still reports it (failure case B20). GPU rows are never filtered: every GPU is reported, idle or not (B22).

Device IDs of our resources embed the GPU UUID as ``<uuid>::<kind>::<n>`` (``domain.device_plugin.devices``), those
of MIG resources the parent GPU's UUID as ``<uuid>::mig-<profile>::<gpu instance id>``; :func:`device_uuid` reads
the UUID back from either, and :class:`PodContainerDevices` keeps the UUIDs it names.

DRA claims (``docs/dra.md``): the Runtime records a claim's grant as pod = the claim (claim UID, namespace, name)
with container :data:`~domain.dra.claims.CLAIM_CONTAINER`. Pod-resources lists, per container, the claims it uses
(``dynamic_resources``: claim namespace and name, kubelet 1.27+, filled by default from 1.34). Such a row is
served once for every listed container that uses the claim, with that container's namespace, pod and container
names and the claim's in ``claim_namespace``/``claim_name`` (its ``pod_uid`` stays the claim's UID); a claim no
listed container uses (its pods ended, the claim not yet unprepared) is not served. Several containers sharing one
claim each show the claim's whole grant and usage (the Runtime measures the claim, not its users): aggregate by the
claim labels, not by pod, to count it once. The GPU cross-check below does not apply to claim rows (pod-resources
names their devices by DRA device name, not by our device IDs). Without pod-resources a claim's row is served as
the Runtime has it, with the claim labels set.

MIG instances (``ExporterData.mig``) are never filtered either: free ones are reported too (B22). An instance is
served as held (its ``owner`` kept) only while a container row pod-resources lists names its MIG UUID; otherwise
its owner is cleared, so the instance of a terminated pod is reported free at the next scrape even when the Runtime
has not released it yet (B20).

GPU cross-check: when pod-resources lists device IDs of ours for a container, every GPU of the Runtime's row for
that container (its time-sharing GPUs and the parent GPUs of its MIG instances) must be among the UUIDs those IDs
embed. A row that fails the check (the Runtime and kubelet disagree on which GPU the container holds, e.g. the
device plugin was handed IDs of another GPU) is not served — neither source is guessed right — and is reported as an
:class:`AttributionMismatch` instead. A container whose listed device IDs are all foreign (another vendor's
resource) or that lists none is kept by name alone: kubelet then says nothing about our GPUs. A rejected container
still exists for kubelet, so its MIG instances stay held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from domain.dra.claims import CLAIM_CONTAINER
from domain.gpu import GpuUuid
from domain.runtime.types import ContainerData, ExporterData, MigInstanceData

DEVICE_ID_SEPARATOR = "::"
"""Separator of the fields of our device IDs (``<uuid>::<kind>::<n>``, ``<uuid>::mig-<profile>::<gi id>``)."""


def device_uuid(device_id: str) -> GpuUuid | None:
    """The GPU UUID a device ID embeds (the parent GPU's for a MIG device ID), or None for a device ID that is not
    ours (no separator, empty UUID)."""
    uuid, separator, _ = device_id.partition(DEVICE_ID_SEPARATOR)
    return GpuUuid(uuid) if separator and uuid else None


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _claim_tuple(values: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(namespace), str(name)) for namespace, name in values)


@attrs.frozen
class PodContainerDevices:
    """One container as pod-resources lists it: ``namespace``, ``pod``, ``container``, the ``device_ids`` it
    holds (all resources) and the DRA ``claims`` it uses, as (claim namespace, claim name), all drivers."""

    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    claims: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_claim_tuple)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(namespace, pod, container)``."""
        return (self.namespace, self.pod, self.container)

    @property
    def gpu_uuids(self) -> frozenset[GpuUuid]:
        """The GPU UUIDs embedded in ``device_ids`` (foreign device IDs ignored)."""
        return frozenset(u for u in map(device_uuid, self.device_ids) if u is not None)


@attrs.frozen
class AttributionMismatch:
    """A Runtime container row whose GPUs pod-resources contradicts: ``namespace``, ``pod``, ``container``,
    ``runtime_uuids`` (the GPUs of the Runtime's row) and ``listed_uuids`` (the GPUs its listed device IDs
    embed), both sorted."""

    namespace: str
    pod: str
    container: str
    runtime_uuids: tuple[GpuUuid, ...]
    listed_uuids: tuple[GpuUuid, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        """``(namespace, pod, container)``."""
        return (self.namespace, self.pod, self.container)

    def describe(self) -> str:
        """One line for a log: the container and both GPU sets."""
        return (f"{self.namespace}/{self.pod}/{self.container}: the Runtime records GPU(s) "
                f"{', '.join(self.runtime_uuids) or '-'}, kubelet lists device IDs of {', '.join(self.listed_uuids)}")


@attrs.frozen
class Attribution:
    """The result of :func:`attribute_checked`: the filtered ``data`` and the rows dropped by the GPU
    cross-check (``mismatches``, in Runtime row order)."""

    data: ExporterData
    mismatches: tuple[AttributionMismatch, ...] = ()


def attribute_checked(data: ExporterData, listed: Sequence[PodContainerDevices] | None) -> Attribution:
    """``data`` with only the container rows pod-resources lists and confirms, and MIG owners only where a listed
    row holds the instance (module docstring), plus the rows the GPU cross-check rejected. ``listed=None`` (no
    pod-resources socket configured) keeps every row and owner. A container listed twice counts the GPUs of both
    entries. Never raises."""
    if listed is None:
        if not any(row.container == CLAIM_CONTAINER for row in data.containers):
            return Attribution(data)
        rows = tuple(_as_claim(row) if row.container == CLAIM_CONTAINER else row for row in data.containers)
        return Attribution(attrs.evolve(data, containers=rows))
    live: dict[tuple[str, str, str], frozenset[GpuUuid]] = {}
    users: dict[tuple[str, str], dict[tuple[str, str, str], None]] = {}  # claim → its containers, listed order
    for entry in listed:
        live[entry.key] = live.get(entry.key, frozenset()) | entry.gpu_uuids
        for claim in entry.claims:
            users.setdefault(claim, {})[entry.key] = None
    mig_gpus = {m.instance.uuid: m.instance.gpu_uuid for m in data.mig if m.instance.uuid}
    kept: list[ContainerData] = []
    mismatches: list[AttributionMismatch] = []
    held: set[str] = set()
    changed = False
    for row in data.containers:
        if row.container == CLAIM_CONTAINER:
            changed = True
            for namespace, pod, container in users.get((row.namespace, row.pod_name), {}):
                held.update(row.mig_uuids)
                kept.append(attrs.evolve(_as_claim(row), namespace=namespace, pod_name=pod, container=container))
            continue
        key = (row.namespace, row.pod_name, row.container)
        if key not in live:
            continue
        held.update(row.mig_uuids)
        ours = live[key]
        runtime_uuids = frozenset(g.uuid for g in row.gpus) | {mig_gpus[u] for u in row.mig_uuids if u in mig_gpus}
        if ours and not runtime_uuids <= ours:
            mismatches.append(AttributionMismatch(*key, tuple(sorted(runtime_uuids)), tuple(sorted(ours))))
            continue
        kept.append(row)
    mig = _held_only(data.mig, held)
    if not changed and len(kept) == len(data.containers) and mig is data.mig:
        return Attribution(data)
    return Attribution(attrs.evolve(data, containers=tuple(kept), mig=mig), tuple(mismatches))


def _as_claim(row: ContainerData) -> ContainerData:
    """A claim's Runtime row (pod = the claim) with the claim labels set."""
    return attrs.evolve(row, claim_namespace=row.namespace, claim_name=row.pod_name)


def _held_only(rows: tuple[MigInstanceData, ...], held: set[str]) -> tuple[MigInstanceData, ...]:
    """``rows`` with the owner cleared where no listed container holds the instance (``rows`` itself when none)."""
    if all(r.instance.owner is None or r.instance.uuid in held for r in rows):
        return rows
    return tuple(
        r if r.instance.owner is None or r.instance.uuid in held
        else attrs.evolve(r, instance=attrs.evolve(r.instance, owner=None))
        for r in rows
    )


def attribute(data: ExporterData, listed: Sequence[PodContainerDevices] | None) -> ExporterData:
    """``data`` with only the container rows pod-resources lists and confirms: :func:`attribute_checked`
    without the mismatch report. ``listed=None`` keeps every row."""
    return attribute_checked(data, listed).data
