"""gRPC adapters: the node Runtime and config service clients and servers (``proto/ljrk``), and the generated
code of every proto we speak (``_pb``, produced by ``scripts/gen_proto.py``; kubelet APIs included)."""

from .client import DEFAULT_TIMEOUT_S, GrpcNodeConfig, GrpcNodeRuntime, unix_channel, unix_target
from .server import ConfigServicer, GrpcRuntimeServer, RuntimeServicer

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ConfigServicer",
    "GrpcNodeConfig",
    "GrpcNodeRuntime",
    "GrpcRuntimeServer",
    "RuntimeServicer",
    "unix_channel",
    "unix_target",
]
