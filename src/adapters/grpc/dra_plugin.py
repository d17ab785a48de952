"""Kubelet DRA plugin API (``proto/kubelet/dra/v1``) and plugin registration (``proto/kubelet/pluginregistration/v1``):
the two servers of a DRA driver's kubelet plugin.

Protocol facts followed (k8s.io/kubelet ``pkg/apis/dra/v1`` and ``pkg/apis/pluginregistration/v1``; kubelet's
plugin manager): the registration socket ``<plugins_registry>/<driver>-reg.sock`` serves ``Registration.GetInfo``
(type ``DRAPlugin``, name = the driver, endpoint = the DRA socket's path, supported versions
:data:`SUPPORTED_VERSIONS`, newest first) and ``NotifyRegistrationStatus`` (logged); the DRA socket
``<plugins>/<driver>/dra.sock`` serves ``DRAPlugin`` under both service names ``k8s.io.kubelet.pkg.apis.dra.v1``
and ``…v1beta1`` (their messages differ only by v1's optional ``Device.share_id``, field 5, which a v1beta1
kubelet skips, so v1's stubs serve both). Every claim of a request gets an entry in the response map, with an
``error`` when it failed; an RPC fails as a whole only for a malformed claim identity (INVALID_ARGUMENT).

:class:`DraPluginServer` owns both servers and one thread pool; ``stop`` removes both sockets.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from domain.dra.claims import ClaimRef
from domain.errors import InvalidRequestError
from ports.dra_plugin import DraPluginHandler

from ._pb.kubelet.dra.v1 import api_pb2 as dra
from ._pb.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from ._pb.kubelet.pluginregistration.v1 import api_pb2 as reg
from ._pb.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from .client import unix_target
from .sockets import prepare_socket_path

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver (pluginregistration ``DRAPlugin`` constant)."""

SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""Services advertised in ``PluginInfo.supported_versions``, newest first (kubelet picks the first it knows)."""

V1BETA1_SERVICE = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"


def registration_socket(registry_dir: Path, driver: str) -> Path:
    """``<registry_dir>/<driver>-reg.sock``."""
    return registry_dir / f"{driver}-reg.sock"


def dra_socket(plugins_dir: Path, driver: str) -> Path:
    """``<plugins_dir>/<driver>/dra.sock``."""
    return plugins_dir / driver / "dra.sock"


def _claims(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class DraServicer(dra_grpc.DRAPluginServicer):
    """``DRAPlugin`` over a :class:`DraPluginHandler` (module docstring)."""

    def __init__(self, handler: DraPluginHandler) -> None:
        self._handler = handler

    def NodePrepareResources(  # noqa: N802 (proto RPC name)
            self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext,
    ) -> dra.NodePrepareResourcesResponse:
        """Prepare every claim; each gets its devices or an error."""
        try:
            claims = _claims(request.claims)
        except InvalidRequestError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"NodePrepareResources: {error}")
        response = dra.NodePrepareResourcesResponse()
        for uid, outcome in self._handler.prepare(claims).items():
            entry = response.claims[uid]
            if outcome.prepared is None:
                entry.error = outcome.error
                continue
            for device in outcome.prepared.devices:
                item = entry.devices.add(request_names=list(device.requests), pool_name=device.pool,
                                         device_name=device.device, cdi_device_ids=list(device.cdi_ids))
                if device.share_id is not None:
                    item.share_id = device.share_id
        return response

    def NodeUnprepareResources(  # noqa: N802 (proto RPC name)
            self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext,
    ) -> dra.NodeUnprepareResourcesResponse:
        """Unprepare every claim; each gets an entry, with an error when it failed."""
        try:
            claims = _claims(request.claims)
        except InvalidRequestError as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"NodeUnprepareResources: {error}")
        response = dra.NodeUnprepareResourcesResponse()
        for uid, error_text in self._handler.unprepare(claims).items():
            response.claims[uid].error = error_text
        return response


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """pluginregistration ``Registration`` for one DRA driver; ``on_status(registered, error)`` is told kubelet's
    verdict."""

    def __init__(self, driver: str, endpoint: Path, on_status: Callable[[bool, str], None]) -> None:
        self._info = reg.PluginInfo(type=PLUGIN_TYPE, name=driver, endpoint=str(endpoint),
                                    supported_versions=list(SUPPORTED_VERSIONS))
        self._on_status = on_status

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802 (proto RPC name)
        """The plugin's type, name, DRA endpoint and versions."""
        return self._info

    def NotifyRegistrationStatus(  # noqa: N802 (proto RPC name)
            self, request: reg.RegistrationStatus, context: grpc.ServicerContext,
    ) -> reg.RegistrationStatusResponse:
        """Log kubelet's verdict and pass it on."""
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s", self._info.name)
        else:
            log.error("kubelet refused DRA driver %s: %s", self._info.name, request.error)
        self._on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


def _v1beta1_handler(servicer: DraServicer) -> grpc.GenericRpcHandler:
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
            servicer.NodePrepareResources, request_deserializer=dra.NodePrepareResourcesRequest.FromString,
            response_serializer=dra.NodePrepareResourcesResponse.SerializeToString),
        "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
            servicer.NodeUnprepareResources, request_deserializer=dra.NodeUnprepareResourcesRequest.FromString,
            response_serializer=dra.NodeUnprepareResourcesResponse.SerializeToString),
    }
    return grpc.method_handlers_generic_handler(V1BETA1_SERVICE, handlers)


class DraPluginServer:
    """Serves the DRA service on ``dra_path`` and the registration service on ``registration_path``.

    ``start`` serves the DRA socket first, then the registration socket (kubelet dials the endpoint as soon as it
    sees the registration socket); it replaces stale sockets (only sockets) and raises OSError when it cannot
    bind. ``stop`` stops both and removes their sockets; idempotent.
    """

    def __init__(self, *, driver: str, handler: DraPluginHandler, dra_path: Path, registration_path: Path,
                 on_status: Callable[[bool, str], None] = lambda _ok, _error: None, max_workers: int = 4) -> None:
        self.dra_path = dra_path
        self.registration_path = registration_path
        self._executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ljrk-dra")
        self._dra = grpc.server(self._executor)
        servicer = DraServicer(handler)
        dra_grpc.add_DRAPluginServicer_to_server(servicer, self._dra)
        self._dra.add_generic_rpc_handlers((_v1beta1_handler(servicer),))
        self._registration = grpc.server(self._executor)
        reg_grpc.add_RegistrationServicer_to_server(RegistrationServicer(driver, dra_path, on_status),
                                                    self._registration)
        self._started = False

    def start(self) -> None:
        """Bind and serve (class docstring)."""
        for server, path in ((self._dra, self.dra_path), (self._registration, self.registration_path)):
            prepare_socket_path(path, refuse_live=True, owner="another DRA plugin")
            if server.add_insecure_port(unix_target(path)) == 0:
                raise OSError(f"cannot bind the DRA plugin server to unix socket {path}")
            server.start()
        self._started = True

    def stop(self, grace_s: float = 0.5) -> None:
        """Stop serving (class docstring)."""
        if not self._started:
            return
        self._started = False
        self._registration.stop(grace_s).wait()
        self._dra.stop(grace_s).wait()
        self._executor.shutdown(wait=True)
        for path in (self.registration_path, self.dra_path):
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
            except FileNotFoundError:
                pass
