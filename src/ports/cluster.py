"""The cluster port: what the components need from the Kubernetes API, in domain types only.

Role protocols, one per kind of object: :class:`NodesApi`, :class:`PodsApi` (bindings included),
:class:`EventsApi`, :class:`LeasesApi`, :class:`JobsApi`, :class:`ConfigMapsApi`; :class:`ClusterApi` is all of
them (what the adapters implement). A component's dependency is typed with the roles it uses only.

Semantics every adapter must honour (the contract suite in ``tests/contract`` checks them against the in-memory
adapter and a real kube-apiserver):

* lists return a resourceVersion; a watch from it delivers every later change, in order; a watch from a
  resourceVersion the server no longer has raises :class:`GoneError` (HTTP 410) — the caller relists;
* writes that carry a ``resource_version`` fail with :class:`ConflictError` (HTTP 409) when it is stale;
* binding an already bound pod raises :class:`ConflictError`; a missing object raises :class:`NotFoundError`;
* patch maps set keys to a string or delete them with ``None``;
* label selectors (Jobs, pods) are the API's equality- and existence-based terms, comma-ANDed: ``k=v``, ``k==v``,
  ``k!=v``, ``k``, ``!k``; a malformed one is a :class:`ClusterError` with status 400;
* a Job deleted with ``Propagation.BACKGROUND`` leaves the list at once; its pods are garbage-collected later;
* every failure to reach the server or to get its answer — connection refused or reset, DNS, TLS, a request
  or socket timeout, a broken stream — raises :class:`UnavailableError` (``status`` 0), chained to the
  transport's exception: callers handle :class:`ClusterError` and never see a raw socket or HTTP-library
  error. A write that fails this way may or may not have been applied (the answer was lost): re-read to know.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from domain.kube.objects import (
    ClusterEvent,
    ConfigMapObject,
    ContainerTermination,
    JobObject,
    JobStatus,
    LeaseRecord,
    Listing,
    NodeObject,
    PodObject,
    PodPhase,
    Propagation,
    WatchEvent,
)
from domain.kube.podconditions import PodCondition


class ClusterError(Exception):
    """Base of the cluster port's errors; ``status`` is the HTTP status when there is one."""

    status: int = 0


class NotFoundError(ClusterError):
    """The object does not exist (404)."""

    status = 404


class ConflictError(ClusterError):
    """Stale resourceVersion, already bound, or already exists (409)."""

    status = 409


class GoneError(ClusterError):
    """The watch's resourceVersion is too old (410); relist."""

    status = 410


class UnavailableError(ClusterError):
    """The API server could not be reached or did not answer in time (no HTTP status: ``status`` is 0); the
    transport's exception is the ``__cause__``. The request may have been applied anyway."""

    status = 0


class NodesApi(Protocol):
    """Nodes: list, watch, read, create, delete and patch their metadata."""

    def list_nodes(self) -> Listing[NodeObject]:
        """All nodes and the list's resourceVersion."""
        ...

    def watch_nodes(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[NodeObject]]:
        """Node changes after ``resource_version``; ends after ``timeout_seconds``. Raises GoneError."""
        ...

    def get_node(self, name: str) -> NodeObject:
        """One node. Raises NotFoundError."""
        ...

    def create_node(self, node: NodeObject) -> NodeObject:
        """Create a node (tests, local cluster). Raises ConflictError if it exists."""
        ...

    def delete_node(self, name: str) -> None:
        """Delete a node. Raises NotFoundError."""
        ...

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> NodeObject:
        """Set/delete labels and annotations. Raises NotFoundError, ConflictError (stale RV)."""
        ...


