"""Client of kubelet's pod-resources API v1 (``PodResourcesLister.List`` and ``Get``) over its unix socket
(``ports.pod_resources.PodResourcesLister``).

``pod_containers`` calls ``Get`` (kubelet 1.27+). A kubelet without it answers UNIMPLEMENTED (older than 1.27) or,
with the ``KubeletPodResourcesGet`` gate off (its default on 1.27-1.33), UNKNOWN "PodResources API Get method
disabled" (pkg/kubelet/apis/podresources/server_v1.go): the client then answers from ``List`` and keeps using
``List`` for that channel. Kubelet
answers ``Get`` for a pod it does not know with a plain error (status UNKNOWN, "pod <name> in namespace <ns> not
found"), which becomes :class:`PodNotFoundError`, as does a pod absent from ``List``.

Each call carries a deadline (``timeout_s``); every other gRPC failure becomes :class:`PodResourcesError`. The client
owns its channel when built by :meth:`GrpcPodResourcesLister.connect` and closes it in :meth:`close`.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from domain.exporter.attribution import PodContainerDevices
from ports.pod_resources import PodNotFoundError, PodResourcesError

from ._pb.kubelet.podresources.v1 import api_pb2 as pr
from ._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from .client import unix_channel
from .errors import truncate

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""Where kubelet serves the pod-resources API."""
GET_DISABLED = "PodResources API Get method disabled"
"""What kubelet 1.27-1.33 answers ``Get`` with while its ``KubeletPodResourcesGet`` gate is off (status UNKNOWN)."""


def pod_from_pb(pod: pr.PodResources) -> tuple[PodContainerDevices, ...]:
    """Domain rows of one pod: one per container, its device IDs of every resource in reply order and the DRA
    claims it uses (``dynamic_resources``: claim namespace and name; kubelet 1.27+, filled by default from 1.34)."""
    return tuple(
        PodContainerDevices(
            namespace=pod.namespace, pod=pod.name, container=container.name,
            device_ids=[i for devices in container.devices for i in devices.device_ids],
            claims=[(claim.claim_namespace, claim.claim_name) for claim in container.dynamic_resources],
        )
        for container in pod.containers
    )


def containers_from_pb(reply: pr.ListPodResourcesResponse) -> tuple[PodContainerDevices, ...]:
    """Domain rows of a ``List`` reply (:func:`pod_from_pb` of each pod in reply order)."""
    return tuple(row for pod in reply.pod_resources for row in pod_from_pb(pod))


def _error(call: str, error: grpc.RpcError) -> PodResourcesError:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    return PodResourcesError(f"kubelet pod-resources {call}: {code}: {truncate(details or '')}")


class GrpcPodResourcesLister:
    """``PodResourcesLister`` over gRPC (module docstring)."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = 5.0, owns_channel: bool = False) -> None:
        self._channel = channel
        self._stub = pr_grpc.PodResourcesListerStub(channel)
        self._timeout_s = timeout_s
        self._owns_channel = owns_channel
        self.get_supported: bool | None = None
        """Whether kubelet serves ``Get`` (None until the first :meth:`pod_containers`)."""

    @classmethod
    def connect(cls, socket_path: str | Path, *, timeout_s: float = 5.0) -> GrpcPodResourcesLister:
        """A client owning a new channel to ``socket_path`` (connects lazily)."""
        return cls(unix_channel(socket_path), timeout_s=timeout_s, owns_channel=True)

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """``List``; raises :class:`PodResourcesError`."""
        try:
            reply = self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            raise _error("List", error) from error
        return containers_from_pb(reply)

    def pod_containers(self, namespace: str, pod: str) -> tuple[PodContainerDevices, ...]:
        """``Get``, or ``List`` filtered to the pod (module docstring); raises :class:`PodNotFoundError` or
        :class:`PodResourcesError`."""
        if self.get_supported is not False:
            request = pr.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
            try:
                reply = self._stub.Get(request, timeout=self._timeout_s)
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                details = (error.details() if isinstance(error, grpc.Call) else "") or ""
                if code is grpc.StatusCode.UNKNOWN and details.endswith(" not found"):
                    self.get_supported = True
                    raise PodNotFoundError(f"kubelet pod-resources Get: {truncate(details)}") from error
                gate_off = code is grpc.StatusCode.UNKNOWN and details == GET_DISABLED
                if code is not grpc.StatusCode.UNIMPLEMENTED and not gate_off:
                    raise _error("Get", error) from error
                self.get_supported = False
            else:
                self.get_supported = True
                return pod_from_pb(reply.pod_resources)
        rows = tuple(c for c in self.list_containers() if c.namespace == namespace and c.pod == pod)
        if not rows:
            raise PodNotFoundError(f"kubelet pod-resources List: pod {pod} in namespace {namespace} not found")
        return rows

    def close(self) -> None:
        """Close the channel when owned."""
        if self._owns_channel:
            self._channel.close()
