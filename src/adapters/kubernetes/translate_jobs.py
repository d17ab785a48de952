"""Translation between ``V1Job`` (batch/v1, ``kubernetes`` 37.x) and :class:`~domain.kube.objects.JobObject`.

Private to this adapter. A domain Job is one container (named :data:`CONTAINER_NAME`) run once (restart policy
``Never``) with ``automountServiceAccountToken: false`` (a node Job needs no API access); its labels go on the
pod template too, so the pods carry them. The container keeps its termination message at Kubernetes' default
path :data:`TERMINATION_MESSAGE_PATH` (where ``ljrk job-agent`` writes its outcome) with policy
``FallbackToLogsOnError``: a container that fails before writing it leaves the tail of its log instead, so the
controller always has a cause to report. A Job with :class:`~domain.kube.objects.JobSecurity` gets the pod
``securityContext`` (``runAsNonRoot``, user, group, supplementary groups, seccomp ``RuntimeDefault``) and the
container's (no privilege escalation, ``drop: [ALL]``, read-only root filesystem); read back from the pod's
context. The phase is read from the conditions as kube-controller-manager's
``IsJobFinished`` does (a ``Complete`` or ``Failed`` condition with status ``True``). Status writes are JSON merge
patches of ``status`` through the status subresource; times go out as RFC 3339 in UTC with whole seconds
(``metav1.Time``). Source: batch/v1 Job and core/v1 PodSpec API reference.
"""

from __future__ import annotations

import datetime as dt

from kubernetes import client

from domain.kube.objects import (
    HostPathMount,
    JobObject,
    JobPhase,
    JobSecurity,
    JobStatus,
    OwnerReference,
    TaintEffect,
    Toleration,
)

from .translate import to_epoch

CONTAINER_NAME = "main"
"""Name of the Job's only container."""
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
"""``terminationMessagePath`` of the Job's container (the Kubernetes default, spelled out)."""


def _rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_to_v1(owner: OwnerReference) -> client.V1OwnerReference:
    return client.V1OwnerReference(
        api_version=owner.api_version, kind=owner.kind, name=owner.name, uid=owner.uid,
        controller=owner.controller or None,
    )


def _owner_from_v1(refs: list[client.V1OwnerReference] | None) -> OwnerReference | None:
    if not refs:
        return None
    ref = next((r for r in refs if r.controller), refs[0])
    return OwnerReference(api_version=ref.api_version, kind=ref.kind, name=ref.name, uid=ref.uid,
                          controller=bool(ref.controller))


def _toleration_to_v1(tol: Toleration) -> client.V1Toleration:
    return client.V1Toleration(
        key=tol.key or None, operator=tol.operator or None, value=tol.value or None,
        effect=tol.effect.value if tol.effect is not None else None,
    )


def _toleration_from_v1(tol: client.V1Toleration) -> Toleration:
    return Toleration(key=tol.key or "", operator=tol.operator or "Equal", value=tol.value or "",
                      effect=TaintEffect(tol.effect) if tol.effect else None)


def _security_to_v1(
    security: JobSecurity | None,
) -> tuple[client.V1PodSecurityContext | None, client.V1SecurityContext | None]:
    if security is None:
        return None, None
    pod = client.V1PodSecurityContext(
        run_as_non_root=True, run_as_user=security.run_as_user, run_as_group=security.run_as_group,
        supplemental_groups=list(security.supplemental_groups) or None,
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )
    container = client.V1SecurityContext(
        allow_privilege_escalation=False, capabilities=client.V1Capabilities(drop=["ALL"]),
        read_only_root_filesystem=True, run_as_non_root=True,
    )
    return pod, container


def _security_from_v1(pod: client.V1PodSecurityContext | None) -> JobSecurity | None:
    if pod is None or not pod.run_as_user or not pod.run_as_group:
        return None
    return JobSecurity(pod.run_as_user, pod.run_as_group, tuple(pod.supplemental_groups or ()))


def job_to_v1(job: JobObject) -> client.V1Job:
    """A ``V1Job`` to create (module docstring); ``status`` is not sent (the server owns it)."""
    labels = dict(job.labels) or None
    pod_security, container_security = _security_to_v1(job.security)
    container = client.V1Container(
        name=CONTAINER_NAME,
        image=job.image,
        command=list(job.command) or None,
        termination_message_path=TERMINATION_MESSAGE_PATH,
        termination_message_policy="FallbackToLogsOnError",
        volume_mounts=[client.V1VolumeMount(name=m.name, mount_path=m.mount_path, read_only=m.read_only or None)
                       for m in job.host_paths] or None,
        security_context=container_security,
    )
    pod_spec = client.V1PodSpec(
        containers=[container],
        restart_policy="Never",
        node_name=job.node_name or None,
        tolerations=[_toleration_to_v1(t) for t in job.tolerations] or None,
        service_account_name=job.service_account or None,
        automount_service_account_token=False,
        security_context=pod_security,
        volumes=[
            client.V1Volume(name=m.name, host_path=client.V1HostPathVolumeSource(path=m.host_path, type=m.type or None))
            for m in job.host_paths
        ] or None,
    )
    return client.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=client.V1ObjectMeta(
            name=job.name, namespace=job.namespace, labels=labels, annotations=dict(job.annotations) or None,
            owner_references=[_owner_to_v1(job.owner)] if job.owner is not None else None,
        ),
        spec=client.V1JobSpec(
            backoff_limit=job.backoff_limit,
            active_deadline_seconds=job.active_deadline_seconds,
            ttl_seconds_after_finished=job.ttl_seconds_after_finished,
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=pod_spec),
        ),
    )


