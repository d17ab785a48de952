"""The GPU backend port: where the reference Runtime gets its GPUs, measurements and health from.

Implementations: ``adapters.nvml.NvmlGpuBackend`` (real GPUs through NVML) and
``adapters.simulated.SimulatedGpuBackend`` (deterministic fake GPUs for tests, demos and the local cluster).
Speaks domain types only; no NVML handle ever crosses it. ``tests/contract/test_gpu_backend_contract.py`` checks
the behaviour below against the simulated backend, NVML over a fake ``pynvml`` and (marker ``gpu``) real NVML.

MIG: ``devices`` lists each MIG GPU's instances (unowned: the Runtime adds owners from its records);
``create_mig_instance`` / ``destroy_mig_instance`` change the layout for the dynamic strategy, each all or nothing
(a GPU instance whose compute instance cannot be created is destroyed again before the error is raised); they make
every backend the :class:`domain.runtime.mig.MigDriver` that Allocate creates instances through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from domain.gpu import GpuUuid
from domain.runtime.mig import MigDriver
from domain.runtime.types import ContainerAllocation, DeviceInfo, HealthChange, UsageSample


class GpuBackendError(Exception):
    """A backend operation failed; the message names the GPU and the call."""


class GpuBackendUnavailableError(GpuBackendError):
    """The backend cannot start on this node (no NVML library, no driver): choose another backend."""


class GpuBackend(MigDriver, Protocol):
    """Inventory, usage samples and health events of the node's GPUs."""

    @property
    def name(self) -> str:
        """Short backend name reported by GetVersion (``nvml``, ``simulated``)."""
        ...

    def devices(self) -> tuple[DeviceInfo, ...]:
        """Every GPU in index order with current health; a GPU in MIG mode with its instances (by start, owner
        None). A MIG listing that fails for one GPU leaves that GPU's instances empty. Raises
        :class:`GpuBackendError`."""
        ...

    def device_minors(self) -> Mapping[GpuUuid, int]:
        """Device minor number (``/dev/nvidia<minor>``) per GPU UUID; GPUs whose number is unknown are absent.
        Runtime-internal (not part of the gRPC contract); used for Allocate's device specs."""
        ...

    def sample(self, allocations: Sequence[ContainerAllocation]) -> UsageSample:
        """Measure every GPU, every MIG instance (``UsageSample.mig``), and the containers of ``allocations`` where
        use can be attributed. A metric that cannot be read is None with the reason in ``GpuSample.error`` /
        ``MigSample.error``; this never raises for one GPU."""
        ...

    def poll_health(self, timeout_s: float) -> tuple[HealthChange, ...]:
        """Wait up to ``timeout_s`` seconds for health events; return the changes they caused (maybe none),
        recoveries included."""
        ...

    def close(self) -> None:
        """Release the backend (NVML shutdown); idempotent."""
        ...
