"""Decoding a ResourceClaimTemplate's spec back into the claim shape it asks
(``adapters.kubernetes.claimtemplates.shape_of``), no cluster.

Behaviours covered:
- what ``ClaimShape.template_spec()`` writes decodes to the same shape (share and whole GPUs), also with the API's
  defaults spelled out (allocationMode) and memory in bytes;
- anything a shape does not say decodes to None: selectors, constraints, two requests, another request name,
  firstAvailable, another allocation mode, other capacity names, malformed amounts.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.kubernetes.claimtemplates import shape_of
from domain.dra.migrate import ClaimShape

SHARE = ClaimShape("gpu-share.lj-runtimekit.io", cores=30, memory_bytes=4 * 2**30)
WHOLE = ClaimShape("gpu.lj-runtimekit.io", count=2)


def test_written_shapes_decode_to_themselves() -> None:
    assert shape_of(SHARE.template_spec()) == SHARE
    assert shape_of(WHOLE.template_spec()) == WHOLE
    spec = SHARE.template_spec()
    spec["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = str(4 * 2**30)
    assert shape_of(spec) == SHARE


def _changed(path: list[Any], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SHARE.template_spec())
    target = spec
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return spec


EXACTLY = ["spec", "devices", "requests", 0, "exactly"]


@pytest.mark.parametrize("spec", [
    _changed([*EXACTLY, "selectors"], [{"cel": {"expression": "true"}}]),
    _changed(["spec", "devices", "constraints"], [{"matchAttribute": "x.io/y"}]),
    _changed(["spec", "devices", "requests"], [{"name": "gpu"}, {"name": "b"}]),
    _changed(["spec", "devices", "requests", 0, "name"], "other"),
    _changed(["spec", "devices", "requests", 0, "firstAvailable"], []),
    _changed([*EXACTLY, "allocationMode"], "All"),
    _changed([*EXACTLY, "capacity", "requests", "other"], "1"),
    _changed([*EXACTLY, "capacity", "requests", "cores"], "0.5"),
    _changed([*EXACTLY, "capacity", "requests", "cores"], "300"),
    {"spec": {}},
])
def test_anything_else_is_no_shape(spec: dict[str, Any]) -> None:
    assert shape_of(spec) is None
