"""The Kubernetes adapter's raw-JSON path (``adapters.kubernetes.rawjson`` + ``.corejson``) against the
client's model path (``translate.pod_from_v1``/``node_from_v1``).

Covers: for pods (init containers, tolerations, required node affinity, deletionTimestamp, terminated and running
container statuses, annotations, labels) and nodes (taints, unschedulable, allocatable) the raw translation equals
the model translation of the same JSON, without a server; on a real kube-apiserver, ``list_pods``/``list_nodes``
(raw) equal the model translation of the client's own LIST; the watch line reader yields events whose lines are
split across chunks, a BOOKMARK's resourceVersion, raises GoneError for an ``ERROR`` event with code 410,
ClusterError with the status for another, and ClusterError for a malformed line; a stream read to its end goes
back to the pool unclosed, one left early or failed is closed.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import types
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from adapters.kubernetes.corejson import node_from_json, pod_from_json
from domain.kube.objects import EventType, NodeObject, PodClaim, PodObject, Taint, TaintEffect
from ports.cluster import ClusterError, GoneError

RICH_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                 "annotations": {"a": "b"}, "labels": {"app": "x"}, "deletionTimestamp": "2024-01-01T00:00:10Z",
                 "creationTimestamp": "2024-01-01T00:00:00Z", "managedFields": [{"manager": "kubectl"}]},
    "spec": {
        "schedulerName": "ljrk", "nodeName": "n1", "nodeSelector": {"pool": "gpu"},
        "initContainers": [{"name": "init", "image": "i", "resources": {"limits": {"cpu": "1"}}}],
        "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                                    "limits": {"memory": "1Gi"}}},
                       {"name": "side", "image": "y"}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"},
                        {"key": "v", "value": "1", "effect": "NoExecute", "tolerationSeconds": 30}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
             "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]},
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "c1"}, {"name": "share",
                                                                          "resourceClaimTemplateName": "t"},
                           {"name": "later", "resourceClaimTemplateName": "t"}],
    },
    "status": {"phase": "Failed", "resourceClaimStatuses": [{"name": "share", "resourceClaimName": "p-share-x"}],
               "containerStatuses": [
        {"name": "main", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}}},
        {"name": "side", "ready": True, "restartCount": 1, "image": "y", "imageID": "",
         "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}},
    ]},
}
PLAIN_POD: dict[str, Any] = {"metadata": {"name": "q", "namespace": "default", "uid": "u-2", "resourceVersion": "7"},
                             "spec": {"containers": [{"name": "c", "image": "z"}]}, "status": {"phase": "Pending"}}
NODES: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "n1", "uid": "nu-1", "resourceVersion": "9", "labels": {"zone": "a"},
                  "annotations": {"x": "y"}},
     "spec": {"unschedulable": True, "taints": [{"key": "t", "effect": "NoSchedule"},
                                                {"key": "u", "value": "v", "effect": "PreferNoSchedule",
                                                 "timeAdded": "2024-01-01T00:00:00Z"}]},
     "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}, "capacity": {"cpu": "64"}}},
    {"metadata": {"name": "n2", "uid": "nu-2", "resourceVersion": "10"}, "spec": {}, "status": {}},
)


def _models(raw: dict[str, Any], model: str) -> Any:
    """``raw`` deserialised into the installed client's ``model`` (37 takes text and content type, 28-35 an
    object with ``.data``)."""
    from kubernetes import client

    with client.ApiClient() as api_client:
        text = json.dumps(raw)
        if "content_type" in inspect.signature(api_client.deserialize).parameters:
            return api_client.deserialize(text, model, "application/json")
        return api_client.deserialize(types.SimpleNamespace(data=text), model)


@pytest.mark.parametrize("raw", [RICH_POD, PLAIN_POD], ids=["rich", "plain"])
def test_raw_pod_json_translates_as_the_client_models_do(raw: dict[str, Any]) -> None:
    from kubernetes import client

    from adapters.kubernetes.translate import pod_from_v1

    model = pod_from_v1(_models(raw, "V1Pod"))
    expected = pod_from_json(raw)
    if "resource_claim_name" not in client.V1PodResourceClaim.attribute_map:  # clients before 31 drop the flat fields
        expected = attrs.evolve(expected, resource_claims=tuple(
            attrs.evolve(c, claim_name="", template_name="") for c in expected.resource_claims))
    assert expected == model


def test_rich_pod_translation_reads_every_field() -> None:
    pod = pod_from_json(RICH_POD)
    assert [(c.name, c.init) for c in pod.containers] == [("init", True), ("main", False), ("side", False)]
    assert [(t.container, t.exit_code, t.reason, t.message) for t in pod.terminations] == [("main", 3, "Error",
                                                                                             "boom")]
    assert pod.deletion_timestamp == 1704067210.0
    assert len(pod.required_node_affinity) == 2
    assert pod.node_name == "n1"
    assert pod.resource_claims == (PodClaim("gpu", claim_name="c1"),
                                   PodClaim("share", template_name="t", generated="p-share-x"),
                                   PodClaim("later", template_name="t"))


@pytest.mark.parametrize("raw", NODES, ids=["tainted", "bare"])
def test_raw_node_json_translates_as_the_client_models_do(raw: dict[str, Any]) -> None:
    from adapters.kubernetes.translate import node_from_v1

    assert node_from_json(raw) == node_from_v1(_models(raw, "V1Node"))


def test_tainted_node_translation_reads_every_field() -> None:
    node = node_from_json(NODES[0])
    assert node.taints == (Taint("t", TaintEffect.NO_SCHEDULE), Taint("u", TaintEffect.PREFER_NO_SCHEDULE, "v"))
    assert node.unschedulable
    assert node.allocatable == {"cpu": "64", "memory": "256Gi", "pods": "110"}


class _Streamed:
    """A ``_preload_content=False`` response whose body arrives in the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.closed, self.released = chunks, False, False

    def stream(self, amt: object = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def _watch(chunks: list[bytes]) -> tuple[list[Any], _Streamed]:
    from adapters.kubernetes.rawjson import watch_json

    response = _Streamed(chunks)
    seen: list[Any] = []

    def call(**kwargs: Any) -> _Streamed:
        assert kwargs["watch"] is True
        assert kwargs["_preload_content"] is False
        return response

    ended = False
    try:
        for event in watch_json(call, pod_from_json, "5", 1, "watch pods"):
            seen.append(event)
        ended = True
    finally:
        assert response.closed is not ended  # a stream read to its end keeps its connection for reuse
        assert response.released
    return seen, response


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_watch_reader_joins_lines_split_across_chunks() -> None:
    body = _line("ADDED", RICH_POD) + b"\n" + _line("BOOKMARK", {"metadata": {"resourceVersion": "50"}}) + _line(
        "DELETED", PLAIN_POD)
    chunks = [body[i:i + 7] for i in range(0, len(body), 7)]
    events, _ = _watch(chunks)
    assert [e.type for e in events] == [EventType.ADDED, EventType.BOOKMARK, EventType.DELETED]
    assert isinstance(events[0].object, PodObject)
    assert events[0].object == pod_from_json(RICH_POD)
    assert events[0].resource_version == "42"
    assert (events[1].object, events[1].resource_version) == (None, "50")
    assert events[2].object.name == "q"


def test_watch_reader_raises_gone_for_an_error_event_with_code_410() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (5)"}
    with pytest.raises(GoneError, match="too old"):
        _watch([_line("ADDED", PLAIN_POD), _line("ERROR", status)])


def test_watch_reader_raises_cluster_error_with_the_status_of_other_errors() -> None:
    with pytest.raises(ClusterError) as caught:
        _watch([_line("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"})])
    assert caught.value.status == 500


