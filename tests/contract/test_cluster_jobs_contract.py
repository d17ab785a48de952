"""Contract of the cluster port's Jobs (``ports.cluster.ClusterApi``), against InMemoryCluster and KubernetesCluster.

Part of the cluster contract suite (same ``cluster`` fixture as ``test_cluster_contract.py``): every case runs
``[memory]`` and ``[kubernetes]`` (real kube-apiserver of the live version, no Job controller, marker ``k8s``), in
a fresh namespace.

Behaviours covered:
- create / get / list: uid, RV, creation time, labels, annotations, the Node owner reference, pinned node, image,
  command, tolerate-everything toleration, hostPath mount, service account, backoffLimit 0, activeDeadlineSeconds,
  ttlSecondsAfterFinished round-trip; a new Job is ACTIVE with zero counts whatever status it was given; create of
  an existing name → ConflictError; a name over 63 characters → ClusterError 422;
- label selectors on list: ``k=v``, ``k!=v``, ``!k``, ``k in (…)``; a malformed selector → ClusterError 400;
- watch from the list RV through a selector: ADDED, MODIFIED (status), DELETED of matching Jobs only, RVs rising;
- set_job_status: ACTIVE, then SUCCEEDED (``Complete`` condition, completion time) and, on another Job, FAILED
  (``Failed`` condition with reason and message) read back with their phase, counts and finish time; a finished
  Job stays finished (another phase → ClusterError, as kube-apiserver >= 1.31 refuses dropping a terminal
  condition);
- (kubernetes only) a finished status replaces the conditions: a merge patch, not a strategic one;
- delete with background propagation: the Job is gone at once; delete/get/set status of a missing Job →
  NotFoundError.
Memory-only extras: ``job_deletions`` records each propagation; namespaces separate Jobs; the domain's toggle Job
(``JobTemplate.build``) round-trips unchanged through both adapters (kubernetes case included above).
"""

from __future__ import annotations

import time

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import (
    EventType,
    HostPathMount,
    JobObject,
    JobPhase,
    JobStatus,
    NodeObject,
    OwnerReference,
    Propagation,
    Toleration,
)
from domain.toggle.jobs import JOB_SELECTOR, JobTemplate
from domain.toggle.states import Action
from ports.cluster import ClusterError, ConflictError, NotFoundError

from .conftest import ClusterUnderTest, collect_events

WATCH_SECONDS = 2.0


def _job(cut: ClusterUnderTest, name: str | None = None, **changes: object) -> JobObject:
    base = JobObject(
        namespace=cut.namespace,
        name=name or cut.name("job"),
        labels={"app.kubernetes.io/managed-by": "ljrk-contract", "tier": "a"},
        annotations={"note": "contract"},
        node_name="nowhere",
        image="registry.example/ljrk:1",
        command=("ljrk", "job-agent", "--action", "enable"),
        tolerations=(Toleration(operator="Exists"),),
        host_paths=(HostPathMount("sock", "/run/ljrk", "/run/ljrk", "DirectoryOrCreate"),),
        backoff_limit=0,
        active_deadline_seconds=120,
        ttl_seconds_after_finished=600,
    )
    return attrs.evolve(base, **changes)


def _names(jobs: tuple[JobObject, ...]) -> set[str]:
    return {j.name for j in jobs}


