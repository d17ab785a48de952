"""Preemption through the real kube-scheduler (etcd + kube-apiserver + kube-scheduler, live version) and our
extender's ``preempt`` verb (``preemptVerb``, ``nodeCacheCapable``), extender in-process over KubernetesCluster.

One node with two 16 GiB GPUs, no kubelet (the test deletes terminating pods as kubelet would, with grace 0).
GPU 0 holds ``a`` (40 %, priority 100) and ``d`` (30 %, priority 300), GPU 1 holds ``b`` (60 %, priority 200), all
bound by the test with plans. A pending 80 % share of priority 1000000 fits nowhere: kube-scheduler's summed view
(70 of 200 free) proposes evicting ``a`` alone (its reprieve keeps d and b), which frees only GPU 0 to 70 %; our
verb answers ``b`` instead (GPU 1 then has 100 % free; {a, d} would take a priority-300 victim). The test asserts
kube-scheduler deleted exactly ``b`` and nominated the pod, then bound it to GPU 1 through our bind verb. A second
node and pod whose PriorityClass says ``preemptionPolicy: Never`` get a FailedScheduling Event and evict nobody.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_harness import ControlPlane, control_plane, free_ports
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import decode_plan, encode_inventory, encode_plan
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from services.scheduler.service import SchedulerService, ServiceConfig
from support.k8s_nodes import make_schedulable
from support.polling import eventually

pytestmark = pytest.mark.k8s

PROTOCOL = ProtocolConstants()
RES, KEYS = PROTOCOL.resources, PROTOCOL.annotations
NOBODY = "ljrk-test-none"
CLASSES = {"ljrk-low-100": (100, "PreemptLowerPriority"), "ljrk-mid-200": (200, "PreemptLowerPriority"),
           "ljrk-mid-300": (300, "PreemptLowerPriority"), "ljrk-high": (1_000_000, "PreemptLowerPriority"),
           "ljrk-high-never": (1_000_000, "Never")}


Api = tuple[client.CoreV1Api, KubernetesCluster, SchedulerService, SchedulerApp]


def gpus(node: str) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, GpuUuid(f"GPU-{node}-{i}"), "A100", 16 * GiB) for i in range(2))


@pytest.fixture(scope="module")
def extender_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, extender_port: int) -> Iterator[ControlPlane]:
    extender = {
        "urlPrefix": f"http://127.0.0.1:{extender_port}", "filterVerb": "filter", "prioritizeVerb": "prioritize",
        "bindVerb": "bind", "preemptVerb": "preempt", "weight": 1, "enableHTTPS": False, "nodeCacheCapable": True,
        "managedResources": [{"name": name, "ignoredByScheduler": False} for name in (RES.gpu, RES.core, RES.memory)],
    }
    with control_plane(k8s_bin_dir, scheduler=True,
                       scheduler_config={"extenders": [extender], "percentageOfNodesToScore": 100}) as cp:
        yield cp


@pytest.fixture(scope="module")
def api(plane: ControlPlane, extender_port: int) -> Iterator[Api]:
    api_client = plane.api_client()
    scheduling = client.SchedulingV1Api(api_client)
    for name, (value, policy) in CLASSES.items():
        scheduling.create_priority_class(client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=name), value=value, preemption_policy=policy))
    cluster = KubernetesCluster(api_client)
    service = SchedulerService(cluster, PROTOCOL, PrometheusSchedulerMetrics(),
                               config=ServiceConfig(policy="fgd", admission_hold_seconds=None,
                                                    follow_nominations=True))  # as --mode extender sets it
    settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=extender_port, watch_timeout_seconds=1,
                                 tick_seconds=0.2, identity="solo")
    app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None,
                       metrics_text=PrometheusSchedulerMetrics().exposition)
    app.start()
    try:
        eventually(lambda: app.synced and service.serving, what="extender serving")
        yield client.CoreV1Api(api_client), cluster, service, app
    finally:
        app.stop(join_seconds=10)
        api_client.close()


def make_node(core: client.CoreV1Api, label: dict[str, str]) -> str:
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    inventory = encode_inventory(gpus(name), heartbeat=time.time(), protocol=PROTOCOL.fingerprint())
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels=label, annotations={KEYS.node_inventory: inventory})))
    make_schedulable(core, name, {"cpu": "8", "memory": "32Gi", "pods": "110", RES.gpu: "2", RES.core: "200",
                                  RES.memory: "32"})
    return name


def pod_body(name: str, percent: int, priority_class: str, *, scheduler: str, label: dict[str, str]) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="default", labels=label),
        spec=client.V1PodSpec(
            scheduler_name=scheduler, priority_class_name=priority_class, node_selector=label,
            containers=[client.V1Container(
                name="main", image="registry.invalid/none:1",
                resources=client.V1ResourceRequirements(limits={RES.core: str(percent), RES.memory: "1"}))]))


def running(core: client.CoreV1Api, cluster: KubernetesCluster, node: str, gpu: int, percent: int,
            priority_class: str, label: dict[str, str]) -> str:
    """A pod of ``priority_class`` bound by the test to ``node`` with a plan holding ``percent`` of GPU ``gpu``."""
    name = f"victim-{uuid.uuid4().hex[:6]}"
    uid = core.create_namespaced_pod("default", pod_body(name, percent, priority_class, scheduler=NOBODY,
                                                          label=label)).metadata.uid
    grant = ContainerGrant("main", (GpuGrant(gpu, percent * 10, 1 * GiB),))
    plan = encode_plan(PodAllocation(uid, node, (grant,)), gpus(node), writer=NOBODY)
    cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
    cluster.bind_pod("default", name, uid=uid, node=node)
    return name


def kubelet_deletes(core: client.CoreV1Api, names: list[str]) -> list[str]:
    """What kubelet would do for terminating pods: delete them for good (grace 0). Returns the ones deleted."""
    done = []
    for name in names:
        try:
            pod = core.read_namespaced_pod(name, "default")
        except client.ApiException as error:
            if error.status == 404:
                continue
            raise
        if pod.metadata.deletion_timestamp is not None:
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
            done.append(name)
    return done


def test_kube_scheduler_evicts_the_victim_on_the_gpu_our_verb_names_and_binds_the_preemptor(
    api: Api,
) -> None:
    core, cluster, service, app = api
    label = {"ljrk-preempt": uuid.uuid4().hex[:8]}
    node = make_node(core, label)
    calls: list[tuple[object, object]] = []
    verbs = dict(app.http.verbs)
    real_preempt = verbs["preempt"]

    def spy(body: object) -> object:
        answer = real_preempt(body)
        assert isinstance(body, dict)
        calls.append((body["NodeNameToMetaVictims"], answer))
        return answer

    app.http.verbs = {**verbs, "preempt": spy}
    a = running(core, cluster, node, 0, 40, "ljrk-low-100", label)
    d = running(core, cluster, node, 0, 30, "ljrk-mid-300", label)
    b = running(core, cluster, node, 1, 60, "ljrk-mid-200", label)
    eventually(lambda: service.knows_node(node) and [g.core_used for g in service.gpus(node)] == [700, 600],
               what="the bound pods counted")
    core.create_namespaced_pod("default", pod_body("preemptor", 80, "ljrk-high", scheduler="default-scheduler",
                                                   label=label))
    evicted: list[str] = []

    def bound() -> client.V1Pod | None:
        evicted.extend(kubelet_deletes(core, [a, d, b]))
        pod = core.read_namespaced_pod("preemptor", "default")
        return pod if pod.spec.node_name else None

    pod = eventually(bound, timeout=60, what="preemption, then the binding")
    assert evicted == [b]
    uid = {name: core.read_namespaced_pod(name, "default").metadata.uid for name in (a, d)}
    proposed, answer = calls[0]  # kube-scheduler's summed view proposed a alone; we answered b
    assert proposed == {node: {"Pods": [{"UID": uid[a]}], "NumPDBViolations": 0}}
    assert isinstance(answer, dict)
    (victim,) = answer["NodeNameToMetaVictims"][node]["Pods"]
    assert victim["UID"] not in uid.values()
    app.http.verbs = verbs
    assert pod.spec.node_name == node
    plan = decode_plan(pod.metadata.annotations[KEYS.pod_plan], key=KEYS.pod_plan, pod_uid=pod.metadata.uid,
                       node=node, node_gpus=gpus(node))
    assert [(g.gpu_index, g.core_milli) for c in plan.containers for g in c.grants] == [(1, 800)]
    for name in (a, d):
        assert core.read_namespaced_pod(name, "default").metadata.deletion_timestamp is None
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={b}").items
    assert any(e.reason == "Preempted" for e in events), [(e.reason, e.message) for e in events]


def test_a_preemption_policy_never_pod_evicts_nobody(api: Api) -> None:
    core, cluster, service, app = api
    label = {"ljrk-preempt": uuid.uuid4().hex[:8]}
    node = make_node(core, label)
    verbs = dict(app.http.verbs)
    called: list[object] = []
    app.http.verbs = {**verbs, "preempt": lambda body: called.append(body) or verbs["preempt"](body)}
    victims = [running(core, cluster, node, 0, 70, "ljrk-low-100", label),
               running(core, cluster, node, 1, 70, "ljrk-low-100", label)]
    eventually(lambda: service.knows_node(node) and [g.core_used for g in service.gpus(node)] == [700, 700],
               what="the bound pods counted")
    name = f"never-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod("default", pod_body(name, 60, "ljrk-high-never", scheduler="default-scheduler",
                                                   label=label))

    def refused() -> list[str]:
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
        return [e.message for e in events if e.reason == "FailedScheduling"]

    messages = eventually(refused, timeout=60, what="FailedScheduling for the Never pod")
    pod = core.read_namespaced_pod(name, "default")
    assert not pod.spec.node_name
    assert not pod.status.nominated_node_name
    for victim in victims:
        assert core.read_namespaced_pod(victim, "default").metadata.deletion_timestamp is None
    assert messages
    assert called == []  # kube-scheduler does not even ask: the pod is not eligible to preempt
    app.http.verbs = verbs
