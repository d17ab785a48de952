"""The container runtime's side of CDI, as far as the emulated kubelet needs it: resolve the CDI device names a
container got from its device plugins against the spec files in a CDI spec directory (containerd 2's
``cdi_spec_dirs``, default ``/etc/cdi`` and ``/var/run/cdi``).

Like the CDI library containerd uses (tags.cncf.io/container-device-interface, ``pkg/cdi`` cache): every ``*.json``
file of the directory is a spec (``kind`` + ``devices[].name``; YAML specs are not read here: our plugin writes
JSON); a file that cannot be parsed is skipped; a qualified name ``<kind>=<device>`` resolves when some spec has that
kind and device. Any unresolvable name fails the container ("unresolvable CDI devices ..."), which the emulator
reports as a pod rejection. Resolution yields the env edits the runtime would inject (the device's, then the
spec's), so tests can see what the container got. The spec is read independently of the plugin's writer
(``adapters.cdifiles``), as containerd would read it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class UnresolvableCdiDevicesError(Exception):
    """Some CDI names have no device in the spec directory; the message lists them."""


def _specs(directory: Path) -> list[dict[str, Any]]:
    specs = []
    for path in sorted(directory.glob("*.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            log.warning("CDI spec %s skipped: %s", path, error)
            continue
        if isinstance(document, dict) and isinstance(document.get("kind"), str):
            specs.append(document)
    return specs


def _env(edits: object) -> dict[str, str]:
    entries = edits.get("env", []) if isinstance(edits, dict) else []
    return dict(entry.split("=", 1) for entry in entries if isinstance(entry, str) and "=" in entry)


def resolve(names: Sequence[str], directory: Path) -> dict[str, str]:
    """The env edits injected for ``names`` (module docstring); empty names resolve to nothing without reading the
    directory. Raises :class:`UnresolvableCdiDevicesError`."""
    if not names:
        return {}
    devices: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for spec in _specs(directory):
        for device in spec.get("devices", []):
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                devices.setdefault(f"{spec['kind']}={device['name']}", (spec, device))
    missing = [name for name in names if name not in devices]
    if missing:
        raise UnresolvableCdiDevicesError(f"unresolvable CDI devices {', '.join(missing)} (spec dir {directory})")
    env: dict[str, str] = {}
    for name in names:
        spec, device = devices[name]
        env.update(_env(device.get("containerEdits")))
        env.update(_env(spec.get("containerEdits")))
    return env
