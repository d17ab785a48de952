"""Kubernetes API objects as the components need them: plain, immutable value types.

Adapters translate ``V1Node``/``V1Pod``/``V1Lease`` (or their in-memory twins) into these and back, so nothing
beyond the adapters sees the client library. Mapping fields hold plain dicts; never mutate an object taken from
a cache (a Python aliasing hazard seen in other stacks): build a new one with :func:`attrs.evolve`.

Time values are seconds since the epoch (float).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

import attrs


class TaintEffect(enum.Enum):
    """Taint effects (core/v1)."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@attrs.frozen
class Taint:
    """A node taint: ``key``, ``value``, ``effect``."""

    key: str
    effect: TaintEffect
    value: str = ""


@attrs.frozen
class Toleration:
    """A pod toleration (core/v1 semantics: empty key with ``Exists`` tolerates everything; empty effect
    matches every effect)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: TaintEffect | None = None

    def tolerates(self, taint: Taint) -> bool:
        """True if this toleration matches ``taint`` (v1.Toleration.ToleratesTaint)."""
        if self.effect is not None and self.effect is not taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@attrs.frozen
class NodeSelectorRequirement:
    """One requirement: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist, Gt, Lt), ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@attrs.frozen
class NodeSelectorTerm:
    """Requirements ANDed together; terms of a node selector are ORed. ``match_fields`` supports only
    ``metadata.name`` (as Kubernetes does)."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class PodPhase(enum.Enum):
    """Pod phases (core/v1)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: the pod holds no resources any more."""
        return self in (PodPhase.SUCCEEDED, PodPhase.FAILED)


@attrs.frozen
class ContainerSpec:
    """A container's name and resource quantities (strings, as in the API: ``"60"``, ``"8"``, ``"16Gi"``)."""

    name: str
    requests: Mapping[str, str] = attrs.field(factory=dict)
    limits: Mapping[str, str] = attrs.field(factory=dict)
    init: bool = False


@attrs.frozen
class PodObject:
    """The parts of a Pod the stack uses. ``node_name`` is empty while unbound; ``deletion_timestamp`` is set
    while terminating; ``resource_version`` is the API's optimistic-concurrency token."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...] = ()
    node_name: str = ""
    scheduler_name: str = "default-scheduler"
    phase: PodPhase = PodPhase.PENDING
    resource_version: str = ""
    deletion_timestamp: float | None = None
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    node_selector: Mapping[str, str] = attrs.field(factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class NodeObject:
    """The parts of a Node the stack uses: labels, annotations, allocatable quantities, taints."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    allocatable: Mapping[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


class EventType(enum.Enum):
    """Watch event types."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


T = TypeVar("T")


@attrs.frozen
class WatchEvent(Generic[T]):
    """One watch event; ``object`` is None only for BOOKMARK. ``resource_version`` is the event's RV."""

    type: EventType
    object: T | None
    resource_version: str


@attrs.frozen
class Listing(Generic[T]):
    """A list response: the items and the list's resourceVersion (where a watch resumes)."""

    items: tuple[T, ...]
    resource_version: str


@attrs.frozen
class LeaseRecord:
    """A coordination.k8s.io/v1 Lease: holder, duration (s), acquire/renew times (epoch s), transitions."""

    namespace: str
    name: str
    holder: str = ""
    lease_duration_seconds: int = 15
    acquire_time: float | None = None
    renew_time: float | None = None
    transitions: int = 0
    resource_version: str = ""


@attrs.frozen
class ClusterEvent:
    """A core/v1 Event about an object: ``kind``/``namespace``/``name`` of the object, ``reason``, ``message``,
    ``type`` (Normal or Warning)."""

    kind: str
    name: str
    reason: str
    message: str
    namespace: str = "default"
    type: str = "Normal"
