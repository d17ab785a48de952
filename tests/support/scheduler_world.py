"""Builders for the scheduler service and standalone loop tests: an in-memory cluster whose binds can be made to
fail, a service on it, and helpers that create pods and deliver them to the service as an informer would.

Not a test module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import decode_plan, encode_plan
from domain.kube.objects import Listing, PodObject, PodPhase
from domain.units import GiB
from ports.disruption_budgets import DisruptionBudgetsApi
from services.scheduler.service import SchedulerService, ServiceConfig
from support.kube_builders import GPU16, KEYS, NOW, PROTOCOL, Clock, make_gpus, make_node, make_pod

NONE_SCHEDULER = "nobody"


class FlakyCluster(InMemoryCluster):
    """An in-memory cluster whose calls can be made to fail, in order:

    ``bind_failures`` — the next binds raise these (without binding); ``lost_binds`` — the next binds bind, then
    raise these (the answer was lost); ``patch_failures`` — the next pod annotation patches raise ``error``,
    after applying the patch when ``applied``; ``before_patch`` — called before every pod annotation patch;
    ``list_failures`` — the next pod listings raise these; ``on_list`` — called inside every pod listing.
    """

    def __init__(self) -> None:
        super().__init__(clock=Clock())
        self.bind_failures: list[Exception] = []
        self.lost_binds: list[Exception] = []
        self.patch_failures: list[tuple[Exception, bool]] = []
        self.before_patch: Callable[[], None] | None = None
        self.list_failures: list[Exception] = []
        self.on_list: Callable[[], None] | None = None

    def bind_pod(
        self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        if self.bind_failures:
            raise self.bind_failures.pop(0)
        super().bind_pod(namespace, name, uid=uid, node=node, annotations=annotations)
        if self.lost_binds:
            raise self.lost_binds.pop(0)

    def patch_pod_annotations(
        self, namespace: str, name: str, changes: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> PodObject:
        if self.before_patch is not None:
            self.before_patch()
        if self.patch_failures:
            error, applied = self.patch_failures.pop(0)
            if applied:
                super().patch_pod_annotations(namespace, name, changes, resource_version=resource_version)
            raise error
        return super().patch_pod_annotations(namespace, name, changes, resource_version=resource_version)

    def list_pods(self, *, field_selector: str = "") -> Listing[PodObject]:
        if self.on_list is not None:
            self.on_list()
        if self.list_failures:
            raise self.list_failures.pop(0)
        return super().list_pods(field_selector=field_selector)


@attrs.define
class World:
    cluster: FlakyCluster
    service: SchedulerService
    metrics: PrometheusSchedulerMetrics
    clock: Clock
    leader: list[bool]

    def node(self, name: str, count: int = 2, **kwargs: object) -> None:
        created = self.cluster.create_node(make_node(name, count, **kwargs))  # type: ignore[arg-type]
        self.service.on_node(created)

    def pending(self, name: str, *, gpu: str | None = None, core: str | None = None, mem: str | None = None,
                annotations: dict[str, str] | None = None, scheduler: str = PROTOCOL.scheduler_name) -> PodObject:
        """Create a pending pod in the cluster and deliver it to the service."""
        pod = new_pod(self.cluster, name, gpu=gpu, core=core, mem=mem, annotations=annotations, scheduler=scheduler)
        self.service.on_pod(pod)
        return pod

    def running(self, name: str, node: str, grants: dict[int, tuple[int, int]] | None = None, *,
                whole: int = 0, scheduler: str = NONE_SCHEDULER, gpu: str | None = None, core: str | None = None,
                mem: str | None = None) -> PodObject:
        """A pod bound to ``node`` and Running; with ``grants`` (GPU index → core %, GiB) or ``whole`` (GPUs) it
        carries a plan. Its requests default to what the grants say."""
        if grants is not None and core is None and mem is None:
            (c, m), = grants.values()
            core, mem = str(c), str(m)
        pod = self.pending(name, scheduler=scheduler, gpu=gpu, core=core, mem=mem)
        if grants is not None or whole:
            gpus = make_gpus(node, len(self.service.gpus(node)))
            if whole:
                container = ContainerGrant("main", tuple(GpuGrant(i, 1000, GPU16) for i in range(whole)), whole=True)
            else:
                assert grants is not None
                container = ContainerGrant("main", tuple(GpuGrant(i, c * 10, m * GiB) for i, (c, m) in grants.items()))
            plan = encode_plan(PodAllocation(pod.uid, node, (container,)), gpus, writer=scheduler)
            self.cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
        self.cluster.bind_pod("default", name, uid=pod.uid, node=node)
        bound = self.cluster.set_pod_phase("default", name, PodPhase.RUNNING)
        self.service.on_pod(bound)
        return bound

    def deliver(self, name: str) -> PodObject:
        """Deliver the pod's current state to the service (an informer update)."""
        pod = self.cluster.get_pod("default", name)
        self.service.on_pod(pod)
        return pod

    def used(self, node: str) -> list[tuple[int, int]]:
        """(core milli, memory GiB) per GPU."""
        return [(g.core_used, g.memory_used // GiB) for g in self.service.gpus(node)]

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def new_pod(cluster: InMemoryCluster, name: str, *, gpu: str | None = None, core: str | None = None,
            mem: str | None = None, annotations: dict[str, str] | None = None,
            scheduler: str = PROTOCOL.scheduler_name) -> PodObject:
    """A pending pod created in ``cluster`` (one container ``main`` with our resources as limits)."""
    containers = make_pod("template", gpu=gpu, core=core, mem=mem).containers
    return cluster.create_pod(PodObject("", "default", name, containers=containers,
                                        annotations=dict(annotations or {}), scheduler_name=scheduler))


def world(policy: str = "binpack", *, admission_hold_seconds: float | None = None,
          budgets: DisruptionBudgetsApi | None = None) -> World:
    """A scheduler service over an in-memory cluster. Admission holds are off by default: these worlds have no
    device plugin to mark pods allocated (tests of the holds turn them on). ``budgets``: the PodDisruptionBudgets
    preemption reads (none by default)."""
    clock, leader = Clock(NOW), [True]
    cluster = FlakyCluster()
    metrics = PrometheusSchedulerMetrics()
    config = ServiceConfig(policy=policy, admission_hold_seconds=admission_hold_seconds)
    service = SchedulerService(cluster, PROTOCOL, metrics, config=config, clock=clock,
                               is_leader=lambda: leader[0], budgets=budgets)
    return World(cluster, service, metrics, clock, leader)


def schedule_and_commit(w: World, pod: PodObject) -> PodAllocation:
    result = w.service.schedule_pod(pod)
    assert result.allocation is not None, result.reason
    w.service.commit(pod, result.allocation)
    w.deliver(pod.name)
    return result.allocation


def plan_of(w: World, name: str) -> PodAllocation:
    pod = w.cluster.get_pod("default", name)
    return decode_plan(pod.annotations[KEYS.pod_plan], key=KEYS.pod_plan, pod_uid=pod.uid, node=pod.node_name,
                       node_gpus=make_gpus(pod.node_name, len(w.service.gpus(pod.node_name))))