def test_watch_reader_raises_cluster_error_for_a_malformed_line() -> None:
    with pytest.raises(ClusterError, match="malformed JSON"):
        _watch([b'{"type": "ADDED", "obj\n'])


@pytest.mark.parametrize("line", [
    _line("ADDED", {**PLAIN_POD, "spec": {"tolerations": [{"key": "k", "effect": "Sometimes"}]}}),  # bad field
    _line("ERROR", {"kind": "Status", "code": "gone", "message": "x"}),  # a code that is not a number
    _line("RENAMED", PLAIN_POD),  # an unknown event type
    b'[1, 2]\n',  # not an event object
], ids=["bad-field", "bad-code", "bad-type", "not-an-object"])
def test_watch_reader_raises_cluster_error_for_an_event_of_the_wrong_shape(line: bytes) -> None:
    with pytest.raises(ClusterError, match="watch pods: the API server sent an object that cannot be read"):
        _watch([_line("ADDED", PLAIN_POD), line])


class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def read(self) -> bytes:
        return self.body

    def release_conn(self) -> None:
        pass


@pytest.mark.parametrize("body", [
    json.dumps({"items": [{**PLAIN_POD, "metadata": {"name": "p", "labels": {"a": [1]}}}]}).encode(),
    b"[1]",
], ids=["bad-item", "not-a-list-object"])
def test_list_reader_raises_cluster_error_for_a_body_of_the_wrong_shape(body: bytes) -> None:
    from adapters.kubernetes.rawjson import list_json

    with pytest.raises(ClusterError, match="list pods: the API server sent an object that cannot be read"):
        list_json(lambda **kwargs: _Body(body), pod_from_json, "list pods")


