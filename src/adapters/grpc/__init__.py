"""gRPC adapters: the node Runtime and config service clients and servers (``proto/ljrk``), and the generated
code of every proto we speak (``_pb``, produced by ``scripts/gen_proto.py``; kubelet APIs included)."""

from .client import DEFAULT_TIMEOUT_S, GrpcNodeConfig, GrpcNodeRuntime, unix_channel, unix_target
from .device_plugin import (
    DEFAULT_PLUGIN_DIR,
    KUBELET_SOCKET,
    KubeletPluginServer,
    KubeletRegistrationError,
    register,
)
from .server import ConfigServicer, GrpcRuntimeServer, RuntimeServicer

__all__ = [
    "DEFAULT_PLUGIN_DIR",
    "DEFAULT_TIMEOUT_S",
    "KUBELET_SOCKET",
    "ConfigServicer",
    "GrpcNodeConfig",
    "GrpcNodeRuntime",
    "GrpcRuntimeServer",
    "KubeletPluginServer",
    "KubeletRegistrationError",
    "RuntimeServicer",
    "register",
    "unix_channel",
    "unix_target",
]
