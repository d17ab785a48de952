"""Smoke tests of the real control plane (etcd + kube-apiserver/scheduler/controller-manager of the live version on
127.0.0.1) and
a record of the official ``kubernetes`` client (37.x) behaviours later code relies on.

Behaviours covered:
- the harness: API server reachable over verified TLS with the static token; kubeconfig usable by the client's own
  loader; stop() ends every process and removes the temp dir;
- Node with allocatable ``alibabacloud.com/gpu-core.percentage`` via patch_node_status; the admission-added
  ``node.kubernetes.io/not-ready:NoSchedule`` taint, removed by a spec patch;
- extended resources: requests == limits accepted; requests without limits and requests != limits → 422;
- binding from a custom scheduler: create_namespaced_pod_binding needs ``_preload_content=False`` (without it the
  client binds and THEN raises a pydantic ValidationError, a ValueError); a second bind → 409;
- optimistic concurrency: a patch carrying a stale metadata.resourceVersion → 409;
- list + watch from the list's resourceVersion yields later changes (ADDED/MODIFIED/DELETED, typed object + raw dict;
  a delete may be preceded by a MODIFIED carrying deletionTimestamp);
- coordination.k8s.io/v1 Lease create / replace with the read resourceVersion / stale replace → 409;
- kube-scheduler binds a default-scheduler pod onto the fake node; kube-controller-manager's job controller
  creates the Job's pod.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from support.k8s_nodes import NOT_READY_TAINT, make_schedulable
from support.polling import eventually

pytestmark = pytest.mark.k8s

GPU_CORE = "alibabacloud.com/gpu-core.percentage"
NO_SCHEDULER = "ljrk-smoke-none"  # no scheduler serves it: the test binds these pods itself


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pod(name: str, gpu_core: str | None = "50", *, limits: dict[str, str] | None = None,
         scheduler: str = NO_SCHEDULER) -> client.V1Pod:  # fmt: skip
    requests = {"cpu": "100m"}
    lim: dict[str, str] = {} if limits is None else dict(limits)
    if gpu_core is not None:
        requests[GPU_CORE] = gpu_core
        if limits is None:
            lim[GPU_CORE] = gpu_core
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "ljrk-smoke"}),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            containers=[
                client.V1Container(
                    name="main",
                    image="ljrk.invalid/none:0",
                    resources=client.V1ResourceRequirements(requests=requests, limits=lim or None),
                )
            ],
        ),
    )


def _binding(pod: str, node: str) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )


@pytest.fixture
def core(k8s_api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api)


@pytest.fixture(scope="module")
def gpu_node(k8s_control_plane: ControlPlane) -> Iterator[str]:
    """A fake Node (no kubelet) with 4 GPUs worth of gpu-core percentage, schedulable (not-ready taint removed)."""
    with k8s_control_plane.api_client() as api:
        core = client.CoreV1Api(api)
        name = _name("gpu-node")
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={"ljrk/smoke": "true"})))
        make_schedulable(core, name, {"cpu": "8", "memory": "32Gi", "pods": "110", GPU_CORE: "400"})
        yield name
        core.delete_node(name)


# ---------------------------------------------------------------- harness


def test_api_server_answers_over_verified_tls(k8s_control_plane: ControlPlane, k8s_api: Any, k8s_bin_dir: Path) -> None:
    assert k8s_control_plane.host.startswith("https://127.0.0.1:")
    version = client.VersionApi(k8s_api).get_code()
    built = subprocess.run([str(k8s_bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True,
                           check=True).stdout.split()[-1]  # "Kubernetes v1.37.2": the version the build stamped
    assert version.major == "1"
    assert version.git_version == built
    assert built == f"v1.{version.minor}.{built.rsplit('.', 1)[-1]}"
    print(f"control plane {version.git_version} up in {k8s_control_plane.startup_seconds:.1f} s")
    assert set(k8s_control_plane.processes()) == {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"}


def test_kubeconfig_file_loads_with_the_client_loader(k8s_control_plane: ControlPlane) -> None:
    doc = json.loads(k8s_control_plane.kubeconfig.read_text())
    assert doc["clusters"][0]["cluster"]["server"] == k8s_control_plane.host
    api = config.new_client_from_config(config_file=str(k8s_control_plane.kubeconfig))
    with api:
        names = [ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items]
    assert "default" in names


def test_stop_ends_every_process_and_removes_the_temp_dir(k8s_bin_dir: Path) -> None:
    plane = start_control_plane(k8s_bin_dir)
    pids = plane.processes()
    workdir = plane.workdir
    assert set(pids) == {"etcd", "kube-apiserver"}
    plane.stop()
    plane.stop()  # idempotent
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()


# ---------------------------------------------------------------- objects


def test_namespace_create_and_read(core: client.CoreV1Api) -> None:
    name = _name("ns")
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert core.read_namespace(name).status.phase == "Active"
    core.delete_namespace(name)


def test_node_exposes_gpu_core_allocatable_without_not_ready_taint(core: client.CoreV1Api, gpu_node: str) -> None:
    node = core.read_node(gpu_node)
    assert node.status.allocatable[GPU_CORE] == "400"
    assert node.status.capacity[GPU_CORE] == "400"
    assert not any(t.key == NOT_READY_TAINT for t in node.spec.taints or [])


def test_new_node_gets_the_not_ready_taint(core: client.CoreV1Api) -> None:
    name = _name("bare-node")
    node = core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    try:
        assert [(t.key, t.effect) for t in node.spec.taints or []] == [(NOT_READY_TAINT, "NoSchedule")]
    finally:
        core.delete_node(name)


def test_extended_resource_requests_must_equal_limits(core: client.CoreV1Api, k8s_namespace: str) -> None:
    created = core.create_namespaced_pod(k8s_namespace, _pod(_name("ok")))
    container = created.spec.containers[0]
    assert container.resources.requests[GPU_CORE] == container.resources.limits[GPU_CORE] == "50"
    with pytest.raises(ApiException) as no_limit:
        core.create_namespaced_pod(k8s_namespace, _pod(_name("nolimit"), limits={}))
    assert no_limit.value.status == 422
    with pytest.raises(ApiException) as unequal:
        core.create_namespaced_pod(k8s_namespace, _pod(_name("unequal"), limits={GPU_CORE: "60"}))
    assert unequal.value.status == 422


# ---------------------------------------------------------------- binding


def test_bind_with_raw_response_then_second_bind_conflicts(
    core: client.CoreV1Api, k8s_namespace: str, gpu_node: str
) -> None:
    pod = _name("bind")
    core.create_namespaced_pod(k8s_namespace, _pod(pod))
    resp = core.create_namespaced_pod_binding(pod, k8s_namespace, _binding(pod, gpu_node), _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["status"] == "Success"  # the body is a Status, not a Binding
    assert core.read_namespaced_pod(pod, k8s_namespace).spec.node_name == gpu_node

    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_binding(pod, k8s_namespace, _binding(pod, gpu_node), _preload_content=False)
    assert again.value.status == 409
    assert "already assigned" in (again.value.body or "")


def test_bind_with_preloaded_content_binds_then_raises_value_error(
    core: client.CoreV1Api, k8s_namespace: str, gpu_node: str
) -> None:
    """Client quirk (37.x): the 201 Status body fails V1Binding validation AFTER the bind happened."""
    pod = _name("quirk")
    core.create_namespaced_pod(k8s_namespace, _pod(pod))
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic_core.ValidationError; the message is the client's
        core.create_namespaced_pod_binding(pod, k8s_namespace, _binding(pod, gpu_node))
    assert core.read_namespaced_pod(pod, k8s_namespace).spec.node_name == gpu_node


def test_binding_to_a_missing_node_is_accepted(core: client.CoreV1Api, k8s_namespace: str) -> None:
    pod = _name("ghost")
    core.create_namespaced_pod(k8s_namespace, _pod(pod))
    resp = core.create_namespaced_pod_binding(pod, k8s_namespace, _binding(pod, "no-such-node"), _preload_content=False)
    assert resp.status == 201


# ---------------------------------------------------------------- concurrency, watch, leases


def test_patch_with_stale_resource_version_conflicts(core: client.CoreV1Api, k8s_namespace: str) -> None:
    pod = _name("rv")
    created = core.create_namespaced_pod(k8s_namespace, _pod(pod))
    stale = created.metadata.resource_version
    fresh = core.patch_namespaced_pod(
        pod, k8s_namespace, {"metadata": {"annotations": {"ljrk/a": "1"}, "resourceVersion": stale}}
    )
    assert fresh.metadata.annotations["ljrk/a"] == "1"
    assert fresh.metadata.resource_version != stale
    with pytest.raises(ApiException) as conflict:
        core.patch_namespaced_pod(
            pod, k8s_namespace, {"metadata": {"annotations": {"ljrk/a": "2"}, "resourceVersion": stale}}
        )
    assert conflict.value.status == 409
    assert core.read_namespaced_pod(pod, k8s_namespace).metadata.annotations["ljrk/a"] == "1"


def test_list_then_watch_from_resource_version(core: client.CoreV1Api, k8s_namespace: str) -> None:
    first = _name("w1")
    core.create_namespaced_pod(k8s_namespace, _pod(first))
    listed = core.list_namespaced_pod(k8s_namespace)
    assert [p.metadata.name for p in listed.items] == [first]
    rv = listed.metadata.resource_version
    assert rv

    second = _name("w2")
    core.create_namespaced_pod(k8s_namespace, _pod(second))
    core.patch_namespaced_pod(second, k8s_namespace, {"metadata": {"labels": {"seen": "yes"}}})
    core.delete_namespaced_pod(first, k8s_namespace, grace_period_seconds=0)

    w = watch.Watch()
    events: list[tuple[str, str]] = []
    for event in w.stream(
        core.list_namespaced_pod, k8s_namespace, resource_version=rv, timeout_seconds=10, _request_timeout=20
    ):
        obj = event["object"]
        assert isinstance(obj, client.V1Pod)
        assert event["raw_object"]["metadata"]["name"] == obj.metadata.name
        events.append((event["type"], obj.metadata.name))
        if event["type"] == "DELETED":
            w.stop()
    assert events[:2] == [("ADDED", second), ("MODIFIED", second)]
    assert events[-1] == ("DELETED", first)
    # A delete may first show up as MODIFIED (deletionTimestamp set), even with grace period 0.
    assert set(events[2:-1]) <= {("MODIFIED", first)}
    assert int(w.resource_version) > int(rv)


def test_lease_create_replace_and_stale_replace_conflicts(k8s_api: Any, k8s_namespace: str) -> None:
    leases = client.CoordinationV1Api(k8s_api)
    now = dt.datetime.now(dt.UTC)
    name = _name("leader")
    created = leases.create_namespaced_lease(
        k8s_namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1LeaseSpec(
                holder_identity="a", lease_duration_seconds=15, acquire_time=now, renew_time=now, lease_transitions=0
            ),
        ),
    )
    assert created.spec.holder_identity == "a"
    read = leases.read_namespaced_lease(name, k8s_namespace)
    assert isinstance(read.spec.renew_time, dt.datetime)
    stale_rv = read.metadata.resource_version

    read.spec.holder_identity = "b"
    read.spec.renew_time = dt.datetime.now(dt.UTC)
    read.spec.lease_transitions = 1
    replaced = leases.replace_namespaced_lease(name, k8s_namespace, read)
    assert replaced.spec.holder_identity == "b"
    assert replaced.spec.lease_transitions == 1
    assert replaced.metadata.resource_version != stale_rv

    read.spec.holder_identity = "c"
    read.metadata.resource_version = stale_rv
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease(name, k8s_namespace, read)
    assert conflict.value.status == 409
    assert leases.read_namespaced_lease(name, k8s_namespace).spec.holder_identity == "b"


# ---------------------------------------------------------------- scheduler and controller manager


def test_default_scheduler_binds_a_gpu_pod(core: client.CoreV1Api, k8s_namespace: str, gpu_node: str) -> None:
    pod = _name("sched")
    spec = _pod(pod, "30", scheduler="default-scheduler")
    spec.spec.node_selector = {"ljrk/smoke": "true"}
    core.create_namespaced_pod(k8s_namespace, spec)
    node = eventually(
        lambda: core.read_namespaced_pod(pod, k8s_namespace).spec.node_name, what="kube-scheduler to bind the pod"
    )
    assert node == gpu_node


def test_job_controller_creates_the_jobs_pod(k8s_api: Any, core: client.CoreV1Api, k8s_namespace: str) -> None:
    batch = client.BatchV1Api(k8s_api)
    job = _name("job")
    pod_spec = _pod("unused", None, scheduler=NO_SCHEDULER).spec
    pod_spec.restart_policy = "Never"
    batch.create_namespaced_job(
        k8s_namespace,
        client.V1Job(
            metadata=client.V1ObjectMeta(name=job),
            spec=client.V1JobSpec(
                backoff_limit=0,
                ttl_seconds_after_finished=5,
                template=client.V1PodTemplateSpec(spec=pod_spec),
            ),
        ),
    )
    pods = eventually(
        lambda: core.list_namespaced_pod(k8s_namespace, label_selector=f"job-name={job}").items,
        what="the job controller to create a pod",
    )
    assert len(pods) == 1
    owner = pods[0].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Job", job, True)
