"""MPS enforcement of a GPU share: what a container needs so the node's CUDA MPS control daemon holds it to its grant.

A node runs MPS when its operator starts ``nvidia-cuda-mps-control -d`` with ``CUDA_MPS_PIPE_DIRECTORY`` set to a
host directory and gives that directory to the Runtime (``ljrk runtime --mps-pipe-dir``). Every time-shared
container then gets (NVIDIA's *Multi-Process Service* guide, appendix "Environment Variables"):

* the pipe directory mounted read-write at :data:`MPS_PIPE_DIRECTORY` and ``CUDA_MPS_PIPE_DIRECTORY`` naming it, so
  its CUDA contexts connect to the node's daemon (a client that cannot reach it runs without MPS: the reason the
  environment policy of deploy/admission refuses every ``CUDA_MPS_*`` variable in a tenant's pod);
* ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: one integer percent for all of the container's GPUs, the smallest core
  percent among them (:attr:`GrantedGpu.core_percent`), so no GPU gets more than its grant; never below 1;
* ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: ``<ordinal>=<MiB>M`` per GPU, comma-separated, the ordinal being the
  container-local CUDA ordinal of :mod:`domain.runtime.limits` (plan order), the MiB floored so the limit never
  exceeds the grant, and at least 1.

MIG containers get none of this: MIG isolates compute and memory in hardware.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.runtime.types import GrantedGpu, Mount
from domain.units import MiB

MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"
"""Where the node's MPS pipe directory appears inside a container (the CUDA default pipe directory)."""

PIPE_DIRECTORY_ENV = "CUDA_MPS_PIPE_DIRECTORY"
THREAD_PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MEMORY_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


def mps_memory_limit(grants: Sequence[GrantedGpu]) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for ``grants`` in plan order: ``"0=<MiB>M,1=<MiB>M"`` (module
    docstring)."""
    return ",".join(f"{ordinal}={max(1, grant.memory_bytes // MiB)}M" for ordinal, grant in enumerate(grants))


def mps_envs(grants: Sequence[GrantedGpu]) -> dict[str, str]:
    """The MPS client environment for ``grants`` (module docstring). Raises ValueError for no grant."""
    if not grants:
        raise ValueError("mps_envs needs at least one grant")
    return {
        PIPE_DIRECTORY_ENV: MPS_PIPE_DIRECTORY,
        THREAD_PERCENTAGE_ENV: str(max(1, min(grant.core_percent for grant in grants))),
        MEMORY_LIMIT_ENV: mps_memory_limit(grants),
    }


def mps_mount(pipe_dir: str) -> Mount:
    """The node's MPS pipe directory ``pipe_dir`` (absolute host path) mounted read-write at
    :data:`MPS_PIPE_DIRECTORY`: clients write to the daemon's pipes."""
    return Mount(container_path=MPS_PIPE_DIRECTORY, host_path=pipe_dir, read_only=False)
