"""The node Runtime port: what the stack (device plugin, exporter) needs from a node's GPU runtime.

Speaks domain types only (``domain.runtime.types``); the wire form is ``proto/ljrk/runtime/v1/runtime.proto``,
spoken by ``adapters.grpc.GrpcNodeRuntime``. Semantics every implementation honours (checked by
``tests/contract/test_node_runtime_contract.py`` against the reference Runtime wired in process
(``entrypoints.runtime.inprocess``), as ``ljrk runtime`` runs it, and both behind gRPC):

* ``allocate`` is idempotent per (pod UID, container): an identical repeat returns the same response; a
  different plan for the key raises :class:`AllocationConflictError`; a GPU that is not on the node or a
  malformed plan raises :class:`InvalidAllocationError`; a new key while disabled raises
  :class:`RuntimeDisabledError`; a grant that would take a GPU beyond 1000 milli-GPU core or its memory, counting
  the node's other grants, raises :class:`CapacityExceededError` (``domain.runtime.capacity``). Limits follow the
  ledger's default rule (``domain.request.resolve_share``).
* ``release`` of nothing returns 0, never raises.
* ``watch_health`` opens with one ``initial`` event per GPU, then delivers every change until ``close()``.
* ``exporter_data`` lists every GPU (idle ones too) and every allocated container.
* MIG (Runtime 1.1.0): ``list_devices`` lists each MIG GPU's instances with their owners; ``allocate`` grants the
  planned instances (``ContainerAllocationRequest.mig``, rules in ``domain.runtime.mig``) and answers
  ``NVIDIA_VISIBLE_DEVICES=MIG-<uuid>,…``; a Runtime with the dynamic strategy creates planned instances at
  Allocate and ``release`` destroys them once no record holds them (one that cannot be destroyed keeps its record
  and raises, so the caller retries); ``exporter_data`` adds a row per MIG instance. Clients that use MIG check
  the features (``domain.runtime.features.mig_features``) after ``get_version``.

Errors: the contract errors of ``domain.runtime.errors`` above; :class:`RuntimeUnavailableError` when the Runtime
cannot be reached in time; :class:`NodeRuntimeError` for anything else a remote Runtime reports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from domain.runtime.errors import (  # re-exported: the contract errors callers catch
    AllocationConflictError,
    CapacityExceededError,
    InvalidAllocationError,
    RuntimeDisabledError,
    UnsupportedFeatureError,
)
from domain.runtime.features import RuntimeInfo
from domain.runtime.types import (
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceInfo,
    ExporterData,
    HealthChange,
)

__all__ = [
    "AllocationConflictError",
    "CapacityExceededError",
    "HealthStream",
    "InvalidAllocationError",
    "NodeRuntime",
    "NodeRuntimeError",
    "RuntimeDisabledError",
    "RuntimeUnavailableError",
    "UnsupportedFeatureError",
]


class NodeRuntimeError(Exception):
    """A remote Runtime failed in a way the contract does not name (e.g. an internal error); the message
    carries its (truncated) explanation."""


class RuntimeUnavailableError(NodeRuntimeError):
    """The Runtime could not be reached or did not answer within the deadline (socket missing, not serving)."""


class HealthStream(Protocol):
    """A blocking iterator of health changes; ``close()`` ends it from any thread (idempotent)."""

    def __iter__(self) -> Iterator[HealthChange]:
        """Itself."""
        ...

    def __next__(self) -> HealthChange:
        """The next change; blocks. Raises StopIteration once closed."""
        ...

    def close(self) -> None:
        """End the stream and free its resources."""
        ...


class NodeRuntime(Protocol):
    """The Runtime service (module docstring)."""

    def get_version(self) -> RuntimeInfo:
        """Implementation name, semantic version, capabilities and backend."""
        ...

    def list_devices(self) -> tuple[DeviceInfo, ...]:
        """The node's GPUs in index order, with current health."""
        ...

    def watch_health(self) -> HealthStream:
        """A stream: one ``initial`` event per GPU, then every health change."""
        ...

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        """Prepare one container's GPUs (idempotent per pod UID + container)."""
        ...

    def release(self, pod_uid: str, container: str | None = None) -> int:
        """Forget the pod's records (one container's when given); returns how many were removed."""
        ...

    def exporter_data(self) -> ExporterData:
        """Per-GPU and per-container raw data for the exporter."""
        ...
