"""The node controller against a real control plane: etcd + kube-apiserver + kube-controller-manager (Job,
TTL-after-finished and garbage-collector controllers). No kubelet runs, so the test plays it: it sets the phase of
the pods the Job controller creates, and the Job controller turns that into the Job's Complete/Failed condition.

The controller is built through its composition root (``ControllerContainer``: kubeconfig file, KubernetesCluster,
Prometheus metrics, leader election on a real Lease) and runs its own threads.

Covers, on one node:
(B26) before the controller starts, two Succeeded Jobs of ours and a Succeeded Job that is not ours exist: the
      startup sweep deletes ours (background propagation) and leaves the other;
(B28) label ``true`` → an enable Job pinned to the node (nodeName, tolerations, hostPath) → its pod marked
      Succeeded → the node's state annotation reads ``enabled`` and the Job is deleted; label removed → a disable
      Job; its pod marked Failed → the Job controller fails the Job → the controller retries after its backoff
      (no label change) with a Warning Event → that pod Succeeded → ``disabled``; the failed Job is kept;
(B27) label ``true`` again → an enable Job; the Node is deleted before its pod runs → the Job is deleted and the
      record forgotten; the Node re-created with ``true`` → exactly one new enable Job, under another name;
and ``/metrics`` counts the Jobs created.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from k8s_harness import ControlPlane
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from domain.kube.objects import JobObject, JobPhase, NodeObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.toggle.jobs import MANAGED_BY_LABEL, JobTemplate, is_ours, job_node
from domain.toggle.states import Action
from entrypoints.controller.app import ControllerApp, ControllerSettings
from entrypoints.controller.containers import ControllerContainer
from support.polling import eventually

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
LABEL, STATE = PROTOCOL.node_label, PROTOCOL.annotations.node_state


class Harness:
    """The test's own view of the cluster (its own client) plus the controller under test."""

    def __init__(self, plane: ControlPlane, api_client: Any, namespace: str) -> None:
        self.plane = plane
        self.cluster = KubernetesCluster(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.node = f"gpu-{uuid.uuid4().hex[:8]}"
        self.container: ControllerContainer | None = None
        self.app: ControllerApp | None = None

    def start_controller(self) -> ControllerApp:
        settings = ControllerSettings(
            kubeconfig=self.plane.kubeconfig, namespace=self.namespace, job_image="ljrk:test", host="127.0.0.1",
            port=0, max_retries=2, backoff_base=1.0, backoff_cap=2.0, failed_job_ttl=3600.0, job_timeout=30.0,
            job_deadline=300.0, lease_name=f"ljrk-controller-{self.node}", identity="it-controller",
            lease_duration=3.0, renew_deadline=2.0, retry_period=0.2, watch_timeout_seconds=2.0, retry_seconds=1.0,
        )
        self.container = ControllerContainer(settings=settings)
        self.container.init_resources()
        self.app = self.container.app()
        self.app.start()
        return self.app

    def stop(self) -> None:
        if self.app is not None:
            self.app.stop()
        if self.container is not None:
            self.container.shutdown_resources()

    # -------------------------------------------------------------- cluster views
    def jobs(self, *, ours: bool = True) -> list[JobObject]:
        items = self.cluster.list_jobs(self.namespace).items
        return [j for j in items if is_ours(j) == ours and (not ours or job_node(j) == self.node)]

    def active(self) -> list[JobObject]:
        return [j for j in self.jobs() if not j.status.phase.finished]

    def state(self) -> str | None:
        return self.cluster.get_node(self.node).annotations.get(STATE)

    def pods_of(self, job: JobObject) -> list[Any]:
        pods = self.cluster.list_pods(field_selector=f"metadata.namespace={self.namespace}").items
        return [p for p in pods if p.labels.get("controller-uid") == job.uid]

    def run_pod(self, job: JobObject, phase: PodPhase) -> None:
        """Play the kubelet: the Job's pod ends in ``phase``."""
        (pod,) = eventually(lambda: self.pods_of(job), what=f"the pod of {job.name}")
        assert pod.node_name == self.node
        self.cluster.set_pod_phase(self.namespace, pod.name, phase)

    def one_active(self, action: Action) -> JobObject:
        (job,) = eventually(lambda: self.active() if len(self.active()) == 1 else None, what=f"one {action} Job")
        assert job.command[3] == action.value
        return job

    def add_node(self, label: str | None) -> NodeObject:
        return self.cluster.create_node(NodeObject(self.node, labels={LABEL: label} if label else {}))

    def warnings(self) -> list[str]:
        events = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={self.node}")
        return [e.reason for e in events.items if e.type == "Warning"]


@pytest.fixture
def harness(k8s_control_plane: ControlPlane, k8s_api: Any, k8s_namespace: str) -> Iterator[Harness]:
    h = Harness(k8s_control_plane, k8s_api, k8s_namespace)
    try:
        yield h
    finally:
        h.stop()
        with contextlib.suppress(Exception):
            h.cluster.delete_node(h.node)


def _metric(app: ControllerApp, line: str) -> bool:
    host, port = app.http.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        return line in response.read().decode()


def test_controller_toggles_a_node_through_real_jobs(harness: Harness) -> None:
    node = harness.add_node(None)
    template = JobTemplate(namespace=harness.namespace, image="ljrk:test")
    foreign = template.build(node.name, node.uid, Action.ENABLE, 3)
    foreign = attrs.evolve(foreign, name=f"foreign-{node.name}",
                           labels={**foreign.labels, MANAGED_BY_LABEL: "someone-else"})
    before = [template.build(node.name, node.uid, Action.ENABLE, generation) for generation in (1, 2)]
    for job in [*before, foreign]:  # B26: Jobs that finish before the controller starts
        harness.run_pod(harness.cluster.create_job(job), PodPhase.SUCCEEDED)
    for job in [*before, foreign]:  # the Job controller turns the pods' success into Complete
        eventually(lambda job=job: harness.cluster.get_job(harness.namespace, job.name).status.phase
                   is JobPhase.SUCCEEDED, what=f"{job.name} complete")

    app = harness.start_controller()
    eventually(lambda: not harness.jobs(), what="the startup sweep")
    assert [j.name for j in harness.jobs(ours=False)] == [foreign.name]

    # B28: true → enabled
    started = time.monotonic()
    harness.cluster.patch_node_metadata(harness.node, labels={LABEL: "true"})
    enable = harness.one_active(Action.ENABLE)
    flip_to_job = time.monotonic() - started
    assert enable.node_name == harness.node
    assert enable.backoff_limit == 0
    assert enable.owner is not None
    assert enable.owner.uid == node.uid
    eventually(lambda: harness.state() == "enabling", what="state enabling")
    harness.run_pod(enable, PodPhase.SUCCEEDED)
    eventually(lambda: harness.state() == "enabled", what="state enabled")
    eventually(lambda: not harness.jobs(), what="the succeeded Job deleted")
    assert flip_to_job < 10

    # B28 (a): label removed → disable; a failed try is retried without a label change
    harness.cluster.patch_node_metadata(harness.node, labels={LABEL: None})
    first = harness.one_active(Action.DISABLE)
    harness.run_pod(first, PodPhase.FAILED)
    second = eventually(lambda: [j for j in harness.active() if j.name != first.name], what="the retry Job")[0]
    assert second.command[3] == "disable"
    assert harness.cluster.get_job(harness.namespace, first.name).status.phase is JobPhase.FAILED
    assert "RuntimeToggleRetry" in eventually(harness.warnings, what="a Warning Event")
    harness.run_pod(second, PodPhase.SUCCEEDED)
    eventually(lambda: harness.state() == "disabled", what="state disabled")
    eventually(lambda: [j.name for j in harness.jobs()] == [first.name], what="only the failed Job kept")

    # B27: the node goes while its enable Job waits; it comes back and gets exactly one new Job
    harness.cluster.patch_node_metadata(harness.node, labels={LABEL: "true"})
    pending = harness.one_active(Action.ENABLE)
    harness.cluster.delete_node(harness.node)
    eventually(lambda: not harness.jobs(), what="the deleted node's Jobs deleted")
    eventually(lambda: app.controller.record(harness.node) is None, what="the record forgotten")
    harness.add_node("true")
    fresh = harness.one_active(Action.ENABLE)
    assert fresh.name != pending.name
    time.sleep(1.0)
    assert [j.name for j in harness.jobs()] == [fresh.name]
    assert _metric(app, 'lj_runtimekit_controller_jobs_created_total{action="enable"} 3.0')
    assert _metric(app, 'lj_runtimekit_controller_jobs_created_total{action="disable"} 2.0')
