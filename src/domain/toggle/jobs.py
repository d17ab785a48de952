"""The Jobs the controller runs on nodes: names, labels, ownership, and the spec built from settings.

A toggle Job runs ``ljrk job-agent --action enable|disable --config-daemon-socket PATH --timeout S`` once
(``backoffLimit: 0``, restart ``Never``: the controller retries itself, with backoff) in a pod pinned to the node
with ``spec.nodeName`` (no scheduler involved), tolerating every taint (a node being disabled may carry a
"GPU off" taint, and NoExecute taints would evict the pod), with the config daemon's socket directory mounted
read-only from the host (``connect()`` needs no write access to the mount, so the agent cannot unlink or replace
the socket).

Security: the pod runs restricted (:class:`domain.kube.objects.JobSecurity`): as the non-root ``run_as_user``
(default 65532, group the same) with the Runtime socket's group ``socket_group`` as a supplementary group, no
privilege escalation, every capability dropped, a read-only root filesystem, seccomp ``RuntimeDefault``. The
Runtime's socket is mode 0660 (``adapters.grpc.server.RUNTIME_SOCKET_MODE``) and owned by the Runtime's user and
primary group, root:root in the shipped DaemonSet, hence ``socket_group`` 0: group membership is the one
permission the agent needs, and it gets no other privilege of root.

``activeDeadlineSeconds`` bounds a Job whose pod never runs; ``ttlSecondsAfterFinished`` is a
safety net for when no controller runs (the controller deletes succeeded Jobs itself at once, failed ones after
the same TTL).

Ownership (the controller never touches a Job that fails :func:`is_ours`): label
``app.kubernetes.io/managed-by=lj-runtimekit-controller`` (the list/watch selector) **and** a controlling owner
reference to the Node (``v1``/``Node``, name, uid; the garbage collector deletes the Job if the Node goes).

Failure causes (:func:`failure_cause`): the Job condition says only ``BackoffLimitExceeded``; the real cause is
the termination message of the Job's failed pod (``ljrk job-agent`` writes its one-line outcome to
``/dev/termination-log``; with ``FallbackToLogsOnError`` a crash leaves the tail of its log, whose last line is the
error), which the controller reads through the cluster port and reports in the node annotation and the Events.

Names are deterministic per node, node UID, action and generation (the node's Job counter):
``ljrk-<action>-<node stem>-<8 hex of sha256(node/uid)>-<generation>``, at most 63 characters (the API server
copies Job names into a label value). A node re-created under the same name gets other names. Source: batch/v1 Job
and core/v1 PodSpec API reference.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import (
    HostPathMount,
    JobObject,
    JobSecurity,
    OwnerReference,
    PodObject,
    PodPhase,
    Toleration,
)
from domain.runtime.features import CONTRACT_VERSION

from .states import Action

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "lj-runtimekit-controller"
NODE_LABEL = "lj-runtimekit.io/node"
ACTION_LABEL = "lj-runtimekit.io/action"
GENERATION_LABEL = "lj-runtimekit.io/generation"
NODE_ANNOTATION = "lj-runtimekit.io/node"
JOB_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGER}"
"""Label selector of the controller's Job list and watch."""
JOB_NAME_POD_LABEL = "job-name"
"""Label the Job controller puts on a Job's pods (every version; ``batch.kubernetes.io/job-name`` too since 1.27)."""

MAX_NAME = 63
"""Longest Job name (it becomes the pods' ``job-name`` label value)."""
MAX_LABEL_VALUE = 63
SOCKET_VOLUME = "config-daemon"
DEFAULT_IMAGE = f"lj-runtimekit/job-agent:{CONTRACT_VERSION}"
"""The job-agent image of this release: component versions follow the Runtime contract version."""
DEFAULT_SOCKET = "/run/lj-runtimekit/runtime.sock"
DEFAULT_JOB_USER = 65532
"""uid (and gid) the toggle Jobs run as: non-root, the same as the scheduler and controller images."""
DEFAULT_SOCKET_GROUP = 0
"""Group of the Runtime's socket in the shipped DaemonSet (the Runtime runs as root:root); the Jobs join it."""
ALL_TAINTS = Toleration(operator="Exists")
"""Empty key with ``Exists``: tolerates every taint, every effect."""

