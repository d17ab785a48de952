"""Contract of the cluster port (``ports.cluster.ClusterApi``), run against InMemoryCluster and KubernetesCluster.

Every case runs twice: ``[memory]`` on a fresh in-memory cluster and ``[kubernetes]`` on a real kube-apiserver of the
live version (marker ``k8s``), each in a fresh namespace with unique node names, so cases never see each
other's objects.

Behaviours covered:
- nodes: create (uid, RV, allocatable, labels, annotations, taints, unschedulable) / get / list; create of an
  existing name → ConflictError;
- pods: create (uid, RV, Pending whatever the phase given, containers with init flag and quantities, scheduler,
  node selector, tolerations, required node affinity) / get / list; create of an existing name → ConflictError;
- list RV + watch: ADDED, MODIFIED, (MODIFIED with deletion timestamp,) DELETED in order with increasing RVs, for
  pods and nodes; a watch blocks until an event written by another thread arrives;
- field selectors ``spec.nodeName=`` and ``spec.schedulerName=X`` (comma-ANDed) on list and watch; a pod that
  stops matching (bound) arrives as DELETED, one that starts matching as ADDED; an unknown field → 400;
- watch from a resourceVersion older than the server's window → GoneError (memory: ``compact()``; real server:
  etcd compaction on a plane without watch cache, see conftest);
- patch annotations/labels: stale RV → ConflictError, current RV → applied, None → key removed, a patch that
  changes nothing keeps the RV; six threads patching with the same RV → exactly one wins;
- bind: node_name set; second bind → ConflictError; binding a terminating pod → ConflictError; a missing pod →
  NotFoundError; UID mismatch → ConflictError; the binding's
  annotations are merged into the pod's in the same write (one watch event), and a failed binding writes none;
- delete: unbound pod and finished pod go at once whatever the grace; a bound pod with the default grace gets a
  deletion timestamp (≈ now + 30 s) and stays listed, a repeat delete changes nothing, a shorter grace moves the
  timestamp, grace 0 removes it;
- set_pod_phase writes status.phase;
- Leases: create / get (times to the microsecond, whole seconds too) / update with the current RV / stale RV →
  ConflictError / create existing → ConflictError;
- create_event accepts pod and node events; a repeat raises the count of the Event recorded before (memory: read
  back; kubernetes: on the wire in ``tests/integration/test_kubernetes_event_dedup.py``);
- NotFoundError for every read or write of a missing pod, node or lease;
- Jobs (batch/v1: create/list/watch with label selectors, status, background delete): in
  ``test_cluster_jobs_contract.py``, on the same ``cluster`` fixture.
Memory-only extras: finalize_deletions, the bounded history window, a watcher behind the window, RV "0".
Kubernetes-adapter extras: from_kubeconfig (real server; without one, that its client keeps a pool of at least
CONNECTION_POOL_MAXSIZE connections); error translation and MicroTime wire format (no server,
written for every supported client: 28-35 and 37 differ in ``ApiException`` and ``deserialize``);
transport failures — connection refused, a server that never answers (timeout) — surface as UnavailableError
(status 0, chained to the urllib3/socket error) from every call and from a watch iterator, never as a raw
exception; ``with_request_timeout`` gives a view with its own timeout.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import socket
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import (
    ClusterEvent,
    ContainerSpec,
    EventType,
    LeaseRecord,
    NodeObject,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodObject,
    PodPhase,
    Taint,
    TaintEffect,
    Toleration,
    WatchEvent,
)
from ports.cluster import ClusterError, ConflictError, GoneError, NotFoundError, UnavailableError
from support.polling import eventually

from .conftest import ClusterUnderTest, collect_events, compact_etcd

SCHEDULER = "ljrk-contract"  # no scheduler serves it: pods stay unbound until a test binds them
WATCH_SECONDS = 2.0


def _pod(cut: ClusterUnderTest, name: str | None = None, **changes: Any) -> PodObject:
    base = PodObject(
        uid="",
        namespace=cut.namespace,
        name=name or cut.name(),
        containers=(ContainerSpec("main", requests={"cpu": "100m"}, limits={"cpu": "100m"}),),
        scheduler_name=SCHEDULER,
    )
    return attrs.evolve(base, **changes)


def _in_namespace(cut: ClusterUnderTest) -> Callable[[WatchEvent[object]], bool]:
    return lambda e: isinstance(e.object, PodObject) and e.object.namespace == cut.namespace


def _types(events: list[WatchEvent[object]]) -> list[EventType]:
    return [e.type for e in events]


def _rvs_increase(events: list[WatchEvent[object]]) -> bool:
    rvs = [int(e.resource_version) for e in events]
    return rvs == sorted(rvs) and len(set(rvs)) == len(rvs)


# ------------------------------------------------------------------------------------------------ nodes
def test_create_get_list_nodes(cluster: ClusterUnderTest) -> None:
    name = cluster.node_name()
    node = NodeObject(
        name=name,
        labels={"lj_runtimekit_enable": "true"},
        annotations={"lj-runtimekit.io/gpu-inventory": "{}"},
        allocatable={"cpu": "8", "memory": "16Gi", "alibabacloud.com/gpu": "2"},
        taints=(Taint("gpu", TaintEffect.NO_SCHEDULE, "off"),),
        unschedulable=True,
    )
    created = cluster.api.create_node(node)
    assert created.uid
    assert int(created.resource_version) > 0
    assert (created.labels, created.annotations, created.allocatable) == (
        node.labels,
        node.annotations,
        node.allocatable,
    )
    assert set(node.taints) <= set(created.taints)  # the real server adds node.kubernetes.io/not-ready
    assert created.unschedulable
    assert cluster.api.get_node(name) == created
    listing = cluster.api.list_nodes()
    assert created in listing.items
    assert int(listing.resource_version) >= int(created.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.create_node(node)


def test_node_watch_delivers_changes_in_order(cluster: ClusterUnderTest) -> None:
    start = cluster.api.list_nodes().resource_version
    name = cluster.node_name()
    cluster.api.create_node(NodeObject(name=name, allocatable={"cpu": "4"}))
    cluster.api.patch_node_metadata(name, labels={"a": "1"})
    cluster.api.delete_node(name)
    events = collect_events(
        cluster.api.watch_nodes(resource_version=start, timeout_seconds=WATCH_SECONDS),
        keep=lambda e: isinstance(e.object, NodeObject) and e.object.name == name,
        done=lambda seen: seen[-1].type is EventType.DELETED,
    )
    assert _types(events) == [EventType.ADDED, EventType.MODIFIED, EventType.DELETED]
    assert _rvs_increase(events)
    assert all(isinstance(e.object, NodeObject) and e.resource_version == e.object.resource_version for e in events)
    assert isinstance(events[1].object, NodeObject)
    assert events[1].object.labels == {"a": "1"}


def test_patch_node_metadata(cluster: ClusterUnderTest) -> None:
    name = cluster.node_name()
    node = cluster.api.create_node(NodeObject(name=name, labels={"keep": "1", "drop": "2"}))
    patched = cluster.api.patch_node_metadata(
        name, labels={"drop": None, "new": "3"}, annotations={"x": "y"}, resource_version=node.resource_version
    )
    assert patched.labels == {"keep": "1", "new": "3"}
    assert patched.annotations == {"x": "y"}
    with pytest.raises(ConflictError):
        cluster.api.patch_node_metadata(name, labels={"z": "1"}, resource_version=node.resource_version)
    same = cluster.api.patch_node_metadata(name, labels={"new": "3"})
    assert same.resource_version == patched.resource_version  # nothing changed: no write


# ------------------------------------------------------------------------------------------------ pods
def test_create_get_list_pods(cluster: ClusterUnderTest) -> None:
    pod = _pod(
        cluster,
        containers=(
            ContainerSpec("setup", requests={"cpu": "50m"}, limits={"cpu": "50m"}, init=True),
            ContainerSpec(
                "main",
                requests={"cpu": "500m", "memory": "1Gi", "alibabacloud.com/gpu-memory": "8"},
                limits={"cpu": "1", "memory": "1Gi", "alibabacloud.com/gpu-memory": "8"},
            ),
        ),
        phase=PodPhase.RUNNING,  # ignored: a new pod is Pending
        annotations={"lj-runtimekit.io/gpu-plan": "{}"},
        labels={"app": "x"},
        node_selector={"lj_runtimekit_enable": "true"},
        tolerations=(
            Toleration(key="gpu", operator="Equal", value="off", effect=TaintEffect.NO_SCHEDULE),
            Toleration(key="node.kubernetes.io/not-ready", operator="Exists"),
        ),
        required_node_affinity=(
            NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("zone", "In", ("a", "b")),)),
            NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", ("n1",)),)),
        ),
    )
    created = cluster.api.create_pod(pod)
    assert created.uid
    assert int(created.resource_version) > 0
    assert created.phase is PodPhase.PENDING
    assert created.node_name == ""
    assert created.deletion_timestamp is None
    for field in ("namespace", "name", "containers", "scheduler_name", "annotations", "labels", "node_selector",
                  "required_node_affinity"):  # fmt: skip
        assert getattr(created, field) == getattr(pod, field), field
    # the real server's DefaultTolerationSeconds admission adds not-ready/unreachable NoExecute tolerations
    assert set(pod.tolerations) <= set(created.tolerations)
    assert cluster.api.get_pod(cluster.namespace, pod.name) == created
    listing = cluster.api.list_pods()
    assert created in listing.items
    assert int(listing.resource_version) >= int(created.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.create_pod(pod)


def test_pod_watch_delivers_changes_in_order(cluster: ClusterUnderTest) -> None:
    start = cluster.api.list_pods().resource_version
    pod = cluster.api.create_pod(_pod(cluster))
    cluster.api.patch_pod_annotations(cluster.namespace, pod.name, {"k": "v"})
    cluster.api.delete_pod(cluster.namespace, pod.name)  # unbound: deleted at once (marked, then removed)
    events = collect_events(
        cluster.api.watch_pods(resource_version=start, timeout_seconds=WATCH_SECONDS),
        keep=_in_namespace(cluster),
        done=lambda seen: seen[-1].type is EventType.DELETED,
    )
    assert _types(events) == [EventType.ADDED, EventType.MODIFIED, EventType.MODIFIED, EventType.DELETED]
    assert _rvs_increase(events)
    marked = events[2].object
    assert isinstance(marked, PodObject)
    assert marked.deletion_timestamp is not None
    assert isinstance(events[1].object, PodObject)
    assert events[1].object.annotations == {"k": "v"}


def test_watch_blocks_until_an_event_arrives(cluster: ClusterUnderTest) -> None:
    start = cluster.api.list_pods().resource_version
    name = cluster.name()
    timer = threading.Timer(0.3, lambda: cluster.api.create_pod(_pod(cluster, name)))
    timer.start()
    try:
        began = time.monotonic()
        events = collect_events(
            cluster.api.watch_pods(resource_version=start, timeout_seconds=WATCH_SECONDS + 1),
            keep=_in_namespace(cluster),
            done=lambda seen: True,
        )
        assert time.monotonic() - began < WATCH_SECONDS
    finally:
        timer.join()
    assert _types(events) == [EventType.ADDED]
    assert isinstance(events[0].object, PodObject)
    assert events[0].object.name == name


def test_watch_ends_after_its_timeout(cluster: ClusterUnderTest) -> None:
    start = cluster.api.list_pods(field_selector=f"metadata.namespace={cluster.namespace}").resource_version
    began = time.monotonic()
    events = collect_events(
        cluster.api.watch_pods(resource_version=start, timeout_seconds=1, field_selector="metadata.name=nothing"),
        keep=lambda e: True,
        done=lambda seen: False,
    )
    assert events == []
    assert time.monotonic() - began < 1 + 5


def test_field_selector_unbound_pods(cluster: ClusterUnderTest) -> None:
    unbound = cluster.api.create_pod(_pod(cluster))
    bound = cluster.api.create_pod(_pod(cluster, node_name="n-elsewhere"))
    listing = cluster.api.list_pods(field_selector="spec.nodeName=")
    names = {p.name for p in listing.items if p.namespace == cluster.namespace}
    assert names == {unbound.name}
    on_node = cluster.api.list_pods(field_selector="spec.nodeName=n-elsewhere").items
    assert [p.name for p in on_node if p.namespace == cluster.namespace] == [bound.name]

    cluster.api.bind_pod(cluster.namespace, unbound.name, uid=unbound.uid, node="n1")  # leaves the selection
    fresh = cluster.api.create_pod(_pod(cluster))  # enters it
    events = collect_events(
        cluster.api.watch_pods(
            resource_version=listing.resource_version, timeout_seconds=WATCH_SECONDS, field_selector="spec.nodeName="
        ),
        keep=_in_namespace(cluster),
        done=lambda seen: len(seen) == 2,
    )
    assert _types(events) == [EventType.DELETED, EventType.ADDED]
    gone, added = events[0].object, events[1].object
    assert isinstance(gone, PodObject)
    assert isinstance(added, PodObject)
    assert (gone.name, gone.node_name) == (unbound.name, "")  # the last state that matched
    assert int(events[0].resource_version) > int(unbound.resource_version)
    assert added.name == fresh.name


def test_field_selector_scheduler_name(cluster: ClusterUnderTest) -> None:
    selector = f"spec.schedulerName={SCHEDULER},spec.nodeName="
    mine = cluster.api.create_pod(_pod(cluster))
    cluster.api.create_pod(_pod(cluster, scheduler_name="other-scheduler"))
    cluster.api.create_pod(_pod(cluster, node_name="n1"))
    listing = cluster.api.list_pods(field_selector=selector)
    assert [p.name for p in listing.items if p.namespace == cluster.namespace] == [mine.name]
    assert all(p.scheduler_name == SCHEDULER and not p.node_name for p in listing.items)
    cluster.api.create_pod(_pod(cluster, scheduler_name="other-scheduler"))
    later = cluster.api.create_pod(_pod(cluster))  # written last: anything unfiltered would come before it
    events = collect_events(
        cluster.api.watch_pods(
            resource_version=listing.resource_version, timeout_seconds=WATCH_SECONDS, field_selector=selector
        ),
        keep=_in_namespace(cluster),
        done=lambda seen: getattr(seen[-1].object, "name", "") == later.name,
    )
    assert [(e.type, getattr(e.object, "name", "")) for e in events] == [(EventType.ADDED, later.name)]


def test_unknown_field_selector_is_a_bad_request(cluster: ClusterUnderTest) -> None:
    with pytest.raises(ClusterError) as info:
        cluster.api.list_pods(field_selector="spec.containers=x")
    assert info.value.status == 400


def test_watch_from_an_ancient_resource_version_is_gone(
    cluster: ClusterUnderTest, request: pytest.FixtureRequest
) -> None:
    api = cluster.api
    if cluster.kind == "kubernetes":
        from adapters.kubernetes import KubernetesCluster

        plane = request.getfixturevalue("uncached_k8s_plane")
        api_client = plane.api_client()
        request.addfinalizer(api_client.close)
        api = KubernetesCluster(api_client)
        name = cluster.node_name()
        api.create_node(NodeObject(name=name))
        api.delete_node(name)
        compact_etcd(plane, int(api.list_nodes().resource_version))
    else:
        assert cluster.memory is not None
        name = cluster.node_name()
        api.create_node(NodeObject(name=name))
        cluster.memory.compact()
    with pytest.raises(GoneError):
        collect_events(api.watch_pods(resource_version="1", timeout_seconds=1), keep=lambda e: True,
                       done=lambda s: True)
    with pytest.raises(GoneError):
        collect_events(api.watch_nodes(resource_version="1", timeout_seconds=1), keep=lambda e: True,
                       done=lambda s: True)


def test_patch_pod_annotations_with_resource_version(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster, annotations={"old": "1"}))
    first = cluster.api.patch_pod_annotations(
        cluster.namespace, pod.name, {"plan": "a"}, resource_version=pod.resource_version
    )
    assert first.annotations == {"old": "1", "plan": "a"}
    assert int(first.resource_version) > int(pod.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.patch_pod_annotations(
            cluster.namespace, pod.name, {"plan": "b"}, resource_version=pod.resource_version
        )
    assert cluster.api.get_pod(cluster.namespace, pod.name).annotations["plan"] == "a"
    second = cluster.api.patch_pod_annotations(cluster.namespace, pod.name, {"old": None, "plan": "b"})
    assert second.annotations == {"plan": "b"}
    same = cluster.api.patch_pod_annotations(
        cluster.namespace, pod.name, {"plan": "b", "absent": None}, resource_version=second.resource_version
    )
    assert same.resource_version == second.resource_version  # nothing changed: no write


def test_concurrent_conditional_patches_have_one_winner(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    outcomes: list[str] = []
    lock = threading.Lock()

    def patch(i: int) -> None:
        try:
            cluster.api.patch_pod_annotations(
                cluster.namespace, pod.name, {"winner": str(i)}, resource_version=pod.resource_version
            )
            result = str(i)
        except ConflictError:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=patch, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o != "conflict"]
    assert len(winners) == 1
    assert outcomes.count("conflict") == 5
    assert cluster.api.get_pod(cluster.namespace, pod.name).annotations == {"winner": winners[0]}


def test_bind_pod(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n1")
    bound = cluster.api.get_pod(cluster.namespace, pod.name)
    assert bound.node_name == "n1"
    assert int(bound.resource_version) > int(pod.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n2")
    assert cluster.api.get_pod(cluster.namespace, pod.name).node_name == "n1"
    with pytest.raises(NotFoundError):
        cluster.api.bind_pod(cluster.namespace, "missing", uid="", node="n1")


def test_bind_pod_with_annotations_writes_them_with_the_node(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster, annotations={"kept": "1", "replaced": "old"}))
    start = cluster.api.get_pod(cluster.namespace, pod.name).resource_version
    cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n1",
                         annotations={"replaced": "new", "added": "x"})
    with pytest.raises(ConflictError):  # a failed binding writes no annotation either
        cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n2", annotations={"added": "y"})
    cluster.api.patch_pod_annotations(cluster.namespace, pod.name, {"end": "1"})
    events = collect_events(
        cluster.api.watch_pods(resource_version=start, timeout_seconds=WATCH_SECONDS),
        keep=lambda e: isinstance(e.object, PodObject) and e.object.uid == pod.uid,
        done=lambda seen: isinstance(seen[-1].object, PodObject) and "end" in seen[-1].object.annotations,
    )
    assert _types(events) == [EventType.MODIFIED, EventType.MODIFIED]  # one write each: bind, then the marker
    bound = events[0].object
    assert isinstance(bound, PodObject)
    assert bound.node_name == "n1"
    assert {k: bound.annotations.get(k) for k in ("kept", "replaced", "added")} == {
        "kept": "1", "replaced": "new", "added": "x"}
    assert cluster.api.get_pod(cluster.namespace, pod.name).annotations.get("added") == "x"


def test_bind_terminating_pod_conflicts(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster, node_name="n1"))
    cluster.api.delete_pod(cluster.namespace, pod.name, grace_period_seconds=30)
    # a terminating pod cannot be (re)bound even with its own UID; checked before "already assigned"
    with pytest.raises(ConflictError):
        cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n2")


def test_bind_with_another_uid_conflicts(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    with pytest.raises(ConflictError):
        cluster.api.bind_pod(cluster.namespace, pod.name, uid="not-" + pod.uid, node="n1")
    assert cluster.api.get_pod(cluster.namespace, pod.name).node_name == ""


def test_delete_unbound_pod_is_immediate(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    cluster.api.delete_pod(cluster.namespace, pod.name, grace_period_seconds=30)
    with pytest.raises(NotFoundError):
        cluster.api.get_pod(cluster.namespace, pod.name)


def test_delete_bound_pod_is_graceful(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    cluster.api.bind_pod(cluster.namespace, pod.name, uid=pod.uid, node="n1")
    # kube-apiserver 1.37 sometimes decides a DELETE sent the instant pods/binding returns on the pod as it was before
    # the binding (deletionTimestamp now, grace 0: deleted at once): 12 in 600 tries on a loaded machine, 0 in 300
    # with a read of the pod in between. The contract is about a pod the server shows bound, so wait until it does.
    eventually(lambda: cluster.api.get_pod(cluster.namespace, pod.name).node_name == "n1", what="pod bound to n1")
    before = time.time()
    cluster.api.delete_pod(cluster.namespace, pod.name)
    terminating = cluster.api.get_pod(cluster.namespace, pod.name)
    assert terminating.deletion_timestamp is not None
    assert before + 30 - 2 <= terminating.deletion_timestamp <= time.time() + 30 + 1
    assert terminating in cluster.api.list_pods().items

    cluster.api.delete_pod(cluster.namespace, pod.name)  # pending: nothing changes
    cluster.api.delete_pod(cluster.namespace, pod.name, grace_period_seconds=60)  # only shorter counts
    assert cluster.api.get_pod(cluster.namespace, pod.name) == terminating
    cluster.api.delete_pod(cluster.namespace, pod.name, grace_period_seconds=10)
    shorter = cluster.api.get_pod(cluster.namespace, pod.name)
    assert shorter.deletion_timestamp == terminating.deletion_timestamp - 20

    cluster.api.delete_pod(cluster.namespace, pod.name, grace_period_seconds=0)
    with pytest.raises(NotFoundError):
        cluster.api.get_pod(cluster.namespace, pod.name)
    assert pod.name not in {p.name for p in cluster.api.list_pods().items if p.namespace == cluster.namespace}


def test_delete_finished_pod_is_immediate(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster, node_name="n1"))
    cluster.api.set_pod_phase(cluster.namespace, pod.name, PodPhase.SUCCEEDED)
    cluster.api.delete_pod(cluster.namespace, pod.name)
    with pytest.raises(NotFoundError):
        cluster.api.get_pod(cluster.namespace, pod.name)


def test_set_pod_phase(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster, node_name="n1"))
    running = cluster.api.set_pod_phase(cluster.namespace, pod.name, PodPhase.RUNNING)
    assert running.phase is PodPhase.RUNNING
    assert int(running.resource_version) > int(pod.resource_version)
    assert cluster.api.get_pod(cluster.namespace, pod.name).phase is PodPhase.RUNNING
    failed = cluster.api.set_pod_phase(cluster.namespace, pod.name, PodPhase.FAILED)
    assert failed.phase is PodPhase.FAILED


# ------------------------------------------------------------------------------------------------ leases, events
def test_leases(cluster: ClusterUnderTest) -> None:
    lease = LeaseRecord(
        namespace=cluster.namespace,
        name="ljrk-scheduler",
        holder="a",
        lease_duration_seconds=15,
        acquire_time=1_700_000_000.0,  # whole second: MicroTime still needs its six digits on the wire
        renew_time=1_700_000_000.25,
        transitions=1,
    )
    created = cluster.api.create_lease(lease)
    assert created.resource_version
    for field in ("namespace", "name", "holder", "lease_duration_seconds", "acquire_time", "renew_time", "transitions"):
        assert getattr(created, field) == getattr(lease, field), field
    assert cluster.api.get_lease(cluster.namespace, "ljrk-scheduler") == created
    with pytest.raises(ConflictError):
        cluster.api.create_lease(lease)

    renewed = LeaseRecord(
        namespace=cluster.namespace,
        name="ljrk-scheduler",
        holder="b",
        lease_duration_seconds=15,
        acquire_time=1_700_000_010.5,
        renew_time=1_700_000_010.5,
        transitions=2,
        resource_version=created.resource_version,
    )
    updated = cluster.api.update_lease(renewed)
    assert (updated.holder, updated.transitions, updated.renew_time) == ("b", 2, 1_700_000_010.5)
    assert int(updated.resource_version) > int(created.resource_version)
    with pytest.raises(ConflictError):
        cluster.api.update_lease(renewed)  # carries the old RV
    assert cluster.api.get_lease(cluster.namespace, "ljrk-scheduler") == updated
    with pytest.raises(ClusterError) as info:
        cluster.api.update_lease(LeaseRecord(namespace=cluster.namespace, name="ljrk-scheduler", holder="c"))
    assert info.value.status == 422  # an update must carry a resourceVersion
    assert cluster.api.update_lease(updated) == updated  # nothing changed: no write

    # PUT creates a missing Lease (AllowCreateOnUpdate), whatever resourceVersion it carries
    made = cluster.api.update_lease(
        LeaseRecord(namespace=cluster.namespace, name="other", holder="d", resource_version="5")
    )
    assert (made.holder, made.name) == ("d", "other")
    assert cluster.api.get_lease(cluster.namespace, "other") == made


def test_create_event(cluster: ClusterUnderTest) -> None:
    pod = cluster.api.create_pod(_pod(cluster))
    cluster.api.create_event(
        ClusterEvent(kind="Pod", name=pod.name, namespace=cluster.namespace, reason="Scheduled", message="to n1")
    )
    cluster.api.create_event(
        ClusterEvent(kind="Node", name="n1", reason="GpuUnhealthy", message="GPU 0 lost", type="Warning")
    )
    cluster.api.create_event(  # a repeat: the same Event, count 2 (one object, as Kubernetes' recorder keeps it)
        ClusterEvent(kind="Pod", name=pod.name, namespace=cluster.namespace, reason="Scheduled", message="to n1")
    )
    if cluster.memory is not None:
        assert [(e.reason, e.count) for e in cluster.memory.events] == [("Scheduled", 2), ("GpuUnhealthy", 1)]


def test_missing_objects_raise_not_found(cluster: ClusterUnderTest) -> None:
    ns, api, node = cluster.namespace, cluster.api, "missing-" + cluster.name("node")
    calls: dict[str, Callable[[], object]] = {
        "get_pod": lambda: api.get_pod(ns, "missing"),
        "delete_pod": lambda: api.delete_pod(ns, "missing"),
        "set_pod_phase": lambda: api.set_pod_phase(ns, "missing", PodPhase.RUNNING),
        "patch_pod_annotations": lambda: api.patch_pod_annotations(ns, "missing", {"a": "b"}),
        "get_node": lambda: api.get_node(node),
        "delete_node": lambda: api.delete_node(node),
        "patch_node_metadata": lambda: api.patch_node_metadata(node, labels={"a": "b"}),
        "get_lease": lambda: api.get_lease(ns, "missing"),
    }
    for label, call in calls.items():
        try:
            call()
        except NotFoundError:
            continue
        pytest.fail(f"{label} did not raise NotFoundError")


# ------------------------------------------------------------------------------------------------ memory only
def test_memory_finalize_deletions_removes_terminating_pods() -> None:
    memory = InMemoryCluster()
    pod = memory.create_pod(PodObject(uid="", namespace="ns", name="p", node_name="n1"))
    keep = memory.create_pod(PodObject(uid="", namespace="ns", name="q", node_name="n1"))
    start = memory.resource_version
    memory.delete_pod("ns", "p")
    assert memory.get_pod("ns", "p").deletion_timestamp is not None
    assert memory.finalize_deletions() == 1
    assert [p.name for p in memory.list_pods().items] == [keep.name]
    events = list(memory.watch_pods(resource_version=start, timeout_seconds=0))
    assert [(e.type, e.object.name if e.object else "") for e in events] == [
        (EventType.MODIFIED, pod.name),
        (EventType.DELETED, pod.name),
    ]


def test_memory_history_window_and_lagging_watcher() -> None:
    memory = InMemoryCluster(history_limit=3)
    memory.create_pod(PodObject(uid="", namespace="ns", name="seed"))
    start = memory.resource_version
    watcher = memory.watch_pods(resource_version=start, timeout_seconds=0.5)
    memory.create_pod(PodObject(uid="", namespace="ns", name="p0"))
    first = next(watcher)
    assert (first.type, first.object.name if first.object else "") == (EventType.ADDED, "p0")
    for i in range(1, 5):
        memory.create_pod(PodObject(uid="", namespace="ns", name=f"p{i}"))
    assert list(watcher) == []  # fell behind the window: the stream ends, as the server closes slow watchers
    with pytest.raises(GoneError):
        list(memory.watch_pods(resource_version=start, timeout_seconds=0))
    recent = list(memory.watch_pods(resource_version=str(int(memory.resource_version) - 3), timeout_seconds=0))
    assert [e.object.name for e in recent if e.object] == ["p2", "p3", "p4"]


def test_memory_watch_from_zero_lists_current_state_first() -> None:
    memory = InMemoryCluster()
    memory.create_pod(PodObject(uid="", namespace="ns", name="a"))
    memory.create_pod(PodObject(uid="", namespace="ns", name="b", node_name="n1"))
    events = list(memory.watch_pods(resource_version="0", timeout_seconds=0, field_selector="spec.nodeName="))
    assert [(e.type, e.object.name if e.object else "") for e in events] == [(EventType.ADDED, "a")]


# ------------------------------------------------------------------------------------------------ kubernetes adapter
@pytest.mark.k8s
def test_kubernetes_from_kubeconfig(contract_k8s_plane: Any) -> None:
    from adapters.kubernetes import KubernetesCluster, from_kubeconfig

    api_client = from_kubeconfig(str(contract_k8s_plane.kubeconfig))
    try:
        assert int(KubernetesCluster(api_client).list_nodes().resource_version) > 0
    finally:
        api_client.close()


def test_kubernetes_from_kubeconfig_keeps_a_pool_for_concurrent_binds(tmp_path: Path) -> None:
    from adapters.kubernetes import CONNECTION_POOL_MAXSIZE, from_kubeconfig

    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps(kubeconfig))
    api_client = from_kubeconfig(str(path))
    try:
        assert api_client.configuration.connection_pool_maxsize >= CONNECTION_POOL_MAXSIZE
        assert api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] >= CONNECTION_POOL_MAXSIZE
    finally:
        api_client.close()


def test_kubernetes_error_translation_without_server() -> None:
    from kubernetes.client.exceptions import ApiException

    from adapters.kubernetes.translate import MAX_ERROR_DETAIL, cluster_error

    body = json.dumps({"kind": "Status", "code": 409, "message": "x" * 5000})
    conflict = cluster_error(_api_exception(409, "Conflict", body), "patch pod a/b")
    assert type(conflict) is ConflictError
    assert conflict.status == 409
    assert len(str(conflict)) < MAX_ERROR_DETAIL + 50
    assert type(cluster_error(ApiException(status=404, reason="Not Found"), "get")) is NotFoundError
    gone = cluster_error(ApiException(status=410, reason="Expired: too old resource version: 1 (5)"), "watch")
    assert type(gone) is GoneError
    assert "too old" in str(gone)
    other = cluster_error(_api_exception(422, "Unprocessable Entity", "not json"), "create")
    assert type(other) is ClusterError
    assert other.status == 422


def test_kubernetes_lease_times_always_carry_microseconds() -> None:
    from kubernetes import client

    from adapters.kubernetes.leases import lease_from_v1, lease_to_v1

    lease = LeaseRecord(namespace="ns", name="l", holder="a", acquire_time=1_700_000_000.0, renew_time=1.5)
    with client.ApiClient() as api_client:
        wire = api_client.sanitize_for_serialization(lease_to_v1(lease))
        # metav1.MicroTime is parsed with the layout 2006-01-02T15:04:05.000000Z07:00: six digits, always
        assert wire["spec"]["acquireTime"] == "2023-11-14T22:13:20.000000+00:00"
        assert wire["spec"]["renewTime"] == "1970-01-01T00:00:01.500000+00:00"
        assert lease_from_v1(_deserialize(api_client, json.dumps(wire), "V1Lease")) == lease


def _api_exception(status: int, reason: str, body: str) -> Any:
    """An ``ApiException`` carrying a response ``body`` as the client's REST layer makes one: 37 takes ``body=``,
    28-35 read it from ``http_resp`` only, so it is set as the attribute both keep it in."""
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason=reason)
    exc.body = body
    return exc


def _deserialize(api_client: Any, text: str, model: str) -> Any:
    """``ApiClient.deserialize`` of the installed client: 37 takes the text and its content type, 28-35 a
    response object with ``.data``."""
    if "content_type" in inspect.signature(api_client.deserialize).parameters:
        return api_client.deserialize(text, model, "application/json")
    return api_client.deserialize(types.SimpleNamespace(data=text), model)


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _unreachable(port: int, timeout: float) -> Any:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    return KubernetesCluster(client.ApiClient(configuration), request_timeout=timeout)


def _transport_calls(api: Any) -> dict[str, Callable[[], object]]:
    return {
        "list_nodes": api.list_nodes,
        "get_pod": lambda: api.get_pod("default", "p"),
        "patch_pod_annotations": lambda: api.patch_pod_annotations("default", "p", {"k": "v"}, resource_version="1"),
        "bind_pod": lambda: api.bind_pod("default", "p", uid="u", node="n"),
        "get_lease": lambda: api.get_lease("kube-system", "l"),
        "create_event": lambda: api.create_event(ClusterEvent("Pod", "p", "Scheduled", "m")),
        "watch_pods": lambda: next(iter(api.watch_pods(resource_version="1", timeout_seconds=1))),
        "list_jobs": lambda: api.list_jobs("default"),
        "delete_job": lambda: api.delete_job("default", "j"),
    }


@pytest.mark.parametrize("fault", ["refused", "timeout"])
def test_kubernetes_transport_failures_surface_as_unavailable(fault: str) -> None:
    from urllib3.exceptions import HTTPError

    with contextlib.ExitStack() as stack:
        port = _closed_port() if fault == "refused" else stack.enter_context(_silent_server())
        api = _unreachable(port, 0.2)
        stack.callback(api._api_client.close)
        calls = _transport_calls(api)
        if fault == "timeout":  # the watch's socket timeout is its server timeout + slack: too slow for a test
            del calls["watch_pods"]
        for what, call in calls.items():
            with pytest.raises(UnavailableError) as caught:
                call()
            assert caught.value.status == 0, what
            assert isinstance(caught.value, ClusterError)
            assert isinstance(caught.value.__cause__, HTTPError | OSError), (what, caught.value.__cause__)
            assert "unavailable" in str(caught.value)


def test_kubernetes_with_request_timeout_is_a_view_with_its_own_timeout() -> None:
    with _silent_server() as port:
        api = _unreachable(port, 30.0)
        try:
            quick = api.with_request_timeout(0.2)
            assert (api.request_timeout, quick.request_timeout) == (30.0, 0.2)
            started = time.monotonic()
            with pytest.raises(UnavailableError):
                quick.bind_pod("default", "p", uid="u", node="n")  # POST: urllib3 does not retry reads
            assert time.monotonic() - started < 5
            with pytest.raises(ValueError, match="> 0"):
                api.with_request_timeout(0)
        finally:
            api._api_client.close()
