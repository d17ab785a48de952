"""The CDI ports of the device plugin: where the node's CDI spec is written, and what the host's NVIDIA driver offers.

:class:`CdiSpecStore`: ``write`` replaces the spec atomically (a container runtime reading the spec directory sees
the old or the new file, never a torn one); ``read`` returns the last written spec or None; ``remove`` deletes it
(idempotent). Implementations: ``adapters.cdifiles.CdiSpecDirectory`` (a JSON file in a CDI spec directory such as
``/var/run/cdi``) and ``adapters.memory.cdi.InMemoryCdiSpecStore``; ``tests/contract/test_cdi_spec_store_contract.py``
checks both.

:class:`HostGpuDevices`: ``scan`` says which GPUs the host's driver lists (UUID -> device minor) and which control
device nodes exist; a node without the driver (simulated GPUs) answers empty. Implementation:
``adapters.cdifiles.ProcfsGpuDevices``.

Both speak :mod:`domain.device_plugin.cdi` types only; errors are :class:`CdiSpecError`.
"""

from __future__ import annotations

from typing import Protocol

from domain.device_plugin.cdi import CdiSpec, HostGpuNodes

__all__ = ["CdiSpecError", "CdiSpecStore", "HostGpuDevices"]


class CdiSpecError(Exception):
    """The spec could not be written, read or removed; the message names the file."""


class CdiSpecStore(Protocol):
    """The node's one CDI spec file (module docstring)."""

    def write(self, spec: CdiSpec) -> None:
        """Replace the spec atomically. Raises :class:`CdiSpecError`."""
        ...

    def read(self) -> CdiSpec | None:
        """The spec last written (None when there is none). Raises :class:`CdiSpecError`."""
        ...

    def remove(self) -> None:
        """Delete the spec; no error when there is none. Raises :class:`CdiSpecError`."""
        ...


class HostGpuDevices(Protocol):
    """The host NVIDIA driver's view (module docstring)."""

    def scan(self) -> HostGpuNodes:
        """GPU UUID -> device minor for every GPU the driver lists, and the control nodes that exist. Never
        raises: an unreadable driver entry is skipped (its GPU then gets env edits only)."""
        ...
