"""A node's pool of ResourceSlices over time: the generation and the writes that make the server match.

:class:`PoolState` decides "changed or not": it keeps the content last published and bumps the pool generation
on every content change (never on a repeat), so consumers can tell a complete new view from a half-written
one (``spec.pool.generation``; every slice of a generation carries ``resourceSliceCount``). On start it resumes
from the slices the server holds (:meth:`PoolState.resume`): same content, same generation; else one above the
highest there. :func:`plan_writes` is the difference between the slices wanted and those stored: create the
new names, update the changed ones, then delete the extra (upstream's order: a consumer sees the new
generation complete before the old one goes).

Slice names are ``<node>-<driver>-<k>`` (``k`` from 0), a DNS subdomain; a node name so long that the result
would pass 253 characters is cut and given a hash suffix (:func:`slice_name`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import attrs

from .slices import NodeOwner, ResourceSlice, SliceContent

MAX_NAME = 253
"""Longest object name (DNS subdomain)."""


def slice_name(node: str, driver: str, k: int) -> str:
    """The name of slice ``k`` of ``node``'s pool (module docstring)."""
    name = f"{node}-{driver}-{k}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    keep = MAX_NAME - len(f"-{digest}-{driver}-{k}")
    return f"{node[:keep].rstrip('.-')}-{digest}-{driver}-{k}"


@attrs.frozen
class SlicePlan:
    """Writes that turn the stored slices into the wanted ones: ``create``, ``update`` (the stored
    resourceVersion carried over) and ``delete`` (names)."""

    create: tuple[ResourceSlice, ...] = ()
    update: tuple[ResourceSlice, ...] = ()
    delete: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """True when nothing needs writing."""
        return not (self.create or self.update or self.delete)


def plan_writes(wanted: Sequence[ResourceSlice], stored: Sequence[ResourceSlice]) -> SlicePlan:
    """The :class:`SlicePlan` from ``stored`` to ``wanted`` (matched by name; equal content is left alone)."""
    old = {s.name: s for s in stored}
    create = tuple(s for s in wanted if s.name not in old)
    update = tuple(attrs.evolve(s, resource_version=old[s.name].resource_version)
                   for s in wanted if s.name in old and old[s.name] != s)
    names = {s.name for s in wanted}
    delete = tuple(sorted(name for name in old if name not in names))
    return SlicePlan(create, update, delete)


@attrs.define
class PoolState:
    """The pool of node ``node`` for driver ``driver``, owned by ``owner`` (module docstring). ``generation`` 0
    means nothing published yet."""

    node: str
    driver: str
    owner: NodeOwner | None = None
    generation: int = 0
    content: tuple[SliceContent, ...] | None = None

    def resume(self, stored: Sequence[ResourceSlice]) -> None:
        """Adopt what the server holds (module docstring): the highest generation stored and, when the slices of
        that generation are complete, their content in name order."""
        if not stored:
            return
        top = max(s.generation for s in stored)
        current = sorted((s for s in stored if s.generation == top), key=lambda s: _index(s.name))
        self.generation = max(self.generation, top)
        complete = all(s.slice_count == len(current) for s in current)
        self.content = tuple(s.content for s in current) if complete else None

    def advance(self, content: Sequence[SliceContent]) -> bool:
        """Take ``content`` as the pool's; True (and the next generation) when it differs from the last."""
        wanted = tuple(content) or (SliceContent(),)  # a pool without devices still has one (empty) slice
        if self.generation > 0 and wanted == self.content:
            return False
        self.generation += 1
        self.content = wanted
        return True

    def slices(self) -> tuple[ResourceSlice, ...]:
        """The slices of the current generation (one empty slice for a node without devices, so consumers see
        the pool). Raises ValueError before the first :meth:`advance`."""
        if self.content is None or self.generation == 0:
            raise ValueError("no content yet: call advance() first")
        return tuple(ResourceSlice(name=slice_name(self.node, self.driver, k), driver=self.driver, node=self.node,
                                   generation=self.generation, slice_count=len(self.content), content=part,
                                   owner=self.owner)
                     for k, part in enumerate(self.content))


def _index(name: str) -> int:
    tail = name.rpartition("-")[2]
    return int(tail) if tail.isdigit() else 0