@pytest.mark.k8s
def test_raw_listings_equal_the_model_translation_on_a_real_server(contract_k8s_plane: Any) -> None:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster
    from adapters.kubernetes.translate import node_from_v1, pod_from_v1
    from domain.kube.objects import ContainerSpec, Toleration

    api_client = contract_k8s_plane.api_client()
    try:
        cluster, core = KubernetesCluster(api_client), client.CoreV1Api(api_client)
        cluster.create_node(NodeObject("raw-json-node", labels={"zone": "a"}, annotations={"k": "v"},
                                       allocatable={"cpu": "8", "memory": "1Gi", "pods": "10"},
                                       taints=(Taint("t", TaintEffect.NO_SCHEDULE, "x"),), unschedulable=True))
        cluster.create_pod(PodObject("", "default", "raw-json-pod", labels={"app": "x"}, node_selector={"a": "b"},
                                     tolerations=(Toleration("t", "Equal", "x", TaintEffect.NO_SCHEDULE),),
                                     containers=(ContainerSpec("main", requests={"cpu": "100m"},
                                                               limits={"cpu": "100m"}),)))
        pods = {p.uid: p for p in cluster.list_pods().items}
        nodes = {n.name: n for n in cluster.list_nodes().items}
        model_pods = {p.metadata.uid: pod_from_v1(p) for p in core.list_pod_for_all_namespaces().items}
        model_nodes = {n.metadata.name: node_from_v1(n) for n in core.list_node().items}
        for uid in set(pods) & set(model_pods):  # objects may change between the two LISTs: compare by RV
            if pods[uid].resource_version == model_pods[uid].resource_version:
                assert pods[uid] == model_pods[uid]
        for name in set(nodes) & set(model_nodes):
            if nodes[name].resource_version == model_nodes[name].resource_version:
                assert nodes[name] == model_nodes[name]
        ours = [p for p in pods.values() if p.name == "raw-json-pod"]
        assert len(ours) == 1
        assert ours[0] == model_pods[ours[0].uid]
        assert nodes["raw-json-node"] == model_nodes["raw-json-node"]
        assert nodes["raw-json-node"].unschedulable
    finally:
        for delete in (lambda: cluster.delete_pod("default", "raw-json-pod", grace_period_seconds=0),
                       lambda: cluster.delete_node("raw-json-node")):
            with contextlib.suppress(ClusterError):
                delete()
        api_client.close()
