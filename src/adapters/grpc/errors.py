"""gRPC status codes ↔ the Runtime contract's errors, in one table used by both the servicers and the clients.

| error (server side raises) | status code | client raises |
|---|---|---|
| ``InvalidAllocationError``, other domain ``ValueError`` | INVALID_ARGUMENT | ``InvalidAllocationError`` |
| ``AllocationConflictError`` | ALREADY_EXISTS | ``AllocationConflictError`` |
| ``RuntimeDisabledError`` | FAILED_PRECONDITION | ``RuntimeDisabledError`` |
| ``CapacityExceededError`` | RESOURCE_EXHAUSTED | ``CapacityExceededError`` |
| ``RuntimeUnavailableError``, ``GpuBackendError`` | UNAVAILABLE | ``RuntimeUnavailableError`` |
| anything else | INTERNAL | ``NodeRuntimeError`` |

DEADLINE_EXCEEDED (and UNAVAILABLE from the transport, e.g. no socket) become ``RuntimeUnavailableError``; every
other code ``NodeRuntimeError``. Details are truncated to :data:`MAX_DETAILS` characters so a huge message never
floods a log; the client's message names the RPC.
"""

from __future__ import annotations

import grpc

from domain.errors import DomainError
from domain.runtime.errors import (
    AllocationConflictError,
    CapacityExceededError,
    InvalidAllocationError,
    RuntimeDisabledError,
)
from ports.gpu_backend import GpuBackendError
from ports.runtime import NodeRuntimeError, RuntimeUnavailableError

MAX_DETAILS = 1000


def truncate(text: str, limit: int = MAX_DETAILS) -> str:
    """``text`` cut to ``limit`` characters with a marker."""
    return text if len(text) <= limit else text[: limit - 15] + "… (truncated)"


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and details a servicer answers for ``error`` (module docstring)."""
    code = grpc.StatusCode.INTERNAL
    if isinstance(error, AllocationConflictError):
        code = grpc.StatusCode.ALREADY_EXISTS
    elif isinstance(error, RuntimeDisabledError):
        code = grpc.StatusCode.FAILED_PRECONDITION
    elif isinstance(error, CapacityExceededError):
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
    elif isinstance(error, DomainError) and isinstance(error, ValueError):  # InvalidAllocationError included
        code = grpc.StatusCode.INVALID_ARGUMENT
    elif isinstance(error, RuntimeUnavailableError | GpuBackendError):
        code = grpc.StatusCode.UNAVAILABLE
    details = str(error) if code is not grpc.StatusCode.INTERNAL else f"{type(error).__name__}: {error}"
    return code, truncate(details)


def error_for(error: grpc.RpcError, *, rpc: str) -> Exception:
    """The exception a client raises for a failed ``rpc`` (module docstring)."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = truncate((error.details() if isinstance(error, grpc.Call) else None) or str(error))
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidAllocationError(details)
    if code is grpc.StatusCode.ALREADY_EXISTS:
        return AllocationConflictError(details)
    if code is grpc.StatusCode.FAILED_PRECONDITION:
        return RuntimeDisabledError(details)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return CapacityExceededError(details)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return RuntimeUnavailableError(f"node Runtime {rpc}: {code.name}: {details}")
    return NodeRuntimeError(f"node Runtime {rpc}: {code.name}: {details}")
