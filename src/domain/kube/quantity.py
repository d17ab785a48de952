"""Kubernetes resource quantities for node-level CPU and memory (``500m``, ``2``, ``1.5Gi``, ``129e6``).

Grammar (``k8s.io/apimachinery/pkg/api/resource``, Quantity): an unsigned decimal number followed by an optional
binary suffix (``Ki Mi Gi Ti Pi Ei``), decimal suffix (``n u m k M G T P E``) or decimal exponent (``e3``,
``E-2``). Values are converted exactly (rational arithmetic) and rounded *up* to the target unit, as
``Quantity.MilliValue()``/``Value()`` do, so a request is never under-counted.

Extended resources (our GPU resources) use the stricter integer parser
:func:`domain.kube.protocol.parse_quantity` instead: the API server refuses fractions for them.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from domain.errors import InvalidRequestError
from domain.kube.protocol import MAX_QUANTITY_DIGITS

_QUANTITY = re.compile(r"^\+?(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_SUFFIX = {
    None: Fraction(1),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_MAX_EXPONENT = 30
"""Largest decimal exponent accepted (``1e30``); larger values are not real resource sizes."""


def parse_decimal_quantity(field: str, text: object) -> Fraction:
    """Parse a non-negative Kubernetes quantity to an exact rational value in base units.

    Raises :class:`InvalidRequestError` naming ``field`` for anything else (negative, empty, unknown suffix, more
    than ``MAX_QUANTITY_DIGITS`` digits).
    """
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidRequestError(field, text, "must be a non-negative quantity such as 500m, 2, 1.5Gi or 129e6")
    number, suffix = match.groups()
    if len(number) > MAX_QUANTITY_DIGITS:
        raise InvalidRequestError(field, text, f"more than {MAX_QUANTITY_DIGITS} digits: no resource is that large")
    value = Fraction(number)
    if suffix is not None and suffix[0] in "eE" and suffix not in _SUFFIX:
        exponent = int(suffix[1:])
        if abs(exponent) > _MAX_EXPONENT:
            raise InvalidRequestError(field, text, f"exponent beyond ±{_MAX_EXPONENT}")
        return value * Fraction(10) ** exponent
    return value * _SUFFIX[suffix]


def parse_cpu_milli(field: str, text: object) -> int:
    """CPU quantity → milli-cores (int), rounded up: ``"500m"`` → 500, ``"2"`` → 2000, ``"0.1"`` → 100.

    Raises :class:`InvalidRequestError` naming ``field``.
    """
    value = _cpu_milli(text) if isinstance(text, str) else None
    return math.ceil(parse_decimal_quantity(field, text) * 1000) if value is None else value


def parse_bytes(field: str, text: object) -> int:
    """Memory quantity → bytes (int), rounded up: ``"1Gi"`` → 1073741824, ``"1.5Ki"`` → 1536.

    Raises :class:`InvalidRequestError` naming ``field``.
    """
    value = _bytes(text) if isinstance(text, str) else None
    return math.ceil(parse_decimal_quantity(field, text)) if value is None else value


def parse_count(field: str, text: object) -> int:
    """Count quantity (``pods``) → int, rounded up. Raises :class:`InvalidRequestError` naming ``field``."""
    value = _bytes(text) if isinstance(text, str) else None  # the same rounding as bytes
    return math.ceil(parse_decimal_quantity(field, text)) if value is None else value


@functools.lru_cache(maxsize=4096)
def _cpu_milli(text: str) -> int | None:
    """:func:`parse_cpu_milli` of a valid ``text`` (memoised: pods repeat a few quantities), None when invalid
    (the caller parses again to raise the error naming its field)."""
    try:
        return math.ceil(parse_decimal_quantity("", text) * 1000)
    except InvalidRequestError:
        return None


@functools.lru_cache(maxsize=4096)
def _bytes(text: str) -> int | None:
    """:func:`parse_bytes` of a valid ``text`` (memoised like :func:`_cpu_milli`), None when invalid."""
    try:
        return math.ceil(parse_decimal_quantity("", text))
    except InvalidRequestError:
        return None