class PodsApi(Protocol):
    """Pods: list, watch, read, create, delete, write their phase, conditions and annotations, and bind them."""

    def list_pods(
        self, *, field_selector: str = "", label_selector: str = "", namespace: str = ""
    ) -> Listing[PodObject]:
        """All pods (of ``namespace`` only, when given: a namespaced list, so a Role suffices), optionally filtered
        by a field selector such as ``spec.nodeName=n1`` and a label selector such as ``job-name=j1`` (both
        apply). Raises ClusterError (400 for a bad selector)."""
        ...

    def watch_pods(
        self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
    ) -> Iterator[WatchEvent[PodObject]]:
        """Pod changes after ``resource_version``. Raises GoneError."""
        ...

    def get_pod(self, namespace: str, name: str) -> PodObject:
        """One pod. Raises NotFoundError."""
        ...

    def create_pod(self, pod: PodObject) -> PodObject:
        """Create a pod (tests, local cluster); the server assigns uid and resourceVersion."""
        ...

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None,
                   uid: str | None = None) -> None:
        """Delete a pod (grace 0 = immediately). With ``uid``, only the pod of that UID (a precondition): a pod
        recreated under the name is left alone. Raises NotFoundError, ConflictError (``uid`` is not the pod's)."""
        ...

    def set_pod_phase(
        self, namespace: str, name: str, phase: PodPhase, *, terminations: Sequence[ContainerTermination] = ()
    ) -> PodObject:
        """Write ``status.phase`` and, when ``terminations`` is not empty, ``status.containerStatuses`` as those
        containers, terminated (what a kubelet writes once they ended; tests and the local cluster's emulators).
        Raises NotFoundError."""
        ...

    def patch_pod_annotations(
        self, namespace: str, name: str, changes: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> PodObject:
        """Set/delete annotations. Raises NotFoundError, ConflictError (stale RV)."""
        ...

    def nominate_pod(self, namespace: str, name: str, node: str) -> PodObject:
        """Write ``status.nominatedNodeName`` (``node``; "" clears it), as a scheduler does for a preemptor.
        Raises NotFoundError."""
        ...

    def set_pod_condition(self, namespace: str, name: str, condition: PodCondition, *,
                          uid: str | None = None) -> PodObject:
        """Write ``condition`` into ``status.conditions`` by the rule of
        :func:`~domain.kube.podconditions.with_condition`: it replaces the condition of its type and keeps the
        others; its transition time is the write's (the adapter's clock, whole seconds), kept when the status is
        unchanged; no write when nothing would change. With ``uid``, only the pod of that UID. Returns the pod as
        written. Raises NotFoundError, ConflictError (``uid`` is not the pod's, or the pod changed between the
        adapter's read and its write: re-read and retry)."""
        ...

    def bind_pod(
        self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """POST pods/binding: set ``spec.nodeName`` to ``node`` and merge ``annotations`` (the Binding's
        ``metadata.annotations``; keys set, none removed) into the pod's, in one write. Raises ConflictError if
        already bound or terminating (or UID mismatch), NotFoundError."""
        ...


class EventsApi(Protocol):
    """Events: record one (with the event recorder's de-duplication)."""

    def create_event(self, event: ClusterEvent) -> None:
        """Record an Event (best effort; errors are the caller's to log). As Kubernetes' event recorder does: a
        repeat of an Event recorded before (same object, type, reason and message) raises that Event's ``count``
        and ``lastTimestamp`` instead of creating another object (:mod:`domain.kube.events`); ``event``'s own
        count and timestamps are ignored."""
        ...


class LeasesApi(Protocol):
    """coordination.k8s.io Leases: read, create, replace (leader election)."""

    def get_lease(self, namespace: str, name: str) -> LeaseRecord:
        """A Lease. Raises NotFoundError."""
        ...

    def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Create a Lease. Raises ConflictError if it exists."""
        ...

    def update_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Replace a Lease; ``lease.resource_version`` must be current, else ConflictError (empty: ClusterError
        422). A missing Lease is created: kube-apiserver allows create-on-PUT for Leases."""
        ...


class JobsApi(Protocol):
    """batch/v1 Jobs: list, watch, read, create, delete and write their status."""

    def list_jobs(self, namespace: str, *, label_selector: str = "") -> Listing[JobObject]:
        """batch/v1 Jobs of ``namespace`` matching ``label_selector`` (module docstring), and the list's
        resourceVersion. Raises ClusterError (400 for a bad selector)."""
        ...

    def watch_jobs(
        self, namespace: str, *, resource_version: str, timeout_seconds: float, label_selector: str = ""
    ) -> Iterator[WatchEvent[JobObject]]:
        """Job changes in ``namespace`` after ``resource_version`` seen through ``label_selector``, for
        ``timeout_seconds`` (s). An object that stops matching arrives as DELETED, one that starts matching as
        ADDED. The iterator raises GoneError."""
        ...

    def get_job(self, namespace: str, name: str) -> JobObject:
        """One Job. Raises NotFoundError."""
        ...

    def create_job(self, job: JobObject) -> JobObject:
        """Create a Job (restart policy Never); the server assigns uid, resourceVersion and creation time and
        starts it ACTIVE whatever ``job.status`` says. Raises ConflictError if the name exists, ClusterError
        (422) if invalid."""
        ...

    def delete_job(self, namespace: str, name: str, *, propagation: Propagation = Propagation.BACKGROUND) -> None:
        """Delete a Job with ``propagation`` for its pods (module docstring). Raises NotFoundError."""
        ...

    def set_job_status(self, namespace: str, name: str, status: JobStatus) -> JobObject:
        """Write the Job's ``status`` through the status subresource (what the Job controller does; tests and
        the local cluster). A ``Complete``/``Failed`` condition marks it finished. Raises NotFoundError."""
        ...


class ConfigMapsApi(Protocol):
    """ConfigMaps: list a namespace's and create one (the protocol ConfigMaps)."""

    def list_config_maps(self, namespace: str) -> Listing[ConfigMapObject]:
        """Every ConfigMap of ``namespace`` (a namespaced list: a Role suffices; a namespace that does not exist
        lists nothing) and the list's resourceVersion. Raises ClusterError."""
        ...

    def create_config_map(self, config_map: ConfigMapObject) -> ConfigMapObject:
        """Create a ConfigMap (tests, local cluster); the server assigns its resourceVersion. Raises ConflictError
        if the name exists, NotFoundError if the namespace does not (the in-memory twin has implicit namespaces),
        ClusterError (422) if invalid."""
        ...


class ClusterApi(NodesApi, PodsApi, EventsApi, LeasesApi, JobsApi, ConfigMapsApi, Protocol):
    """Every role: nodes, pods and bindings, events, leases, Jobs and (read, create) ConfigMaps. What the adapters
    implement; a component asks only for the roles it uses (a Protocol inheriting those roles)."""
