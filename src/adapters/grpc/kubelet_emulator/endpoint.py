"""One registered device plugin as kubelet's device manager sees it: the channel to its socket, the options it
answered to GetDevicePluginOptions, its ListAndWatch call and the per-container RPCs (kubelet
``pkg/kubelet/cm/devicemanager/endpoint.go``). gRPC errors propagate as ``grpc.RpcError``; :func:`go_status` renders
them as kubelet would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import attrs
import grpc

from .._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
from .._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from ..client import unix_channel


@attrs.frozen
class PluginOptions:
    """``DevicePluginOptions`` as the plugin answered GetDevicePluginOptions: ``pre_start_required`` (kubelet calls
    PreStartContainer before each container start), ``get_preferred_allocation_available`` (kubelet calls
    GetPreferredAllocation before choosing IDs)."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


class _StreamCall(Protocol):
    """A ListAndWatch call: an iterator of messages that can be cancelled."""

    def __iter__(self) -> Iterator[dp.ListAndWatchResponse]: ...

    def cancel(self) -> bool: ...


class PluginEndpoint:
    """One registered plugin: its socket ``path``, ``resource`` name and ``options``; owns the channel and the
    ListAndWatch call. Thread-safe (gRPC channels and calls are)."""

    def __init__(self, path: Path, resource: str, *, rpc_timeout_s: float) -> None:
        self.path = path
        self.resource = resource
        self.options = PluginOptions()
        self._channel = unix_channel(path)
        self._stub = dp_grpc.DevicePluginStub(self._channel)
        self._rpc_timeout_s = rpc_timeout_s
        self._stream: _StreamCall | None = None
        self._closed = threading.Event()

    def dial(self, timeout_s: float) -> None:
        """GetDevicePluginOptions, waiting up to ``timeout_s`` s for the socket; stores :attr:`options`. Raises
        grpc.RpcError."""
        reply = self._stub.GetDevicePluginOptions(dp.Empty(), timeout=timeout_s, wait_for_ready=True)
        self.options = PluginOptions(pre_start_required=reply.pre_start_required,
                                     get_preferred_allocation_available=reply.get_preferred_allocation_available)

    def open_stream(self) -> Iterator[dp.ListAndWatchResponse]:
        """Start ListAndWatch (no deadline; :meth:`close` or :meth:`cut` cancels it); returns the message iterator,
        which raises grpc.RpcError when the stream fails or is cancelled."""
        call: _StreamCall = self._stub.ListAndWatch(dp.Empty())
        self._stream = call
        if self._closed.is_set():
            call.cancel()
        return iter(call)

    def cut(self) -> None:
        """Cancel the ListAndWatch stream (as a lost connection would end it)."""
        if self._stream is not None:
            self._stream.cancel()

    def close(self) -> None:
        """Cancel the stream and close the channel; idempotent."""
        self._closed.set()
        self.cut()
        self._channel.close()

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container; returns the plugin's IDs (none for an empty reply). Raises
        grpc.RpcError."""
        reply = self._stub.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
            dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=must_include,
                                                   allocation_size=size)]), timeout=self._rpc_timeout_s)
        return list(reply.container_responses[0].deviceIDs) if reply.container_responses else []

    def allocate(self, ids: list[str]) -> dp.AllocateResponse:
        """Allocate with one ContainerAllocateRequest holding ``ids``. Raises grpc.RpcError."""
        request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
        return self._stub.Allocate(request, timeout=self._rpc_timeout_s)

    def pre_start(self, ids: list[str], timeout_s: float) -> None:
        """PreStartContainer with the container's IDs of this resource. Raises grpc.RpcError."""
        self._stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids), timeout=timeout_s)


def go_status(error: grpc.RpcError) -> str:
    """A gRPC error as Go's ``status.Error`` prints it (what kubelet puts in pod messages):
    ``rpc error: code = FailedPrecondition desc = …``."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    name = "OK" if code is grpc.StatusCode.OK else "".join(p.capitalize() for p in code.name.split("_"))
    return f"rpc error: code = {name} desc = {details}"
