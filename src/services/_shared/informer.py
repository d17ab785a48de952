"""A reliable list+watch loop (an informer) over the cluster port, with a local cache.

Algorithm (client-go's ``tools/cache`` Reflector): LIST, replace the cache and remember the list's resourceVersion;
WATCH from it and apply ADDED/MODIFIED (upsert) and DELETED (remove), advancing the resourceVersion with every event
(BOOKMARK included); a watch that ends normally is resumed from the last resourceVersion; 410 Gone relists and *diffs*
the new list against the cache, delivering deletions for vanished objects (their last known state, the "tombstone" of
client-go); other errors back off (0.5 s doubling to 30 s) and retry, each counted in :attr:`Informer.failures`.
Handlers run on the informer's thread and must be quick.

Identity: with ``uid`` given, an object whose key is cached under another UID (deleted and re-created under the
same name while the watch was down, or a missed DELETED) first gets ``on_delete(cached)``, then
``on_upsert(new)`` — in a relist and in a watch event alike — so the old object's resources are released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from domain.kube.objects import EventType, Listing, NodeObject, WatchEvent
from ports.cluster import GoneError, NodesApi

log = logging.getLogger(__name__)

T = TypeVar("T")


class Informer(Generic[T]):
    """List+watch of one object kind. ``key`` names an object (``namespace/name`` or node name); ``uid``
    (optional) gives its UID (module docstring); ``on_upsert(obj)`` runs for adds and updates,
    ``on_delete(last_known)`` for deletions. ``watch_timeout``: seconds one watch request lasts before it is
    resumed (the server's ``timeoutSeconds``)."""

    def __init__(
        self,
        *,
        name: str,
        list_fn: Callable[[], Listing[T]],
        watch_fn: Callable[[str, float], Iterator[WatchEvent[T]]],
        key: Callable[[T], str],
        on_upsert: Callable[[T], None],
        on_delete: Callable[[T], None],
        watch_timeout: float = 300.0,
        uid: Callable[[T], str] | None = None,
    ) -> None:
        self.name = name
        self._list = list_fn
        self._watch = watch_fn
        self._key = key
        self._on_upsert = on_upsert
        self._on_delete = on_delete
        self._uid = uid
        self.watch_timeout = watch_timeout
        self.cache: dict[str, T] = {}
        self.resource_version = ""
        self.synced = threading.Event()
        self.relists = 0
        self.failures = 0
        """Failed LIST or WATCH attempts (each retry counts; a 410 Gone is a relist, not a failure)."""

    def relist(self) -> None:
        """LIST and reconcile the cache: upsert every item, deliver deletions for vanished keys."""
        listing = self._list()
        fresh = {self._key(item): item for item in listing.items}
        for key in [k for k in self.cache if k not in fresh]:
            self._on_delete(self.cache.pop(key))
        for key, item in fresh.items():
            self._replace(key, item)
            self._on_upsert(item)
        self.resource_version = listing.resource_version
        self.relists += 1
        self.synced.set()

    def apply(self, event: WatchEvent[T]) -> None:
        """Apply one watch event to the cache and the handlers."""
        if event.resource_version:
            self.resource_version = event.resource_version
        if event.object is None or event.type is EventType.BOOKMARK:
            return
        key = self._key(event.object)
        if event.type is EventType.DELETED:
            last = self.cache.pop(key, None)
            if last is not None and self._other(last, event.object):
                self._on_delete(last)  # an older object under the same key whose delete we never saw
            self._on_delete(event.object)
        else:
            self._replace(key, event.object)
            self._on_upsert(event.object)

    def _other(self, cached: T, new: T) -> bool:
        return self._uid is not None and self._uid(cached) != self._uid(new)

    def _replace(self, key: str, item: T) -> None:
        """Cache ``item`` under ``key``; a cached object with another UID is deleted first."""
        cached = self.cache.get(key)
        if cached is not None and self._other(cached, item):
            del self.cache[key]
            self._on_delete(cached)
        self.cache[key] = item

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set (module docstring)."""
        backoff = 0.5
        while not stop.is_set():
            try:
                if not self.synced.is_set():
                    self.relist()
                for event in self._watch(self.resource_version, self.watch_timeout):
                    self.apply(event)
                    if stop.is_set():
                        return
                backoff = 0.5
            except GoneError:
                log.info("%s: resourceVersion %s too old, relisting", self.name, self.resource_version)
                self.synced.clear()
            except Exception as error:  # transport errors too: the loop must outlive any one failure
                self.failures += 1
                log.warning("%s: %s; retrying in %.1f s", self.name, error, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)


def node_informer(cluster: NodesApi, *, on_upsert: Callable[[NodeObject], None],
                  on_delete: Callable[[NodeObject], None], watch_timeout: float) -> Informer[NodeObject]:
    """The ``nodes`` informer of ``cluster``: keyed by node name, with UIDs (a node re-created under its name is
    deleted first); ``watch_timeout`` in seconds (the server's ``timeoutSeconds``)."""
    return Informer(
        name="nodes", list_fn=cluster.list_nodes,
        watch_fn=lambda rv, t: cluster.watch_nodes(resource_version=rv, timeout_seconds=t),
        key=lambda n: n.name, uid=lambda n: n.uid, on_upsert=on_upsert, on_delete=on_delete,
        watch_timeout=watch_timeout)
