"""Pods and bindings of :class:`~adapters.memory.cluster.InMemoryCluster` (a mixin over
:class:`~.cluster_store.InMemoryStore`).

As kube-apiserver does with no kubelet: a create assigns a uuid4 ``uid`` and an RV, defaults the scheduler name
and starts the pod Pending with no conditions; a delete is graceful (``deletionTimestamp`` set; an unbound or
finished pod, or a grace of 0, goes at once; a second delete only shortens the grace; a UID precondition refuses a
pod of another UID, 409); a binding sets ``spec.nodeName`` and merges its annotations in one write, refusing a
bound or terminating pod or another UID (409). Lists and watches are in namespace/name order, filtered by field and
label selectors (:mod:`.cluster_watch`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from domain.kube.objects import ContainerTermination, Listing, PodObject, PodPhase, WatchEvent
from domain.kube.podconditions import PodCondition, with_condition
from ports.cluster import ConflictError, NotFoundError

from .cluster_store import InMemoryStore, merged
from .cluster_watch import History, parse_label_selector, parse_pod_field_selector, status_error

DEFAULT_TERMINATION_GRACE_SECONDS = 30
"""``spec.terminationGracePeriodSeconds`` default (core/v1 defaulting)."""

DEFAULT_SCHEDULER = "default-scheduler"


class InMemoryPods(InMemoryStore):
    """The pod methods of :class:`~adapters.memory.cluster.InMemoryCluster` (module docstring), and
    :meth:`finalize_deletions` for tests."""

    _pods: dict[tuple[str, str], PodObject]
    _grace: dict[tuple[str, str], int]  # deletionGracePeriodSeconds of terminating pods
    _pod_history: History[PodObject]

    def finalize_deletions(self) -> int:
        """Remove every terminating pod (what kubelets do once containers stop); returns how many."""
        with self._cond:
            keys = [key for key, pod in self._pods.items() if pod.deletion_timestamp is not None]
            for key in keys:
                self._remove_pod(key)
            return len(keys)

    def list_pods(self, *, field_selector: str = "", label_selector: str = "",
                  namespace: str = "") -> Listing[PodObject]:
        """Pods sorted by namespace/name (of ``namespace`` only, when given), filtered by ``field_selector`` and
        ``label_selector``. Raises ClusterError (400) for a bad selector."""
        match, labels = parse_pod_field_selector(field_selector), parse_label_selector(label_selector)
        with self._cond:
            pods = (self._pods[key] for key in sorted(self._pods) if not namespace or key[0] == namespace)
            return Listing(tuple(p for p in pods if match(p) and labels(p.labels)), str(self._rv))

    def watch_pods(self, *, resource_version: str, timeout_seconds: float,
                   field_selector: str = "") -> Iterator[WatchEvent[PodObject]]:
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
                conditions=(),
                annotations=dict(pod.annotations),
                labels=dict(pod.labels),
                node_selector=dict(pod.node_selector),
            )
            return self._put_pod(fresh, None)

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None,
                   uid: str | None = None) -> None:
        """Delete a pod gracefully (module docstring); ``grace_period_seconds`` in s; ``uid``: only the pod of that
        UID, as the API server's precondition. Raises NotFoundError, ConflictError (another UID)."""
        with self._cond:
            pod = self._pod(namespace, name)
            if uid is not None and uid != pod.uid:
                raise ConflictError(f'pods "{name}": precondition failed: UID in precondition: {uid!r}, UID in '
                                    f"object meta: {pod.uid!r}")
            key = (namespace, name)
            now = self._clock()
            if pod.deletion_timestamp is not None:
                current = self._grace.get(key, 0)
                if current <= 0:
                    self._remove_pod(key)
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
            self._put_pod(attrs.evolve(pod, deletion_timestamp=float(int(timestamp))), pod)
            if period <= 0:
                self._remove_pod(key)

    def set_pod_phase(self, namespace: str, name: str, phase: PodPhase, *,
                      terminations: Sequence[ContainerTermination] = ()) -> PodObject:
        """Write ``status.phase`` and, with ``terminations``, the containers' terminated states (what a kubelet
        does). Raises NotFoundError."""
        with self._cond:
            prev = self._pod(namespace, name)
            pod = attrs.evolve(prev, phase=phase, terminations=tuple(terminations) or prev.terminations)
            return prev if pod == prev else self._put_pod(pod, prev)

    def nominate_pod(self, namespace: str, name: str, node: str) -> PodObject:
        """Write ``status.nominatedNodeName`` ("" clears it). Raises NotFoundError."""
        with self._cond:
            prev = self._pod(namespace, name)
            pod = attrs.evolve(prev, nominated_node_name=node)
            return prev if pod == prev else self._put_pod(pod, prev)

    def set_pod_condition(self, namespace: str, name: str, condition: PodCondition, *,
                          uid: str | None = None) -> PodObject:
        """Write ``condition`` into ``status.conditions`` (:func:`~domain.kube.podconditions.with_condition`, at
        the store's clock); ``uid``: only the pod of that UID. Raises NotFoundError, ConflictError (another UID)."""
        with self._cond:
            prev = self._pod(namespace, name)
            if uid is not None and uid != prev.uid:
                raise ConflictError(f'pods "{name[:100]}": precondition failed: UID in precondition: {uid!r}, UID in '
                                    f"object meta: {prev.uid!r}")
            conditions = with_condition(prev.conditions, condition, self._clock())
            return prev if conditions is None else self._put_pod(attrs.evolve(prev, conditions=conditions), prev)

    def patch_pod_annotations(self, namespace: str, name: str, changes: Mapping[str, str | None], *,
                              resource_version: str | None = None) -> PodObject:
        """Merge annotations (None deletes a key). Raises NotFoundError, ConflictError (stale RV)."""
        with self._cond:
            prev = self._pod(namespace, name)
            self._check_rv(prev.resource_version, resource_version, f'pods "{name}"')
            new = attrs.evolve(prev, annotations=merged(prev.annotations, changes))
            return prev if new == prev else self._put_pod(new, prev)

    def bind_pod(self, namespace: str, name: str, *, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
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
            self._put_pod(attrs.evolve(pod, node_name=node, annotations=merged(pod.annotations, annotations or {})),
                          pod)

    # ------------------------------------------------------------------ internals (callers hold the lock)
    def _pod(self, namespace: str, name: str) -> PodObject:
        try:
            return self._pods[(namespace, name)]
        except KeyError:
            raise NotFoundError(f'pods "{name[:100]}" not found in namespace "{namespace[:64]}"') from None

    def _put_pod(self, pod: PodObject, prev: PodObject | None) -> PodObject:
        return self._put(self._pods, (pod.namespace, pod.name), self._pod_history, pod, prev)

    def _remove_pod(self, key: tuple[str, str]) -> None:
        self._grace.pop(key, None)
        self._drop(self._pods, key, self._pod_history)

    def _current_pods(self) -> Iterable[PodObject]:
        return [self._pods[key] for key in sorted(self._pods)]
