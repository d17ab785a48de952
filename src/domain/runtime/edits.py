"""What a container gets besides environment variables: device nodes and mounts (the Allocate response's
``devices`` and ``mounts``, kubelet device plugin API v1beta1 ``ContainerAllocateResponse``).

Three optional edits, all off by default, chosen per node by the Runtime's flags:

* **Device nodes** (``device_nodes=True``): ``/dev/nvidia<minor>`` of every granted GPU (the minor number comes
  from NVML, ``nvmlDeviceGetMinorNumber``) plus the node-wide control nodes that exist on the host
  (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``), each with permissions ``rw``. The NVIDIA
  container toolkit injects the same nodes from ``NVIDIA_VISIBLE_DEVICES``, so nodes that run it leave this off
  (NVIDIA's own device plugin defaults to the same "envvar" strategy); nodes without the toolkit turn it on. A
  granted GPU whose minor number is unknown is an :class:`InvalidAllocationError` — never a container that
  silently sees no GPU.
* **HAMi-core enforcement** (``hami_library`` set): the host's ``libvgpu.so`` mounted read-only at
  :data:`HAMI_LIBRARY_PATH` and a host file listing that path mounted read-only at ``/etc/ld.so.preload``, so the
  dynamic loader preloads the library into every process of the container and the ``CUDA_DEVICE_*_LIMIT`` envs
  (``domain.runtime.limits``) are enforced. These are the paths the open-source HAMi device plugin uses
  (HAMi-core, github.com/Project-HAMi/HAMi-core). The Runtime writes the preload file at start.

* **MPS enforcement** (``mps_pipe_dir`` set): the node's MPS pipe directory mounted read-write
  (:func:`domain.runtime.mps.mps_mount`), with the MPS client environment of :mod:`domain.runtime.mps`. Exclusive
  with HAMi-core: one mechanism enforces a node's shares.

A MIG container gets the device nodes of its instances' parent GPUs (:meth:`ContainerEdits.devices_for`) and no
mounts. The MIG capability nodes (``/dev/nvidia-caps/nvidia-cap<N>`` of each GPU and compute instance, listed in
``/proc/driver/nvidia-caps/mig-minors``) are not added: nodes running MIG need the NVIDIA container toolkit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.gpu import GpuUuid
from domain.runtime.errors import InvalidAllocationError
from domain.runtime.mps import mps_mount
from domain.runtime.types import DeviceSpec, GrantedGpu, Mount

HAMI_LIBRARY_PATH = "/usr/local/vgpu/libvgpu.so"
"""Where HAMi-core's library appears inside the container."""

LD_SO_PRELOAD = "/etc/ld.so.preload"
"""The dynamic loader's system-wide preload list (ld.so(8))."""

CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
"""Node-wide NVIDIA device nodes a CUDA process opens besides its GPUs' ``nvidia<minor>``."""


def _str_tuple(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class ContainerEdits:
    """The Runtime's per-node choice of device nodes and mounts (module docstring).

    ``device_nodes``: add device specs. ``dev_root``: the host's device directory (``/dev``). ``control_devices``:
    names under ``dev_root`` added to every allocation (the entrypoint keeps only those that exist).
    ``hami_library``: host path of HAMi-core's ``libvgpu.so`` or None; ``preload_file``: host path of the file
    holding :data:`HAMI_LIBRARY_PATH` (required with ``hami_library``). ``mps_pipe_dir``: host path of the node's
    MPS pipe directory or None. Raises ValueError naming the field for relative paths, a library without a preload
    file, or both HAMi-core and MPS.
    """

    device_nodes: bool = False
    dev_root: str = "/dev"
    control_devices: tuple[str, ...] = attrs.field(default=CONTROL_DEVICES, converter=_str_tuple)
    hami_library: str | None = None
    preload_file: str | None = None
    mps_pipe_dir: str | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("dev_root", "hami_library", "preload_file", "mps_pipe_dir"):
            value = getattr(self, name)
            if value is not None and not value.startswith("/"):
                raise ValueError(f"{name}={value!r}: must be an absolute host path")
        if self.hami_library is not None and self.preload_file is None:
            raise ValueError(f"hami_library={self.hami_library!r} needs preload_file (the ld.so.preload to mount)")
        if self.hami_library is not None and self.mps_pipe_dir is not None:
            raise ValueError(f"hami_library={self.hami_library!r}, mps_pipe_dir={self.mps_pipe_dir!r}: one enforcement "
                             "per node, HAMi-core or MPS")

    def devices(self, grants: Sequence[GrantedGpu], minors: Mapping[GpuUuid, int]) -> tuple[DeviceSpec, ...]:
        """Device specs for ``grants`` (empty when ``device_nodes`` is off): one ``nvidia<minor>`` per GPU in
        grant order, then the control devices. Raises :class:`InvalidAllocationError` for a GPU without a known
        minor number."""
        return self.devices_for([grant.uuid for grant in grants], minors)

    def devices_for(self, uuids: Sequence[GpuUuid], minors: Mapping[GpuUuid, int]) -> tuple[DeviceSpec, ...]:
        """Device specs for the GPUs ``uuids`` in order (empty when ``device_nodes`` is off), then the control
        devices. Raises :class:`InvalidAllocationError` for a GPU without a known minor number."""
        if not self.device_nodes:
            return ()
        specs = []
        for uuid in uuids:
            minor = minors.get(uuid)
            if minor is None:
                raise InvalidAllocationError(f"GPU {uuid}: device minor number unknown; device specs cannot be built")
            path = f"{self.dev_root.rstrip('/')}/nvidia{minor}"
            specs.append(DeviceSpec(container_path=f"/dev/nvidia{minor}", host_path=path, permissions="rw"))
        for name in self.control_devices:
            specs.append(DeviceSpec(f"/dev/{name}", f"{self.dev_root.rstrip('/')}/{name}", "rw"))
        return tuple(specs)

    @property
    def hami_core(self) -> bool:
        """True when containers get HAMi-core (library and preload list), which enforces their share."""
        return self.hami_library is not None and self.preload_file is not None

    @property
    def mps(self) -> bool:
        """True when time-shared containers are MPS clients of the node's control daemon."""
        return self.mps_pipe_dir is not None

    def mounts(self) -> tuple[Mount, ...]:
        """The HAMi-core mounts (library and preload list, read-only), the MPS pipe directory, or none."""
        if self.mps_pipe_dir is not None:
            return (mps_mount(self.mps_pipe_dir),)
        if self.hami_library is None or self.preload_file is None:
            return ()
        return (
            Mount(container_path=HAMI_LIBRARY_PATH, host_path=self.hami_library, read_only=True),
            Mount(container_path=LD_SO_PRELOAD, host_path=self.preload_file, read_only=True),
        )
