"""The Runtime's unix socket gets an explicit mode (``adapters.grpc.server.RUNTIME_SOCKET_MODE``, 0o660), not the
one the process umask would leave.

Behaviours covered:
- with a permissive umask (0o000, which would leave the socket world-writable: anyone on the node could connect)
  the bound socket is 0o660 and the owner still connects; the mode is set before the server serves;
- ``socket_mode`` chooses another mode (0o600).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from adapters.grpc import GrpcNodeRuntime, GrpcRuntimeServer
from adapters.grpc.server import RUNTIME_SOCKET_MODE
from domain.gpu import Gpu, GpuUuid
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime

GPUS = [Gpu(0, GpuUuid("GPU-sock-0"), "A100", 16 * GiB)]



def _serve_under_umask(path: Path, umask: int, **kwargs: int) -> GrpcRuntimeServer:
    server = GrpcRuntimeServer(path, InProcessRuntime(GPUS), **kwargs)
    previous = os.umask(umask)
    try:
        server.start()
    finally:
        os.umask(previous)
    return server


def test_socket_is_0660_whatever_the_umask(sock_dir: Path) -> None:
    path = sock_dir / "runtime.sock"
    server = _serve_under_umask(path, 0o000)
    try:
        mode = path.lstat().st_mode
        assert stat.S_ISSOCK(mode)
        assert (stat.S_IMODE(mode), RUNTIME_SOCKET_MODE) == (0o660, 0o660)
        client = GrpcNodeRuntime.connect(path, timeout_s=5)
        try:
            client.wait_ready(5)
            assert [d.gpu.uuid for d in client.list_devices()] == ["GPU-sock-0"]
        finally:
            client.close()
    finally:
        server.stop(0)
    assert not path.exists()


def test_socket_mode_can_be_narrowed(sock_dir: Path) -> None:
    path = sock_dir / "runtime.sock"
    server = _serve_under_umask(path, 0o022, socket_mode=0o600)
    try:
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
    finally:
        server.stop(0)
