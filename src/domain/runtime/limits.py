"""What a container's environment says about its GPUs and limits (the Allocate response's ``envs``).

* ``NVIDIA_VISIBLE_DEVICES``: the granted GPUs' UUIDs, comma-separated, in plan order (the NVIDIA container
  toolkit exposes exactly these; by UUID, so a re-enumerated node cannot hand over the wrong GPU). Inside the
  container CUDA numbers them 0..n-1 in this order; ``<i>`` below is that container-local ordinal.
* Our own limits, exact: ``LJRK_GPU_UUID_<i>``, ``LJRK_CORE_MILLI_<i>`` (milli-GPU), ``LJRK_CORE_PERCENT_<i>``
  (see :attr:`GrantedGpu.core_percent`), ``LJRK_MEMORY_LIMIT_BYTES_<i>``; plus ``LJRK_POD_UID`` and
  ``LJRK_CONTAINER_NAME`` so node tools can attribute a process to its allocation.
* HAMi-core compatible limits (the open-source LD_PRELOAD enforcement library, github.com/Project-HAMi/HAMi-core):
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` as whole MiB with HAMi's ``m`` suffix (``3000m``), floored so the limit never exceeds
  the grant, and at least ``1m``; ``CUDA_DEVICE_SM_LIMIT``, one integer percent for the whole container (HAMi sets one
  value per container): the smallest core percent of its GPUs, so no GPU gets more than its grant. Never ``0``, which
  HAMi-core reads as "unlimited" (failure case B09).
* MIG containers (:func:`mig_envs`): ``NVIDIA_VISIBLE_DEVICES`` lists the granted instances' ``MIG-…`` UUIDs in
  plan order (the NVIDIA container toolkit accepts MIG device UUIDs there); per instance ``LJRK_MIG_UUID_<i>``,
  ``LJRK_MIG_PROFILE_<i>`` (canonical profile), ``LJRK_MIG_GPU_UUID_<i>`` (parent GPU) and
  ``LJRK_MIG_MEMORY_BYTES_<i>``; no HAMi-core limits, since MIG isolates compute and memory in hardware.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.runtime.types import GrantedGpu, MigInstanceInfo
from domain.units import MiB

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
HAMI_MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT_{}"
HAMI_SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
ALLOCATION_ANNOTATION = "lj-runtimekit.io/runtime-allocation"
"""Container annotation naming the allocation record, ``<pod UID>/<container>``."""


def hami_memory_limit(memory_bytes: int) -> str:
    """HAMi-core's memory limit text for ``memory_bytes``: ``"<MiB>m"``, floored, at least ``"1m"``."""
    return f"{max(1, memory_bytes // MiB)}m"


def limit_envs(*, pod_uid: str, container: str, grants: Sequence[GrantedGpu]) -> dict[str, str]:
    """The environment for ``grants`` (module docstring). ``grants`` must be non-empty (a ValueError otherwise)."""
    if not grants:
        raise ValueError("limit_envs needs at least one grant")
    envs = {
        VISIBLE_DEVICES: ",".join(g.uuid for g in grants),
        "LJRK_POD_UID": pod_uid,
        "LJRK_CONTAINER_NAME": container,
        HAMI_SM_LIMIT: str(min(g.core_percent for g in grants)),
    }
    for ordinal, grant in enumerate(grants):
        envs[f"LJRK_GPU_UUID_{ordinal}"] = grant.uuid
        envs[f"LJRK_CORE_MILLI_{ordinal}"] = str(grant.core_milli)
        envs[f"LJRK_CORE_PERCENT_{ordinal}"] = str(grant.core_percent)
        envs[f"LJRK_MEMORY_LIMIT_BYTES_{ordinal}"] = str(grant.memory_bytes)
        envs[HAMI_MEMORY_LIMIT.format(ordinal)] = hami_memory_limit(grant.memory_bytes)
    return envs


def mig_envs(*, pod_uid: str, container: str, instances: Sequence[MigInstanceInfo]) -> dict[str, str]:
    """The environment for MIG ``instances`` (module docstring). ``instances`` must be non-empty (ValueError)."""
    if not instances:
        raise ValueError("mig_envs needs at least one instance")
    envs = {
        VISIBLE_DEVICES: ",".join(i.uuid for i in instances),
        "LJRK_POD_UID": pod_uid,
        "LJRK_CONTAINER_NAME": container,
    }
    for ordinal, instance in enumerate(instances):
        envs[f"LJRK_MIG_UUID_{ordinal}"] = instance.uuid
        envs[f"LJRK_MIG_PROFILE_{ordinal}"] = instance.profile
        envs[f"LJRK_MIG_GPU_UUID_{ordinal}"] = instance.gpu_uuid
        envs[f"LJRK_MIG_MEMORY_BYTES_{ordinal}"] = str(instance.memory_bytes)
    return envs
