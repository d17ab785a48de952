"""The exporter's view of which pods on its node ended, learned from the Kubernetes API through a watch.

:class:`EndedPods` keeps a view of the node's pods fed by an informer (``services._shared.informer``): one LIST
with ``spec.nodeName=<node>`` at start and whenever the watch expires (410 Gone), then a WATCH with the same
selector, resumed from the last resourceVersion every ``watch_timeout_s``. A collector pull reads the view and
makes no API request. After each pull it applies ``domain.exporter.liveness`` to the view: a UID of the Runtime's
data has ended when

(a) the view holds its pod in a terminal phase (Succeeded, Failed);
(b) the view held its pod and lost it: a DELETED event, gone from a relist, or replaced under its name by a pod
    with another UID; or
(c) the view never held it and a LIST that *started after the pull at which the UID first appeared* holds it
    terminal or not at all.

Why (c) needs "started after": every pod with a Runtime record was bound to the node before its record existed,
so a listing taken after the record was read would show it unless it is gone (the rule of the per-pull listing
this replaces). A UID the view has never held is otherwise no evidence — a watch event not delivered yet (the
view lags by the watch's latency) cannot be told from a pod that is gone — so it is kept, and a new pod is never
dropped on old evidence. The first LIST waits for the first pull's Runtime read, and that pull waits up to
``deadline_s`` for it, so records of pods that ended before the exporter started leave at the first pull. A UID
that (c) cannot decide (its pod was created and deleted while the view could not see it, and no relist followed)
stays until the Runtime releases its record, as without the API.

Ended stays ended: pod UIDs are never reused, and what :meth:`EndedPods.update` returned is kept while the
Runtime's data still names the UID. The view remembers at most ``gone_memory`` lost UIDs (oldest forgotten
first; a forgotten one falls under rule (c)).

API failures never block a pull (the first one waits at most ``deadline_s``), so they never count against the
Runtime (``exporter_runtime_up``): the informer retries with backoff, each failed LIST or WATCH attempt is logged
and counted (``exporter_pod_api_errors_total``), and meanwhile the view keeps what it knew.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterator

from domain.exporter.liveness import ended_uids
from domain.kube.objects import Listing, PodObject, WatchEvent
from ports.cluster import PodsApi
from services._shared.informer import Informer

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 300.0
"""Seconds one WATCH request lasts before it is resumed (the server's ``timeoutSeconds``; client-go picks 5–10 min)."""

CLOSE_WAIT_S = 2.0
"""Most seconds :meth:`EndedPods.close` waits for the informer thread (its watch ends at the next event or at
``watch_timeout_s``); past that the daemon thread is left to end on its own."""

GONE_MEMORY = 4096
"""Lost pod UIDs the view remembers (rule (b)); about 150 KiB."""


class EndedPods:
    """Ended pods of node ``node`` (module docstring). ``deadline_s``: seconds the first pull waits for the first
    LIST; ``watch_timeout_s``: seconds one WATCH lasts (and so how long :meth:`close` may wait); ``gone_memory``: lost
    UIDs remembered. :meth:`start` runs the informer on a thread of its own, :meth:`close` stops it. Thread-safe."""

    def __init__(self, cluster: PodsApi, *, node: str, deadline_s: float = 5.0,
                 watch_timeout_s: float = WATCH_TIMEOUT_S, gone_memory: int = GONE_MEMORY) -> None:
        self._cluster = cluster
        self._selector = f"spec.nodeName={node}"
        self._deadline_s = deadline_s
        self._gone_memory = gone_memory
        self._lock = threading.Lock()
        self._terminal: dict[str, bool] = {}  # UID → terminal, for every pod the view holds
        self._gone: dict[str, None] = {}  # UIDs the view held and lost, oldest first
        self._lists_started = 0
        self._listed: tuple[int, tuple[PodObject, ...]] = (0, ())  # (number, items) of the last LIST that answered
        self._first_seen: dict[str, int] = {}  # undecided UID → LISTs started before the pull it first appeared at
        self._ended: frozenset[str] = frozenset()
        self._version = ""
        self._go = threading.Event()  # the first pull read the Runtime (or close): the first LIST may start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.informer: Informer[PodObject] = Informer(
            name=f"pods of the node ({self._selector})", list_fn=self._list, watch_fn=self._watch,
            key=lambda p: p.key, uid=lambda p: p.uid, on_upsert=self._upsert, on_delete=self._delete,
            watch_timeout=watch_timeout_s)

    @property
    def errors(self) -> int:
        """Failed LIST or WATCH requests of the node's pods since start (each retry counts; a 410 Gone does not)."""
        return self.informer.failures

    @property
    def resource_version(self) -> str:
        """The resourceVersion of the last pod change applied to the view (empty before any)."""
        with self._lock:
            return self._version

    def start(self) -> None:
        """Start the informer thread (a no-op when started); its first LIST waits for the first :meth:`update`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ljrk-exp-pods", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        if not self._stop.is_set():
            self.informer.run(self._stop)

    def update(self, uids: Collection[str]) -> frozenset[str]:
        """The pod UIDs among ``uids`` (read from the Runtime just before) whose pod ended (module docstring: the
        view's evidence, plus what was returned before). Never raises; waits only at the first call, at most
        ``deadline_s`` seconds, for the first LIST."""
        current = frozenset(uids)
        with self._lock:
            started = self._lists_started
        if not self._go.is_set():
            self._go.set()
            if self._thread is not None:
                self.informer.synced.wait(self._deadline_s)
        with self._lock:
            ended = set(self._ended & current)
            unseen: set[str] = set()
            for uid in current - ended:
                terminal = self._terminal.get(uid)
                if uid in self._gone or terminal:
                    ended.add(uid)
                elif terminal is None and uid:
                    unseen.add(uid)
            first_seen = {uid: self._first_seen.get(uid, started) for uid in unseen}
            number, items = self._listed
            ended |= ended_uids([uid for uid, since in first_seen.items() if number > since], items)
            self._first_seen = {uid: since for uid, since in first_seen.items() if uid not in ended}
            self._ended = frozenset(ended)
            return self._ended

    def _list(self) -> Listing[PodObject]:
        with self._lock:
            self._lists_started += 1
            number = self._lists_started
        listing = self._cluster.list_pods(field_selector=self._selector)
        with self._lock:
            self._listed = (number, tuple(listing.items))
        return listing

    def _watch(self, resource_version: str, timeout_s: float) -> Iterator[WatchEvent[PodObject]]:
        return self._cluster.watch_pods(resource_version=resource_version, timeout_seconds=timeout_s,
                                        field_selector=self._selector)

    def _upsert(self, pod: PodObject) -> None:
        with self._lock:
            self._terminal[pod.uid] = pod.phase.terminal
            self._version = pod.resource_version

    def _delete(self, pod: PodObject) -> None:
        with self._lock:
            self._terminal.pop(pod.uid, None)
            self._gone[pod.uid] = None
            while len(self._gone) > self._gone_memory:
                del self._gone[next(iter(self._gone))]
            self._version = pod.resource_version

    def close(self) -> None:
        """Stop the informer; wait for its thread until its watch times out (``watch_timeout_s`` + 1 s), at most
        :data:`CLOSE_WAIT_S` seconds."""
        self._stop.set()
        self._go.set()
        if self._thread is not None:
            self._thread.join(timeout=min(self.informer.watch_timeout + 1.0, CLOSE_WAIT_S))
