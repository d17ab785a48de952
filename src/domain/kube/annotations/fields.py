"""Typed reads of decoded annotation JSON: each failure names ``<annotation key>.<json path>`` and the value.

Invariant: a field is either read with its declared type or refused with :class:`InvalidRequestError`.
"""


from __future__ import annotations

import json
from collections.abc import Mapping

from domain.errors import InvalidRequestError
from domain.kube.annotations.records import (
    MAX_ANNOTATION_BYTES,
    PLAN_VERSION,
)


def _load(key: str, text: object) -> dict[str, object]:
    if not isinstance(text, str):
        raise InvalidRequestError(key, text, "annotation value must be a string")
    if len(text) > MAX_ANNOTATION_BYTES:
        raise InvalidRequestError(key, f"<{len(text)} characters>", "longer than the 256 KiB annotation limit")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidRequestError(key, text[:80], f"malformed JSON: {error}") from None
    return _object(key, data)


def _object(field: str, value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise InvalidRequestError(field, value, "must be a JSON object")
    return value


def _get(field: str, data: Mapping[str, object], name: str) -> object:
    if name not in data:
        raise InvalidRequestError(f"{field}.{name}", None, "missing")
    return data[name]


def _int(field: str, data: Mapping[str, object], name: str) -> int:
    value = _get(field, data, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{field}.{name}", value, "must be an integer")
    return value


def _str(field: str, data: Mapping[str, object], name: str) -> str:
    value = _get(field, data, name)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{field}.{name}", value, "must be a non-empty string")
    return value


def _bool(field: str, data: Mapping[str, object], name: str) -> bool:
    value = _get(field, data, name)
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{field}.{name}", value, "must be true or false")
    return value


def _list(field: str, data: Mapping[str, object], name: str) -> list[object]:
    value = _get(field, data, name)
    if not isinstance(value, list):
        raise InvalidRequestError(f"{field}.{name}", value, "must be a JSON array")
    return value


def _version(key: str, data: Mapping[str, object], supported: int | tuple[int, ...]) -> int:
    version = _int(key, data, "version")
    accepted = supported if isinstance(supported, tuple) else (supported,)
    if version not in accepted:
        reads = " and ".join(str(v) for v in accepted)
        raise InvalidRequestError(f"{key}.version", version, f"unsupported version; this build reads {reads}")
    return version


def _plan_version(key: str, data: Mapping[str, object]) -> None:
    version = _int(key, data, "version")
    if version == 1:
        raise InvalidRequestError(f"{key}.version", version, "version 1 plans carry no podUID and are not trusted; "
                                  f"this build reads {PLAN_VERSION}")
    _version(key, data, PLAN_VERSION)


def _dump(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False)
