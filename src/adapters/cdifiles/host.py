"""GPU device minors from the host NVIDIA driver (``ports.cdi.HostGpuDevices``).

The driver writes one ``<proc>/driver/nvidia/gpus/<PCI bus id>/information`` file per GPU with ``Key: value`` lines,
among them ``GPU UUID: GPU-…`` and ``Device Minor: 0`` (the N of ``/dev/nvidiaN``). ``/proc/driver`` is not
namespaced, so a container sees the host's files without a mount. Control nodes (``nvidiactl``, ``nvidia-uvm``,
``nvidia-uvm-tools``: the names ``domain.runtime.edits.CONTROL_DEVICES`` uses) are those that exist under ``dev``.
A node without the driver (simulated GPUs) has no such directory: :meth:`ProcfsGpuDevices.scan` answers empty.
"""

from __future__ import annotations

import logging
from pathlib import Path

from domain.device_plugin.cdi import HostGpuNodes
from domain.gpu import GpuUuid
from domain.runtime.edits import CONTROL_DEVICES

log = logging.getLogger(__name__)


def parse_information(text: str) -> tuple[GpuUuid, int] | None:
    """``(uuid, minor)`` from one ``information`` file's text; None when either line is missing or malformed."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    uuid, minor = fields.get("GPU UUID", ""), fields.get("Device Minor", "")
    if not uuid or not minor.isdigit():
        return None
    return GpuUuid(uuid), int(minor)


class ProcfsGpuDevices:
    """``HostGpuDevices`` over ``proc`` (default ``/proc``) and ``dev`` (default ``/dev``) (module docstring)."""

    def __init__(self, *, proc: Path = Path("/proc"), dev: Path = Path("/dev"),
                 control_devices: tuple[str, ...] = CONTROL_DEVICES) -> None:
        self._gpus = proc / "driver" / "nvidia" / "gpus"
        self._dev = dev
        self._control = control_devices

    def scan(self) -> HostGpuNodes:
        """Minors of every GPU the driver lists and the control nodes that exist; never raises (unreadable entries
        are logged and skipped)."""
        minors: dict[GpuUuid, int] = {}
        try:
            entries = sorted(self._gpus.iterdir())
        except OSError:
            entries = []  # no NVIDIA driver: simulated GPUs
        for entry in entries:
            try:
                parsed = parse_information((entry / "information").read_text())
            except OSError as error:
                log.warning("cannot read %s: %s", entry / "information", error)
                continue
            if parsed is not None:
                minors[parsed[0]] = parsed[1]
        control = tuple(name for name in self._control if (self._dev / name).exists())
        return HostGpuNodes(minors, control)
