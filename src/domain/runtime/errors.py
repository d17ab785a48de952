"""Errors of the node Runtime contract (``proto/ljrk/runtime/v1/runtime.proto``), shared by every implementation.

Each maps to one gRPC status code on the wire (``adapters.grpc.errors``), so a client sees the same error class a
local implementation raises: :class:`InvalidAllocationError` ↔ ``INVALID_ARGUMENT``, :class:`AllocationConflictError`
↔ ``ALREADY_EXISTS``, :class:`RuntimeDisabledError` ↔ ``FAILED_PRECONDITION``, :class:`CapacityExceededError` ↔
``RESOURCE_EXHAUSTED``. :class:`UnsupportedFeatureError` is
raised on the client side by the capability check (``domain.runtime.features``) and never crosses the wire.
"""

from __future__ import annotations

from domain.errors import DomainError


class RuntimeContractError(DomainError):
    """Base of the Runtime contract's errors; the message is the whole explanation."""


class InvalidAllocationError(RuntimeContractError, ValueError):
    """An Allocate request is malformed or names a GPU this node does not have (gRPC ``INVALID_ARGUMENT``)."""


class AllocationConflictError(RuntimeContractError):
    """A different plan is already recorded for the same pod UID and container (gRPC ``ALREADY_EXISTS``).

    Release the container first; a Runtime never silently replaces an allocation, which would hide a bug in
    whoever called it twice with different plans.
    """


class CapacityExceededError(RuntimeContractError):
    """A new grant would take a GPU beyond its capacity (1000 milli-GPU core, the GPU's memory bytes) counting what
    the node already granted (gRPC ``RESOURCE_EXHAUSTED``; ``domain.runtime.capacity``). The plan may be well
    formed; it does not fit this node now. Release something first, or plan again."""


class RuntimeDisabledError(RuntimeContractError):
    """The Runtime is disabled through the config service and takes no new allocation (``FAILED_PRECONDITION``)."""


class UnsupportedFeatureError(RuntimeContractError):
    """The node Runtime is too old for a feature, or does not advertise it; raised by the capability check."""


class UnknownFeatureError(RuntimeContractError, KeyError):
    """A feature name is not in ``RUNTIME_FEATURES`` (a programming error in the caller)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown feature"
