"""gRPC clients of the node Runtime (``GrpcNodeRuntime``, port ``ports.runtime.NodeRuntime``) and of the config
service (``GrpcNodeConfig``, port ``ports.node_config.NodeConfig``), over a unix socket.

Every unary call carries a deadline (``timeout_s``, default :data:`DEFAULT_TIMEOUT_S`); WatchHealth has none (it
lives until closed). gRPC errors become the port's errors (``adapters.grpc.errors``). A client owns its channel
when built by :meth:`GrpcNodeRuntime.connect` and closes it in :meth:`close` (also a context manager).

MIG: before sending an Allocate that plans MIG instances, :class:`GrpcNodeRuntime` checks through GetVersion that
the Runtime serves ``mig-allocate`` (and ``mig-dynamic`` when an instance is to be created) and raises
:class:`UnsupportedFeatureError` otherwise: a 1.0 Runtime would silently drop the unknown MIG field and answer a
confusing "no GPU" error. The version is fetched once and again only while a feature is missing (a Runtime may be
upgraded under a running client).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

import grpc

from domain.errors import InvalidRequestError
from domain.runtime.features import MIG_ALLOCATE, MIG_DYNAMIC, RuntimeInfo
from domain.runtime.types import (
    ConfigStatus,
    ContainerAllocationRequest,
    ContainerAllocationResponse,
    DeviceInfo,
    ExporterData,
    HealthChange,
)
from ports.runtime import NodeRuntimeError, RuntimeUnavailableError

from . import translate
from ._pb.ljrk.config.v1 import config_service_pb2 as cpb
from ._pb.ljrk.config.v1 import config_service_pb2_grpc as cpb_grpc
from ._pb.ljrk.runtime.v1 import runtime_pb2 as pb
from ._pb.ljrk.runtime.v1 import runtime_pb2_grpc as pb_grpc
from .errors import error_for

DEFAULT_TIMEOUT_S = 5.0
"""Deadline of each unary call, seconds (Allocate's budget comes from kubelet's container start path)."""


def unix_target(socket_path: str | Path) -> str:
    """gRPC target for a unix socket path (``unix:/abs/path``). Linux limits the path to 107 bytes."""
    return f"unix:{Path(socket_path).absolute()}"


RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
"""Reconnect backoff of our unix-socket channels: 0.1 s doubling to at most 1 s (gRPC's default grows to 120 s,
so a client that saw its server restart would fail fast for up to two minutes after it came back; a local socket
is cheap to retry). Names from gRPC core's channel arguments (grpc_types.h)."""


def unix_channel(socket_path: str | Path) -> grpc.Channel:
    """An insecure channel to a unix socket (local, so no TLS), reconnecting within 1 s (:data:`RECONNECT_OPTIONS`)."""
    return grpc.insecure_channel(unix_target(socket_path), options=RECONNECT_OPTIONS)


class _Client:
    def __init__(self, channel: grpc.Channel, *, timeout_s: float, owns_channel: bool) -> None:
        self._channel = channel
        self._timeout_s = timeout_s
        self._owns_channel = owns_channel

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the channel connects. Raises :class:`RuntimeUnavailableError` after ``timeout_s`` s."""
        ready = grpc.channel_ready_future(self._channel)
        try:
            ready.result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            ready.cancel()  # unsubscribes from the channel's connectivity updates
            raise RuntimeUnavailableError(f"node Runtime not reachable within {timeout_s:g} s") from None

    def close(self) -> None:
        """Close the channel if this client created it."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class _StreamCall(Protocol):
    """What a unary-stream call object offers: the response iterator and cancellation."""

    def __next__(self) -> pb.HealthEvent: ...

    def cancel(self) -> bool: ...


class _GrpcHealthStream:
    """``ports.runtime.HealthStream`` over a WatchHealth call; ``close()`` cancels it."""

    def __init__(self, call: _StreamCall) -> None:
        self._call = call
        self._closed = False

    def __iter__(self) -> _GrpcHealthStream:
        return self

    def __next__(self) -> HealthChange:
        try:
            message = next(self._call)
        except grpc.RpcError as error:
            if self._closed or (isinstance(error, grpc.Call) and error.code() is grpc.StatusCode.CANCELLED):
                raise StopIteration from None
            raise error_for(error, rpc="WatchHealth") from error
        return translate.health_event_from_pb(message)

    def close(self) -> None:
        """Cancel the call; iteration then ends."""
        self._closed = True
        self._call.cancel()


