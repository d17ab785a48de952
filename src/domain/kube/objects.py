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

from domain.errors import InvalidRequestError
from domain.kube.podconditions import PodCondition


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


MAX_TERMINATION_MESSAGE = 4096
"""Bytes of a container's termination message kubelet keeps (``terminationMessagePath``)."""


@attrs.frozen
class ContainerTermination:
    """``status.containerStatuses[].state.terminated`` of one container (core/v1): ``container`` name,
    ``exit_code``, ``reason`` (``Error``, ``Completed``, ``OOMKilled``…) and ``message`` (what the container wrote
    to its ``terminationMessagePath``, at most :data:`MAX_TERMINATION_MESSAGE` bytes, or the tail of its log with
    policy ``FallbackToLogsOnError``)."""

    container: str
    exit_code: int
    reason: str = ""
    message: str = ""


@attrs.frozen
class PodClaim:
    """One ``spec.resourceClaims`` entry of a pod (core/v1): ``name`` (what its containers' ``resources.claims``
    name), then either ``claim_name`` (``resourceClaimName``: an existing ResourceClaim of the pod's namespace) or
    ``template_name`` (``resourceClaimTemplateName``: kube-controller-manager's resourceclaim controller makes a
    claim from it), and ``generated``: the name of that claim as ``status.resourceClaimStatuses`` gives it (None
    while no status names it yet, "" when the controller decided no claim is needed)."""

    name: str
    claim_name: str = ""
    template_name: str = ""
    generated: str | None = None

    @property
    def resolved(self) -> str | None:
        """The ResourceClaim's name: ``claim_name``, else ``generated`` (None: not made yet; "": none needed)."""
        return self.claim_name or self.generated


@attrs.frozen
class PodObject:
    """The parts of a Pod the stack uses. ``node_name`` is empty while unbound; ``deletion_timestamp`` is set
    while terminating; ``resource_version`` is the API's optimistic-concurrency token; ``terminations`` are the
    containers that terminated (``status.containerStatuses`` with ``state.terminated``), in status order;
    ``priority`` is ``spec.priority`` (0 when unset), ``preemption_policy`` ``spec.preemptionPolicy``
    (``PreemptLowerPriority`` when unset), ``nominated_node_name`` ``status.nominatedNodeName`` and
    ``resource_claims`` the DRA claims of ``spec.resourceClaims`` (:class:`PodClaim`), in spec order;
    ``conditions`` ``status.conditions`` (one per type, in status order: :mod:`domain.kube.podconditions`);
    ``claim_served`` ``(container, resource)`` of ``status.extendedResourceClaimStatus.requestMappings``: extended
    resources kube-scheduler serves through a claim it made (DeviceClass ``extendedResourceName``), not a device
    plugin."""

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
    terminations: tuple[ContainerTermination, ...] = ()
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    nominated_node_name: str = ""
    resource_claims: tuple[PodClaim, ...] = ()
    conditions: tuple[PodCondition, ...] = ()
    claim_served: tuple[tuple[str, str], ...] = ()

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
class ConfigMapObject:
    """A core/v1 ConfigMap: ``namespace``, ``name``, ``labels`` and its string ``data`` (``binaryData`` is not
    read); ``resource_version`` as the API wrote it."""

    namespace: str
    name: str
    data: Mapping[str, str] = attrs.field(factory=dict)
    labels: Mapping[str, str] = attrs.field(factory=dict)
    resource_version: str = ""


