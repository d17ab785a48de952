"""Inventories of simulated GPUs, from a short spec (``--simulated-gpus``) or a YAML file.

Spec grammar: comma-separated items ``[COUNTx]MEMORY[:MODEL[:mig[=PROFILE@START/…]]]``, MEMORY an integer
Kubernetes quantity (``16Gi``, ``80Gi``, ``24000Mi``), e.g. ``2x16Gi:A100``, ``1x80Gi:H100,2x24Gi:L4`` or
``2x80Gi:A100:mig=3g.40gb@0/3g.40gb@4`` (two A100-80GB GPUs in MIG mode, each with two 3g.40gb instances);
``:mig`` alone means MIG mode without instances. MODEL defaults to :data:`DEFAULT_MODEL`. YAML file::

    gpus:
      - {model: A100, memory: 16Gi, count: 2}
      - {model: H100, memory: 80Gi, uuid: GPU-0f0e…, health: Unhealthy, migMode: disabled}
      - model: A100-SXM4-80GB
        memory: 80Gi
        migMode: enabled
        migInstances: [{profile: 3g.40gb, start: 0}, {profile: 1g.10gb, start: 6}]

(``uuid`` only with ``count: 1``; ``migInstances`` only with ``migMode: enabled``; unknown keys are refused). MIG
GPUs need a model with a MIG profile table (``domain.mig.profiles.mig_model``: the name and memory must identify
A100-40GB/80GB, H100-80GB, H200-141GB or A30-24GB); profiles and placements are checked when the backend is built
(:class:`adapters.simulated.SimulatedGpuBackend`). GPUs are numbered 0..n-1 in order; UUIDs not given
are ``GPU-<uuid5(seed, index, model, memory)>``, stable for the same ``seed`` (the entrypoint passes the host
name, so two simulated nodes never share a UUID). An inventory holds at most :data:`MAX_GPUS_PER_NODE` GPUs in all.
Errors: :class:`SpecError` naming the item or file.
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
from domain.units import MAX_GPU_MEMORY_BYTES, MAX_GPUS_PER_NODE

DEFAULT_MODEL = "Simulated-GPU"
_MAX_COUNT_DIGITS = 6  # a count text longer than this is far above the bound: refused before int() reads it
_ITEM = re.compile(r"^(?:([0-9]+)\s*[xX]\s*)?([0-9]+[A-Za-z]*)(?::(.+))?$")
_PLACED = re.compile(r"^\s*([^@\s]+)\s*@\s*([0-9]{1,6})\s*$")  # a start is a memory slice: a few digits at most
_NAMESPACE = uuidlib.UUID("6f1d4a52-3c0e-4c3a-9a57-6c6a72756e74")  # fixed: "ljrk simulated GPUs"
_KEYS = {"model", "memory", "count", "uuid", "health", "migMode", "migInstances"}

MigLayout = tuple[tuple[str, int], ...]
"""Initial MIG instances of one GPU: ``(profile, start)`` pairs, start in memory slices."""


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
    mig_instances: MigLayout = ()


def _mig_suffix(item: str, text: str) -> MigLayout:
    """``mig`` or ``mig=PROFILE@START/…`` → the layout. Raises :class:`SpecError`."""
    name, equals, layout = text.strip().partition("=")
    if name.strip().lower() != "mig" or (equals and not layout.strip()):
        raise SpecError(f"simulated GPUs {item!r}: expected ':mig' or ':mig=PROFILE@START/…' after the model")
    placed = []
    for part in layout.split("/") if equals else ():
        match = _PLACED.match(part)
        if match is None:
            raise SpecError(f"simulated GPUs {item!r}: MIG instance {part!r} is not PROFILE@START, e.g. 3g.40gb@0")
        placed.append((match.group(1), int(match.group(2))))
    return tuple(placed)


def parse_spec(text: str) -> tuple[GpuGroup, ...]:
    """Parse ``2x16Gi:A100[,…]`` (module docstring). Raises :class:`SpecError` naming the item, also for more than
    :data:`MAX_GPUS_PER_NODE` GPUs."""
    groups = []
    for raw in text.split(","):
        item = raw.strip()
        match = _ITEM.match(item)
        if match is None:
            raise SpecError(f"simulated GPUs {item!r}: expected [COUNTx]MEMORY[:MODEL], e.g. 2x16Gi:A100")
        count_text = (match.group(1) or "1").lstrip("0") or "0"
        if len(count_text) > _MAX_COUNT_DIGITS:  # a digit-length bound before int(): no huge parse
            raise SpecError(f"simulated GPUs {item!r}: count {count_text} is above {MAX_GPUS_PER_NODE}, the most GPUs "
                            "one node may have")
        count = int(count_text)
        try:
            memory = parse_quantity("memory", match.group(2))
        except InvalidRequestError as error:
            raise SpecError(f"simulated GPUs {item!r}: {error}") from None
        model, colon, mig = (match.group(3) or DEFAULT_MODEL).partition(":")
        layout = _mig_suffix(item, mig) if colon else ()
        mode = MigMode.ENABLED if colon else MigMode.DISABLED
        groups.append(_group(repr(item), count, memory, model.strip(), mig_mode=mode, mig_instances=layout))
    return _bounded(f"{text.strip()!r}", groups)


def _bounded(where: str, groups: list[GpuGroup]) -> tuple[GpuGroup, ...]:
    """``groups`` when they hold at most :data:`MAX_GPUS_PER_NODE` GPUs in all. Raises :class:`SpecError`."""
    total = sum(group.count for group in groups)
    if total > MAX_GPUS_PER_NODE:
        raise SpecError(f"simulated GPUs {where}: {total} GPUs in all, above {MAX_GPUS_PER_NODE}, the most GPUs one "
                        "node may have")
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
    mig_instances: MigLayout = (),
) -> GpuGroup:
    if count < 1:
        raise SpecError(f"simulated GPUs {where}: count must be at least 1")
    if count > MAX_GPUS_PER_NODE:
        raise SpecError(f"simulated GPUs {where}: count {count} is above {MAX_GPUS_PER_NODE}, the most GPUs one node "
                        "may have")
    if memory <= 0:
        raise SpecError(f"simulated GPUs {where}: memory must be > 0")
    if memory > MAX_GPU_MEMORY_BYTES:
        raise SpecError(f"simulated GPUs {where}: memory {memory} is above {MAX_GPU_MEMORY_BYTES} bytes (1 PiB), more "
                        "than any GPU has")
    if not model:
        raise SpecError(f"simulated GPUs {where}: model must not be empty")
    if uuid is not None and count != 1:
        raise SpecError(f"simulated GPUs {where}: a fixed uuid needs count 1")
    if mig_instances and mig_mode is not MigMode.ENABLED:
        raise SpecError(f"simulated GPUs {where}: MIG instances need migMode enabled")
    return GpuGroup(count, memory, model, uuid, health, mig_mode, mig_instances)


def _yaml_layout(where: str, value: object) -> MigLayout:
    if not isinstance(value, list):
        raise SpecError(f"simulated GPU file {where}: migInstances must be a list of {{profile, start}}")
    placed = []
    for n, entry in enumerate(value):
        ok = isinstance(entry, dict) and set(entry) == {"profile", "start"}
        start = entry.get("start") if isinstance(entry, dict) else None
        if not ok or not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise SpecError(
                f"simulated GPU file {where}: migInstances[{n}] must be {{profile: NAME, start: SLICE >= 0}}"
            )
        placed.append((str(entry["profile"]), start))
    return tuple(placed)


def load_file(path: Path) -> tuple[GpuGroup, ...]:
    """Read a YAML inventory (module docstring). Raises :class:`SpecError` (also for an unreadable file and for more
    than :data:`MAX_GPUS_PER_NODE` GPUs)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as error:
        raise SpecError(f"simulated GPU file {path}: {error}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise SpecError(f"simulated GPU file {path}: nested too deep") from None
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
        layout = _yaml_layout(where, entry["migInstances"]) if "migInstances" in entry else ()
        groups.append(
            _group(where, count, memory, str(entry.get("model", DEFAULT_MODEL)),
                   uuid=None if uuid is None else str(uuid), health=health, mig_mode=mig, mig_instances=layout)
        )
    return _bounded(f"file {path}", groups)


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


def mig_layouts(groups: Sequence[GpuGroup]) -> dict[int, MigLayout]:
    """Initial MIG instances per GPU index, numbered as :func:`build_inventory` numbers the GPUs (GPUs without
    instances are absent)."""
    layouts: dict[int, MigLayout] = {}
    index = 0
    for group in groups:
        for _ in range(group.count):
            if group.mig_instances:
                layouts[index] = group.mig_instances
            index += 1
    return layouts
