"""MPS enforcement on a real GPU (marker ``gpu``; ``LJRK_GPU_TESTS=1`` on a machine with an NVIDIA GPU, its driver's
``nvidia-cuda-mps-control`` and root).

Behaviour covered: the node's MPS control daemon, started on a pipe directory of the test's own, holds a client
that carries the environment the Runtime hands an MPS node's container (:func:`domain.runtime.mps.mps_envs` for a
grant of 25 % and 256 MiB) to its memory limit: a 128 MiB device allocation succeeds, a 512 MiB one fails with
CUDA_ERROR_OUT_OF_MEMORY, while the same client without the MPS variables allocates 512 MiB. The client is a
short Python program calling the driver API through ctypes (libcuda.so.1), so no CUDA toolkit is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.gpu import GpuUuid
from domain.runtime.mps import MPS_PIPE_DIRECTORY, mps_envs
from domain.runtime.types import GrantedGpu
from domain.units import MiB

pytestmark = pytest.mark.gpu

CLIENT = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def check(code, what):
    if code != 0:
        print(f"{what} {code}"); sys.exit(3)
check(cuda.cuInit(0), "cuInit")
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
check(cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device), "cuCtxCreate")
code = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(sys.argv[1]) * 1024 * 1024))
print(f"cuMemAlloc {code}")
sys.exit(0 if code == 0 else 2 if code == 2 else 4)
"""
"""Allocates ``argv[1]`` MiB on device 0: exit 0 done, 2 CUDA_ERROR_OUT_OF_MEMORY, 3/4 any other failure."""


@pytest.fixture
def mps_daemon(tmp_path: Path) -> Iterator[Path]:
    if os.environ.get("LJRK_GPU_TESTS") != "1":
        pytest.skip("needs LJRK_GPU_TESTS=1 and a GPU")
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("nvidia-cuda-mps-control is not installed (it ships with the NVIDIA driver)")
    pipes, logs = tmp_path / "pipes", tmp_path / "logs"
    pipes.mkdir()
    logs.mkdir()
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipes), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    subprocess.run([control, "-d"], env=env, check=True, timeout=30)
    try:
        yield pipes
    finally:
        subprocess.run([control], input="quit\n", text=True, env=env, timeout=30, check=False)


def allocate(mib: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLIENT, str(mib)], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_mps_daemon_holds_a_client_to_its_granted_memory(mps_daemon: Path) -> None:
    grant = GrantedGpu(index=0, uuid=GpuUuid("GPU-any"), core_milli=250, memory_bytes=256 * MiB)
    env = {**mps_envs([grant]), "CUDA_MPS_PIPE_DIRECTORY": str(mps_daemon)}  # the host side of the mount
    assert mps_envs([grant])["CUDA_MPS_PIPE_DIRECTORY"] == MPS_PIPE_DIRECTORY
    within = allocate(128, env)
    assert within.returncode == 0, within.stdout + within.stderr
    beyond = allocate(512, env)
    assert beyond.returncode == 2, beyond.stdout + beyond.stderr
    alone = allocate(512, {"CUDA_MPS_PIPE_DIRECTORY": str(mps_daemon / "none")})  # no daemon there: plain CUDA
    assert alone.returncode == 0, alone.stdout + alone.stderr
