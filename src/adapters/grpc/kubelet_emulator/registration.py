"""Kubelet's side of device-plugin registration (kubelet ``pkg/kubelet/cm/devicemanager/plugin/v1beta1``
``server.go``/``handler.go``): :class:`PluginRegistry` serves ``v1beta1.Registration`` on
``<plugin-dir>/kubelet.sock`` and keeps the latest device list of every registered resource.

Kubelet's ``Register`` rejects a version outside ``SupportedVersions`` and a resource name that is not an extended
resource, then — before replying — dials ``<plugin-dir>/<endpoint>`` (blocking, 10 s), calls
``GetDevicePluginOptions`` (the options come from this call, not from the request) and starts ``ListAndWatch``.
Each ListAndWatch message is the plugin's complete device list for the resource; when the stream ends, kubelet
marks every device of the resource unhealthy. A second Register of a resource replaces (and cancels) the previous
endpoint.

Start, as the real kubelet's device manager does (``CleanupPluginDirectory`` in pkg/kubelet/cm/devicemanager/
manager.go, checked against kubelet 1.37.2's source, and by tests/integration/test_real_kubelet_restarts.py against
the real kubelet): delete every socket in the directory (plugins' and a dead kubelet's ``kubelet.sock``
alike; folders, other files and ``kubelet_internal_checkpoint`` stay), then listen on a new ``kubelet.sock``. A
kubelet restart (:meth:`PluginRegistry.restart`) is a stop as a killed kubelet stops — its ``kubelet.sock`` stays
behind as a file nobody serves, for ``down_s`` seconds — then a start (new inode); device lists start empty until
the plugins register again, while the set of resources ever registered is kept (kubelet's checkpoint keeps them).
A plugin that makes its socket during that gap loses it to the wipe.
"""

from __future__ import annotations

import logging
import stat
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from domain.runtime.types import ContainerAllocationResponse, DeviceSpec, Mount

from .._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
from .._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from ..client import unix_target
from ..sockets import prepare_socket_path
from .admission import HEALTHY, AdmissionError, is_extended_resource
from .endpoint import PluginEndpoint, go_status

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ("v1beta1",)
"""``SupportedVersions`` of the device plugin API (constants.go)."""

KUBELET_SOCKET_NAME = "kubelet.sock"
"""Kubelet's Registration socket, in the device-plugin directory (``KubeletSocket``)."""

RPC_TIMEOUT_S = 10.0
"""Deadline of GetPreferredAllocation and Allocate, s (kubelet sets none; a bound keeps a hung plugin from
blocking admission forever)."""

DIAL_TIMEOUT_S = 10.0
"""How long ``Register`` waits for the plugin's socket to answer GetDevicePluginOptions, s (kubelet dials back
with a 10 s timeout)."""


class RegistrationRefusedError(Exception):
    """Kubelet refuses a RegisterRequest; the message is kubelet's error text."""


def check_request(request: dp.RegisterRequest) -> None:
    """Kubelet's checks of a RegisterRequest. Raises :class:`RegistrationRefusedError` with kubelet's messages
    (``errUnsupportedVersion``, ``errInvalidResourceName``)."""
    if request.version not in SUPPORTED_VERSIONS:
        raise RegistrationRefusedError(f"requested API version {request.version!r} is not supported by kubelet. "
                                  f"Supported versions are {list(SUPPORTED_VERSIONS)!r}")
    if not is_extended_resource(request.resource_name):
        raise RegistrationRefusedError(f"the ResourceName {request.resource_name!r} is invalid")


def response_from_pb(reply: dp.ContainerAllocateResponse) -> ContainerAllocationResponse:
    """A ContainerAllocateResponse in domain form (envs, mounts, device nodes, annotations, CDI device names)."""
    return ContainerAllocationResponse(
        envs=dict(reply.envs),
        mounts=tuple(Mount(m.container_path, m.host_path, m.read_only) for m in reply.mounts),
        devices=tuple(DeviceSpec(d.container_path, d.host_path, d.permissions) for d in reply.devices),
        annotations=dict(reply.annotations),
        cdi_devices=tuple(d.name for d in reply.cdi_devices),
    )


CHECKPOINT_NAME = "kubelet_internal_checkpoint"
"""The device manager's checkpoint file, the one file its start does not delete."""


