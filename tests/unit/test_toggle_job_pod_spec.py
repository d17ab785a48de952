"""The toggle Job as the Kubernetes API sees it (``adapters.kubernetes.translate_jobs``), built from the controller's
template (``domain.toggle.jobs.JobTemplate``); no API server needed.

Behaviours covered:
- the pod runs restricted: ``runAsNonRoot`` as 65532:65532 with the Runtime socket's group 0 as a supplementary
  group, seccomp ``RuntimeDefault``; the container allows no privilege escalation, drops every capability and has a
  read-only root filesystem; no service account token;
- the socket directory is a read-only hostPath mount at the same path;
- the domain Job reads back unchanged from its V1Job (security and read-only mount included); a Job without
  security (not ours, or older) reads back without it.
"""

from __future__ import annotations

import attrs
from kubernetes import client

from adapters.kubernetes.translate_jobs import job_from_v1, job_to_v1
from domain.toggle.jobs import JobTemplate
from domain.toggle.states import Action

JOB = JobTemplate(namespace="ljrk", config_daemon_socket="/run/lj-runtimekit/runtime.sock").build(
    "gpu-1", "uid-1", Action.DISABLE, 3)


def test_the_job_pod_runs_restricted_with_a_read_only_socket_mount() -> None:
    pod = job_to_v1(JOB).spec.template.spec
    assert client.ApiClient().sanitize_for_serialization(pod.security_context) == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "supplementalGroups": [0],
        "seccompProfile": {"type": "RuntimeDefault"}}
    [container] = pod.containers
    assert client.ApiClient().sanitize_for_serialization(container.security_context) == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
        "runAsNonRoot": True}
    assert [(m.name, m.mount_path, m.read_only) for m in container.volume_mounts] == [
        ("config-daemon", "/run/lj-runtimekit", True)]
    assert [(v.name, v.host_path.path, v.host_path.type) for v in pod.volumes] == [
        ("config-daemon", "/run/lj-runtimekit", "DirectoryOrCreate")]
    assert pod.automount_service_account_token is False


def test_the_job_reads_back_unchanged() -> None:
    assert job_from_v1(job_to_v1(JOB)) == JOB
    plain = attrs.evolve(JOB, security=None, host_paths=(attrs.evolve(JOB.host_paths[0], read_only=False),))
    v1 = job_to_v1(plain)
    assert v1.spec.template.spec.security_context is None
    assert v1.spec.template.spec.containers[0].security_context is None
    assert job_from_v1(v1) == plain
