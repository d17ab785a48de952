"""Loads ``protocol.yaml`` (the protocol ConfigMap's content) into :class:`ProtocolConstants`.

Keys are kebab-case (``memory-unit``, ``node-label``…). The grouped ones may be written nested (``resources:``
then ``gpu: …`` under it, as ``deploy/protocol.yaml`` does) or flat and dotted (``resources.gpu: …``, as the
product documentation shows), or mixed (:mod:`._keys`); a key given both ways, a key given twice, an unknown key
or a value of the wrong type is rejected with the key named; missing keys take the embedded defaults (the same
values as ``deploy/protocol.yaml``). Parsing uses PyYAML's safe loader (refusing duplicate keys, which PyYAML
would otherwise resolve silently to the last one) and a private cattrs converter with ``forbid_extra_keys``
(validation at the edge, cattrs "why").
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import attrs
import cattrs
import yaml
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from domain.errors import InvalidRequestError
from domain.kube.protocol import AnnotationKeys, DraNames, ProtocolConstants, ResourceNames

from ._keys import fold_keys, known_keys

__all__ = [
    "PROTOCOL_DATA_KEY", "ProtocolFileError", "dump_protocol", "find_protocols", "known_keys", "load_protocol",
    "parse_protocol", "protocol_items",
]


class ProtocolFileError(ValueError):
    """``protocol.yaml`` is unreadable or invalid; the message names the file and the key at fault."""


def _converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    for cls in (ResourceNames, AnnotationKeys, DraNames, ProtocolConstants):  # nested classes first
        renames: dict[str, Any] = {f.name: override(rename=f.name.replace("_", "-")) for f in attrs.fields(cls)}
        converter.register_structure_hook(
            cls, make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **renames)
        )
        converter.register_unstructure_hook(cls, make_dict_unstructure_fn(cls, converter, **renames))
    return converter


_CONVERTER = _converter()


def _format(error: BaseException, _type: object) -> str:
    if isinstance(error, InvalidRequestError):
        return f"{error.field.replace('_', '-')}={error.value!r}: {error.reason}"
    if isinstance(error, KeyError):
        return "required key missing"
    return f"invalid value ({error})"


def _describe(error: BaseException) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        messages = cattrs.transform_error(error, format_exception=_format)
        return "; ".join(message.removesuffix(" @ $") for message in messages)  # the root path says nothing
    return _format(error, None)


class _DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key; the message names it and both lines."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (``resources.gpu`` pasted in twice)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:  # the keys written here; ``<<`` merges may be overridden, as YAML says
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge, or not a name (fold_keys rejects it)
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKeyError(f"{key}: given twice (lines {seen[key]} and {line}); keep one")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_protocol(text: str, *, source: str = "protocol.yaml") -> ProtocolConstants:
    """Parse YAML text (empty = all defaults) in nested, flat dotted or mixed form. Raises
    :class:`ProtocolFileError` naming ``source`` and the key (and the value where one is at fault)."""
    try:
        data: Any = yaml.load(text, Loader=_UniqueKeyLoader) or {}  # a SafeLoader subclass
    except _DuplicateKeyError as error:
        raise ProtocolFileError(f"{source}: {error}") from error
    except yaml.YAMLError as error:
        raise ProtocolFileError(f"{source}: not valid YAML: {error}") from error
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ProtocolFileError(f"{source}: not valid YAML: nested too deep") from None
    if not isinstance(data, dict):
        raise ProtocolFileError(f"{source}: must be a mapping of keys, got {type(data).__name__}")
    try:
        return _CONVERTER.structure(fold_keys(data), ProtocolConstants)
    except (cattrs.BaseValidationError, InvalidRequestError, TypeError, ValueError) as error:
        raise ProtocolFileError(f"{source}: {_describe(error)}") from error


def load_protocol(path: Path | None) -> ProtocolConstants:
    """Read ``path`` (None = the embedded defaults). Raises :class:`ProtocolFileError`."""
    if path is None:
        return ProtocolConstants()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProtocolFileError(f"{path}: cannot read: {error.strerror or error}") from error
    return parse_protocol(text, source=str(path))


def dump_protocol(protocol: ProtocolConstants) -> str:
    """The YAML text of ``protocol`` (kebab-case keys, every key written)."""
    return yaml.safe_dump(_CONVERTER.unstructure(protocol), sort_keys=False)


PROTOCOL_DATA_KEY = "protocol.yaml"
"""The ConfigMap data key holding the protocol (``deploy/<component>/02-configmap.yaml``)."""


def find_protocols(text: str, *, source: str) -> list[tuple[str, ProtocolConstants]]:
    """Every protocol in YAML ``text``: a bare ``protocol.yaml`` (one mapping with protocol keys), or any number
    of ConfigMaps (``kind: ConfigMap``) among multi-document manifests (``kubectl kustomize`` output, ``List``
    items included) whose ``data`` has :data:`PROTOCOL_DATA_KEY`. Returns ``[(location, constants)]`` in document
    order; a location is ``source`` or ``source: ConfigMap NAMESPACE/NAME``. Raises :class:`ProtocolFileError`
    for invalid YAML or an invalid protocol (naming the location and the key)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise ProtocolFileError(f"{source}: not valid YAML: {error}") from error
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ProtocolFileError(f"{source}: not valid YAML: nested too deep") from None
    found: list[tuple[str, ProtocolConstants]] = []

    def visit(document: Any) -> None:
        if not isinstance(document, dict):
            return
        if document.get("kind") == "List" and isinstance(document.get("items"), list):
            for item in document["items"]:
                visit(item)
            return
        if document.get("kind") == "ConfigMap":
            data = document.get("data") or {}
            if isinstance(data, dict) and PROTOCOL_DATA_KEY in data:
                metadata = document.get("metadata")
                metadata = metadata if isinstance(metadata, dict) else {}
                where = f"{source}: ConfigMap {metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"
                value = data[PROTOCOL_DATA_KEY]
                if not isinstance(value, str):  # Kubernetes refuses it too: ConfigMap data values are strings
                    raise ProtocolFileError(
                        f"{where}: data.{PROTOCOL_DATA_KEY} must be a string, got {type(value).__name__}: write "
                        f"'{PROTOCOL_DATA_KEY}: |' and the keys indented under it"
                    )
                found.append((where, parse_protocol(value, source=where)))

    try:
        for document in documents:
            visit(document)
    except RecursionError:  # a List that holds itself (a YAML alias)
        raise ProtocolFileError(f"{source}: a List nests itself or is nested too deep") from None
    if not found and len(documents) == 1 and isinstance(documents[0], dict) and "kind" not in documents[0]:
        found.append((source, parse_protocol(text, source=source)))
    return found


def protocol_items(protocol: ProtocolConstants) -> dict[str, object]:
    """Every constant of ``protocol`` as ``{dotted kebab-case key: value}`` (``resources.gpu``, ``memory-unit``),
    the keys of ``protocol.yaml``."""
    flat: dict[str, object] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value

    walk("", _CONVERTER.unstructure(protocol))
    return flat
