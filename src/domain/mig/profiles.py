"""MIG profile tables per GPU model, profile-name resolution and memory → profile mapping.

Source: NVIDIA *Multi-Instance GPU User Guide* (docs.nvidia.com/datacenter/tesla/mig-user-guide), "Supported MIG
Profiles" and "Concepts → Partitioning"; the values were entered from memory of that guide, not copied, so check them
against ``nvidia-smi mig -lgipp``. Geometry, placements, nominal memory and name rules: ``docs/mig-profiles.md``.
Invariants: an instance at start ``s`` of a profile with ``c`` compute and ``k`` memory slices occupies memory slices
``[s, s + k)`` and compute slices ``[s, s + c)``, ``s`` one of the profile's placements; a memory request is matched
against the nominal size (``k × model memory / memory slices``); each profile has one canonical name. At run time the
Runtime's NVML listing is the authority for what exists; these tables drive planning only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Final

import attrs

from domain.errors import InvalidRequestError
from domain.mig.errors import UnknownMigModelError, UnknownMigProfileError
from domain.units import GiB, format_bytes


@attrs.frozen
class MigProfile:
    """One GPU instance profile of one model.

    Fields: ``model`` (model key, e.g. ``A100-40GB``), ``name`` (canonical, e.g. ``1g.5gb``), ``compute_slices``
    (out of the model's ``compute_slots``), ``memory_slices`` (out of ``memory_slots``), ``memory_bytes``
    (nominal, see module docstring), ``max_instances`` (per GPU), ``placements`` (valid start memory slices,
    ascending), ``media_extensions`` (``+me``), ``aliases`` (other accepted spellings, normalised).
    Source: MIG user guide, "Supported MIG Profiles".
    """

    model: str
    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    max_instances: int
    placements: tuple[int, ...]
    media_extensions: bool = False
    aliases: tuple[str, ...] = ()

    def memory_mask(self, start: int) -> int:
        """Bit mask of the memory slices ``[start, start + memory_slices)`` an instance at ``start`` takes."""
        return ((1 << self.memory_slices) - 1) << start

    def compute_mask(self, start: int) -> int:
        """Bit mask of the compute slices ``[start, start + compute_slices)`` an instance at ``start`` takes."""
        return ((1 << self.compute_slices) - 1) << start

    @property
    def size(self) -> tuple[int, int]:
        """``(compute_slices, memory_slices)``: the order used to rank profiles from small to large."""
        return (self.compute_slices, self.memory_slices)


def normalise_profile_name(name: str) -> str:
    """Spelling used for lookups: lower case, no blanks, no ``mig-``/``mig_``/``MIG `` prefix, ``.me`` → ``+me``.

    ``"MIG 3g.71gb"`` → ``"3g.71gb"``; ``"mig-1g.5gb.me"`` → ``"1g.5gb+me"``. Raises
    :class:`InvalidRequestError` for a non-string.
    """
    if not isinstance(name, str):
        raise InvalidRequestError("mig.profile", name, "must be a string such as 1g.10gb")
    text = re.sub(r"\s+", "", re.sub(r"^mig[-_\s]+", "", name.strip().lower()))
    if text.endswith(".me"):
        text = text[: -len(".me")] + "+me"
    return text


@attrs.frozen
class MigGpuModel:
    """The MIG geometry and profile table of one GPU model.

    Fields: ``key`` (e.g. ``H100-80GB``), ``compute_slots`` (7 or 4), ``memory_slots`` (8 or 4),
    ``memory_bytes`` (nominal total, bytes), ``profiles`` (table order: small to large, ``+me`` after its base).
    Construction checks the table: placements inside the GPU and aligned to the memory size, instance counts
    reachable, nominal memory consistent, and no spelling that resolves to two profiles (ValueError: a table
    bug, raised when the module is imported).
    """

    key: str
    compute_slots: int
    memory_slots: int
    memory_bytes: int
    profiles: tuple[MigProfile, ...]
    _index: dict[str, MigProfile] = attrs.field(init=False, eq=False, repr=False)
    _family: tuple[MigProfile, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        index: dict[str, MigProfile] = {}
        for profile in self.profiles:
            self._check(profile)
            for spelling in (profile.name, *profile.aliases):
                key = normalise_profile_name(spelling)
                if index.setdefault(key, profile) is not profile:
                    raise ValueError(f"{self.key}: spelling {spelling!r} names two profiles")
        object.__setattr__(self, "_index", index)
        family = sorted((p for p in self.profiles if not p.media_extensions), key=lambda p: p.size, reverse=True)
        object.__setattr__(self, "_family", tuple(family))

    def _check(self, profile: MigProfile) -> None:
        if profile.model != self.key:
            raise ValueError(f"{self.key}: profile {profile.name} belongs to {profile.model}")
        if profile.memory_bytes != profile.memory_slices * self.memory_bytes // self.memory_slots:
            raise ValueError(f"{self.key}: {profile.name} memory is not memory_slices × slice size")
        if not 1 <= profile.max_instances <= len(profile.placements):
            raise ValueError(f"{self.key}: {profile.name} max_instances outside 1..len(placements)")
        if list(profile.placements) != sorted(set(profile.placements)):
            raise ValueError(f"{self.key}: {profile.name} placements must be ascending and distinct")
        for start in profile.placements:
            inside = start + profile.memory_slices <= self.memory_slots and (
                start + profile.compute_slices <= self.compute_slots
            )
            if start < 0 or start % profile.memory_slices or not inside:
                raise ValueError(f"{self.key}: {profile.name} placement {start} outside the GPU or unaligned")

    @property
    def names(self) -> tuple[str, ...]:
        """Canonical profile names in table order."""
        return tuple(p.name for p in self.profiles)

    @property
    def family(self) -> tuple[MigProfile, ...]:
        """Profiles without media extensions, largest first (by compute, then memory slices): the order of the
        fragmentation measure in :mod:`domain.mig.fragmentation`."""
        return self._family

    def lookup(self, name: str) -> MigProfile | None:
        """The profile a spelling names (canonical or alias, see :func:`normalise_profile_name`), or None."""
        return self._index.get(normalise_profile_name(name))


# (compute slices, memory slices, max instances per GPU, placements, media extensions), from the guide's A100,
# H100 and H200 tables and `-lgipp` placements (entered from memory, see module docstring).
_GEOMETRY_7X8: Final = (
    (1, 1, 7, (0, 1, 2, 3, 4, 5, 6), False),
    (1, 1, 1, (0, 1, 2, 3, 4, 5, 6), True),
    (1, 2, 4, (0, 2, 4, 6), False),
    (2, 2, 3, (0, 2, 4), False),
    (3, 4, 2, (0, 4), False),
    (4, 4, 1, (0,), False),
    (7, 8, 1, (0,), False),
)
# A30 24GB: four compute and four memory slices (the guide's A30 table; from memory).
_GEOMETRY_4X4: Final = (
    (1, 1, 4, (0, 1, 2, 3), False),
    (1, 1, 1, (0, 1, 2, 3), True),
    (2, 2, 2, (0, 2), False),
    (2, 2, 1, (0, 2), True),
    (4, 4, 1, (0,), False),
)


def nominal_gb(memory_bytes: int) -> tuple[int, int]:
    """``(rounded half up, truncated)`` GiB figures of a byte count, the two spellings of a profile's ``<n>gb``."""
    return math.floor(memory_bytes / GiB + 0.5), memory_bytes // GiB


def _build(
    key: str,
    *,
    memory_gib: int,
    geometry: tuple[tuple[int, int, int, tuple[int, ...], bool], ...],
    names: tuple[str, ...],
    extra_aliases: Mapping[str, tuple[str, ...]] | None = None,
) -> MigGpuModel:
    compute_slots = max(c + max(p) for c, _, _, p, _ in geometry)
    memory_slots = max(m + max(p) for _, m, _, p, _ in geometry)
    total = memory_gib * GiB
    profiles = []
    for name, (compute, memory, count, placements, media) in zip(names, geometry, strict=True):
        memory_bytes = memory * total // memory_slots
        _, truncated = nominal_gb(memory_bytes)
        suffix = "+me" if media else ""
        spelled = f"{compute}g.{truncated}gb{suffix}"
        aliases = tuple(a for a in (spelled, *(extra_aliases or {}).get(name, ())) if a != name)
        profiles.append(MigProfile(key, name, compute, memory, memory_bytes, count, placements, media, aliases))
    return MigGpuModel(key, compute_slots, memory_slots, total, tuple(profiles))


MIG_MODELS: Final[Mapping[str, MigGpuModel]] = {
    model.key: model
    for model in (
        _build(
            "A100-40GB",
            memory_gib=40,
            geometry=_GEOMETRY_7X8,
            names=("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
        ),
        _build(
            "A100-80GB",
            memory_gib=80,
            geometry=_GEOMETRY_7X8,
            names=("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        ),
        _build(
            "H100-80GB",
            memory_gib=80,
            geometry=_GEOMETRY_7X8,
            names=("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
        ),
        _build(
            "H200-141GB",
            memory_gib=141,
            geometry=_GEOMETRY_7X8,
            names=("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
            extra_aliases={"7g.141gb": ("7g.140gb",)},
        ),
        _build(
            "A30-24GB",
            memory_gib=24,
            geometry=_GEOMETRY_4X4,
            names=("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"),
        ),
    )
}
"""Every model with a table, by key. Source: MIG user guide, "Supported MIG Profiles" (from memory)."""

_NOMINAL_GIB: Final = {"A100-40GB": 40, "A100-80GB": 80, "H100-80GB": 80, "H200-141GB": 141, "A30-24GB": 24}
_TOLERANCE: Final = 0.10
"""NVML reports a little less than the marketing size (A100-SXM4-40GB: 40536 MiB); accept ±10 %."""


def _word(token: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Z0-9]){token}(?![0-9A-Z])")


_A100, _A30, _H100, _H200 = _word("A100"), _word("A30"), _word("H100"), _word("H200")
_SIZE = re.compile(r"(?<![0-9])([0-9]+)\s*GB")


def _by_memory(product: str, keys: tuple[str, ...], memory_bytes: int | None) -> MigGpuModel:
    if memory_bytes is None:
        raise UnknownMigModelError(product, MIG_MODELS, f"ambiguous: one of {', '.join(keys)}; give the GPU memory")
    for key in keys:
        nominal = _NOMINAL_GIB[key] * GiB
        if abs(memory_bytes - nominal) <= _TOLERANCE * nominal:
            return MIG_MODELS[key]
    raise UnknownMigModelError(product, MIG_MODELS, f"memory {format_bytes(memory_bytes)} matches no known size")


def mig_model(product: str, *, memory_bytes: int | None = None) -> MigGpuModel:
    """The table for an NVML product name (``nvmlDeviceGetName``) or a model key.

    Accepts ``"NVIDIA A100-SXM4-40GB"``, ``"NVIDIA A100 80GB PCIe"``, ``"NVIDIA H100 80GB HBM3"``,
    ``"NVIDIA H100 PCIe"``, ``"NVIDIA H200"``, ``"NVIDIA A30"`` and the keys of :data:`MIG_MODELS`, case-
    insensitively. ``memory_bytes`` (the GPU's total memory) settles names without a size (``"A100"``) and must
    then be within ±10 % of the nominal size. Raises :class:`UnknownMigModelError` naming the product and the
    known models for anything else, including H100 NVL / 94-96 GB parts, GH200 and H200 NVL, whose profiles
    differ from these tables.
    """
    text = product.strip().upper() if isinstance(product, str) else ""
    for key, model in MIG_MODELS.items():
        if text == key.upper():
            return model
    sizes = {int(s) for s in _SIZE.findall(text)}
    if _A100.search(text):
        keys = tuple(k for k in ("A100-40GB", "A100-80GB") if _NOMINAL_GIB[k] in sizes) or ("A100-40GB", "A100-80GB")
        return MIG_MODELS[keys[0]] if len(keys) == 1 else _by_memory(product, keys, memory_bytes)
    if _A30.search(text):
        return _by_memory(product, ("A30-24GB",), memory_bytes) if memory_bytes is not None else MIG_MODELS["A30-24GB"]
    if _H200.search(text) and "NVL" not in text:
        return MIG_MODELS["H200-141GB"] if memory_bytes is None else _by_memory(product, ("H200-141GB",), memory_bytes)
    if _H100.search(text) and "NVL" not in text and not sizes - {80}:
        return MIG_MODELS["H100-80GB"] if memory_bytes is None else _by_memory(product, ("H100-80GB",), memory_bytes)
    raise UnknownMigModelError(str(product), MIG_MODELS)


def _model(model: MigGpuModel | str) -> MigGpuModel:
    return model if isinstance(model, MigGpuModel) else mig_model(model)


def resolve_profile(model: MigGpuModel | str, name: str) -> MigProfile:
    """The profile ``name`` denotes on ``model`` (a table or anything :func:`mig_model` accepts).

    Accepts the canonical name and aliases (module docstring). Raises :class:`UnknownMigProfileError` naming the
    model, the name and the model's valid names, with a hint when the name belongs to another model (B30: the
    admission path rejects such a pod with this message instead of leaving it Pending); raises
    :class:`UnknownMigModelError` for an unknown model.
    """
    table = _model(model)
    profile = table.lookup(name)
    if profile is not None:
        return profile
    elsewhere = [m.key for m in MIG_MODELS.values() if m.key != table.key and m.lookup(name) is not None]
    hint = f"{name!r} is a profile of {', '.join(elsewhere)}" if elsewhere else ""
    raise UnknownMigProfileError(table.key, str(name), table.names, hint)


def profile_for_memory(model: MigGpuModel | str, memory_bytes: int) -> MigProfile:
    """The smallest profile of ``model`` whose nominal memory is at least ``memory_bytes`` (bytes, > 0).

    Boundaries are inclusive: asking exactly a profile's memory gives that profile. Among profiles with equal
    memory the one with fewer compute slices wins (A100-40GB: 10 GiB → ``1g.10gb``, not ``2g.10gb``); ``+me``
    profiles are never chosen by memory. Raises :class:`InvalidRequestError` (field ``memory_bytes``) for a
    non-positive or non-integer request and when the request exceeds the largest profile.
    """
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int) or memory_bytes <= 0:
        raise InvalidRequestError("memory_bytes", memory_bytes, "must be a positive integer number of bytes")
    table = _model(model)
    fitting = [p for p in table.profiles if not p.media_extensions and p.memory_bytes >= memory_bytes]
    if not fitting:
        largest = max(table.profiles, key=lambda p: p.memory_bytes)
        raise InvalidRequestError(
            "memory_bytes",
            memory_bytes,
            f"{format_bytes(memory_bytes)} exceeds the largest MIG profile of {table.key}: "
            f"{largest.name} ({format_bytes(largest.memory_bytes)})",
        )
    return min(fitting, key=lambda p: (p.memory_bytes, p.compute_slices, p.memory_slices))
