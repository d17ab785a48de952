"""Contract of the cluster port's pod label selectors and terminated container states (``ports.cluster``), against
InMemoryCluster and KubernetesCluster (same ``cluster`` fixture as ``test_cluster_contract.py``; the
``kubernetes`` cases need the control plane, marker ``k8s``).

Behaviours covered:
- ``list_pods(label_selector=…)``: ``k=v``, ``k!=v``, ``!k``, ANDed with a field selector; a malformed selector is a
  400 ClusterError; ``namespace=`` lists that namespace only;
- ``set_pod_phase(…, terminations=…)`` writes ``status.containerStatuses[].state.terminated`` (exit code, reason,
  the container's termination message, multi-line and up to kubelet's 4096 bytes) and every read returns them in
  ``PodObject.terminations``; a phase written without terminations keeps them; a pod that never terminated has none;
- ``nominate_pod`` writes ``status.nominatedNodeName`` (read back as ``PodObject.nominated_node_name``), "" clears
  it, an absent pod is a 404;
- ``set_pod_condition`` writes one entry of ``status.conditions`` (read back as ``PodObject.conditions``, by every
  read): type, status, reason, message and a transition time of the write; a condition of another type stays; a
  second write of the same type leaves one entry of that type (the new reason and message; the time kept while the
  status is unchanged), a new status is written too; a repeat writes nothing; ``uid`` of another pod is a 409, an absent
  pod a 404.
"""

from __future__ import annotations

import time

import pytest

from domain.kube.objects import MAX_TERMINATION_MESSAGE, ContainerSpec, ContainerTermination, PodObject, PodPhase
from domain.kube.podconditions import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER, PodCondition, preemption_condition
from ports.cluster import ClusterError, ConflictError, NotFoundError

from .conftest import ClusterUnderTest


def _pod(cut: ClusterUnderTest, labels: dict[str, str]) -> PodObject:
    return cut.api.create_pod(PodObject("", cut.namespace, cut.name(), (ContainerSpec("agent"),), node_name="n-none",
                                        scheduler_name="ljrk-contract", labels=labels))


def _names(pods: tuple[PodObject, ...], cut: ClusterUnderTest) -> set[str]:
    return {p.name for p in pods if p.namespace == cut.namespace}


def test_label_selectors_on_pods(cluster: ClusterUnderTest) -> None:
    first = _pod(cluster, {"job-name": "j1", "tier": "a"})
    second = _pod(cluster, {"job-name": "j2"})
    plain = _pod(cluster, {})
    api = cluster.api
    assert _names(api.list_pods(label_selector="job-name=j1").items, cluster) == {first.name}
    assert _names(api.list_pods(label_selector="job-name!=j1").items, cluster) == {second.name, plain.name}
    assert _names(api.list_pods(label_selector="!job-name").items, cluster) == {plain.name}
    both = api.list_pods(field_selector=f"metadata.namespace={cluster.namespace}", label_selector="job-name")
    assert {p.name for p in both.items} == {first.name, second.name}
    assert api.list_pods(label_selector="job-name=j1").resource_version
    here = api.list_pods(namespace=cluster.namespace, label_selector="job-name")
    assert {p.name for p in here.items} == {first.name, second.name}
    assert api.list_pods(namespace=f"{cluster.namespace}-other", label_selector="job-name").items == ()
    with pytest.raises(ClusterError) as raised:
        api.list_pods(label_selector="job-name=(")
    assert raised.value.status == 400


def test_terminated_container_states_round_trip(cluster: ClusterUnderTest) -> None:
    pod = _pod(cluster, {"job-name": "j1"})
    assert pod.terminations == ()
    message = "disable via /run/x.sock: NodeRuntimeError: INTERNAL: disk full\nsecond line"
    long = "x" * MAX_TERMINATION_MESSAGE
    api = cluster.api
    api.set_pod_phase(cluster.namespace, pod.name, PodPhase.RUNNING)
    assert api.get_pod(cluster.namespace, pod.name).terminations == ()
    failed = api.set_pod_phase(cluster.namespace, pod.name, PodPhase.FAILED,
                               terminations=(ContainerTermination("agent", 1, "Error", message),))
    expected = (ContainerTermination("agent", 1, "Error", message),)
    assert failed.phase is PodPhase.FAILED
    assert failed.terminations == expected
    assert api.get_pod(cluster.namespace, pod.name).terminations == expected
    [listed] = api.list_pods(label_selector="job-name=j1", field_selector=f"metadata.namespace={cluster.namespace}"
                             ).items
    assert listed.terminations == expected
    api.set_pod_phase(cluster.namespace, pod.name, PodPhase.FAILED)  # no terminations given: kept
    assert api.get_pod(cluster.namespace, pod.name).terminations == expected
    other = _pod(cluster, {})
    api.set_pod_phase(cluster.namespace, other.name, PodPhase.FAILED,
                      terminations=(ContainerTermination("agent", 137, "OOMKilled", long),))
    assert api.get_pod(cluster.namespace, other.name).terminations == (
        ContainerTermination("agent", 137, "OOMKilled", long),)


