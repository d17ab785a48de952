"""The node's CDI spec as a JSON file in a CDI spec directory (``ports.cdi.CdiSpecStore``).

Format (CDI SPEC.md, tags.cncf.io/container-device-interface): ``{"cdiVersion", "kind", "devices": [{"name",
"containerEdits": {"env": ["K=V"], "deviceNodes": [{"path", "hostPath", "permissions"}]}}], "containerEdits": {...,
"mounts": [{"hostPath", "containerPath", "type": "bind", "options"}]}}``; empty edit lists and an empty spec-wide
``containerEdits`` are left out. A mount's options are :data:`READ_ONLY_OPTIONS` or :data:`READ_WRITE_OPTIONS`
(the bind options NVIDIA's CDI specs give libraries, ``rbind``/``rprivate`` as the OCI runtime applies them).
The file is ``<dir>/lj-runtimekit.io-gpu.json`` (the CDI library's ``<vendor>-<class>`` naming), mode 0644.

Atomic replace: the JSON goes to a temporary file in the same directory whose name ends in ``.tmp`` (container
runtimes load only ``*.json``/``*.yaml``, so they never read it), is fsynced and renamed over the spec
(``os.replace``), then the directory is fsynced. The directory is created when missing. Every OSError becomes
:class:`ports.cdi.CdiSpecError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adapters.atomicfile import write_atomically
from domain.device_plugin.cdi import CDI_CLASS, CDI_VENDOR, CdiDevice, CdiDeviceNode, CdiSpec
from domain.runtime.types import Mount
from ports.cdi import CdiSpecError

DEFAULT_CDI_DIR = Path("/var/run/cdi")
"""The dynamic CDI spec directory every CDI-enabled runtime reads (beside the static ``/etc/cdi``)."""

SPEC_FILE_NAME = f"{CDI_VENDOR}-{CDI_CLASS}.json"
"""``lj-runtimekit.io-gpu.json``."""

READ_ONLY_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
"""``options`` of a read-only bind mount."""
READ_WRITE_OPTIONS = ("rw", "nosuid", "nodev", "rbind", "rprivate")
"""``options`` of a read-write bind mount."""


def _edits(env: tuple[tuple[str, str], ...], nodes: tuple[CdiDeviceNode, ...]) -> dict[str, Any]:
    edits: dict[str, Any] = {}
    if env:
        edits["env"] = [f"{key}={value}" for key, value in env]
    if nodes:
        edits["deviceNodes"] = [{"path": n.path, "hostPath": n.path, "permissions": n.permissions} for n in nodes]
    return edits


def _mount(mount: Mount) -> dict[str, Any]:
    options = READ_ONLY_OPTIONS if mount.read_only else READ_WRITE_OPTIONS
    return {"hostPath": mount.host_path, "containerPath": mount.container_path, "type": "bind",
            "options": list(options)}


def spec_to_json(spec: CdiSpec) -> str:
    """The spec's JSON text (module docstring), keys in spec order, newline-terminated."""
    document: dict[str, Any] = {
        "cdiVersion": spec.version, "kind": spec.kind,
        "devices": [{"name": d.name, "containerEdits": _edits(d.env, d.device_nodes)} for d in spec.devices],
    }
    common = _edits(spec.env, spec.device_nodes)
    if spec.mounts:
        common["mounts"] = [_mount(m) for m in spec.mounts]
    if common:
        document["containerEdits"] = common
    return json.dumps(document, indent=2) + "\n"


def _nodes(edits: dict[str, Any]) -> tuple[CdiDeviceNode, ...]:
    return tuple(CdiDeviceNode(n["path"], n.get("permissions", "rw")) for n in edits.get("deviceNodes", ()))


def spec_from_json(text: str) -> CdiSpec:
    """Parse :func:`spec_to_json`'s format. Raises ValueError (also KeyError/TypeError wrapped) when malformed."""
    try:
        document = json.loads(text)
        devices = []
        for item in document["devices"]:
            edits = item.get("containerEdits", {})
            env = tuple(tuple(entry.split("=", 1)) for entry in edits.get("env", ()))
            devices.append(CdiDevice(item["name"], env=env, device_nodes=_nodes(edits)))
        common = document.get("containerEdits", {})
        env = tuple(tuple(entry.split("=", 1)) for entry in common.get("env", ()))
        mounts = tuple(Mount(container_path=m["containerPath"], host_path=m["hostPath"],
                             read_only="ro" in m.get("options", ())) for m in common.get("mounts", ()))
        return CdiSpec(document["kind"], tuple(devices), device_nodes=_nodes(common), version=document["cdiVersion"],
                       env=env, mounts=mounts)
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a CDI spec: {error!r}") from error


class CdiSpecDirectory:
    """``CdiSpecStore`` over ``<directory>/<file_name>`` (module docstring)."""

    def __init__(self, directory: Path = DEFAULT_CDI_DIR, *, file_name: str = SPEC_FILE_NAME) -> None:
        self.path = directory / file_name

    def write(self, spec: CdiSpec) -> None:
        """Replace the spec atomically. Raises :class:`CdiSpecError`."""
        text = spec_to_json(spec)
        try:
            write_atomically(self.path, text, mode=0o644)
        except OSError as error:
            raise CdiSpecError(f"cannot write CDI spec {self.path}: {error}") from error

    def read(self) -> CdiSpec | None:
        """The spec in the file, None when there is none. Raises :class:`CdiSpecError` (unreadable, malformed)."""
        try:
            return spec_from_json(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise CdiSpecError(f"cannot read CDI spec {self.path}: {error}") from error

    def remove(self) -> None:
        """Delete the file (no error when missing). Raises :class:`CdiSpecError`."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            raise CdiSpecError(f"cannot remove CDI spec {self.path}: {error}") from error
