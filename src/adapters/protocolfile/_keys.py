"""The two spellings of ``protocol.yaml``'s keys, folded into the one nested mapping the converter structures.

``deploy/protocol.yaml`` nests the grouped keys (``resources:`` with ``gpu:`` under it); the product's
documentation writes them flat and dotted (``resources.gpu: …``, ``annotations.pod-plan: …``). Both name the same
constants, may be mixed in one file, and get the same checks. A key given both ways is refused rather than one
copy silently winning, and so is any key this build does not know (the message lists the known ones).

Leaf values are type-checked here, by the type of the constant's default, so that a YAML list or number is not
quietly turned into a resource name: string constants take strings (``memory-unit`` also takes a plain integer,
a quantity without suffix), integer constants take integers (not booleans). Pure functions over the data PyYAML
returns; every error is an :class:`InvalidRequestError` naming the key as written in the file (kebab-case,
dotted) and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from domain.errors import InvalidRequestError
from domain.kube.protocol import ProtocolConstants

_INT_AS_STR = frozenset({"memory-unit"})
"""String constants that also accept a YAML integer (a Kubernetes quantity without suffix, e.g. ``1073741824``)."""


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _schema() -> tuple[dict[str, type], dict[str, dict[str, type]]]:
    """``(scalars, sections)``: top-level key → type, and section key → {sub-key → type}, from the defaults."""
    scalars: dict[str, type] = {}
    sections: dict[str, dict[str, type]] = {}
    for field in attrs.fields(ProtocolConstants):
        kind: type = type(field.default)
        if attrs.has(kind):
            sections[_kebab(field.name)] = {_kebab(sub.name): type(sub.default) for sub in attrs.fields(kind)}
        else:
            scalars[_kebab(field.name)] = kind
    return scalars, sections


SCALARS, SECTIONS = _schema()
"""Top-level keys with their value types (``memory-unit``: str…), and the grouped keys (``resources``: gpu…)."""


def known_keys() -> list[str]:
    """Every key of ``protocol.yaml`` in the flat dotted form (``resources.gpu``, ``memory-unit``), sorted."""
    keys = list(SCALARS)
    keys += [f"{section}.{sub}" for section, subs in SECTIONS.items() for sub in subs]
    return sorted(keys)


def _unknown(key: object, value: object) -> InvalidRequestError:
    text = str(key)
    section = text.partition(".")[0]
    if "." in text and section in SECTIONS:
        known = ", ".join(f"{section}.{sub}" for sub in sorted(SECTIONS[section]))
        return InvalidRequestError(text, value, f"unknown key; the {section} keys are {known}")
    names = sorted([*SCALARS, *(f"{s}.*" for s in SECTIONS)])
    return InvalidRequestError(text, value, f"unknown key; known keys: {', '.join(names)}")


def _checked(key: str, value: object, expected: type) -> object:
    """``value`` if it has the type ``key`` needs (an integer becomes text for :data:`_INT_AS_STR` keys)."""
    if expected is str:
        if isinstance(value, str):
            return value
        if key in _INT_AS_STR and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise InvalidRequestError(key, value, "must be a string (quote it if YAML reads it as something else)")
    if expected is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidRequestError(key, value, "must be an integer")
    return value


def fold_keys(data: Mapping[Any, Any]) -> dict[str, Any]:
    """The nested form of ``data`` (a ``protocol.yaml`` mapping in nested, flat dotted or mixed form): top-level
    scalars as they are, each section a ``{sub-key: value}`` mapping, keys kebab-case as in the file.

    Raises :class:`InvalidRequestError` naming the key for: a key that is not a string, an unknown key (flat or
    nested), a section that is not a mapping, a key given both flat and nested, and a value of the wrong
    type."""
    scalars: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    flat: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise InvalidRequestError("key", key, "keys must be strings such as memory-unit or resources.gpu")
        section, dot, sub = key.partition(".")
        if dot:
            if section not in SECTIONS or sub not in SECTIONS[section]:
                raise _unknown(key, value)
            flat.setdefault(section, {})[sub] = _checked(key, value, SECTIONS[section][sub])
        elif key in SECTIONS:
            if not isinstance(value, Mapping):
                subs = ", ".join(sorted(SECTIONS[key]))
                raise InvalidRequestError(key, value, f"must be a mapping of {subs} (or write {key}.KEY: VALUE)")
            nested[key] = {}
            for inner, item in value.items():
                if not isinstance(inner, str) or inner not in SECTIONS[key]:
                    raise _unknown(f"{key}.{inner}", item)
                nested[key][inner] = _checked(f"{key}.{inner}", item, SECTIONS[key][inner])
        elif key in SCALARS:
            scalars[key] = _checked(key, value, SCALARS[key])
        else:
            raise _unknown(key, value)
    folded: dict[str, Any] = dict(scalars)
    for section in SECTIONS:
        merged = dict(nested.get(section, {}))
        for sub, value in flat.get(section, {}).items():
            if sub in merged:
                raise InvalidRequestError(
                    f"{section}.{sub}", value,
                    f"given twice: flat as '{section}.{sub}' and nested under '{section}:' (as {merged[sub]!r}); "
                    "write it one way only",
                )
            merged[sub] = value
        if section in nested or section in flat:
            folded[section] = merged
    return folded
