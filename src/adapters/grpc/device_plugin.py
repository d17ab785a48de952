"""Kubelet device plugin API v1beta1 (``proto/kubelet/deviceplugin/v1beta1``): one plugin server per resource,
and the registration client.

Protocol facts followed (k8s.io/kubelet ``pkg/apis/deviceplugin/v1beta1``; kubelet's devicemanager): each server listens
on its own unix socket in the device-plugin directory and is serving *before* Register is sent, because kubelet dials
back and calls GetDevicePluginOptions before it answers Register; RegisterRequest carries version ``v1beta1``, the
socket's file name as endpoint, the resource name and options (GetPreferredAllocationAvailable=true,
PreStartRequired=false); ListAndWatch sends the complete list on every change; Allocate gets one
ContainerAllocateRequest and must answer at least one ContainerAllocateResponse, whose ``cdi_devices`` (kubelet
1.28+; older kubelets skip the unknown field) carry the response's CDI names.

Error mapping of Allocate (details name the pod/container or the cause): ``NoMatchingContainerError`` →
NOT_FOUND; ``AmbiguousContainerError``, ``UntrustedPlanError``, ``UnhealthyPlanError`` → FAILED_PRECONDITION;
``ClusterError`` → UNAVAILABLE; Runtime contract errors as in :mod:`adapters.grpc.errors`. A request with other
than one container request is INVALID_ARGUMENT.

:class:`KubeletPluginServer` owns its thread pool and shuts it down on :meth:`~KubeletPluginServer.stop`, so
re-serving after a kubelet restart leaks no threads (failure case B18).
"""

from __future__ import annotations

import logging
import stat
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc

from domain.device_plugin.devices import PluginDevice, ResourceKey
from domain.device_plugin.matching import DevicePluginError, NoMatchingContainerError
from domain.runtime.types import ContainerAllocationResponse
from ports.cluster import ClusterError
from ports.device_plugin import DevicePluginHandler

from ._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
from ._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from .client import unix_channel, unix_target
from .errors import status_for, truncate
from .sockets import prepare_socket_path

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
"""``Version`` of the device plugin API (constants.go); the only entry of kubelet's SupportedVersions."""

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
"""``DevicePluginPath`` (constants.go)."""

KUBELET_SOCKET = "kubelet.sock"
"""Kubelet's Registration socket, in the device-plugin directory."""

REGISTER_TIMEOUT_S = 15.0
"""Register deadline, s: kubelet dials the plugin back with a 10 s timeout before it replies."""

_WATCH_POLL_S = 0.2
"""How often a ListAndWatch stream re-checks whether it was cancelled or its server is stopping, s."""


def _to_pb(response: ContainerAllocationResponse) -> dp.ContainerAllocateResponse:
    return dp.ContainerAllocateResponse(
        envs=dict(response.envs),
        mounts=[dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in response.mounts],
        devices=[dp.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in response.devices],
        annotations=dict(response.annotations),
        cdi_devices=[dp.CDIDevice(name=name) for name in response.cdi_devices],
    )


def _status(error: Exception) -> tuple[grpc.StatusCode, str]:
    if isinstance(error, NoMatchingContainerError):
        return grpc.StatusCode.NOT_FOUND, truncate(str(error))
    if isinstance(error, DevicePluginError):
        return grpc.StatusCode.FAILED_PRECONDITION, truncate(str(error))
    if isinstance(error, ClusterError):
        return grpc.StatusCode.UNAVAILABLE, truncate(f"cannot read pods from the API server: {error}")
    return status_for(error)


def _device(device: PluginDevice) -> dp.Device:
    """A device of ListAndWatch, with its NUMA node as the topology hint when known."""
    if device.numa_node is None:
        return dp.Device(ID=device.id, health=device.health.value)
    return dp.Device(ID=device.id, health=device.health.value,
                     topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=device.numa_node)]))


