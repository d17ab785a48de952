"""Kubelet's pod-resources API v1 ``List`` and ``Get`` (k8s.io/kubelet ``pkg/apis/podresources/v1/api.proto``,
vendored at v1.37.2) on ``<pod-resources-dir>/kubelet.sock``.

``Get`` answers one pod's entry as ``List`` has it, and a pod it does not know with status UNKNOWN "pod <name> in
namespace <ns> not found" (kubelet returns a plain Go error there). With ``get=False`` it answers UNIMPLEMENTED, as a
kubelet before 1.27 does (for clients' fallback to ``List``). ``GetAllocatableResources`` is not emulated
(UNIMPLEMENTED).

``List`` reports every active pod — admitted and not yet ended — with each app container and, per resource, the
device IDs kubelet allocated to it (init containers are not listed, as in kubelet; a container without devices is
listed with none) and the DRA claims it uses (``dynamic_resources``: claim name and namespace, per device the
driver, pool, device, CDI names and share ID the driver's ``NodePrepareResources`` answered; every claim of the
pod is listed for every app container, see :mod:`.dra`). Topology and CPU IDs are left empty. Like kubelet, the
server limits calls to ``qps`` per second with bursts of ``burst`` and answers RESOURCE_EXHAUSTED "rejected by rate
limit" beyond that.
"""

from __future__ import annotations

import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from .._pb.kubelet.podresources.v1 import api_pb2 as pr
from .._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from ..client import unix_target
from ..sockets import prepare_socket_path
from .admission import ClaimDevice, ContainerClaim, PodAdmission

POD_RESOURCES_SOCKET_NAME = "kubelet.sock"
"""The socket's file name in the pod-resources directory (``/var/lib/kubelet/pod-resources/kubelet.sock``)."""

DEFAULT_QPS = 100.0
"""Kubelet's pod-resources rate limit, calls per second (``podresources.DefaultQPS``)."""

DEFAULT_BURST = 10
"""Kubelet's pod-resources burst (``podresources.DefaultBurstTokens``)."""


def _claim_resource(device: ClaimDevice) -> pr.ClaimResource:
    resource = pr.ClaimResource(cdi_devices=[pr.CDIDevice(name=name) for name in device.cdi_ids],
                                driver_name=device.driver, pool_name=device.pool, device_name=device.device)
    if device.share_id is not None:
        resource.share_id = device.share_id
    return resource


def _dynamic_resource(claim: ContainerClaim) -> pr.DynamicResource:
    return pr.DynamicResource(claim_name=claim.name, claim_namespace=claim.namespace,
                              claim_resources=[_claim_resource(device) for device in claim.devices])


def pod_resources(pod: PodAdmission) -> pr.PodResources:
    """One pod's entry (module docstring): one ContainerResources per app container, one ContainerDevices per
    resource it holds, one DynamicResource per claim it uses."""
    return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=[
        pr.ContainerResources(name=container.name, devices=[
            pr.ContainerDevices(resource_name=resource, device_ids=list(ids))
            for resource, ids in container.devices.items()
        ], dynamic_resources=[_dynamic_resource(claim) for claim in container.claims])
        for container in pod.app_containers
    ])


def list_response(pods: Sequence[PodAdmission]) -> pr.ListPodResourcesResponse:
    """The ``List`` reply for ``pods``: :func:`pod_resources` of each."""
    return pr.ListPodResourcesResponse(pod_resources=[pod_resources(pod) for pod in pods])


class _TokenBucket:
    """``qps`` tokens per second up to ``burst``; thread-safe."""

    def __init__(self, qps: float, burst: int) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._qps)
            self._at = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


class _Servicer(pr_grpc.PodResourcesListerServicer):
    def __init__(self, pods: Callable[[], Sequence[PodAdmission]], limiter: _TokenBucket | None, get: bool) -> None:
        self._pods = pods
        self._limiter = limiter
        self._get = get

    def _limit(self, context: grpc.ServicerContext) -> None:
        if self._limiter is not None and not self._limiter.take():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:  # noqa: N802 (proto RPC name)
        self._limit(context)
        return list_response(self._pods())

    def Get(self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:  # noqa: N802 (proto RPC name)
        if not self._get:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self._limit(context)
        for pod in self._pods():
            if pod.namespace == request.pod_namespace and pod.name == request.pod_name:
                return pr.GetPodResourcesResponse(pod_resources=pod_resources(pod))
        context.abort(grpc.StatusCode.UNKNOWN,
                      f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        raise AssertionError("context.abort raises")  # for type checkers and linters

    def GetAllocatableResources(  # noqa: N802 (proto RPC name)
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetAllocatableResources is not emulated")


class PodResourcesServer:
    """Serves pod-resources ``List`` on ``<directory>/kubelet.sock`` over ``pods`` (called per request; e.g.
    :meth:`DeviceManager.admitted <.devicemanager.DeviceManager.admitted>`). ``qps``/``burst`` set the rate limit
    (``qps`` None = unlimited); ``get=False`` answers ``Get`` with UNIMPLEMENTED (a kubelet before 1.27).

    :meth:`start` replaces a stale socket and serves (raises OSError when it cannot bind); :meth:`stop` stops,
    joins the workers and removes the socket (idempotent); :meth:`restart` is a kubelet restart (new inode).
    """

    def __init__(self, directory: Path, pods: Callable[[], Sequence[PodAdmission]], *,
                 qps: float | None = DEFAULT_QPS, burst: int = DEFAULT_BURST, max_workers: int = 4,
                 get: bool = True) -> None:
        self.directory = directory
        self._servicer = _Servicer(pods, None if qps is None else _TokenBucket(qps, burst), get)
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None

    @property
    def socket(self) -> Path:
        """``<directory>/kubelet.sock``."""
        return self.directory / POD_RESOURCES_SOCKET_NAME

    def start(self) -> None:
        """Serve (class docstring); a no-op while serving."""
        with self._lock:
            if self._server is not None:
                return
            prepare_socket_path(self.socket, refuse_live=False)
            executor = futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="kubelet-emu-pr")
            server = grpc.server(executor)
            pr_grpc.add_PodResourcesListerServicer_to_server(self._servicer, server)
            if server.add_insecure_port(unix_target(self.socket)) == 0:
                executor.shutdown(wait=False)
                raise OSError(f"cannot bind pod-resources to {self.socket}")
            server.start()
            self._server, self._executor = server, executor

    def stop(self) -> None:
        """Stop serving (class docstring)."""
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
        if server is None:
            return
        server.stop(0).wait()
        if executor is not None:
            executor.shutdown(wait=True)
        try:
            if stat.S_ISSOCK(self.socket.lstat().st_mode):
                self.socket.unlink()
        except FileNotFoundError:
            pass

    def restart(self) -> None:
        """Stop and serve again on a new socket."""
        self.stop()
        self.start()
