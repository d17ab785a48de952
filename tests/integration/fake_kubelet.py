"""The fake kubelet of the device-plugin tests: the production kubelet emulator's device manager
(:class:`adapters.grpc.kubelet_emulator.DeviceManager`) plus one test-only helper.

Everything kubelet does — Registration with dial-back and GetDevicePluginOptions before the reply, ListAndWatch per
resource, replaced endpoints, :meth:`restart` wiping sockets, :meth:`cut_stream`, :meth:`preferred` and
:meth:`allocate` — comes from the emulator. :meth:`FakeKubelet.admit` picks ``size`` IDs of one resource like kubelet
(:func:`~adapters.grpc.kubelet_emulator.pick_devices`) and Allocates them *without a pod*, so the tests can drive
Allocate calls one resource at a time; those IDs are kept in :attr:`FakeKubelet.allocated` (cleared by a restart).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from adapters.grpc.kubelet_emulator import AdmissionError, DeviceManager, PreferredFn, pick_devices
from domain.runtime.types import ContainerAllocationResponse


class FakeKubelet(DeviceManager):
    """A :class:`DeviceManager` on ``plugin_dir`` with pod-less allocation for tests (module docstring)."""

    def __init__(self, plugin_dir: Path, *, cdi_dir: Path | None = None) -> None:
        super().__init__(plugin_dir, cdi_dir=cdi_dir)
        self.allocated: dict[str, set[str]] = {}

    def restart(self, down_s: float = 0.0) -> None:
        """A kubelet restart (down for ``down_s`` seconds); also forgets the pod-less allocations."""
        super().restart(down_s)
        self.allocated.clear()

    def admit(self, resource: str, size: int) -> tuple[list[str], ContainerAllocationResponse]:
        """Pick ``size`` free healthy IDs like kubelet (preferred allocation first) and Allocate them. Raises
        RuntimeError (kubelet's "requested number of devices unavailable"), grpc.RpcError (the plugin refused)."""
        taken = self.allocated.setdefault(resource, set()) | self.allocated_devices().get(resource, frozenset())
        free = [i for i in self.healthy(resource) if i not in taken]

        def ask(available: Sequence[str], must: Sequence[str], count: int) -> list[str]:
            return self.preferred(resource, available, must, count)

        offers = self.endpoint(resource).options.get_preferred_allocation_available
        preferred: PreferredFn | None = ask if offers else None
        try:
            chosen = pick_devices(resource=resource, required=size, reusable=[], available=free, preferred=preferred)
        except AdmissionError as error:
            raise RuntimeError(str(error)) from None
        response = self.allocate(resource, chosen)
        self.allocated[resource].update(chosen)
        return chosen, response
