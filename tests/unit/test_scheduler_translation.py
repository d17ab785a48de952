"""Pure pieces of the scheduler component: raw Pod JSON → PodObject, candidate restriction, per-node rejection
reasons, FGD typical-pod blending.

Covers: every PodObject field read from camelCase JSON (init containers first, tolerations, required node
affinity, deletionTimestamp, defaults); wrong types name the field; CandidateNodes restricts a cycle and ignores
unknown names; the ledger's select maps known names to a row mask, leaving unknown and removed ones out;
rejection_reasons names the first failing filter per node; pod_class keys shares, whole GPUs, memory-only shares
and CPU-only pods; PodClasses (memoised per shared request template) answers what pod_class
answers; blend_typical adds the reference workload until enough pods are observed; the resources a claim serves
(``status.extendedResourceClaimStatus``) read the same from JSON and the client's model and are left out of the
pod's request.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from kubernetes import client

from adapters.kubernetes.corejson import CoreJsonError, pod_from_json
from adapters.kubernetes.translate import pod_from_v1
from domain.kube.objects import PodPhase, TaintEffect
from domain.kube.requests import PodRequests
from domain.kube.translate import pod_request
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.candidates import CandidateNodes, rejection_reasons
from domain.scheduling.framework.cycle import CycleState
from domain.scheduling.nodefit import PodConstraints
from domain.scheduling.policies.fgd.fragmentation import PodClass
from domain.scheduling.policies.fgd.typical import PodClasses, blend_typical, pod_class
from domain.units import GiB
from support.kube_builders import KEYS, PROTOCOL, RES, make_node, make_pod, make_scheduler, make_sync

RAW = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                 "annotations": {"a": "b"}, "labels": {"app": "x"}, "deletionTimestamp": "2024-01-01T00:00:10Z",
                 "managedFields": [{"manager": "kubectl"}]},
    "spec": {
        "schedulerName": "default-scheduler", "nodeSelector": {"pool": "gpu"},
        "initContainers": [{"name": "init", "resources": {"limits": {RES.core: "20"}}}],
        "containers": [{"name": "main", "image": "x", "resources": {"requests": {RES.core: "60", "cpu": "500m"},
                                                                    "limits": {RES.core: "60", RES.memory: 8}}}],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
             "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]}}},
        "unknownFutureField": {"x": 1},
    },
    "status": {"phase": "Pending", "conditions": []},
}


def test_raw_pod_json_translates_every_field() -> None:
    pod = pod_from_json(RAW)
    assert (pod.uid, pod.namespace, pod.name, pod.resource_version) == ("u-1", "ns", "p", "42")
    assert [(c.name, c.init) for c in pod.containers] == [("init", True), ("main", False)]
    assert pod.containers[1].limits == {RES.core: "60", RES.memory: "8"}
    assert pod.containers[1].requests["cpu"] == "500m"
    assert pod.deletion_timestamp == 1704067210.0
    assert pod.phase is PodPhase.PENDING
    assert pod.node_selector == {"pool": "gpu"}
    assert pod.tolerations[0].effect is TaintEffect.NO_SCHEDULE
    assert pod.tolerations[1].key == ""
    (term,) = pod.required_node_affinity
    assert term.match_expressions[0].values == ("a", "b")
    assert term.match_fields[0].operator == "NotIn"
    request = pod_request(pod, PROTOCOL)
    assert [c.core_milli for c in request.containers] == [200, 600]


def test_raw_pod_json_defaults() -> None:
    pod = pod_from_json({"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [{"name": "c"}]}})
    assert (pod.namespace, pod.scheduler_name, pod.phase, pod.deletion_timestamp) == (
        "default", "default-scheduler", PodPhase.PENDING, None)


@pytest.mark.parametrize(("raw", "field"), [
    ({"spec": {"containers": {"name": "c"}}}, "spec.containers"),
    ({"spec": {"containers": [{"name": 3}]}}, "spec.containers[0].name"),
    ({"metadata": {"annotations": {"a": ["x"]}}}, "metadata.annotations.a"),
    ({"metadata": {"deletionTimestamp": "yesterday"}}, "metadata.deletionTimestamp"),
    ({"spec": {"tolerations": [{"effect": "Sometimes"}]}}, "spec.tolerations[0].effect"),
    ("not a pod", "Pod"),
])
def test_raw_pod_json_errors_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(CoreJsonError, match=field.replace("[", r"\[").replace("]", r"\]")):
        pod_from_json(raw)


def test_candidate_nodes_restrict_the_cycle() -> None:
    sync = make_sync(make_node("n1"), make_node("n2"), make_node("n3"))
    plugin = CandidateNodes()
    ledger = sync.ledger
    offered = CycleState(candidates=frozenset({"n2", "ghost"}))
    mask = plugin.filter(single_container_pod("u"), ledger, offered, ledger.active.copy())
    assert [ledger.name(int(s)) for s in np.flatnonzero(mask)] == ["n2"]
    free = plugin.filter(single_container_pod("other"), ledger, CycleState(), ledger.active.copy())
    assert free.sum() == 3


def test_ledger_select_maps_known_names_to_their_rows_in_one_pass() -> None:
    sync = make_sync(make_node("n1"), make_node("n2"), make_node("n3"))
    ledger = sync.ledger
    known, mask = ledger.select(["n3", "ghost", "n1", "n3"])
    assert known == ["n3", "n1", "n3"]
    assert mask.shape == (ledger.rows,)
    assert mask.dtype == np.bool_
    assert sorted(ledger.name(int(s)) for s in np.flatnonzero(mask)) == ["n1", "n3"]
    ledger.remove_node("n1")
    assert ledger.select(["n1", "n2"])[0] == ["n2"]
    assert ledger.select([])[0] == []
    assert not ledger.select([])[1].any()


def test_rejection_reasons_name_the_first_failing_filter_per_node() -> None:
    sync = make_sync(make_node("n1", labels={"pool": "a"}), make_node("n2", labels={"pool": "b"}),
                     make_node("n3", labels={"pool": "b"}, annotation=None))
    scheduler = make_scheduler(sync)
    pod = make_pod("u", core="50", mem="8", node_selector={"pool": "b"})
    sync.constraints[pod.uid] = PodConstraints.of(pod)
    reasons = rejection_reasons(scheduler, pod_request(pod, PROTOCOL), ["n1", "n2", "n3", "ghost"],
                                fallback="later")
    assert reasons["n1"] == "node labels do not match the pod's nodeSelector"
    assert "no GPU inventory annotation" in reasons["n3"]
    assert reasons["n2"] == "later"
    assert "ghost" not in reasons


def test_pod_class_keys() -> None:
    def request(**kwargs: object) -> PodRequest:
        return single_container_pod("u", cpu_milli=2000, **kwargs)  # type: ignore[arg-type]

    assert pod_class(request(core_milli=300)) == PodClass(2000, 300, 1)
    assert pod_class(request(gpus=2)) == PodClass(2000, 1000, 2)
    assert pod_class(request(gpu_memory_bytes=4 * GiB)) == PodClass(2000, 250, 1)
    assert pod_class(request()) == PodClass(2000, 0, 0)
    assert pod_class(request(core_milli=500, models=("A100", "V100"))).models == "A100|V100"


def test_pod_classes_answer_what_pod_class_answers_for_shared_and_distinct_requests() -> None:
    requests = PodRequests(PROTOCOL)
    replicas = [make_pod(f"r-{i}", core="30", mem="2", node="n1", phase=PodPhase.RUNNING) for i in range(3)]
    others = [make_pod("w", gpu="2", node="n1", phase=PodPhase.RUNNING),
              make_pod("c", cpu="3", node="n1", phase=PodPhase.RUNNING),
              make_pod("m", mem="4", node="n1", phase=PodPhase.RUNNING,
                       annotations={KEYS.pod_gpu_models: "A100,V100"})]
    classes = PodClasses()
    for pod in (*replicas, *others, *replicas):
        request = requests.get(pod)
        assert classes.of(request) == pod_class(request), pod.uid
    shared = [requests.get(p) for p in replicas]
    assert shared[0].containers is shared[1].containers  # replicas share the template: one memo entry
    same_objects = attrs.evolve(shared[0], cpu_milli=shared[0].cpu_milli + 500)
    assert classes.of(same_objects) == pod_class(same_objects) != pod_class(shared[0])


def test_blend_typical_uses_the_reference_until_enough_pods_are_observed() -> None:
    observed = [PodClass(1000, 500, 1)] * 3
    reference = [PodClass(2000, 1000, 1)] * 7
    young = blend_typical(observed, reference, min_observed=5)
    assert young.total_pods == 10
    grown = blend_typical(observed, reference, min_observed=3)
    assert grown.classes == (PodClass(1000, 500, 1),)


def test_resources_a_claim_serves_are_read_from_either_client_shape_and_left_out_of_the_request() -> None:
    gpu = RES.gpu
    model = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="ns", uid="u1"),
        spec=client.V1PodSpec(containers=[
            client.V1Container(name="main", resources=client.V1ResourceRequirements(limits={gpu: "1", "cpu": "1"})),
            client.V1Container(name="side", resources=client.V1ResourceRequirements(limits={gpu: "1"}))]),
        status=client.V1PodStatus(extended_resource_claim_status=client.V1PodExtendedResourceClaimStatus(
            resource_claim_name="p-extended-resources-abc", request_mappings=[client.V1ContainerExtendedResourceRequest(
                container_name="main", resource_name=gpu, request_name="container-0-request-0")])))
    from_model = pod_from_v1(model)
    from_json = pod_from_json(client.ApiClient().sanitize_for_serialization(model))
    assert from_model.claim_served == from_json.claim_served == (("main", gpu),)
    request = pod_request(from_json, PROTOCOL)
    assert [(c.name, c.gpus) for c in request.containers] == [("main", 0), ("side", 1)]
    requests = PodRequests(PROTOCOL)
    assert requests.get(from_json).containers[0].gpus == 0
    assert requests.get(attrs.evolve(from_json, claim_served=())).containers[0].gpus == 1  # the memo tells them apart
    with pytest.raises(CoreJsonError, match="requestMappings"):
        pod_from_json({**client.ApiClient().sanitize_for_serialization(model),
                       "status": {"extendedResourceClaimStatus": {"requestMappings": "x"}}})