@attrs.frozen
class ClusterEvent:
    """A core/v1 Event about an object: ``kind``/``namespace``/``name`` of the object, ``reason``, ``message``,
    ``type`` (Normal or Warning) and the object's ``uid`` (empty = unknown, not sent).

    ``count``, ``first_timestamp`` and ``last_timestamp`` (keyword-only; epoch seconds) are what the cluster stored:
    a repeat of the same Event raises the stored one's count and last timestamp instead of creating another
    (:mod:`domain.kube.events`). Writers leave them at their defaults (1, None, None); reads fill them in.
    """

    kind: str
    name: str
    reason: str
    message: str
    namespace: str = "default"
    type: str = "Normal"
    uid: str = ""
    count: int = attrs.field(default=1, kw_only=True)
    first_timestamp: float | None = attrs.field(default=None, kw_only=True)
    last_timestamp: float | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class OwnerReference:
    """``metadata.ownerReferences[]`` (meta/v1): the owner's ``api_version``, ``kind``, ``name`` and ``uid``;
    ``controller`` marks the managing owner. Namespaced objects may name a cluster-scoped owner such as a Node;
    the garbage collector deletes the dependent once no owner with that UID exists."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False


@attrs.frozen
class HostPathMount:
    """A ``hostPath`` volume mounted into the Job's container: ``name`` (volume name), ``host_path`` on the node,
    ``mount_path`` in the container, ``type`` (core/v1 ``HostPathType``: ``DirectoryOrCreate``, ``Directory``…),
    ``read_only`` (``volumeMounts[].readOnly``; connecting to a unix socket works through a read-only mount)."""

    name: str
    host_path: str
    mount_path: str
    type: str = "DirectoryOrCreate"
    read_only: bool = False


@attrs.frozen
class JobSecurity:
    """A Job pod run restricted: as ``run_as_user``:``run_as_group`` (``runAsNonRoot``; both > 0) with the extra
    ``supplemental_groups`` (gids ≥ 0, e.g. a socket's group), no privilege escalation, every capability dropped,
    a read-only root filesystem and seccomp ``RuntimeDefault`` (core/v1 PodSecurityContext and SecurityContext).
    Raises :class:`InvalidRequestError` naming the field for a root or negative id."""

    run_as_user: int
    run_as_group: int
    supplemental_groups: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        for name in ("run_as_user", "run_as_group"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidRequestError(name, value, "must be a non-root id (an integer > 0)")
        if any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in self.supplemental_groups):
            raise InvalidRequestError("supplemental_groups", self.supplemental_groups, "must be gids >= 0")


class JobPhase(enum.Enum):
    """Where a batch/v1 Job stands: ``ACTIVE`` until a ``Complete`` (→ ``SUCCEEDED``) or ``Failed``
    (→ ``FAILED``) condition with status ``True`` appears (``IsJobFinished`` in kube-controller-manager)."""

    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: the Job runs no pod any more and will not start another."""
        return self is not JobPhase.ACTIVE


@attrs.frozen
class JobStatus:
    """``status`` of a batch/v1 Job: ``phase`` (from its conditions), pod counts ``active``/``succeeded``/
    ``failed``, ``finished_at`` (epoch s: ``completionTime``, or the ``Failed`` condition's transition time),
    ``reason``/``message`` of the finishing condition (``BackoffLimitExceeded``, ``DeadlineExceeded``…)."""

    phase: JobPhase = JobPhase.ACTIVE
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    finished_at: float | None = None
    reason: str = ""
    message: str = ""


@attrs.frozen
class JobObject:
    """The parts of a batch/v1 Job the stack uses: one container run once on one node.

    Metadata: ``namespace``, ``name``, ``uid``, ``resource_version``, ``labels``, ``annotations``, ``owner``
    (the controlling owner reference, or None), ``created_at`` (epoch s, server-set), ``deletion_timestamp``.
    Pod template: ``node_name`` (``spec.nodeName``: the pod bypasses the scheduler and is pinned to that node),
    ``image``, ``command`` (argv), ``tolerations``, ``host_paths``, ``service_account`` (empty = the
    namespace's default), ``security`` (:class:`JobSecurity`; None = the image's user, no restrictions). Job
    spec: ``backoff_limit`` (pod retries by the Job controller; 0 = none),
    ``active_deadline_seconds`` (s; the Job fails with ``DeadlineExceeded`` after it),
    ``ttl_seconds_after_finished`` (s; the TTL controller deletes the finished Job after it; None = never).
    ``status``: see :class:`JobStatus`. Restart policy is always ``Never``. Source: batch/v1 and core/v1 API
    reference (Job, PodTemplateSpec).
    """

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    owner: OwnerReference | None = None
    node_name: str = ""
    image: str = ""
    command: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    host_paths: tuple[HostPathMount, ...] = ()
    service_account: str = ""
    security: JobSecurity | None = None
    backoff_limit: int = 0
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    created_at: float | None = None
    deletion_timestamp: float | None = None
    status: JobStatus = JobStatus()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


class Propagation(enum.Enum):
    """``propagationPolicy`` of a delete (meta/v1 DeleteOptions): ``BACKGROUND`` removes the object at once and
    lets the garbage collector delete its dependents (a Job's pods); ``FOREGROUND`` deletes dependents first;
    ``ORPHAN`` leaves them. batch/v1 Jobs default to orphaning their pods, so callers say which they want."""

    BACKGROUND = "Background"
    FOREGROUND = "Foreground"
    ORPHAN = "Orphan"
