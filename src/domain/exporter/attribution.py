"""Attribution of the Runtime's container rows to live pods via the kubelet pod-resources API v1 ``List``.

Kubelet is the authority on which containers exist: a Runtime allocation record outlives its pod until the
device plugin or a resync releases it, so a container row is kept only when pod-resources still lists the
same (namespace, pod, container) — a terminated pod's series vanish at the next scrape even when the Runtime
still reports it (failure case B20). GPU rows are never filtered: every GPU is reported, idle or not (B22).

Device IDs of our resources embed the GPU UUID as ``<uuid>::<kind>::<n>`` (``domain.deviceplugin.devices``);
:func:`device_uuid` reads it back, and :class:`PodContainerDevices` keeps the UUIDs it names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from domain.gpu import GpuUuid
from domain.runtime.types import ExporterData

DEVICE_ID_SEPARATOR = "::"
"""Separator of the fields of our device IDs (``<uuid>::<kind>::<n>``)."""


def device_uuid(device_id: str) -> GpuUuid | None:
    """The GPU UUID a device ID embeds, or None for a device ID that is not ours (no separator, empty UUID)."""
    uuid, separator, _ = device_id.partition(DEVICE_ID_SEPARATOR)
    return GpuUuid(uuid) if separator and uuid else None


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class PodContainerDevices:
    """One container as pod-resources lists it: ``namespace``, ``pod``, ``container`` and the ``device_ids`` it
    holds (all resources)."""

    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(namespace, pod, container)``."""
        return (self.namespace, self.pod, self.container)

    @property
    def gpu_uuids(self) -> frozenset[GpuUuid]:
        """The GPU UUIDs embedded in ``device_ids`` (foreign device IDs ignored)."""
        return frozenset(u for u in map(device_uuid, self.device_ids) if u is not None)


def attribute(data: ExporterData, listed: Sequence[PodContainerDevices] | None) -> ExporterData:
    """``data`` with only the container rows pod-resources lists (module docstring); ``listed=None`` (no
    pod-resources socket configured) keeps every row."""
    if listed is None:
        return data
    live = {entry.key for entry in listed}
    kept = tuple(c for c in data.containers if (c.namespace, c.pod_name, c.container) in live)
    return data if len(kept) == len(data.containers) else attrs.evolve(data, containers=kept)