def remove_contents(directory: Path) -> None:
    """What kubelet's device manager does to its folder before it listens: delete every socket (following links, as
    its ``os.Stat`` does), never :data:`CHECKPOINT_NAME` (``CleanupPluginDirectory``). A missing folder is made."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.name != CHECKPOINT_NAME and path.is_socket():
            path.unlink(missing_ok=True)


class PluginRegistry(dp_grpc.RegistrationServicer):
    """Kubelet's Registration service and device lists on ``plugin_dir`` (module docstring). Thread-safe;
    :meth:`stop` releases every thread, channel and socket. ``dial_timeout_s`` bounds Register's dial-back,
    ``rpc_timeout_s`` each GetPreferredAllocation/Allocate call (seconds)."""

    def __init__(self, plugin_dir: Path, *, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 rpc_timeout_s: float = RPC_TIMEOUT_S, max_workers: int = 4) -> None:
        self.plugin_dir = plugin_dir
        self._dial_timeout_s = dial_timeout_s
        self._rpc_timeout_s = rpc_timeout_s
        self._max_workers = max_workers
        self._lock = threading.Condition()
        self._endpoints: dict[str, PluginEndpoint] = {}
        self._devices: dict[str, dict[str, str]] = {}  # resource -> {id: health}, since the last (re)start
        self._updates: dict[str, int] = {}
        self._registrations: list[str] = []
        self.failed_dials: list[str] = []
        """Plugin sockets a Register named that could not be dialled back (kubelet logs each one)."""
        self._known: set[str] = set()  # resources registered at least once (kubelet's checkpoint keeps them)
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._generation = 0  # bumped by start and stop: a Register that straddles them is dropped
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle
    @property
    def socket(self) -> Path:
        """``<plugin_dir>/kubelet.sock``."""
        return self.plugin_dir / KUBELET_SOCKET_NAME

    @property
    def serving(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        with self._lock:
            return self._server is not None

    def start(self) -> None:
        """Serve Registration on a fresh ``kubelet.sock`` (a stale socket there is replaced); a no-op while serving.
        Raises OSError when the socket cannot be bound or a non-socket file is in the way."""
        with self._lock:
            if self._server is not None:
                return
            remove_contents(self.plugin_dir)
            prepare_socket_path(self.socket, refuse_live=False)
            executor = futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="kubelet-emu")
            server = grpc.server(executor)
            dp_grpc.add_RegistrationServicer_to_server(self, server)
            if server.add_insecure_port(unix_target(self.socket)) == 0:
                executor.shutdown(wait=False)
                raise OSError(f"cannot bind kubelet Registration to {self.socket}")
            server.start()
            self._server, self._executor = server, executor
            self._generation += 1

    def stop(self, *, remove_socket: bool = True) -> None:
        """Stop serving, cancel every ListAndWatch stream, close every plugin channel, join the threads and (unless
        ``remove_socket`` is False, as when kubelet is killed) remove ``kubelet.sock``. Allocations are kept.
        Idempotent."""
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
            self._generation += 1
            endpoints, self._endpoints = list(self._endpoints.values()), {}
            threads, self._threads = self._threads, []
            self._lock.notify_all()
        if server is not None:
            server.stop(0).wait()
        if executor is not None:
            executor.shutdown(wait=True)
        for endpoint in endpoints:
            endpoint.close()
        for thread in threads:
            thread.join(timeout=5)
        if server is not None and remove_socket:
            try:
                if stat.S_ISSOCK(self.socket.lstat().st_mode):
                    self.socket.unlink()
            except FileNotFoundError:
                pass

    def restart(self, down_s: float = 0.0) -> None:
        """A kubelet restart (module docstring): stop as a killed kubelet does (``kubelet.sock`` left behind,
        unserved, for ``down_s`` seconds), then start (every file of the directory deleted, a new ``kubelet.sock``).
        Raises OSError as :meth:`start`."""
        self.stop(remove_socket=False)
        if down_s > 0:
            time.sleep(down_s)
        with self._lock:
            self._devices.clear()
            self._lock.notify_all()
        self.start()

    # ------------------------------------------------------------------ Registration
    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:  # noqa: N802 (proto RPC name)
        """Kubelet's Register (module docstring). Errors: UNKNOWN with kubelet's message for a refused request or a
        plugin that cannot be dialled (kubelet returns plain Go errors); UNAVAILABLE while stopping."""
        try:
            check_request(request)
        except RegistrationRefusedError as error:
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        with self._lock:
            generation = self._generation
        endpoint = PluginEndpoint(self.plugin_dir / request.endpoint, request.resource_name,
                                  rpc_timeout_s=self._rpc_timeout_s)
        try:
            endpoint.dial(self._dial_timeout_s)
        except grpc.RpcError as error:
            endpoint.close()
            with self._lock:
                self.failed_dials.append(request.endpoint)
            context.abort(grpc.StatusCode.UNKNOWN, f"failed to dial device plugin {endpoint.path}: {go_status(error)}")
        with self._lock:
            stale = generation != self._generation or self._server is None
            old = None if stale else self._endpoints.pop(request.resource_name, None)
            if not stale:
                self._endpoints[request.resource_name] = endpoint
                self._registrations.append(request.resource_name)
                self._known.add(request.resource_name)
                thread = threading.Thread(target=self._consume, args=(endpoint,), daemon=True,
                                          name=f"kubelet-emu-law-{request.resource_name}")
                thread.start()  # under the lock: stop() never joins a thread that was not started
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        if stale:
            endpoint.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting")
        if old is not None:
            old.close()
        log.info("device plugin %s registered at %s (%s)", request.resource_name, endpoint.path, endpoint.options)
        return dp.Empty()

    def _consume(self, endpoint: PluginEndpoint) -> None:
        try:
            for message in endpoint.open_stream():
                with self._lock:
                    if self._endpoints.get(endpoint.resource) is not endpoint:
                        break
                    self._devices[endpoint.resource] = {d.ID: d.health for d in message.devices}
                    self._updates[endpoint.resource] = self._updates.get(endpoint.resource, 0) + 1
                    self._lock.notify_all()
        except grpc.RpcError:
            pass
        with self._lock:  # kubelet marks a lost resource's devices unhealthy
            if self._endpoints.get(endpoint.resource) is endpoint:
                self._devices[endpoint.resource] = dict.fromkeys(self._devices.get(endpoint.resource, {}), "Unhealthy")
                self._lock.notify_all()

    def cut_stream(self, resource: str) -> None:
        """Cancel the open ListAndWatch stream of ``resource`` (as a broken connection would). Raises KeyError when
        the resource has no endpoint."""
        with self._lock:
            endpoint = self._endpoints[resource]
        endpoint.cut()

    # ------------------------------------------------------------------ device state
    @property
    def devices(self) -> dict[str, dict[str, str]]:
        """A copy of the latest device list per resource since the last (re)start: ``{resource: {id: health}}``
        in advertised order."""
        with self._lock:
            return {name: dict(ids) for name, ids in self._devices.items()}

    @property
    def updates(self) -> dict[str, int]:
        """ListAndWatch messages received per resource (a copy)."""
        with self._lock:
            return dict(self._updates)

    @property
    def registrations(self) -> list[str]:
        """Resource names of every accepted Register, oldest first (a copy)."""
        with self._lock:
            return list(self._registrations)

    @property
    def known_resources(self) -> frozenset[str]:
        """Resources registered at least once (kept across restarts, like kubelet's checkpoint)."""
        with self._lock:
            return frozenset(self._known)

    def healthy(self, resource: str) -> list[str]:
        """Healthy IDs of ``resource`` in advertised order (empty when not listed)."""
        with self._lock:
            return [i for i, h in self._devices.get(resource, {}).items() if h == HEALTHY]

    def endpoint(self, resource: str) -> PluginEndpoint:
        """The registered plugin endpoint of ``resource``. Raises KeyError."""
        with self._lock:
            return self._endpoints[resource]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Wait until ``predicate()`` (evaluated under the lock, at every device update and at least every 50 ms, so
        it may also read outside state) holds; False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
            return True

    def wait_listed(self, resources: Collection[str], timeout_s: float) -> bool:
        """Wait until every resource in ``resources`` has a device list with a healthy device since the last
        (re)start, woken only by updates; False after ``timeout_s`` s or when stopped."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not all(HEALTHY in self._devices.get(r, {}).values() for r in resources):
                left = deadline - time.monotonic()
                if left <= 0 or self._server is None:
                    return False
                self._lock.wait(left)
            return True

    # ------------------------------------------------------------------ plugin RPCs (wire-level helpers)
    def preferred(self, resource: str, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container of ``resource``. Raises KeyError (no endpoint), grpc.RpcError."""
        return self.endpoint(resource).preferred(list(available), list(must), size)

    def allocate(self, resource: str, ids: Sequence[str]) -> ContainerAllocationResponse:
        """Allocate with one ContainerAllocateRequest holding ``ids``; returns element [0] as kubelet does, in domain
        form. Raises KeyError (no endpoint), grpc.RpcError (the plugin refused), AdmissionError (empty reply)."""
        reply = self.endpoint(resource).allocate(list(ids))
        if not reply.container_responses:
            raise AdmissionError(f"no containers return in allocation response {reply}")
        return response_from_pb(reply.container_responses[0])
