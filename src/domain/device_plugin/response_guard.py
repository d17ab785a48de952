"""What the device plugin lets through from the Runtime's Allocate answer to kubelet (and the DRA plugin into a
claim's CDI spec): an allow-list of mounts and device nodes.

The Runtime is reached over a unix socket; whoever serves that socket (a compromised Job that replaced it, a buggy
Runtime) could answer mounts that put host paths into every GPU container. The plugin therefore forwards only
what it expects, and refuses the whole answer otherwise (the container does not start; the caller logs and
counts it):

* Mounts: exactly the HAMi-core mounts the plugin was configured for (``--hami-core-library`` and
  ``--hami-preload-file``, the same host paths the Runtime mounts): the library at
  :data:`domain.runtime.edits.HAMI_LIBRARY_PATH` and the preload list at ``/etc/ld.so.preload``, both read-only,
  built by the Runtime's own :class:`domain.runtime.edits.ContainerEdits`; or, on an MPS node (``--mps-pipe-dir``,
  the Runtime's too), the MPS pipe directory read-write at :data:`domain.runtime.mps.MPS_PIPE_DIRECTORY`. Without
  that configuration, no mount.
* Device specs: only NVIDIA device nodes, container path ``/dev/nvidia<suffix>`` (suffix of lower-case letters,
  digits and ``-``: ``nvidia0``, ``nvidiactl``, ``nvidia-uvm``, …; no further ``/``), host path the same name under
  the configured device root (``/dev``), permissions a subset of ``rwm``.

Environment variables, annotations and CDI names are not filtered here (env vars carry no host path; CDI names are
the plugin's own). The list judges the Runtime's answer only: the ``/dev/null`` mounts of the ``volume-mounts``
device-list strategy are added by the plugin after the check (:mod:`domain.device_plugin.device_list`), and the same
mount in the Runtime's answer is refused.
"""

from __future__ import annotations

import re

import attrs

from domain.device_plugin.matching import DevicePluginError
from domain.runtime.edits import ContainerEdits
from domain.runtime.types import ContainerAllocationResponse, DeviceSpec, Mount

NVIDIA_DEVICE = re.compile(r"/dev/nvidia[a-z0-9-]*")
"""Container paths of the device nodes the plugin forwards (matched whole)."""


class ForbiddenResponseError(DevicePluginError):
    """The Runtime's Allocate answer holds a mount or device spec outside the allow-list (module docstring)."""


@attrs.frozen
class ResponseAllowList:
    """The mounts and device nodes the plugin forwards (module docstring).

    ``hami_library``: host path of HAMi-core's ``libvgpu.so`` the Runtime mounts (None: no HAMi-core mounts
    allowed); ``preload_file``: host path of the Runtime's ``ld.so.preload`` (required with ``hami_library``);
    ``mps_pipe_dir``: host path of the node's MPS pipe directory (None: no MPS mount allowed); ``dev_root``: the
    host's device directory. Raises ValueError naming the field for a relative path, a library without its preload
    file, or HAMi-core with MPS.
    """

    hami_library: str | None = None
    preload_file: str | None = None
    dev_root: str = "/dev"
    mps_pipe_dir: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.preload_file is not None and self.hami_library is None:
            raise ValueError(f"preload_file={self.preload_file!r} needs hami_library (the library it preloads)")
        ContainerEdits(dev_root=self.dev_root, hami_library=self.hami_library, preload_file=self.preload_file,
                       mps_pipe_dir=self.mps_pipe_dir)

    @property
    def mounts(self) -> frozenset[Mount]:
        """The allowed mounts, exactly (container path, host path, read-only)."""
        edits = ContainerEdits(hami_library=self.hami_library, preload_file=self.preload_file,
                               mps_pipe_dir=self.mps_pipe_dir)
        return frozenset(edits.mounts())

    def device_allowed(self, spec: DeviceSpec) -> bool:
        """True for an NVIDIA device node under the configured device root with permissions within ``rwm``."""
        if NVIDIA_DEVICE.fullmatch(spec.container_path) is None:
            return False
        host = self.dev_root.rstrip("/") + spec.container_path.removeprefix("/dev")
        return spec.host_path == host and set(spec.permissions) <= set("rwm")

    def refused(self, response: ContainerAllocationResponse, *, devices: bool = True) -> list[str]:
        """Each mount and (with ``devices``) device spec of ``response`` outside the allow-list, described; empty
        when all pass."""
        allowed = self.mounts
        found = [f"mount host {m.host_path!r} at {m.container_path!r} (read_only={m.read_only})"
                 for m in response.mounts if m not in allowed]
        if devices:
            found += [f"device host {d.host_path!r} at {d.container_path!r} ({d.permissions!r})"
                      for d in response.devices if not self.device_allowed(d)]
        return found

    def check(self, response: ContainerAllocationResponse, *, label: str, devices: bool = True) -> None:
        """Pass ``response`` or raise :class:`ForbiddenResponseError` naming ``label`` (the container or claim),
        every refused entry and what is allowed. ``devices``: judge the device specs too (False where they are not
        forwarded: the DRA plugin writes a claim's device nodes itself, :mod:`domain.dra.prepared`)."""
        refused = self.refused(response, devices=devices)
        if refused:
            expected = ", ".join(f"{m.host_path} at {m.container_path}{' read-only' * m.read_only}" for m in sorted(
                self.mounts, key=lambda m: m.container_path)) or "none"
            raise ForbiddenResponseError(
                f"{label}: the node Runtime answered {'; '.join(refused)}: not forwarded to the container (allowed "
                f"mounts: {expected}; device nodes: /dev/nvidia* from {self.dev_root})"
            )