_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def _digest(node: str, node_uid: str) -> str:
    return hashlib.sha256(f"{node}/{node_uid}".encode()).hexdigest()[:8]


def job_name(node: str, node_uid: str, action: Action, generation: int) -> str:
    """The Job name for ``node`` (with ``node_uid``), ``action`` and ``generation`` (module docstring): a DNS
    label of at most :data:`MAX_NAME` characters. Raises :class:`InvalidRequestError` for a negative generation."""
    if generation < 0:
        raise InvalidRequestError("generation", generation, "must be >= 0")
    head = f"ljrk-{action.value}-"
    tail = f"-{_digest(node, node_uid)}-{generation}"
    stem = _NOT_NAME.sub("-", node.lower()).strip("-")[: max(0, MAX_NAME - len(head) - len(tail))].strip("-")
    return f"{head}{stem or 'node'}{tail}"


def node_label_value(node: str) -> str:
    """``node`` as a label value: itself when it fits :data:`MAX_LABEL_VALUE`, else a prefix plus a digest (node
    names are DNS subdomains, so their characters are valid in label values)."""
    if len(node) <= MAX_LABEL_VALUE:
        return node
    return f"{node[: MAX_LABEL_VALUE - 9]}-{_digest(node, '')}"


def is_ours(job: JobObject) -> bool:
    """True for a Job this controller manages: our ``managed-by`` label, a known action label, and a controlling
    ``v1``/``Node`` owner reference (module docstring)."""
    owner = job.owner
    return (
        job.labels.get(MANAGED_BY_LABEL) == MANAGER
        and job_action(job) is not None
        and owner is not None
        and owner.kind == "Node"
        and owner.api_version == "v1"
        and bool(owner.name)
    )


def job_node(job: JobObject) -> str:
    """The node a Job of ours is for: its Node owner's name (empty for a Job without one)."""
    owner = job.owner
    return owner.name if owner is not None and owner.kind == "Node" else ""


def job_action(job: JobObject) -> Action | None:
    """The action label of a Job, or None when missing or unknown."""
    try:
        return Action(job.labels.get(ACTION_LABEL, ""))
    except ValueError:
        return None


def job_generation(job: JobObject) -> int:
    """The generation label of a Job (0 when missing or malformed)."""
    text = job.labels.get(GENERATION_LABEL, "")
    return int(text) if text.isdigit() else 0


