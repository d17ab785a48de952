"""Client of kubelet's pod-resources API v1 (``PodResourcesLister.List``) over its unix socket
(``ports.pod_resources.PodResourcesLister``).

Each call carries a deadline (``timeout_s``); every gRPC failure becomes :class:`PodResourcesError`. The client
owns its channel when built by :meth:`GrpcPodResourcesLister.connect` and closes it in :meth:`close`.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from domain.exporter.attribution import PodContainerDevices
from ports.pod_resources import PodResourcesError

from ._pb.kubelet.podresources.v1 import api_pb2 as pr
from ._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from .client import unix_channel
from .errors import truncate

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""Where kubelet serves the pod-resources API."""


def containers_from_pb(reply: pr.ListPodResourcesResponse) -> tuple[PodContainerDevices, ...]:
    """Domain rows of a ``List`` reply: one per container, its device IDs of every resource in reply order."""
    return tuple(
        PodContainerDevices(
            namespace=pod.namespace, pod=pod.name, container=container.name,
            device_ids=[i for devices in container.devices for i in devices.device_ids],
        )
        for pod in reply.pod_resources for container in pod.containers
    )


class GrpcPodResourcesLister:
    """``PodResourcesLister`` over gRPC (module docstring)."""

    def __init__(self, channel: grpc.Channel, *, timeout_s: float = 5.0, owns_channel: bool = False) -> None:
        self._channel = channel
        self._stub = pr_grpc.PodResourcesListerStub(channel)
        self._timeout_s = timeout_s
        self._owns_channel = owns_channel

    @classmethod
    def connect(cls, socket_path: str | Path, *, timeout_s: float = 5.0) -> GrpcPodResourcesLister:
        """A client owning a new channel to ``socket_path`` (connects lazily)."""
        return cls(unix_channel(socket_path), timeout_s=timeout_s, owns_channel=True)

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """``List``; raises :class:`PodResourcesError`."""
        try:
            reply = self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            details = error.details() if isinstance(error, grpc.Call) else str(error)
            raise PodResourcesError(f"kubelet pod-resources List: {code}: {truncate(details or '')}") from error
        return containers_from_pb(reply)

    def close(self) -> None:
        """Close the channel when owned."""
        if self._owns_channel:
            self._channel.close()
