"""The constant-by-constant comparison of protocols, shared by both modes of ``ljrk protocol check`` (files and
``--kubeconfig``): every key of ``protocol.yaml`` whose value is not the same at every location."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.protocolfile import protocol_items
from domain.kube.protocol import ProtocolConstants


def differences(found: Sequence[tuple[str, ProtocolConstants]]) -> dict[str, dict[str, object]]:
    """``{key: {location: value}}`` for every constant whose value is not the same at all ``found`` locations
    (keys as in ``protocol.yaml``, dotted; sorted by key)."""
    flat = [(where, protocol_items(protocol)) for where, protocol in found]
    keys = sorted({key for _, items in flat for key in items})
    result: dict[str, dict[str, object]] = {}
    for key in keys:
        values = {where: items.get(key) for where, items in flat}
        if len({repr(v) for v in values.values()}) > 1:
            result[key] = values
    return result
