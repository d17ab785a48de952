"""Contract of the cluster port's pod deletion with a UID precondition (``ports.cluster.PodsApi.delete_pod``),
against InMemoryCluster and KubernetesCluster (same ``cluster`` fixture as ``test_cluster_contract.py``; the
``kubernetes`` cases need the control plane, marker ``k8s``).

Behaviours covered:
- ``delete_pod(…, uid=…)`` deletes the pod of that UID (at once when unbound, gracefully when bound);
- a pod recreated under the name (another UID) is refused with ConflictError and left as it was;
- the Kubernetes adapter sends the UID as ``DeleteOptions.preconditions.uid`` with the grace (no server needed).
"""

from __future__ import annotations

from typing import Any

import pytest

from domain.kube.objects import ContainerSpec, PodObject
from ports.cluster import ConflictError, NotFoundError
from support.polling import eventually

from .conftest import ClusterUnderTest


def _pod(cut: ClusterUnderTest, name: str) -> PodObject:
    return cut.api.create_pod(PodObject("", cut.namespace, name, (ContainerSpec("main"),),
                                        scheduler_name="ljrk-contract"))


def test_delete_with_the_pods_uid_deletes_it(cluster: ClusterUnderTest) -> None:
    pod = _pod(cluster, cluster.name())
    cluster.api.delete_pod(cluster.namespace, pod.name, uid=pod.uid)
    with pytest.raises(NotFoundError):
        cluster.api.get_pod(cluster.namespace, pod.name)
    bound = _pod(cluster, cluster.name())
    cluster.api.bind_pod(cluster.namespace, bound.name, uid=bound.uid, node="n1")
    # as in test_delete_bound_pod_is_graceful: a DELETE sent the instant the binding returns may meet the unbound pod
    eventually(lambda: cluster.api.get_pod(cluster.namespace, bound.name).node_name == "n1", what="pod bound to n1")
    cluster.api.delete_pod(cluster.namespace, bound.name, uid=bound.uid)
    assert cluster.api.get_pod(cluster.namespace, bound.name).deletion_timestamp is not None


def test_delete_with_another_uid_leaves_a_pod_recreated_under_the_name(cluster: ClusterUnderTest) -> None:
    name = cluster.name()
    old = _pod(cluster, name)
    cluster.api.delete_pod(cluster.namespace, name, grace_period_seconds=0)
    new = _pod(cluster, name)
    assert new.uid != old.uid
    with pytest.raises(ConflictError):
        cluster.api.delete_pod(cluster.namespace, name, grace_period_seconds=0, uid=old.uid)
    kept = cluster.api.get_pod(cluster.namespace, name)
    assert (kept.uid, kept.deletion_timestamp) == (new.uid, None)


def test_kubernetes_delete_sends_the_uid_as_a_precondition() -> None:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster

    calls: list[dict[str, Any]] = []

    class Core:
        def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> None:
            calls.append({"name": name, "namespace": namespace, **kwargs})

    api = KubernetesCluster(client.ApiClient(client.Configuration()), request_timeout=1.0)
    try:
        api._core = Core()  # type: ignore[assignment]
        api.delete_pod("ns", "victim", grace_period_seconds=5, uid="u-1")
        api.delete_pod("ns", "plain")
    finally:
        api._api_client.close()
    sent, plain = calls
    body = sent["body"]
    assert isinstance(body, client.V1DeleteOptions)
    assert body.preconditions.uid == "u-1"
    assert (body.grace_period_seconds, sent["grace_period_seconds"]) == (5, 5)
    assert (sent["name"], sent["namespace"]) == ("victim", "ns")
    assert plain["body"] is None
