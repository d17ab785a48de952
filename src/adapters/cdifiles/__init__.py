"""CDI spec files and the host NVIDIA driver's files (``ports.cdi``): :class:`CdiSpecDirectory` writes the node's
spec as JSON into a CDI spec directory, :class:`ProcfsGpuDevices` reads GPU minors from ``/proc/driver/nvidia``."""

from .host import ProcfsGpuDevices
from .spec import DEFAULT_CDI_DIR, SPEC_FILE_NAME, CdiSpecDirectory, spec_from_json, spec_to_json

__all__ = ["DEFAULT_CDI_DIR", "SPEC_FILE_NAME", "CdiSpecDirectory", "ProcfsGpuDevices", "spec_from_json",
           "spec_to_json"]