def _status_from_v1(status: client.V1JobStatus | None) -> JobStatus:
    status = status or client.V1JobStatus()
    phase, finished_at, reason, message = JobPhase.ACTIVE, None, "", ""
    for condition in status.conditions or ():
        if condition.status != "True" or condition.type not in ("Complete", "Failed"):
            continue
        phase = JobPhase.SUCCEEDED if condition.type == "Complete" else JobPhase.FAILED
        finished_at = to_epoch(condition.last_transition_time)
        reason, message = condition.reason or "", condition.message or ""
        break
    if phase is JobPhase.SUCCEEDED and status.completion_time is not None:
        finished_at = to_epoch(status.completion_time)
    return JobStatus(
        phase=phase, active=status.active or 0, succeeded=status.succeeded or 0, failed=status.failed or 0,
        finished_at=finished_at, reason=reason, message=message,
    )


def job_from_v1(job: client.V1Job) -> JobObject:
    """Domain Job of a ``V1Job``: the first container's image and command, its hostPath mounts, the controlling
    owner reference (else the first one), the phase from the conditions (module docstring)."""
    meta = job.metadata or client.V1ObjectMeta()
    spec = job.spec
    template = spec.template.spec if spec is not None and spec.template is not None else None
    containers = template.containers if template is not None else []
    container = containers[0] if containers else None
    volumes = {v.name: v.host_path for v in (template.volumes or ()) if v.host_path is not None} if template else {}
    mounts = tuple(
        HostPathMount(name=m.name, host_path=volumes[m.name].path, mount_path=m.mount_path,
                      type=volumes[m.name].type or "", read_only=bool(m.read_only))
        for m in ((container.volume_mounts or ()) if container is not None else ())
        if m.name in volumes
    )
    return JobObject(
        namespace=meta.namespace or "",
        name=meta.name or "",
        uid=meta.uid or "",
        resource_version=meta.resource_version or "",
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
        owner=_owner_from_v1(meta.owner_references),
        node_name=(template.node_name or "") if template is not None else "",
        image=(container.image or "") if container is not None else "",
        command=tuple(container.command or ()) if container is not None else (),
        tolerations=tuple(_toleration_from_v1(t) for t in (template.tolerations or ())) if template else (),
        host_paths=mounts,
        service_account=(template.service_account_name or "") if template is not None else "",
        security=_security_from_v1(template.security_context) if template is not None else None,
        backoff_limit=spec.backoff_limit if spec is not None and spec.backoff_limit is not None else 6,
        active_deadline_seconds=spec.active_deadline_seconds if spec is not None else None,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished if spec is not None else None,
        created_at=to_epoch(meta.creation_timestamp),
        deletion_timestamp=to_epoch(meta.deletion_timestamp),
        status=_status_from_v1(job.status),
    )


def job_status_patch(status: JobStatus, *, now: float) -> dict[str, object]:
    """A JSON merge patch for the status subresource writing ``status``: pod counts, and for a finished phase the
    interim condition then the terminal one, ``SuccessCriteriaMet`` + ``Complete`` or ``FailureTarget`` + ``Failed``
    (each with ``reason``/``message``; kube-apiserver >= 1.31 refuses a terminal condition without its interim one,
    and kube-controller-manager writes both), plus ``startTime`` and, when it succeeded, ``completionTime`` at
    ``finished_at`` (default ``now``, epoch s); an ACTIVE status removes both. The API server keeps a terminal
    condition once written: a later write that drops it is refused (422)."""
    body: dict[str, object] = {"active": status.active, "succeeded": status.succeeded, "failed": status.failed}
    if status.phase.finished:
        at = _rfc3339(status.finished_at if status.finished_at is not None else now)
        succeeded = status.phase is JobPhase.SUCCEEDED
        kinds = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
        conditions = [{
            "type": kind,
            "status": "True",
            "lastProbeTime": at,
            "lastTransitionTime": at,
            "reason": status.reason or None,
            "message": status.message or None,
        } for kind in kinds]
        body["conditions"] = [{k: v for k, v in condition.items() if v is not None} for condition in conditions]
        body["startTime"] = at
        body["completionTime"] = at if status.phase is JobPhase.SUCCEEDED else None
    else:
        body["conditions"] = None
        body["completionTime"] = None
    return {"status": body}