class DevicePluginServicer(dp_grpc.DevicePluginServicer):
    """``v1beta1.DevicePlugin`` for one resource ``kind`` over a :class:`DevicePluginHandler`; ``stopping`` ends
    open ListAndWatch streams. ``on_stream_lost(kind)`` is called when kubelet ends a ListAndWatch stream while
    the server is still serving (kubelet stopped or replaced the endpoint): the plugin must register again."""

    def __init__(self, handler: DevicePluginHandler, kind: ResourceKey, stopping: threading.Event,
                 on_stream_lost: Callable[[ResourceKey], None] = lambda _: None) -> None:
        self._handler = handler
        self._kind = kind
        self._stopping = stopping
        self._on_stream_lost = on_stream_lost

    def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.ServicerContext) -> dp.DevicePluginOptions:  # noqa: N802 (proto RPC name)
        """PreStartRequired false, GetPreferredAllocationAvailable true."""
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:  # noqa: N802 (proto RPC name)
        """The complete list now and after every health change, until cancelled or the server stops."""
        generation = -1
        while not self._stopping.is_set() and context.is_active():
            current, devices = self._handler.devices(self._kind)
            if current != generation:
                generation = current
                yield dp.ListAndWatchResponse(devices=[_device(d) for d in devices])
            self._handler.wait_change(generation, _WATCH_POLL_S)
        if not self._stopping.is_set():
            log.warning("kubelet ended the ListAndWatch stream of %s; registering again", self._kind.value)
            self._on_stream_lost(self._kind)

    def GetPreferredAllocation(  # noqa: N802 (proto RPC name)
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        """IDs of the planned GPU for each container request (advisory; never fails for lack of a plan)."""
        responses = []
        for item in request.container_requests:
            ids = self._handler.preferred(self._kind, list(item.available_deviceIDs),
                                          list(item.must_include_deviceIDs), item.allocation_size)
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=list(ids)))
        return dp.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:  # noqa: N802 (proto RPC name)
        """One container's allocation from the scheduler's plan (module docstring for the errors)."""
        if len(request.container_requests) != 1:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"expected exactly one ContainerAllocateRequest, got {len(request.container_requests)}")
        ids = list(request.container_requests[0].devices_ids)
        try:
            response = self._handler.allocate(self._kind, ids)
        except Exception as error:  # every failure becomes a status kubelet reports on the pod
            code, details = _status(error)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("Allocate failed")
            else:
                log.warning("Allocate %s x %s refused: %s", len(ids), self._kind.value, details)
            context.abort(code, details)
        return dp.AllocateResponse(container_responses=[_to_pb(response)])

    def PreStartContainer(  # noqa: N802 (proto RPC name)
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        """Never requested (PreStartRequired is false); answers empty."""
        return dp.PreStartContainerResponse()


class KubeletPluginServer:
    """Serves one resource's :class:`DevicePluginServicer` on ``socket_path``.

    ``start`` replaces a stale socket (only a socket), binds and serves; raises OSError when it cannot.
    ``stop`` ends streams, stops the server, joins its worker threads and removes the socket; idempotent.
    """

    def __init__(self, socket_path: Path, handler: DevicePluginHandler, kind: ResourceKey, *,
                 on_stream_lost: Callable[[ResourceKey], None] = lambda _: None, max_workers: int = 8) -> None:
        self.socket_path = socket_path
        self.kind = kind
        self._stopping = threading.Event()
        self._executor = futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix=f"ljrk-dp-{kind.value}")
        self._server = grpc.server(self._executor)
        servicer = DevicePluginServicer(handler, kind, self._stopping, on_stream_lost)
        dp_grpc.add_DevicePluginServicer_to_server(servicer, self._server)
        self._started = False

    def start(self) -> None:
        """Bind and serve (class docstring)."""
        prepare_socket_path(self.socket_path, refuse_live=False)  # kubelet restarts leave our sockets behind
        if self._server.add_insecure_port(unix_target(self.socket_path)) == 0:
            raise OSError(f"cannot bind device plugin server to unix socket {self.socket_path}")
        self._server.start()
        self._started = True

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop serving (class docstring)."""
        if not self._started:
            return
        self._started = False
        self._stopping.set()
        self._server.stop(grace_s).wait()
        self._executor.shutdown(wait=True)
        try:
            if stat.S_ISSOCK(self.socket_path.lstat().st_mode):
                self.socket_path.unlink()
        except FileNotFoundError:
            pass


class KubeletRegistrationError(Exception):
    """Kubelet refused the registration or could not be reached; the message carries the gRPC status."""


def register(kubelet_socket: Path, *, endpoint: str, resource_name: str,
             timeout_s: float = REGISTER_TIMEOUT_S) -> None:
    """Send ``Registration.Register`` to kubelet (module docstring for the fields); ``endpoint`` is the plugin
    socket's file name. Fails fast (no wait for a socket nobody serves: a kubelet starting meanwhile would first
    delete the plugin's socket). Raises :class:`KubeletRegistrationError` when kubelet refuses, is not listening,
    or does not answer within ``timeout_s`` seconds."""
    with unix_channel(kubelet_socket) as channel:
        try:
            _register(channel, endpoint=endpoint, resource_name=resource_name, timeout_s=timeout_s)
        except grpc.RpcError as error:
            code = error.code().name if isinstance(error, grpc.Call) else "UNKNOWN"
            details = error.details() if isinstance(error, grpc.Call) else str(error)
            raise KubeletRegistrationError(f"Register {resource_name}: {code}: {truncate(details or '')}") from None


def _register(channel: grpc.Channel, *, endpoint: str, resource_name: str, timeout_s: float) -> None:
    dp_grpc.RegistrationStub(channel).Register(
        dp.RegisterRequest(
            version=API_VERSION, endpoint=endpoint, resource_name=resource_name,
            options=dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True),
        ),
        timeout=timeout_s, wait_for_ready=False,
    )
