"""What every resource of :class:`~adapters.memory.cluster.InMemoryCluster` shares: one lock (a condition that
watches wait on), one global resourceVersion counter, the clock, the optimistic-concurrency check, the store
writes that record a change, and the watch loop.

Invariant: every write bumps the one counter, so resourceVersions order all changes of all resources; callers of
the underscored methods hold :attr:`InMemoryStore._cond`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TypeVar

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.slices import ResourceSlice
from domain.kube.objects import EventType, JobObject, NodeObject, PodObject, WatchEvent
from ports.cluster import ConflictError, GoneError

from .cluster_watch import Change, History, status_error, visible_event

_O = TypeVar("_O", PodObject, NodeObject, JobObject, ClaimAllocation, ResourceSlice)
_K = TypeVar("_K", bound=Hashable)


def merged(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """``current`` with ``changes`` applied: a string sets its key, None deletes it (a merge patch of a map)."""
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


class InMemoryStore:
    """The shared state and machinery of the in-memory cluster's resources (module docstring); ``clock`` gives
    epoch seconds."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._cond = threading.Condition()
        self._clock = clock
        self._rv = 1  # never list RV "0": to a watch it means "any state" (current objects first)

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._cond:
            return str(self._rv)

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _rv_now(self) -> int:
        return self._rv

    @staticmethod
    def _check_rv(current: str, given: str | None, what: str) -> None:
        if given is not None and given != current:
            raise ConflictError(
                f"Operation cannot be fulfilled on {what}: the object has been modified; "
                "please apply your changes to the latest version and try again"
            )

    def _put(self, objects: dict[_K, _O], key: _K, history: History[_O], obj: _O, prev: _O | None) -> _O:
        """Store ``obj`` under ``key`` at a new RV and record the change (ADDED when ``prev`` is None)."""
        rv = self._bump()
        stored = attrs.evolve(obj, resource_version=str(rv))
        objects[key] = stored
        history.append(Change(rv, EventType.ADDED if prev is None else EventType.MODIFIED, stored, prev))
        self._cond.notify_all()
        return stored

    def _drop(self, objects: dict[_K, _O], key: _K, history: History[_O]) -> None:
        """Remove the object under ``key`` at a new RV and record its deletion."""
        prev = objects.pop(key)
        rv = self._bump()
        history.append(Change(rv, EventType.DELETED, attrs.evolve(prev, resource_version=str(rv)), prev))
        self._cond.notify_all()

    def _watch(
        self,
        history: History[_O],
        current: Callable[[], Iterable[_O]],
        resource_version: str,
        timeout_seconds: float,
        match: Callable[[_O], bool],
    ) -> Iterator[WatchEvent[_O]]:
        deadline = time.monotonic() + timeout_seconds
        try:
            start = int(resource_version or "0")
        except ValueError:
            raise status_error(400, f"invalid resourceVersion {resource_version[:40]!r}") from None
        if start < 0:
            raise status_error(400, f"invalid resourceVersion {resource_version[:40]!r}")
        with self._cond:
            initial: list[WatchEvent[_O]] = []
            if start == 0:  # "any state": list the current objects first, then follow
                initial = [WatchEvent(EventType.ADDED, obj, obj.resource_version) for obj in current() if match(obj)]
                cursor = self._rv
            elif start < history.floor:
                raise GoneError(f"too old resource version: {start} ({history.floor})")
            else:
                cursor = start
        yield from initial
        while True:
            with self._cond:
                batch = history.since(cursor)
                while batch == [] and (remaining := deadline - time.monotonic()) > 0:
                    self._cond.wait(remaining)
                    batch = history.since(cursor)
            if not batch:  # timed out (empty) or fell behind the window (None): the server closes the stream
                return
            cursor = batch[-1].rv
            for change in batch:
                event = visible_event(change, match)
                if event is not None:
                    yield event
            if time.monotonic() >= deadline:
                return
