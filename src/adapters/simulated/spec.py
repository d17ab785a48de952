"""Inventories of simulated GPUs, from a short spec (``--simulated-gpus``) or a YAML file.

Spec grammar: comma-separated items ``[COUNTx]MEMORY[:MODEL]``, MEMORY an integer Kubernetes quantity
(``16Gi``, ``80Gi``, ``24000Mi``), e.g. ``2x16Gi:A100`` or ``1x80Gi:H100,2x24Gi:L4``; MODEL defaults to
:data:`DEFAULT_MODEL`. YAML file::

    gpus:
      - {model: A100, memory: 16Gi, count: 2}
      - {model: H100, memory: 80Gi, uuid: GPU-0f0e…, health: Unhealthy, migMode: disabled}

(``uuid`` only with ``count: 1``; unknown keys are refused). GPUs are numbered 0..n-1 in order; UUIDs not given
are ``GPU-<uuid5(seed, index, model, memory)>``, stable for the same ``seed`` (the entrypoint passes the host
name, so two simulated nodes never share a UUID). Errors: :class:`SpecError` naming the item or file.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Sequence
from pathlib import Path

import attrs
import yaml

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.protocol import parse_quantity

DEFAULT_MODEL = "Simulated-GPU"
_ITEM = re.compile(r"^(?:(\d+)\s*[xX]\s*)?([0-9]+[A-Za-z]*)(?::(.+))?$")
_NAMESPACE = uuidlib.UUID("6f1d4a52-3c0e-4c3a-9a57-6c6a72756e74")  # fixed: "ljrk simulated GPUs"
_KEYS = {"model", "memory", "count", "uuid", "health", "migMode"}


class SpecError(ValueError):
    """A malformed simulated-GPU spec or file; the message names the item and says what is expected."""


@attrs.frozen
class GpuGroup:
    """``count`` identical simulated GPUs of ``memory_bytes`` and ``model``; ``uuid`` only when count is 1."""

    count: int
    memory_bytes: int
    model: str = DEFAULT_MODEL
    uuid: str | None = None
    health: Health = Health.HEALTHY
    mig_mode: MigMode = MigMode.DISABLED


def parse_spec(text: str) -> tuple[GpuGroup, ...]:
    """Parse ``2x16Gi:A100[,…]`` (module docstring). Raises :class:`SpecError`."""
    groups = []
    for raw in text.split(","):
        item = raw.strip()
        match = _ITEM.match(item)
        if match is None:
            raise SpecError(f"simulated GPUs {item!r}: expected [COUNTx]MEMORY[:MODEL], e.g. 2x16Gi:A100")
        count = int(match.group(1) or 1)
        try:
            memory = parse_quantity("memory", match.group(2))
        except InvalidRequestError as error:
            raise SpecError(f"simulated GPUs {item!r}: {error}") from None
        groups.append(_group(item, count, memory, (match.group(3) or DEFAULT_MODEL).strip()))
    return tuple(groups)


def _group(
    where: str,
    count: int,
    memory: int,
    model: str,
    *,
    uuid: str | None = None,
    health: Health = Health.HEALTHY,
    mig_mode: MigMode = MigMode.DISABLED,
) -> GpuGroup:
    if count < 1:
        raise SpecError(f"simulated GPUs {where}: count must be at least 1")
    if memory <= 0:
        raise SpecError(f"simulated GPUs {where}: memory must be > 0")
    if not model:
        raise SpecError(f"simulated GPUs {where}: model must not be empty")
    if uuid is not None and count != 1:
        raise SpecError(f"simulated GPUs {where}: a fixed uuid needs count 1")
    return GpuGroup(count, memory, model, uuid, health, mig_mode)


def load_file(path: Path) -> tuple[GpuGroup, ...]:
    """Read a YAML inventory (module docstring). Raises :class:`SpecError` (also for an unreadable file)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SpecError(f"simulated GPU file {path}: {error}") from None
    entries = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries or set(data) != {"gpus"}:
        raise SpecError(f"simulated GPU file {path}: expected one key 'gpus' with a non-empty list")
    groups = []
    for position, entry in enumerate(entries):
        where = f"{path}: gpus[{position}]"
        if not isinstance(entry, dict) or not set(entry) <= _KEYS or "memory" not in entry:
            raise SpecError(f"simulated GPU file {where}: expected a mapping with 'memory' and only {sorted(_KEYS)}")
        try:
            memory = parse_quantity("memory", str(entry["memory"]))
            health = Health(entry.get("health", Health.HEALTHY.value))
            mig = MigMode(entry.get("migMode", MigMode.DISABLED.value))
        except (InvalidRequestError, ValueError) as error:
            raise SpecError(f"simulated GPU file {where}: {error}") from None
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int):
            raise SpecError(f"simulated GPU file {where}: count must be an integer")
        uuid = entry.get("uuid")
        groups.append(
            _group(where, count, memory, str(entry.get("model", DEFAULT_MODEL)),
                   uuid=None if uuid is None else str(uuid), health=health, mig_mode=mig)
        )
    return tuple(groups)


def build_inventory(groups: Sequence[GpuGroup], *, seed: str) -> tuple[Gpu, ...]:
    """The GPUs of ``groups`` with indexes 0..n-1 and stable UUIDs (module docstring). Raises :class:`SpecError`
    for duplicate UUIDs."""
    gpus: list[Gpu] = []
    for group in groups:
        for _ in range(group.count):
            index = len(gpus)
            uuid = group.uuid or "GPU-" + str(
                uuidlib.uuid5(_NAMESPACE, f"{seed}/{index}/{group.model}/{group.memory_bytes}")
            )
            gpus.append(Gpu(index, GpuUuid(uuid), group.model, group.memory_bytes, group.health, group.mig_mode))
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise SpecError(f"simulated GPUs: duplicate uuids {sorted(u for u in uuids if uuids.count(u) > 1)}")
    return tuple(gpus)
