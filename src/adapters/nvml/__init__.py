"""Real GPUs through NVML (``pynvml`` from ``nvidia-ml-py``) behind the GPU backend port."""

from .backend import NvmlGpuBackend
from .procfs import container_of_pid, pod_uid_of_pid

__all__ = ["NvmlGpuBackend", "container_of_pid", "pod_uid_of_pid"]
