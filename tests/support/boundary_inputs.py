"""Shared by the boundary property tests: any JSON value, a valid JSON document with some of its fields replaced by
any JSON value or removed (the inputs a careless or hostile writer produces), and :func:`raised`, which lets a test
assert on the typed error outside an ``except`` block.

Not a test module.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from hypothesis import strategies as st

_E = TypeVar("_E", bound=BaseException)


def raised(call: Callable[[], object], kind: type[_E] | tuple[type[_E], ...]) -> _E | None:
    """The ``kind`` error ``call`` raised, or None when it returned; any other exception propagates (fails the test)."""
    try:
        call()
    except kind as error:
        return error
    return None


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(10**308, 10**320),
                      st.floats(), st.text(max_size=8),
                      st.sampled_from(["static", "Healthy", "enabled", "disabled", "GPU-n1-0", "GPU-n1-1", "3g.40gb",
                                       "n1", "u", "main", "uid-1"]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _replace(doc: Any, path: tuple[Any, ...], new: Any, *, delete: bool) -> Any:
    if not path:
        return new
    doc = copy.deepcopy(doc)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


@st.composite
def mutated(draw: st.DrawFn, document: str) -> str:
    """``document`` (JSON text) with one to three fields replaced by any JSON value or removed."""
    doc = json.loads(document)
    for _ in range(draw(st.integers(1, 3))):
        doc = _replace(doc, draw(st.sampled_from(list(_paths(doc)))), draw(json_value), delete=draw(st.booleans()))
    return json.dumps(doc)