@attrs.frozen
class JobTemplate:
    """Settings of the Jobs: ``namespace``; ``image`` with ``ljrk`` on its PATH; ``config_daemon_socket`` (the
    node config daemon's unix socket on the host; its directory is mounted at the same path); ``agent_timeout``
    (s, the agent's ``--timeout``); ``deadline`` (s, ``activeDeadlineSeconds``); ``ttl`` (s,
    ``ttlSecondsAfterFinished``, None = unset); ``service_account`` (empty = the namespace default);
    ``run_as_user`` (non-root uid and gid of the pod) and ``socket_group`` (gid owning the socket, joined as a
    supplementary group). Raises :class:`InvalidRequestError` for an empty namespace or image, a relative socket
    path, non-positive times, a root ``run_as_user`` or a negative ``socket_group``.
    """

    namespace: str = "kube-system"
    image: str = DEFAULT_IMAGE
    config_daemon_socket: str = DEFAULT_SOCKET
    agent_timeout: float = 60.0
    deadline: float = 300.0
    ttl: float | None = 3600.0
    service_account: str = ""
    run_as_user: int = DEFAULT_JOB_USER
    socket_group: int = DEFAULT_SOCKET_GROUP

    def __attrs_post_init__(self) -> None:
        if not self.namespace:
            raise InvalidRequestError("namespace", self.namespace, "must not be empty")
        if not self.image.strip():
            raise InvalidRequestError("job_image", self.image, "must not be empty")
        if not posixpath.isabs(self.config_daemon_socket) or self.config_daemon_socket.endswith("/"):
            raise InvalidRequestError("config_daemon_socket", self.config_daemon_socket,
                                      "must be an absolute path to a socket file")
        if not self.agent_timeout > 0 or not self.deadline >= 1:
            raise InvalidRequestError("agent_timeout", (self.agent_timeout, self.deadline),
                                      "need agent_timeout > 0 and deadline >= 1 s")
        if self.ttl is not None and self.ttl < 0:
            raise InvalidRequestError("ttl", self.ttl, "must be >= 0")
        _ = self.security  # validates run_as_user and socket_group (JobSecurity raises naming the field)

    @property
    def security(self) -> JobSecurity:
        """The Job pod's restricted security context (module docstring)."""
        return JobSecurity(self.run_as_user, self.run_as_user, (self.socket_group,))

    def command(self, action: Action) -> tuple[str, ...]:
        """The agent's argv for ``action``."""
        return ("ljrk", "job-agent", "--action", action.value, "--config-daemon-socket", self.config_daemon_socket,
                "--timeout", f"{self.agent_timeout:g}")

    def build(self, node: str, node_uid: str, action: Action, generation: int) -> JobObject:
        """The Job running ``action`` on ``node`` (module docstring)."""
        directory = posixpath.dirname(self.config_daemon_socket)
        return JobObject(
            namespace=self.namespace,
            name=job_name(node, node_uid, action, generation),
            labels={
                MANAGED_BY_LABEL: MANAGER,
                NODE_LABEL: node_label_value(node),
                ACTION_LABEL: action.value,
                GENERATION_LABEL: str(generation),
            },
            annotations={NODE_ANNOTATION: node},
            owner=OwnerReference(api_version="v1", kind="Node", name=node, uid=node_uid, controller=True),
            node_name=node,
            image=self.image,
            command=self.command(action),
            tolerations=(ALL_TAINTS,),
            host_paths=(HostPathMount(SOCKET_VOLUME, directory, directory, "DirectoryOrCreate", read_only=True),),
            service_account=self.service_account,
            security=self.security,
            backoff_limit=0,
            active_deadline_seconds=max(1, int(self.deadline)),
            ttl_seconds_after_finished=None if self.ttl is None else int(self.ttl),
        )


@attrs.frozen
class FailureCause:
    """Why a failed Job failed, from its pod: ``message`` (the job agent's own words; empty when none was read)
    or ``note`` (why there is none: no pod found, the pod could not be read, it left no message)."""

    message: str = ""
    note: str = ""

    def describe(self, condition: str) -> str:
        """The failure text with the Job ``condition`` (``reason: message``): the cause first, because the node
        annotation keeps only the first 300 characters."""
        if self.message:
            return f"{self.message} ({condition})"
        return f"{condition} ({self.note})" if self.note else condition


def failure_cause(pods: Sequence[PodObject]) -> FailureCause:
    """The cause a failed Job's ``pods`` give (module docstring): the last non-empty line of the termination message
    of a terminated container that failed (non-zero exit), preferring pods in phase Failed; a note when no pod or
    no message is there."""
    if not pods:
        return FailureCause(note="no pod of the Job found")
    ordered = sorted(pods, key=lambda p: p.phase is not PodPhase.FAILED)
    for pod in ordered:
        for ended in pod.terminations:
            lines = [line.strip() for line in ended.message.splitlines() if line.strip()]
            if ended.exit_code != 0 and lines:
                return FailureCause(message=lines[-1])
    return FailureCause(note=f"pod {ordered[0].name} left no termination message")
