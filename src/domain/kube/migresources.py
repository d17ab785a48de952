"""Extended resource names of MIG profiles: ``<prefix>/mig-<canonical profile>``, one shared table.

``prefix`` is the domain of the protocol's GPU resource (``alibabacloud.com`` for ``alibabacloud.com/gpu``,
:class:`domain.kube.protocol.ResourceNames`). ``+`` is not allowed in a Kubernetes qualified name (the name
part matches ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``, at most 63 characters), so ``+me`` is written
``.me``: ``mig-1g.5gb.me``. Only canonical names are resource names: kubelet matches resource names exactly,
so an alias spelled in a pod's resources could never be served; :meth:`MigResourceTable.parse` rejects it at
admission with the canonical name to use (failure case B30) instead of leaving the pod Pending.

The scheduler's MIG plugin reads pod requests through :class:`MigResourceTable` and the device plugin registers
exactly :attr:`MigResourceTable.names`; both build the table with :func:`mig_resource_table` from the same
protocol, so they cannot disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.kube.protocol import ProtocolConstants
from domain.mig.errors import UnknownMigProfileError
from domain.mig.profiles import MIG_MODELS, MigGpuModel, MigProfile, mig_model, normalise_profile_name

RESOURCE_STEM = "mig-"
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def resource_prefix(protocol: ProtocolConstants) -> str:
    """The domain part of the protocol's GPU resource name. Raises :class:`InvalidRequestError` when the GPU
    resource has no ``<domain>/`` prefix."""
    domain, slash, _ = protocol.resources.gpu.partition("/")
    if not slash or not domain:
        raise InvalidRequestError("resources.gpu", protocol.resources.gpu, "needs a <domain>/ prefix for MIG names")
    return domain


def _name_part(profile_name: str) -> str:
    return RESOURCE_STEM + profile_name.replace("+", ".")


def mig_resource_name(protocol: ProtocolConstants, profile: MigProfile) -> str:
    """``<prefix>/mig-<canonical name>`` of ``profile`` (``+`` written ``.``). Raises
    :class:`InvalidRequestError` for a name Kubernetes would refuse."""
    part = _name_part(profile.name)
    if len(part) > 63 or not _NAME_PART.match(part):
        raise InvalidRequestError("mig.resource", part, "not a valid Kubernetes resource name")
    return f"{resource_prefix(protocol)}/{part}"


@attrs.frozen
class MigResourceTable:
    """Resource name → canonical profile name, and which models offer it.

    Fields: ``prefix``; ``profiles`` (resource name → canonical profile name); ``models`` (resource name → model
    keys whose table has that canonical name); ``aliases`` (normalised spelling, canonical or alias → canonical
    profile name, for the B30 hint).
    """

    prefix: str
    profiles: Mapping[str, str]
    models: Mapping[str, tuple[str, ...]]
    aliases: Mapping[str, str]

    @property
    def names(self) -> tuple[str, ...]:
        """Every resource name, sorted: what the device plugin registers and the scheduler schedules."""
        return tuple(sorted(self.profiles))

    def parse(self, resource: str) -> str | None:
        """The canonical profile name of a pod's resource, or None when it is not a ``<prefix>/mig-*`` name.

        Raises :class:`UnknownMigProfileError` for a ``<prefix>/mig-*`` name outside the table, naming the
        canonical resource when the name is an alias spelling (B30).
        """
        if resource in self.profiles:
            return self.profiles[resource]
        stem = f"{self.prefix}/{RESOURCE_STEM}"
        if not resource.startswith(stem):
            return None
        spelled = normalise_profile_name(resource[len(stem):])
        canonical = self.aliases.get(spelled)
        hint = f"use {self.prefix}/{_name_part(canonical)}" if canonical else ""
        valid = sorted(set(self.profiles.values()))
        raise UnknownMigProfileError(f"resource {resource}", resource[len(stem):], valid, hint)


def mig_resource_table(
    protocol: ProtocolConstants, models: Iterable[MigGpuModel | str] | None = None
) -> MigResourceTable:
    """The table for ``models`` (tables or names :func:`mig_model` accepts; default: every known model).

    Raises :class:`InvalidRequestError` when the protocol's GPU resource has no domain prefix.
    """
    prefix = resource_prefix(protocol)
    tables = [m if isinstance(m, MigGpuModel) else mig_model(m) for m in (models or MIG_MODELS.values())]
    profiles: dict[str, str] = {}
    offered: dict[str, list[str]] = {}
    aliases: dict[str, str] = {}
    for table in tables:
        for profile in table.profiles:
            name = mig_resource_name(protocol, profile)
            profiles[name] = profile.name
            offered.setdefault(name, []).append(table.key)
            for alias in (profile.name, *profile.aliases):
                aliases[normalise_profile_name(alias)] = profile.name
    models_by_name = {name: tuple(sorted(set(keys))) for name, keys in offered.items()}
    return MigResourceTable(prefix, profiles, models_by_name, aliases)


def mig_resource_names(
    protocol: ProtocolConstants, models: Iterable[MigGpuModel | str] | None = None
) -> tuple[str, ...]:
    """The sorted resource names of :func:`mig_resource_table` (what the device plugin registers)."""
    return mig_resource_table(protocol, models).names
