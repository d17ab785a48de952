"""In-memory :class:`~ports.cluster.ClusterApi`: a single-process twin of kube-apiserver for tests and dry runs.

It mirrors what kube-apiserver (1.37) does with no kubelet (resource versions, watches and their 410 window,
optimistic concurrency, binding, graceful delete, field and label selectors); the contract suite in
``tests/contract`` runs the same cases against this class and a real server. Invariant: every write bumps one global
resourceVersion, a write that changes nothing is no write. The rules and the differences by design (no validation
or admission): ``docs/memory-cluster.md``. All methods are thread-safe (one lock).

One file per resource, each a mixin over :class:`~.cluster_store.InMemoryStore` (the lock, the counter, the watch
loop): nodes :mod:`.cluster_nodes`, pods and bindings :mod:`.cluster_pods`, events and leases
:mod:`.cluster_leases`, Jobs :mod:`.cluster_jobs`, ConfigMaps :mod:`.cluster_configmaps`; this class owns every
resource's state and composes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from domain.kube.events import EventCorrelator
from domain.kube.objects import (
    ClusterEvent,
    ConfigMapObject,
    JobObject,
    LeaseRecord,
    NodeObject,
    PodObject,
    Propagation,
)

from .cluster_configmaps import InMemoryConfigMaps
from .cluster_jobs import InMemoryJobs
from .cluster_leases import InMemoryLeasesAndEvents
from .cluster_nodes import InMemoryNodes
from .cluster_pods import InMemoryPods
from .cluster_watch import History

DEFAULT_HISTORY_LIMIT = 1000
"""Changes kept per resource for watches (kube-apiserver's watch cache keeps at least 100 per resource)."""


class InMemoryCluster(InMemoryNodes, InMemoryPods, InMemoryJobs, InMemoryLeasesAndEvents, InMemoryConfigMaps):
    """Nodes, pods, bindings, events, leases, Jobs and ConfigMaps held in memory with kube-apiserver semantics
    (module docstring).

    ``history_limit`` — changes kept per resource for watches; ``clock`` — epoch seconds for deletion timestamps
    and Job creation times. Test helpers beyond the port: :meth:`finalize_deletions`, :meth:`compact`,
    :attr:`events`, :attr:`job_deletions`, :attr:`resource_version`.
    """

    def __init__(self, *, history_limit: int = DEFAULT_HISTORY_LIMIT, clock: Callable[[], float] = time.time) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit={history_limit}: must be >= 1")
        super().__init__(clock=clock)
        self._nodes: dict[str, NodeObject] = {}
        self._node_history: History[NodeObject] = History(history_limit)
        self._pods: dict[tuple[str, str], PodObject] = {}
        self._grace: dict[tuple[str, str], int] = {}
        self._pod_history: History[PodObject] = History(history_limit)
        self._leases: dict[tuple[str, str], LeaseRecord] = {}
        self._events: list[ClusterEvent] = []
        self._correlator = EventCorrelator()  # names are indexes into _events
        self._jobs: dict[tuple[str, str], JobObject] = {}
        self._job_history: History[JobObject] = History(history_limit)
        self._job_deletions: list[tuple[str, str, Propagation]] = []
        self._config_maps: dict[tuple[str, str], ConfigMapObject] = {}

    @property
    def events(self) -> list[ClusterEvent]:
        """A copy of every Event object :meth:`create_event` stored, oldest first; a repeated Event is one entry
        with its ``count``, ``first_timestamp`` and ``last_timestamp`` (the cluster's clock)."""
        with self._cond:
            return list(self._events)

    def compact(self) -> None:
        """Forget all watch history up to now (etcd compaction): a watch from an older RV raises GoneError."""
        with self._cond:
            for history in (self._node_history, self._pod_history, self._job_history):
                history.compact(self._rv)
