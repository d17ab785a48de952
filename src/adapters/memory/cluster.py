"""In-memory :class:`~ports.cluster.ClusterApi`: a single-process twin of kube-apiserver for tests and dry runs.

It mirrors what kube-apiserver (1.37) does with no kubelet (resource versions, watches and their 410 window,
optimistic concurrency, binding, graceful delete, field and label selectors); the contract suite in
``tests/contract`` runs the same cases against this class and a real server. Invariant: every write bumps one global
resourceVersion, a write that changes nothing is no write. The rules and the differences by design (no validation
or admission): ``docs/memory-cluster.md``. All methods are thread-safe (one lock).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import attrs

from domain.kube.events import EventCorrelator
from domain.kube.objects import (
    ClusterEvent,
    ConfigMapObject,
    ContainerTermination,
    EventType,
    JobObject,
    LeaseRecord,
    Listing,
    NodeObject,
    PodObject,
    PodPhase,
    Propagation,
    WatchEvent,
)
from ports.cluster import ConflictError, GoneError, NotFoundError

from .cluster_configmaps import InMemoryConfigMaps
from .cluster_jobs import InMemoryJobs
from .cluster_leases import InMemoryLeasesAndEvents
from .cluster_watch import (
    Change,
    History,
    parse_label_selector,
    parse_pod_field_selector,
    status_error,
    visible_event,
)

DEFAULT_HISTORY_LIMIT = 1000
"""Changes kept per resource for watches (kube-apiserver's watch cache keeps at least 100 per resource)."""

DEFAULT_TERMINATION_GRACE_SECONDS = 30
"""``spec.terminationGracePeriodSeconds`` default (core/v1 defaulting)."""

DEFAULT_SCHEDULER = "default-scheduler"

_O = TypeVar("_O", PodObject, NodeObject, JobObject)


def _merge(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _always(_: object) -> bool:
    return True


class InMemoryCluster(InMemoryJobs, InMemoryLeasesAndEvents, InMemoryConfigMaps):
    """Nodes, pods, bindings, events, leases and Jobs held in memory with kube-apiserver semantics (module
    docstring).

    ``history_limit`` — changes kept per resource for watches; ``clock`` — epoch seconds for deletion timestamps
    and Job creation times. Test helpers beyond the port: :meth:`finalize_deletions`, :meth:`compact`,
    :attr:`events`, :attr:`job_deletions`.
    """

    def __init__(self, *, history_limit: int = DEFAULT_HISTORY_LIMIT, clock: Callable[[], float] = time.time) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit={history_limit}: must be >= 1")
        self._cond = threading.Condition()
        self._clock = clock
        self._rv = 1  # never list RV "0": to a watch it means "any state" (current objects first)
        self._nodes: dict[str, NodeObject] = {}
        self._pods: dict[tuple[str, str], PodObject] = {}
        self._grace: dict[tuple[str, str], int] = {}  # deletionGracePeriodSeconds of terminating pods
        self._leases: dict[tuple[str, str], LeaseRecord] = {}
        self._events: list[ClusterEvent] = []
        self._correlator = EventCorrelator()  # names are indexes into _events
        self._node_history: History[NodeObject] = History(history_limit)
        self._pod_history: History[PodObject] = History(history_limit)
        self._jobs: dict[tuple[str, str], JobObject] = {}
        self._job_history: History[JobObject] = History(history_limit)
        self._job_deletions: list[tuple[str, str, Propagation]] = []
        self._config_maps: dict[tuple[str, str], ConfigMapObject] = {}

    # ------------------------------------------------------------------ test helpers
    @property
    def events(self) -> list[ClusterEvent]:
        """A copy of every Event object :meth:`create_event` stored, oldest first; a repeated Event is one entry
        with its ``count``, ``first_timestamp`` and ``last_timestamp`` (the cluster's clock)."""
        with self._cond:
            return list(self._events)

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self._cond:
            return str(self._rv)

    def finalize_deletions(self) -> int:
        """Remove every terminating pod (what kubelets do once containers stop); returns how many."""
        with self._cond:
            keys = [key for key, pod in self._pods.items() if pod.deletion_timestamp is not None]
            for key in keys:
                self._remove_pod(self._pods[key])
            return len(keys)

    def compact(self) -> None:
        """Forget all watch history up to now (etcd compaction): a watch from an older RV raises GoneError."""
        with self._cond:
            self._node_history.compact(self._rv)
            self._pod_history.compact(self._rv)
            self._job_history.compact(self._rv)

    # ------------------------------------------------------------------ nodes
    def list_nodes(self) -> Listing[NodeObject]:
        """All nodes sorted by name, and the list's resourceVersion."""
        with self._cond:
            return Listing(tuple(self._nodes[name] for name in sorted(self._nodes)), str(self._rv))

    def watch_nodes(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[NodeObject]]:
        """Node changes after ``resource_version`` for ``timeout_seconds`` (s). The iterator raises GoneError."""
        return self._watch(self._node_history, self._current_nodes, resource_version, timeout_seconds, _always)

    def get_node(self, name: str) -> NodeObject:
        """One node. Raises NotFoundError."""
        with self._cond:
            return self._node(name)

    def create_node(self, node: NodeObject) -> NodeObject:
        """Store a new node with a fresh uid and RV. Raises ConflictError if the name exists, 422 if empty."""
        if not node.name:
            raise status_error(422, "node name is required")
        with self._cond:
            if node.name in self._nodes:
                raise ConflictError(f'nodes "{node.name}" already exists')
            fresh = attrs.evolve(
                node,
                uid=str(uuid.uuid4()),
                labels=dict(node.labels),
                annotations=dict(node.annotations),
                allocatable=dict(node.allocatable),
            )
            return self._put_node(fresh, None)

    def delete_node(self, name: str) -> None:
        """Delete a node at once (nodes have no graceful deletion). Raises NotFoundError."""
        with self._cond:
            prev = self._node(name)
            del self._nodes[name]
            rv = self._bump()
            gone = attrs.evolve(prev, resource_version=str(rv))
            self._node_history.append(Change(rv, EventType.DELETED, gone, prev))
            self._cond.notify_all()

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> NodeObject:
        """Merge labels/annotations (None deletes a key). Raises NotFoundError, ConflictError (stale RV)."""
        with self._cond:
            prev = self._node(name)
            self._check_rv(prev.resource_version, resource_version, f'nodes "{name}"')
            new = attrs.evolve(
                prev,
                labels=_merge(prev.labels, labels or {}),
                annotations=_merge(prev.annotations, annotations or {}),
            )
            return prev if new == prev else self._put_node(new, prev)

    # ------------------------------------------------------------------ pods
    def list_pods(
        self, *, field_selector: str = "", label_selector: str = "", namespace: str = ""
    ) -> Listing[PodObject]:
        """Pods sorted by namespace/name (of ``namespace`` only, when given), filtered by ``field_selector`` and
        ``label_selector``. Raises ClusterError (400) for a bad selector."""
        match, labels = parse_pod_field_selector(field_selector), parse_label_selector(label_selector)
        with self._cond:
            pods = (self._pods[key] for key in sorted(self._pods) if not namespace or key[0] == namespace)
            return Listing(tuple(p for p in pods if match(p) and labels(p.labels)), str(self._rv))

    def watch_pods(
        self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
    ) -> Iterator[WatchEvent[PodObject]]:
        """Pod changes after ``resource_version`` seen through ``field_selector``, for ``timeout_seconds`` (s).

        Raises ClusterError (400) for a bad selector at once; the iterator raises GoneError.
        """
        match = parse_pod_field_selector(field_selector)
        return self._watch(self._pod_history, self._current_pods, resource_version, timeout_seconds, match)

    def get_pod(self, namespace: str, name: str) -> PodObject:
        """One pod. Raises NotFoundError."""
        with self._cond:
            return self._pod(namespace, name)

    def create_pod(self, pod: PodObject) -> PodObject:
        """Store a new Pending pod with a fresh uid and RV. Raises ConflictError if it exists, 422 if unnamed."""
        if not pod.name or not pod.namespace:
            raise status_error(422, "pod namespace and name are required")
        with self._cond:
            if (pod.namespace, pod.name) in self._pods:
                raise ConflictError(f'pods "{pod.name}" already exists')
            fresh = attrs.evolve(
                pod,
                uid=str(uuid.uuid4()),
                scheduler_name=pod.scheduler_name or DEFAULT_SCHEDULER,
                phase=PodPhase.PENDING,
                deletion_timestamp=None,
                annotations=dict(pod.annotations),
                labels=dict(pod.labels),
                node_selector=dict(pod.node_selector),
            )
            return self._put_pod(fresh, None)

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> None:
        """Delete a pod gracefully (module docstring); ``grace_period_seconds`` in s. Raises NotFoundError."""
        with self._cond:
            pod = self._pod(namespace, name)
            key = (namespace, name)
            now = self._clock()
            if pod.deletion_timestamp is not None:
                current = self._grace.get(key, 0)
                if current <= 0:
                    self._remove_pod(pod)
                    return
                if grace_period_seconds is None or grace_period_seconds >= current:
                    return  # graceful deletion pending: only a shorter grace changes anything
                period = grace_period_seconds
                timestamp = pod.deletion_timestamp - current + period
            else:
                period = DEFAULT_TERMINATION_GRACE_SECONDS if grace_period_seconds is None else grace_period_seconds
                if not pod.node_name or pod.phase.terminal:
                    period = 0
                timestamp = now + period
            self._grace[key] = max(period, 0)
            marked = self._put_pod(attrs.evolve(pod, deletion_timestamp=float(int(timestamp))), pod)
            if period <= 0:
                self._remove_pod(marked)

    def set_pod_phase(
        self, namespace: str, name: str, phase: PodPhase, *, terminations: Sequence[ContainerTermination] = ()
    ) -> PodObject:
        """Write ``status.phase`` and, with ``terminations``, the containers' terminated states (what a kubelet
        does). Raises NotFoundError."""
        with self._cond:
            prev = self._pod(namespace, name)
            pod = attrs.evolve(prev, phase=phase, terminations=tuple(terminations) or prev.terminations)
            return prev if pod == prev else self._put_pod(pod, prev)

    def patch_pod_annotations(
        self, namespace: str, name: str, changes: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> PodObject:
        """Merge annotations (None deletes a key). Raises NotFoundError, ConflictError (stale RV)."""
        with self._cond:
            prev = self._pod(namespace, name)
            self._check_rv(prev.resource_version, resource_version, f'pods "{name}"')
            new = attrs.evolve(prev, annotations=_merge(prev.annotations, changes))
            return prev if new == prev else self._put_pod(new, prev)

    def bind_pod(
        self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Set ``node_name`` and merge ``annotations`` into the pod's in one write (POST pods/binding). Raises
        NotFoundError, ConflictError (bound, terminating, UID)."""
        with self._cond:
            pod = self._pod(namespace, name)
            if uid and uid != pod.uid:
                raise ConflictError(f'Operation cannot be fulfilled on pods/binding "{name}": UID {uid} != {pod.uid}')
            if pod.deletion_timestamp is not None:
                raise ConflictError(f'Operation cannot be fulfilled on pods/binding "{name}": pod is being deleted')
            if pod.node_name:
                raise ConflictError(
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f'pod {name} is already assigned to node "{pod.node_name}"'
                )
            merged = _merge(pod.annotations, dict(annotations or {}))
            self._put_pod(attrs.evolve(pod, node_name=node, annotations=merged), pod)

    # ------------------------------------------------------------------ internals (callers hold the lock)
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

    def _node(self, name: str) -> NodeObject:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFoundError(f'nodes "{name[:100]}" not found') from None

    def _pod(self, namespace: str, name: str) -> PodObject:
        try:
            return self._pods[(namespace, name)]
        except KeyError:
            raise NotFoundError(f'pods "{name[:100]}" not found in namespace "{namespace[:64]}"') from None

    def _put_node(self, node: NodeObject, prev: NodeObject | None) -> NodeObject:
        rv = self._bump()
        stored = attrs.evolve(node, resource_version=str(rv))
        self._nodes[node.name] = stored
        self._node_history.append(Change(rv, EventType.ADDED if prev is None else EventType.MODIFIED, stored, prev))
        self._cond.notify_all()
        return stored

    def _put_pod(self, pod: PodObject, prev: PodObject | None) -> PodObject:
        rv = self._bump()
        stored = attrs.evolve(pod, resource_version=str(rv))
        self._pods[(pod.namespace, pod.name)] = stored
        self._pod_history.append(Change(rv, EventType.ADDED if prev is None else EventType.MODIFIED, stored, prev))
        self._cond.notify_all()
        return stored

    def _remove_pod(self, prev: PodObject) -> None:
        key = (prev.namespace, prev.name)
        del self._pods[key]
        self._grace.pop(key, None)
        rv = self._bump()
        self._pod_history.append(Change(rv, EventType.DELETED, attrs.evolve(prev, resource_version=str(rv)), prev))
        self._cond.notify_all()

    def _current_nodes(self) -> Iterable[NodeObject]:
        return [self._nodes[name] for name in sorted(self._nodes)]

    def _current_pods(self) -> Iterable[PodObject]:
        return [self._pods[key] for key in sorted(self._pods)]

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
