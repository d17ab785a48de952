"""gRPC servicers that serve any ``NodeRuntime`` / ``NodeConfig``, and a unix-socket server hosting both.

Servicers translate protobuf ↔ domain (``adapters.grpc.translate``) and the implementation's errors to status
codes (``adapters.grpc.errors``); they hold no state. A WatchHealth stream closes the implementation's stream
when the client goes away (RPC termination callback) or the server stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import NoReturn, TypeVar

import grpc

from ports.node_config import NodeConfig
from ports.runtime import NodeRuntime

from . import translate
from ._pb.ljrk.config.v1 import config_service_pb2 as cpb
from ._pb.ljrk.config.v1 import config_service_pb2_grpc as cpb_grpc
from ._pb.ljrk.runtime.v1 import runtime_pb2 as pb
from ._pb.ljrk.runtime.v1 import runtime_pb2_grpc as pb_grpc
from .client import unix_target
from .errors import status_for
from .sockets import prepare_socket_path, set_socket_mode

log = logging.getLogger(__name__)

RUNTIME_SOCKET_MODE = 0o660
"""Mode of the Runtime's socket: read-write for its owner (the Runtime's user, root in the shipped DaemonSet) and
its group (the Runtime's primary group), nothing for others; set explicitly after bind, never left to the umask.
Whoever can connect can Allocate, Release and Disable, so only root on the node (the device plugin, the exporter,
the toggle Jobs) may."""
_T = TypeVar("_T")


def _abort(context: grpc.ServicerContext, rpc: str, error: Exception) -> NoReturn:
    code, details = status_for(error)
    if code is grpc.StatusCode.INTERNAL:
        log.exception("%s failed", rpc)
    context.abort(code, details)


def _call(context: grpc.ServicerContext, rpc: str, body: Callable[[], _T]) -> _T:
    try:
        return body()
    except Exception as error:  # every failure becomes a status, never a bare "Exception calling application"
        _abort(context, rpc, error)


class RuntimeServicer(pb_grpc.RuntimeServicer):
    """``ljrk.runtime.v1.Runtime`` over any :class:`NodeRuntime`."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self._runtime = runtime

    def GetVersion(self, request: pb.GetVersionRequest, context: grpc.ServicerContext) -> pb.GetVersionResponse:
        """Runtime name, version, capabilities, backend."""
        return _call(context, "GetVersion", lambda: translate.info_to_pb(self._runtime.get_version()))

    def ListDevices(self, request: pb.ListDevicesRequest, context: grpc.ServicerContext) -> pb.ListDevicesResponse:
        """Inventory with health."""
        return _call(context, "ListDevices", lambda: pb.ListDevicesResponse(
            devices=[translate.device_to_pb(d) for d in self._runtime.list_devices()]))

    def WatchHealth(
        self, request: pb.WatchHealthRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.HealthEvent]:
        """Snapshot then changes until the client cancels or the server stops."""
        stream = _call(context, "WatchHealth", self._runtime.watch_health)
        context.add_callback(stream.close)
        try:
            for change in stream:
                yield translate.health_event_to_pb(change)
        finally:
            stream.close()

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        """One container; the contract's errors become INVALID_ARGUMENT / ALREADY_EXISTS / FAILED_PRECONDITION."""
        return _call(context, "Allocate", lambda: translate.response_to_pb(
            self._runtime.allocate(translate.request_from_pb(request))))

    def Release(self, request: pb.ReleaseRequest, context: grpc.ServicerContext) -> pb.ReleaseResponse:
        """Records removed (0 is fine)."""
        return _call(context, "Release", lambda: pb.ReleaseResponse(
            released=self._runtime.release(request.pod_uid, request.container_name or None)))

    def ExporterGetDataList(
        self, request: pb.ExporterGetDataListRequest, context: grpc.ServicerContext
    ) -> pb.ExporterGetDataListResponse:
        """Per-GPU and per-container data."""
        return _call(context, "ExporterGetDataList", lambda: translate.exporter_to_pb(self._runtime.exporter_data()))


class ConfigServicer(cpb_grpc.ConfigServiceServicer):
    """``ljrk.config.v1.ConfigService`` over any :class:`NodeConfig`."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config

    def Enable(self, request: cpb.EnableRequest, context: grpc.ServicerContext) -> cpb.EnableResponse:
        """Enable; returns the resulting status."""
        return _call(context, "Enable", lambda: cpb.EnableResponse(
            status=translate.status_to_pb(self._config.enable(request.reason))))

    def Disable(self, request: cpb.DisableRequest, context: grpc.ServicerContext) -> cpb.DisableResponse:
        """Disable; returns the resulting status."""
        return _call(context, "Disable", lambda: cpb.DisableResponse(
            status=translate.status_to_pb(self._config.disable(request.reason))))

    def GetStatus(self, request: cpb.GetStatusRequest, context: grpc.ServicerContext) -> cpb.GetStatusResponse:
        """Current status."""
        return _call(context, "GetStatus", lambda: cpb.GetStatusResponse(
            status=translate.status_to_pb(self._config.status())))


class GrpcRuntimeServer:
    """Serves ``runtime`` (and ``config``, when given) on the unix socket ``socket_path``.

    ``start`` removes a stale socket file left by a crash (only a socket, never another kind of file), binds, sets
    the socket's mode to ``socket_mode`` (default :data:`RUNTIME_SOCKET_MODE`, 0o660) and starts; ``stop`` stops
    with ``grace_s`` seconds for calls in flight (health streams are cancelled) and removes the socket.
    ``max_workers`` bounds concurrent calls; every open WatchHealth stream holds one worker.
    Raises OSError when the socket cannot be bound or its mode cannot be set.
    """

    def __init__(
        self, socket_path: Path, runtime: NodeRuntime, config: NodeConfig | None = None, *, max_workers: int = 32,
        socket_mode: int = RUNTIME_SOCKET_MODE,
    ) -> None:
        self.socket_path = socket_path
        self.socket_mode = socket_mode
        self._executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ljrk-rpc")
        self._server = grpc.server(self._executor)
        pb_grpc.add_RuntimeServicer_to_server(RuntimeServicer(runtime), self._server)
        if config is not None:
            cpb_grpc.add_ConfigServiceServicer_to_server(ConfigServicer(config), self._server)
        self._started = False

    def start(self) -> None:
        """Bind and serve (module docstring)."""
        prepare_socket_path(
            self.socket_path, refuse_live=True, owner="another process (a Runtime already running?)"
        )
        if self._server.add_insecure_port(unix_target(self.socket_path)) == 0:
            raise OSError(f"cannot bind gRPC server to unix socket {self.socket_path}")
        try:
            set_socket_mode(self.socket_path, self.socket_mode)  # bound but not yet serving
        except OSError:
            self._server.stop(None)
            self.socket_path.unlink(missing_ok=True)
            raise
        self._server.start()
        self._started = True
        log.info("serving node Runtime on %s (mode %#o)", self.socket_path, self.socket_mode)

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, join the worker threads and remove the socket; idempotent."""
        if self._started:
            self._server.stop(grace_s).wait()
            self._executor.shutdown(wait=True)
            self._started = False
            self.socket_path.unlink(missing_ok=True)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (True) or ``timeout_s`` passes (False)."""
        return self._server.wait_for_termination(timeout_s)
