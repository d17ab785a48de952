"""What our ServiceAccounts may do, and which pods Pod Security ``restricted`` admits, judged by a real kube-apiserver.

Behaviours covered (the stack's RBAC and namespaces as ``kubectl kustomize deploy`` renders them, applied to an API
server running ``--authorization-mode=RBAC``; each right asked with a SubjectAccessReview, the question the API
server's authorizer answers for every request):

* each component's account has the rights its calls need, where it needs them, and is refused the neighbouring
  ones a tenant would want it to have: the scheduler binds pods anywhere but patches pods only in the stack's
  namespace; the controller creates Jobs only in the Jobs' namespace, not in kube-system; the job agent, the
  Runtime and the exporter write no pods; no account reads Secrets;
* Pod Security ``restricted``: the scheduler's and the controller's pods pass it; a toggle Job's pod breaks it by
  exactly one thing, its read-only hostPath volume (the Runtime's socket directory), and the Jobs' namespace
  (``privileged``, deploy/jobs) admits it.

The module starts its own API server: the shared plane authorizes everything.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_harness import ControlPlane, start_control_plane

from adapters.kubernetes.translate_jobs import job_to_v1
from domain.toggle.jobs import JobTemplate
from domain.toggle.states import Action
from support.polling import wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
STACK, JOBS = "kube-system", "lj-runtimekit-jobs"
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def account(name: str) -> str:
    return f"system:serviceaccount:{STACK}:lj-runtimekit-{name}"


GROUPS = {"jobs": "batch", "resourceclaims": "resource.k8s.io"}
"""API group of each resource of :data:`RIGHTS` outside the core group."""

# (account, verb, resource (with /subresource), namespace ("" = cluster-wide), allowed)
RIGHTS = [
    ("scheduler", "create", "pods/binding", "tenant", True),
    ("scheduler", "watch", "pods", "", True),
    ("scheduler", "patch", "pods", STACK, True),  # its own Pod's fingerprint (deploy/admission: only that)
    ("scheduler", "patch", "pods", "tenant", False),
    ("scheduler", "update", "pods", "tenant", False),
    ("scheduler", "create", "pods", "tenant", False),
    ("scheduler", "patch", "nodes", "", False),
    # DRA allocations counted in its books (its kube-scheduler's built-in role, bound to the same account, grants
    # more on claims: it allocates them; tests/unit/test_deploy_manifests.py pins that our own role only reads)
    ("scheduler", "watch", "resourceclaims", "", True),
    ("device-plugin", "patch", "pods", "tenant", True),  # the allocated mark (deploy/admission: its node's pods)
    ("device-plugin", "patch", "nodes", "", True),  # deploy/admission: only its own Node, only our keys
    ("device-plugin", "delete", "nodes", "", False),
    ("device-plugin", "create", "pods", "tenant", False),
    ("device-plugin", "delete", "pods", "tenant", False),
    ("exporter", "patch", "pods", "tenant", False),
    ("exporter", "watch", "pods", "", True),
    ("controller", "create", "jobs", JOBS, True),
    ("controller", "delete", "jobs", JOBS, True),
    ("controller", "list", "pods", JOBS, True),
    ("controller", "create", "jobs", STACK, False),  # it could run a Job as any kube-system account
    ("controller", "list", "pods", STACK, False),
    ("controller", "patch", "pods", "tenant", False),
    ("controller", "patch", "nodes", "", True),
    ("runtime", "get", "nodes", "", False),
    *((who, "get", "secrets", where, False) for who in ("scheduler", "device-plugin", "exporter", "controller")
      for where in (STACK, JOBS, "tenant")),
]


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir, authorization_mode="RBAC")
    try:
        kubectl = Path(sys.executable).parent / "kubectl"
        rendered = subprocess.run([str(kubectl), "kustomize", str(REPO / "deploy")], capture_output=True, text=True,
                                  timeout=60, check=True).stdout
        rbac = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] in RBAC_KINDS]
        applied = subprocess.run([str(kubectl), "--kubeconfig", str(plane.kubeconfig), "apply", "--server-side",
                                  "--field-manager=lj-runtimekit", "-f", "-"], input=yaml.safe_dump_all(rbac),
                                 capture_output=True, text=True, timeout=60, check=False)
        assert applied.returncode == 0, applied.stderr
        yield plane
    finally:
        plane.stop()


def allowed(plane: ControlPlane, user: str, verb: str, resource: str, namespace: str) -> bool:
    from kubernetes import client

    name, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=["system:serviceaccounts", f"system:serviceaccounts:{STACK}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(
            verb=verb, group=GROUPS.get(name, ""), resource=name, subresource=subresource or None,
            namespace=namespace or None)))
    answer = client.AuthorizationV1Api(plane.api_client()).create_subject_access_review(review)
    return bool(answer.status.allowed)


def test_each_account_has_exactly_the_rights_it_needs(plane: ControlPlane) -> None:
    # RBAC caches roles briefly after they are written: wait until every granted right shows, so a refusal below
    # is the roles' answer, not a cache not yet filled
    granted = [(who, verb, resource, where) for who, verb, resource, where, expected in RIGHTS if expected]
    assert wait_for(lambda: all(allowed(plane, account(w), v, r, n) for w, v, r, n in granted), timeout=60)
    wrong = [(who, verb, resource, where or "cluster", expected) for who, verb, resource, where, expected in RIGHTS
             if allowed(plane, account(who), verb, resource, where) != expected]
    assert wrong == []
    assert not allowed(plane, f"system:serviceaccount:{JOBS}:lj-runtimekit-job-agent", "get", "pods", JOBS)


# ---------------------------------------------------------------- Pod Security
def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in spec.items() if k != "priorityClassName"}  # Priority admission is not judged here
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def template_spec(kind: str, name: str) -> dict[str, Any]:
    kubectl = Path(sys.executable).parent / "kubectl"
    rendered = subprocess.run([str(kubectl), "kustomize", str(REPO / "deploy")], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    found = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return dict(found[0]["spec"]["template"]["spec"])


def job_pod_spec(namespace: str) -> dict[str, Any]:
    from kubernetes import client

    template = JobTemplate(namespace=namespace, service_account="lj-runtimekit-job-agent")
    job = client.ApiClient().sanitize_for_serialization(job_to_v1(template.build("gpu-node-1", "uid-1", Action.ENABLE,
                                                                                1)))
    return dict(job["spec"]["template"]["spec"])


def test_restricted_admits_the_control_pods_and_the_job_pod_but_for_its_socket(plane: ControlPlane) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(plane.api_client())
    core.create_namespace({"metadata": {"name": "restricted", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    for name in ("lj-runtimekit-scheduler-framework", "lj-runtimekit-controller"):
        core.create_namespaced_pod("restricted", pod("control", template_spec("Deployment", name)), dry_run="All")

    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("restricted", pod("toggle", job_pod_spec("restricted")), dry_run="All")
    assert caught.value.status == 403, caught.value.body
    violations = re.search(r'violates PodSecurity \\?"restricted:latest\\?": (.*?)","', str(caught.value.body))
    assert violations is not None, caught.value.body
    only_socket = r'restricted volume types \(volume \\?"[^"\\]+\\?" uses restricted volume type \\?"hostPath\\?"\)'
    assert re.fullmatch(only_socket, violations.group(1)), violations.group(1)

    core.create_namespaced_pod(JOBS, pod("toggle", job_pod_spec(JOBS)), dry_run="All")  # privileged there
