"""A fake kubelet over real unix sockets, behaving like kubelet's device manager (research/k8s-protocols.md §1.4).

* Serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock``. Register checks the version, dials the plugin back at
  ``<dir>/<endpoint>`` and calls GetDevicePluginOptions *before* replying (failing Register when that fails),
  then consumes ListAndWatch in a background thread, keeping the latest complete list per resource. A second
  Register of a resource replaces (and cancels) the previous stream.
* :meth:`FakeKubelet.admit` picks device IDs like kubelet: free healthy candidates, GetPreferredAllocation when
  the plugin asks for it, keep returned candidates, fill the shortfall, then Allocate with one
  ContainerAllocateRequest; :meth:`FakeKubelet.allocate` sends chosen IDs directly (B17: IDs of the "wrong" GPU).
* :meth:`FakeKubelet.restart` stops, deletes every socket in the directory (not other files) and serves a new
  ``kubelet.sock`` (new inode); :meth:`FakeKubelet.cut_stream` cancels one ListAndWatch stream.
"""

from __future__ import annotations

import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc


class _Endpoint:
    def __init__(self, path: Path, resource: str, options: dp.DevicePluginOptions, channel: grpc.Channel) -> None:
        self.path = path
        self.resource = resource
        self.options = options
        self.channel = channel
        self.stub = dp_grpc.DevicePluginStub(channel)
        self.stream: grpc.Future | None = None  # the ListAndWatch call (cancellable)


class FakeKubelet(dp_grpc.RegistrationServicer):
    """Fake kubelet on ``plugin_dir`` (module docstring). Thread-safe; ``stop()`` releases everything."""

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self._lock = threading.Condition()
        self._endpoints: dict[str, _Endpoint] = {}
        self.devices: dict[str, dict[str, str]] = {}  # resource -> {id: health}
        self.updates: dict[str, int] = {}
        self.registrations: list[str] = []
        self.allocated: dict[str, set[str]] = {}
        self._server: grpc.Server | None = None
        self._threads: list[threading.Thread] = []

    @property
    def socket(self) -> Path:
        """``<dir>/kubelet.sock``."""
        return self.plugin_dir / "kubelet.sock"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Serve Registration on a fresh kubelet.sock."""
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-kubelet"))
        dp_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{self.socket}")
        self._server.start()

    def stop(self) -> None:
        """Stop serving and drop every plugin connection (streams cancelled, channels closed)."""
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        with self._lock:
            endpoints, self._endpoints = list(self._endpoints.values()), {}
        for endpoint in endpoints:
            self._close(endpoint)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def restart(self) -> None:
        """Like a kubelet restart: stop, delete every socket in the directory, serve a new kubelet.sock."""
        self.stop()
        for path in self.plugin_dir.iterdir():
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
        with self._lock:
            self.devices.clear()
            self.allocated.clear()
        self.start()

    @staticmethod
    def _close(endpoint: _Endpoint) -> None:
        if endpoint.stream is not None:
            endpoint.stream.cancel()
        endpoint.channel.close()

    # ------------------------------------------------------------------ Registration
    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:  # noqa: N802
        """Kubelet's Register: version check, dial back, GetDevicePluginOptions, then ListAndWatch."""
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if "/" not in request.resource_name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not an extended resource: {request.resource_name}")
        path = self.plugin_dir / request.endpoint
        channel = grpc.insecure_channel(f"unix:{path}")
        endpoint = _Endpoint(path, request.resource_name, dp.DevicePluginOptions(), channel)
        try:
            endpoint.options = endpoint.stub.GetDevicePluginOptions(dp.Empty(), timeout=10, wait_for_ready=True)
        except grpc.RpcError as error:
            channel.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot dial plugin {path}: {error}")
        call = endpoint.stub.ListAndWatch(dp.Empty())
        endpoint.stream = call
        with self._lock:
            old = self._endpoints.pop(request.resource_name, None)
            self._endpoints[request.resource_name] = endpoint
            self.registrations.append(request.resource_name)
        if old is not None:
            self._close(old)
        thread = threading.Thread(target=self._consume, args=(endpoint, call), daemon=True,
                                  name=f"fake-kubelet-law-{request.resource_name}")
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        return dp.Empty()

    def _consume(self, endpoint: _Endpoint, call: object) -> None:
        try:
            for message in call:  # type: ignore[attr-defined]
                with self._lock:
                    self.devices[endpoint.resource] = {d.ID: d.health for d in message.devices}
                    self.updates[endpoint.resource] = self.updates.get(endpoint.resource, 0) + 1
                    self._lock.notify_all()
        except grpc.RpcError:
            pass
        with self._lock:  # kubelet marks a lost resource's devices unhealthy
            if self._endpoints.get(endpoint.resource) is endpoint:
                self.devices[endpoint.resource] = dict.fromkeys(self.devices.get(endpoint.resource, {}), "Unhealthy")
                self._lock.notify_all()

    def cut_stream(self, resource: str) -> None:
        """Cancel the open ListAndWatch stream of ``resource``."""
        with self._lock:
            endpoint = self._endpoints[resource]
        assert endpoint.stream is not None
        endpoint.stream.cancel()

    # ------------------------------------------------------------------ queries
    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Wait until ``predicate()`` (evaluated under the lock) holds; False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
            return True

    def healthy(self, resource: str) -> list[str]:
        """Healthy IDs of ``resource`` in advertised order."""
        with self._lock:
            return [i for i, h in self.devices.get(resource, {}).items() if h == "Healthy"]

    def endpoint(self, resource: str) -> _Endpoint:
        """The registered plugin endpoint of ``resource``."""
        with self._lock:
            return self._endpoints[resource]

    # ------------------------------------------------------------------ allocation
    def preferred(self, resource: str, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container."""
        reply = self.endpoint(resource).stub.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
            dp.ContainerPreferredAllocationRequest(available_deviceIDs=list(available),
                                                   must_include_deviceIDs=list(must), allocation_size=size)]),
            timeout=5)
        return list(reply.container_responses[0].deviceIDs)

    def allocate(self, resource: str, ids: Sequence[str]) -> dp.ContainerAllocateResponse:
        """Allocate with one ContainerAllocateRequest holding ``ids``; returns element [0] as kubelet does.
        Raises grpc.RpcError when the plugin refuses."""
        reply = self.endpoint(resource).stub.Allocate(
            dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devicesIDs=list(ids))]), timeout=5)
        assert len(reply.container_responses) >= 1
        return reply.container_responses[0]

    def admit(self, resource: str, size: int) -> tuple[list[str], dp.ContainerAllocateResponse]:
        """Pick ``size`` free healthy IDs like kubelet (preferred allocation first) and Allocate them."""
        with self._lock:
            taken = self.allocated.setdefault(resource, set())
            free = [i for i, h in self.devices.get(resource, {}).items() if h == "Healthy" and i not in taken]
        if len(free) < size:
            raise RuntimeError(f"requested number of devices unavailable for {resource}: {len(free)} < {size}")
        chosen: list[str] = []
        if self.endpoint(resource).options.get_preferred_allocation_available:
            chosen = [i for i in self.preferred(resource, free, [], size) if i in free][:size]
        chosen += [i for i in free if i not in chosen][: size - len(chosen)]
        response = self.allocate(resource, chosen)
        with self._lock:
            self.allocated.setdefault(resource, set()).update(chosen)
        return chosen, response