def test_create_get_list_jobs(cluster: ClusterUnderTest) -> None:
    node = cluster.api.create_node(NodeObject(cluster.node_name()))
    owner = OwnerReference("v1", "Node", node.name, node.uid, controller=True)
    wanted = _job(cluster, owner=owner, status=JobStatus(JobPhase.SUCCEEDED, succeeded=3))
    before = time.time()
    created = cluster.api.create_job(wanted)
    assert created.uid
    assert int(created.resource_version) > 0
    assert created.created_at is not None
    assert before - 2 <= created.created_at <= time.time() + 2
    expected = attrs.evolve(wanted, uid=created.uid, resource_version=created.resource_version,
                            created_at=created.created_at, status=JobStatus())
    assert created == expected
    assert cluster.api.get_job(cluster.namespace, created.name) == created
    listing = cluster.api.list_jobs(cluster.namespace)
    assert list(listing.items) == [created]
    assert int(listing.resource_version) >= int(created.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.create_job(wanted)


def test_toggle_job_round_trips(cluster: ClusterUnderTest) -> None:
    node = cluster.api.create_node(NodeObject(cluster.node_name()))
    job = JobTemplate(namespace=cluster.namespace).build(node.name, node.uid, Action.DISABLE, 12)
    created = cluster.api.create_job(job)
    assert attrs.evolve(created, uid="", resource_version="", created_at=None) == job
    assert list(cluster.api.list_jobs(cluster.namespace, label_selector=JOB_SELECTOR).items) == [created]


def test_job_name_longer_than_63_is_invalid(cluster: ClusterUnderTest) -> None:
    with pytest.raises(ClusterError) as error:
        cluster.api.create_job(_job(cluster, "j" * 64))
    assert error.value.status == 422


def test_label_selectors(cluster: ClusterUnderTest) -> None:
    a = cluster.api.create_job(_job(cluster, labels={"app.kubernetes.io/managed-by": "x", "tier": "a"}))
    b = cluster.api.create_job(_job(cluster, labels={"app.kubernetes.io/managed-by": "y", "tier": "b"}))
    c = cluster.api.create_job(_job(cluster, labels={"tier": "c"}))

    def selected(selector: str) -> set[str]:
        return _names(cluster.api.list_jobs(cluster.namespace, label_selector=selector).items)

    assert selected("") == {a.name, b.name, c.name}
    assert selected("app.kubernetes.io/managed-by=x") == {a.name}
    assert selected("app.kubernetes.io/managed-by==y,tier=b") == {b.name}
    assert selected("app.kubernetes.io/managed-by!=x") == {b.name, c.name}
    assert selected("!app.kubernetes.io/managed-by") == {c.name}
    assert selected("app.kubernetes.io/managed-by") == {a.name, b.name}
    assert selected("tier in (a,c)") == {a.name, c.name}
    assert selected("tier notin (a,c)") == {b.name}
    with pytest.raises(ClusterError) as error:
        cluster.api.list_jobs(cluster.namespace, label_selector="tier in (a")
    assert error.value.status == 400


def test_watch_jobs_through_a_selector(cluster: ClusterUnderTest) -> None:
    selector = "app.kubernetes.io/managed-by=ljrk-contract"
    start = cluster.api.list_jobs(cluster.namespace, label_selector=selector).resource_version
    other = cluster.api.create_job(_job(cluster, labels={"app.kubernetes.io/managed-by": "else"}))
    job = cluster.api.create_job(_job(cluster))
    cluster.api.set_job_status(cluster.namespace, other.name, JobStatus(JobPhase.FAILED, failed=1))
    cluster.api.set_job_status(cluster.namespace, job.name, JobStatus(JobPhase.SUCCEEDED, succeeded=1))
    cluster.api.delete_job(cluster.namespace, job.name)
    events = collect_events(cluster.api.watch_jobs(cluster.namespace, resource_version=start,
                                                   timeout_seconds=WATCH_SECONDS, label_selector=selector),
                            keep=lambda e: True, done=lambda seen: len(seen) == 3)
    assert [e.type for e in events] == [EventType.ADDED, EventType.MODIFIED, EventType.DELETED]
    assert {e.object.name for e in events if e.object is not None} == {job.name}
    assert events[1].object is not None
    assert events[1].object.status.phase is JobPhase.SUCCEEDED
    rvs = [int(e.resource_version) for e in events]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 3


def test_set_job_status(cluster: ClusterUnderTest) -> None:
    job = cluster.api.create_job(_job(cluster))
    finished = float(int(time.time()) - 5)
    active = cluster.api.set_job_status(cluster.namespace, job.name, JobStatus(JobPhase.ACTIVE, active=1))
    assert active.status == JobStatus(JobPhase.ACTIVE, active=1)
    done = cluster.api.set_job_status(cluster.namespace, job.name,
                                      JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=finished))
    assert done.status == JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=finished)
    assert cluster.api.get_job(cluster.namespace, job.name).status.phase is JobPhase.SUCCEEDED
    other = cluster.api.create_job(_job(cluster))
    failed_status = JobStatus(JobPhase.FAILED, failed=1, finished_at=finished, reason="BackoffLimitExceeded",
                              message="Job has reached the specified backoff limit")
    failed = cluster.api.set_job_status(cluster.namespace, other.name, failed_status)
    assert failed.status == failed_status


