"""Simulated GPUs behind the GPU backend port (``ports.gpu_backend``)."""

from .backend import SimulatedGpuBackend
from .spec import GpuGroup, SpecError, build_inventory, load_file, mig_layouts, parse_spec

__all__ = ["GpuGroup", "SimulatedGpuBackend", "SpecError", "build_inventory", "load_file", "mig_layouts", "parse_spec"]