def test_nomination_writes_and_clears_status_nominated_node_name(cluster: ClusterUnderTest) -> None:
    api = cluster.api
    pod = api.create_pod(PodObject("", cluster.namespace, cluster.name(), (ContainerSpec("agent"),),
                                   scheduler_name="ljrk-contract"))
    assert pod.nominated_node_name == ""
    assert api.nominate_pod(cluster.namespace, pod.name, "n-held").nominated_node_name == "n-held"
    assert api.get_pod(cluster.namespace, pod.name).nominated_node_name == "n-held"
    assert api.nominate_pod(cluster.namespace, pod.name, "").nominated_node_name == ""
    assert api.get_pod(cluster.namespace, pod.name).nominated_node_name == ""
    with pytest.raises(ClusterError) as raised:
        api.nominate_pod(cluster.namespace, f"{pod.name}-absent", "n-held")
    assert raised.value.status == 404


def _types(pod: PodObject) -> list[str]:
    return [c.type for c in pod.conditions]


def test_set_pod_condition_writes_one_entry_per_type_and_keeps_the_others(cluster: ClusterUnderTest) -> None:
    api, ns = cluster.api, cluster.namespace
    pod = _pod(cluster, {"job-name": "j1"})
    assert pod.conditions == ()
    before = time.time()
    scheduled = api.set_pod_condition(ns, pod.name, PodCondition("PodScheduled", "True", "", ""), uid=pod.uid)
    assert _types(scheduled) == ["PodScheduled"]
    victim = preemption_condition("ljrk-contract")
    marked = api.set_pod_condition(ns, pod.name, victim)
    [kept, target] = marked.conditions
    assert kept == scheduled.conditions[0]
    assert (target.type, target.status, target.reason, target.message) == (
        DISRUPTION_TARGET, "True", PREEMPTION_BY_SCHEDULER, "ljrk-contract: preempting to accommodate a higher "
                                                             "priority pod")
    assert target.last_transition_time is not None
    assert int(before) - 1 <= target.last_transition_time <= time.time() + 1
    assert api.get_pod(ns, pod.name).conditions == marked.conditions
    [listed] = api.list_pods(namespace=ns, label_selector="job-name=j1").items
    assert listed.conditions == marked.conditions
    assert api.set_pod_condition(ns, pod.name, victim, uid=pod.uid) == marked  # a repeat writes nothing
    reworded = api.set_pod_condition(ns, pod.name, PodCondition(DISRUPTION_TARGET, "True", "Other", "again"))
    assert reworded.conditions == (kept, PodCondition(DISRUPTION_TARGET, "True", "Other", "again",
                                                      target.last_transition_time))
    cleared = api.set_pod_condition(ns, pod.name, PodCondition(DISRUPTION_TARGET, "False", "Other", "again"))
    assert _types(cleared) == ["PodScheduled", DISRUPTION_TARGET]
    assert cleared.conditions[1].status == "False"
    assert cleared.conditions[1].last_transition_time is not None


def test_set_pod_condition_refuses_another_uid_and_an_absent_pod(cluster: ClusterUnderTest) -> None:
    api, ns = cluster.api, cluster.namespace
    pod = _pod(cluster, {})
    with pytest.raises(ConflictError):
        api.set_pod_condition(ns, pod.name, preemption_condition("ljrk-contract"), uid=f"{pod.uid}-other")
    assert api.get_pod(ns, pod.name).conditions == ()
    with pytest.raises(NotFoundError):
        api.set_pod_condition(ns, f"{pod.name}-absent", preemption_condition("ljrk-contract"))