class GrpcNodeRuntime(_Client):
    """``NodeRuntime`` over gRPC (module docstring). Thread-safe (gRPC channels are)."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = DEFAULT_TIMEOUT_S, owns_channel: bool = False):
        super().__init__(channel, timeout_s=timeout_s, owns_channel=owns_channel)
        self._stub = pb_grpc.RuntimeStub(channel)
        self._info: RuntimeInfo | None = None

    def require(self, *features: str) -> RuntimeInfo:
        """The Runtime's GetVersion answer, after checking it serves ``features`` (cached while it does). Raises
        :class:`UnsupportedFeatureError` naming what is missing, or the GetVersion errors."""
        info = self._info
        if info is None or not all(info.supports(f) for f in features):
            info = self._info = self.get_version()
        info.require(*features)
        return info

    @classmethod
    def connect(cls, socket_path: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GrpcNodeRuntime:
        """A client owning a new channel to ``socket_path`` (connects lazily; see :meth:`wait_ready`)."""
        return cls(unix_channel(socket_path), timeout_s=timeout_s, owns_channel=True)

    def get_version(self) -> RuntimeInfo:
        """GetVersion. Raises NodeRuntimeError when the Runtime reports a version that is not SemVer."""
        try:
            reply = self._stub.GetVersion(pb.GetVersionRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="GetVersion") from error
        try:
            return translate.info_from_pb(reply)
        except InvalidRequestError as error:
            raise NodeRuntimeError(f"node Runtime GetVersion: {error}") from error

    def list_devices(self) -> tuple[DeviceInfo, ...]:
        """ListDevices."""
        try:
            reply = self._stub.ListDevices(pb.ListDevicesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="ListDevices") from error
        try:
            return tuple(translate.device_from_pb(d) for d in reply.devices)
        except InvalidRequestError as error:
            raise NodeRuntimeError(f"node Runtime ListDevices: {error}") from error

    def watch_health(self) -> _GrpcHealthStream:
        """WatchHealth as a closable iterator (no deadline)."""
        return _GrpcHealthStream(self._stub.WatchHealth(pb.WatchHealthRequest()))

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        """Allocate; raises the contract errors, and :class:`UnsupportedFeatureError` for a MIG plan the Runtime
        cannot serve (module docstring). Waits for a Runtime that is (re)starting, within the deadline: kubelet
        fails the pod's admission on the first error, so a Runtime restart shorter than ``timeout_s`` seconds must
        not fail it."""
        if request.mig:
            self.require(MIG_ALLOCATE, *((MIG_DYNAMIC,) if any(m.create for m in request.mig) else ()))
        try:
            reply = self._stub.Allocate(translate.request_to_pb(request), timeout=self._timeout_s,
                                        wait_for_ready=True)
        except grpc.RpcError as error:
            raise error_for(error, rpc="Allocate") from error
        return translate.response_from_pb(reply)

    def release(self, pod_uid: str, container: str | None = None) -> int:
        """Release; returns the number of records removed."""
        message = pb.ReleaseRequest(pod_uid=pod_uid, container_name=container or "")
        try:
            return self._stub.Release(message, timeout=self._timeout_s).released
        except grpc.RpcError as error:
            raise error_for(error, rpc="Release") from error

    def exporter_data(self) -> ExporterData:
        """ExporterGetDataList."""
        try:
            reply = self._stub.ExporterGetDataList(pb.ExporterGetDataListRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="ExporterGetDataList") from error
        try:
            return translate.exporter_from_pb(reply)
        except InvalidRequestError as error:
            raise NodeRuntimeError(f"node Runtime ExporterGetDataList: {error}") from error


class GrpcNodeConfig(_Client):
    """``NodeConfig`` over gRPC (``ljrk.config.v1.ConfigService``)."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = DEFAULT_TIMEOUT_S, owns_channel: bool = False):
        super().__init__(channel, timeout_s=timeout_s, owns_channel=owns_channel)
        self._stub = cpb_grpc.ConfigServiceStub(channel)

    @classmethod
    def connect(cls, socket_path: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GrpcNodeConfig:
        """A client owning a new channel to ``socket_path``."""
        return cls(unix_channel(socket_path), timeout_s=timeout_s, owns_channel=True)

    def enable(self, reason: str = "") -> ConfigStatus:
        """Enable."""
        try:
            reply = self._stub.Enable(cpb.EnableRequest(reason=reason), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="Enable") from error
        return translate.status_from_pb(reply.status)

    def disable(self, reason: str = "") -> ConfigStatus:
        """Disable."""
        try:
            reply = self._stub.Disable(cpb.DisableRequest(reason=reason), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="Disable") from error
        return translate.status_from_pb(reply.status)

    def status(self) -> ConfigStatus:
        """GetStatus."""
        try:
            reply = self._stub.GetStatus(cpb.GetStatusRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise error_for(error, rpc="GetStatus") from error
        return translate.status_from_pb(reply.status)
