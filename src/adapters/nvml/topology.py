"""Read each GPU's topology (NUMA node, PCIe root, NVLink peers) through NVML and sysfs.

Calls (NVML API reference, ``nvidia-ml-py``): ``nvmlDeviceGetPciInfo`` (``busId``, e.g. ``00000000:17:00.0``),
``nvmlDeviceGetNumaNodeId`` (newer drivers; else ``/sys/bus/pci/devices/<bus id>/numa_node``, where -1 means
none), and per link ``0..NVML_NVLINK_MAX_LINKS-1``: ``nvmlDeviceGetNvLinkState`` (``NVML_FEATURE_ENABLED``),
``nvmlDeviceGetNvLinkRemotePciInfo`` and ``nvmlDeviceGetNvLinkRemoteDeviceType`` (``NVML_NVLINK_DEVICE_TYPE_SWITCH``).
A link whose remote bus id is another GPU's counts one link to that peer; links to NVSwitches make the GPU part of
the node's switch fabric, and every two GPUs on the fabric are peers (links: the listing GPU's switch links). The
PCIe root is the ``pci<domain>:<bus>`` folder above the GPU's device in ``/sys/devices`` (the resolved
``/sys/bus/pci/devices/<bus id>`` link), the form of the DRA attribute ``resource.kubernetes.io/pcieRoot``.

Failures never stop the Runtime: a value NVML or sysfs cannot give is unknown (None / empty / no peers), logged once
per GPU at debug level; the caller gets a :class:`GpuTopology` per GPU index in every case.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from domain.topology import PCIE_ROOT, GpuTopology, NvLinkPeer

log = logging.getLogger(__name__)

_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS before Blackwell; the module's value wins
_FEATURE_ENABLED = 1
_TYPE_SWITCH = 2


def sysfs_bus_id(text: object) -> str:
    """NVML's ``busId`` (``00000000:17:00.0``, bytes or str) in the sysfs form ``0000:17:00.0`` (lower case, a
    4-digit domain unless it needs more). Empty for a malformed id."""
    value = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    domain, _, rest = value.strip().rstrip("\x00").lower().rpartition(":")
    domain, _, bus = domain.rpartition(":")
    try:
        number = int(domain or "0", 16)
    except ValueError:
        return ""
    return f"{number:04x}:{bus}:{rest}" if bus and rest else ""


class TopologyReader:
    """Reads topology for the GPUs of one NVML session (module docstring). ``sysfs``: the sysfs mount (tests pass a
    folder of their own)."""

    def __init__(self, nvml: Any, sysfs: Path = Path("/sys")) -> None:
        self._nvml = nvml
        self._sysfs = sysfs

    def _const(self, name: str, default: int) -> int:
        value = getattr(self._nvml, name, default)
        return value if isinstance(value, int) else default

    def read(self, handles: Mapping[int, object]) -> dict[int, GpuTopology]:
        """A :class:`GpuTopology` per GPU index of ``handles`` (index → NVML device handle)."""
        buses = {index: self._bus_id(index, handle) for index, handle in handles.items()}
        by_bus = {bus: index for index, bus in buses.items() if bus}
        peers: dict[int, dict[int, int]] = {}
        switch_links: dict[int, int] = {}
        for index, handle in handles.items():
            peers[index], switch_links[index] = self._links(index, handle, by_bus)
        fabric = [index for index, links in switch_links.items() if links]
        for index in fabric:
            for other in fabric:
                if other != index:
                    peers[index][other] = max(peers[index].get(other, 0), switch_links[index])
        return {
            index: GpuTopology(self._numa(index, handles[index], buses[index]), self._root(buses[index]),
                               tuple(NvLinkPeer(peer, links) for peer, links in sorted(peers[index].items())))
            for index in handles
        }

    def _bus_id(self, index: int, handle: object) -> str:
        try:
            return sysfs_bus_id(self._nvml.nvmlDeviceGetPciInfo(handle).busId)
        except (self._nvml.NVMLError, AttributeError) as error:
            log.debug("GPU %d: no PCI bus id (%s); PCIe root, NUMA node and NVLink peers unknown", index, error)
            return ""

    def _numa(self, index: int, handle: object, bus: str) -> int | None:
        try:
            node = int(self._nvml.nvmlDeviceGetNumaNodeId(handle))
            return node if node >= 0 else None
        except (self._nvml.NVMLError, AttributeError) as error:
            log.debug("GPU %d: nvmlDeviceGetNumaNodeId: %s; reading sysfs", index, error)
        if not bus:
            return None
        try:
            node = int((self._sysfs / "bus" / "pci" / "devices" / bus / "numa_node").read_text().strip())
        except (OSError, ValueError) as error:
            log.debug("GPU %d: no NUMA node in sysfs (%s)", index, error)
            return None
        return node if node >= 0 else None

    def _root(self, bus: str) -> str:
        if not bus:
            return ""
        try:
            resolved = os.path.realpath(self._sysfs / "bus" / "pci" / "devices" / bus)
        except OSError:
            return ""
        return next((part for part in Path(resolved).parts if PCIE_ROOT.match(part)), "")

    def _links(self, index: int, handle: object, by_bus: Mapping[str, int]) -> tuple[dict[int, int], int]:
        nvml = self._nvml
        peers: dict[int, int] = {}
        switches = 0
        for link in range(self._const("NVML_NVLINK_MAX_LINKS", _MAX_LINKS)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != self._const("NVML_FEATURE_ENABLED", _FEATURE_ENABLED):
                    continue
                remote = sysfs_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except (nvml.NVMLError, AttributeError):
                continue  # NotSupported (no NVLink), InvalidArgument (past the GPU's links)
            peer = by_bus.get(remote)
            if peer is not None and peer != index:
                peers[peer] = peers.get(peer, 0) + 1
            elif peer is None and self._is_switch(handle, link):
                switches += 1
        return peers, switches

    def _is_switch(self, handle: object, link: int) -> bool:
        try:
            kind = self._nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except (self._nvml.NVMLError, AttributeError):
            return False
        return bool(kind == self._const("NVML_NVLINK_DEVICE_TYPE_SWITCH", _TYPE_SWITCH))