def test_a_finished_job_stays_finished(cluster: ClusterUnderTest) -> None:
    """A terminal condition is final (kube-apiserver >= 1.31 refuses dropping it): another phase → ClusterError,
    the Job keeps its status; writing the same finished status again is accepted."""
    job = cluster.api.create_job(_job(cluster))
    done = JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=float(int(time.time()) - 5))
    cluster.api.set_job_status(cluster.namespace, job.name, done)
    for other in (JobStatus(JobPhase.FAILED, failed=1, reason="R"), JobStatus(JobPhase.ACTIVE, active=1)):
        with pytest.raises(ClusterError, match="Complete"):
            cluster.api.set_job_status(cluster.namespace, job.name, other)
    assert cluster.api.get_job(cluster.namespace, job.name).status == done
    assert cluster.api.set_job_status(cluster.namespace, job.name, done).status == done


@pytest.mark.k8s
@pytest.mark.parametrize("cluster", ["kubernetes"], indirect=True)
def test_kubernetes_job_status_writes_are_merge_patches(cluster: ClusterUnderTest) -> None:
    """A finished status replaces ``status.conditions``: the write is a JSON merge patch on every client. A
    strategic merge patch — what clients 28-35 send for a dict body unless told otherwise — merges the list by
    ``type`` (patchMergeKey) and would keep a condition written before beside the new ones (here a non-terminal
    ``Suspended`` one, seeded with a strategic merge patch of the raw client)."""
    from kubernetes import client

    job = cluster.api.create_job(_job(cluster))
    seed = {"status": {"conditions": [{"type": "Suspended", "status": "False", "reason": "Seeded"}]}}
    with cluster.plane.api_client() as api_client:
        client.BatchV1Api(api_client).patch_namespaced_job_status(job.name, cluster.namespace, seed)
    cluster.api.set_job_status(cluster.namespace, job.name, JobStatus(JobPhase.FAILED, failed=1, reason="R"))
    with cluster.plane.api_client() as api_client:
        raw = client.BatchV1Api(api_client).read_namespaced_job_status(job.name, cluster.namespace)
    assert [(c.type, c.status, c.reason) for c in raw.status.conditions] == [
        ("FailureTarget", "True", "R"), ("Failed", "True", "R")]
    assert raw.status.completion_time is None


def test_delete_job_and_not_found(cluster: ClusterUnderTest) -> None:
    job = cluster.api.create_job(_job(cluster))
    cluster.api.delete_job(cluster.namespace, job.name, propagation=Propagation.BACKGROUND)
    with pytest.raises(NotFoundError):
        cluster.api.get_job(cluster.namespace, job.name)
    assert cluster.api.list_jobs(cluster.namespace).items == ()
    with pytest.raises(NotFoundError):
        cluster.api.delete_job(cluster.namespace, job.name)
    with pytest.raises(NotFoundError):
        cluster.api.set_job_status(cluster.namespace, job.name, JobStatus())


# ------------------------------------------------------------------------------------------------ memory only
def test_memory_records_propagation_and_separates_namespaces() -> None:
    memory = InMemoryCluster()
    memory.create_job(JobObject(namespace="a", name="j"))
    memory.create_job(JobObject(namespace="b", name="j"))
    assert [j.namespace for j in memory.list_jobs("a").items] == ["a"]
    memory.delete_job("a", "j", propagation=Propagation.FOREGROUND)
    memory.delete_job("b", "j")
    assert memory.job_deletions == [("a", "j", Propagation.FOREGROUND), ("b", "j", Propagation.BACKGROUND)]
