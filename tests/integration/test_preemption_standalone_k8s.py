"""Standalone preemption against a real API server (the session's etcd + kube-apiserver; our scheduler in
standalone mode in-process over KubernetesCluster; no kubelet: the test deletes terminating pods with grace 0 as
kubelet would once their containers ended).

One node with two 16 GiB GPUs: GPU 0 holds ``a`` (40 %, priority 100) and ``d`` (30 %, priority 300), GPU 1 holds
``b`` (60 %, priority 200). A pending 80 % share of priority 1000000 for our scheduler fits nowhere: b is deleted
gracefully with a ``Preempted`` Event naming the preemptor and the ``DisruptionTarget`` condition
(``PreemptionByScheduler``, naming our scheduler) written before the delete, the preemptor is nominated
(``status.nominatedNodeName``) and, once b is gone, bound to GPU 1; a lower-priority 50 % share created meanwhile
is not bound (neither GPU can take it beside the preemptor), and a and d are untouched. A ``preemptionPolicy:
Never`` pod evicts nobody and says so in its FailedScheduling Event. A PodDisruptionBudget (``maxUnavailable: 0``)
over the lowest-priority pod makes the preemptor evict the other one, whose eviction violates no budget.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from k8s_harness import ControlPlane
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.kubernetes.disruptionbudgets import KubernetesDisruptionBudgets
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
SUFFIX = uuid.uuid4().hex[:6]
CLASSES = {"low": (100, "PreemptLowerPriority"), "mid-200": (200, "PreemptLowerPriority"),
           "mid-300": (300, "PreemptLowerPriority"), "high": (1_000_000, "PreemptLowerPriority"),
           "never": (1_000_000, "Never")}


def gpus(node: str) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, GpuUuid(f"GPU-{node}-{i}"), "A100", 16 * GiB) for i in range(2))


@pytest.fixture(scope="module")
def world(k8s_control_plane: ControlPlane) -> Iterator[tuple[client.CoreV1Api, KubernetesCluster]]:
    api_client = k8s_control_plane.api_client()
    scheduling = client.SchedulingV1Api(api_client)
    for name, (value, policy) in CLASSES.items():
        scheduling.create_priority_class(client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=f"ljrk-{name}-{SUFFIX}"), value=value, preemption_policy=policy))
    cluster = KubernetesCluster(api_client)
    service = SchedulerService(cluster, PROTOCOL, PrometheusSchedulerMetrics(),
                               config=ServiceConfig(policy="fgd", admission_hold_seconds=None),
                               budgets=KubernetesDisruptionBudgets(api_client))
    settings = SchedulerSettings(mode="standalone", host="127.0.0.1", port=0, watch_timeout_seconds=1,
                                 tick_seconds=0.2, identity="solo")
    app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None,
                       metrics_text=PrometheusSchedulerMetrics().exposition)
    app.start()
    try:
        eventually(lambda: app.synced and service.serving, what="standalone scheduler serving")
        yield client.CoreV1Api(api_client), cluster
    finally:
        app.stop(join_seconds=10)
        for name in CLASSES:
            scheduling.delete_priority_class(f"ljrk-{name}-{SUFFIX}")
        api_client.close()


def make_node(core: client.CoreV1Api, label: dict[str, str]) -> str:
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    inventory = encode_inventory(gpus(name), heartbeat=time.time(), protocol=PROTOCOL.fingerprint())
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels=label, annotations={KEYS.node_inventory: inventory})))
    make_schedulable(core, name, {"cpu": "8", "memory": "32Gi", "pods": "110", RES.gpu: "2", RES.core: "200",
                                  RES.memory: "32"})
    return name


def create(core: client.CoreV1Api, name: str, percent: int, priority: str, label: dict[str, str], *,
           scheduler: str = PROTOCOL.scheduler_name, extra: dict[str, str] | None = None) -> str:
    core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="default", labels={**label, **(extra or {})}),
        spec=client.V1PodSpec(
            scheduler_name=scheduler, priority_class_name=f"ljrk-{priority}-{SUFFIX}", node_selector=label,
            containers=[client.V1Container(
                name="main", image="registry.invalid/none:1",
                resources=client.V1ResourceRequirements(limits={RES.core: str(percent), RES.memory: "1"}))])))
    return name


def running(core: client.CoreV1Api, cluster: KubernetesCluster, node: str, gpu: int, percent: int, priority: str,
            label: dict[str, str], extra: dict[str, str] | None = None) -> str:
    name = create(core, f"victim-{uuid.uuid4().hex[:6]}", percent, priority, label, scheduler=NOBODY, extra=extra)
    uid = core.read_namespaced_pod(name, "default").metadata.uid
    plan = encode_plan(PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(gpu, percent * 10, GiB),)),)),
                       gpus(node), writer=NOBODY)
    cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
    cluster.bind_pod("default", name, uid=uid, node=node)
    return name


def events(core: client.CoreV1Api, name: str, reason: str) -> list[str]:
    found = core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}").items
    return [e.message for e in found if e.reason == reason]


def terminating(core: client.CoreV1Api, name: str) -> bool:
    return core.read_namespaced_pod(name, "default").metadata.deletion_timestamp is not None


def test_standalone_preemption_evicts_on_the_right_gpu_nominates_holds_and_binds(
    world: tuple[client.CoreV1Api, KubernetesCluster],
) -> None:
    core, cluster = world
    label = {"ljrk-preempt": uuid.uuid4().hex[:8]}
    node = make_node(core, label)
    a = running(core, cluster, node, 0, 40, "low", label)
    d = running(core, cluster, node, 0, 30, "mid-300", label)
    b = running(core, cluster, node, 1, 60, "mid-200", label)
    hi = create(core, f"hi-{uuid.uuid4().hex[:6]}", 80, "high", label)
    eventually(lambda: terminating(core, b), timeout=30, what="the victim on GPU 1 deleted gracefully")
    assert eventually(lambda: core.read_namespaced_pod(hi, "default").status.nominated_node_name,
                      what="the preemptor nominated") == node
    (preempted,) = eventually(lambda: events(core, b, "Preempted"), what="the Preempted Event on the victim")
    assert f"default/{hi}" in preempted
    [target] = [c for c in core.read_namespaced_pod(b, "default").status.conditions or ()
                if c.type == "DisruptionTarget"]  # written before the delete, so present once it is terminating
    assert (target.status, target.reason, target.message) == (
        "True", "PreemptionByScheduler", f"{PROTOCOL.scheduler_name}: preempting to accommodate a higher priority pod")
    assert target.last_transition_time is not None
    assert not [c for c in core.read_namespaced_pod(a, "default").status.conditions or ()
                if c.type == "DisruptionTarget"]
    low = create(core, f"low-{uuid.uuid4().hex[:6]}", 50, "low", label)
    eventually(lambda: events(core, low, "FailedScheduling"), what="the lower-priority pod tried")
    core.delete_namespaced_pod(b, "default", grace_period_seconds=0)  # its containers ended
    bound = eventually(lambda: (p := core.read_namespaced_pod(hi, "default")).spec.node_name and p,
                       timeout=30, what="the preemptor bound")
    assert bound.spec.node_name == node
    plan = decode_plan(bound.metadata.annotations[KEYS.pod_plan], key=KEYS.pod_plan, pod_uid=bound.metadata.uid,
                       node=node, node_gpus=gpus(node))
    assert [(g.gpu_index, g.core_milli) for c in plan.containers for g in c.grants] == [(1, 800)]
    assert not core.read_namespaced_pod(low, "default").spec.node_name
    assert not terminating(core, a)
    assert not terminating(core, d)


def test_standalone_never_pod_evicts_nobody(world: tuple[client.CoreV1Api, KubernetesCluster]) -> None:
    core, cluster = world
    label = {"ljrk-preempt": uuid.uuid4().hex[:8]}
    node = make_node(core, label)
    victims = [running(core, cluster, node, 0, 70, "low", label), running(core, cluster, node, 1, 70, "low", label)]
    never = create(core, f"never-{uuid.uuid4().hex[:6]}", 60, "never", label)
    messages = eventually(lambda: events(core, never, "FailedScheduling"), what="FailedScheduling of the Never pod")
    assert "preemptionPolicy is Never" in messages[0]
    assert not any(terminating(core, victim) for victim in victims)
    pod = core.read_namespaced_pod(never, "default")
    assert not pod.spec.node_name
    assert not pod.status.nominated_node_name


def test_standalone_spares_the_pod_a_disruption_budget_protects(
    world: tuple[client.CoreV1Api, KubernetesCluster],
) -> None:
    core, cluster = world
    label = {"ljrk-preempt": uuid.uuid4().hex[:8]}
    guarded = {"ljrk-guarded": label["ljrk-preempt"]}
    node = make_node(core, label)
    policy = client.PolicyV1Api(core.api_client)
    budget = f"guard-{label['ljrk-preempt']}"
    policy.create_namespaced_pod_disruption_budget("default", client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name=budget),
        spec=client.V1PodDisruptionBudgetSpec(max_unavailable=0,
                                              selector=client.V1LabelSelector(match_labels=guarded))))
    try:
        a = running(core, cluster, node, 0, 60, "low", label, extra=guarded)   # lowest priority, but protected
        b = running(core, cluster, node, 1, 60, "mid-200", label)
        create(core, f"hi-{uuid.uuid4().hex[:6]}", 80, "high", label)
        eventually(lambda: terminating(core, b), timeout=30, what="the unprotected victim deleted")
        assert not terminating(core, a)
    finally:
        policy.delete_namespaced_pod_disruption_budget(budget, "default")
