"""Builders of Kubernetes domain objects shared by the kube translation, node filter and ledger sync tests.

Not a test module: it only makes nodes with an inventory annotation, pods with our resources and plans, and a
scheduler whose profile starts with the standalone loop's node filters.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import numpy as np

from domain.allocation import PodAllocation
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase, Taint
from domain.kube.protocol import ProtocolConstants
from domain.ledger import ClusterLedger
from domain.scheduling.framework.cycle import BindPlugin, Scheduler
from domain.scheduling.nodefit import node_filters
from domain.scheduling.registry import build_profile
from domain.scheduling.sync import LedgerSync
from domain.units import GiB

PROTOCOL = ProtocolConstants()
NOW = 1_700_000_000.0
GPU16 = 16 * GiB
KEYS = PROTOCOL.annotations
RES = PROTOCOL.resources


def make_gpus(node: str, count: int, *, memory: int = GPU16, unhealthy: tuple[int, ...] = (),
              model: str = "A100") -> tuple[Gpu, ...]:
    return tuple(
        Gpu(i, GpuUuid(f"GPU-{node}-{i}"), model, memory,
            health=Health.UNHEALTHY if i in unhealthy else Health.HEALTHY)
        for i in range(count)
    )


def make_node(
    name: str,
    count: int = 2,
    *,
    memory: int = GPU16,
    unhealthy: tuple[int, ...] = (),
    model: str = "A100",
    heartbeat: float = NOW,
    fingerprint: str | None = None,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
    annotation: str | None = "",
    allocatable: Mapping[str, str] | None = None,
) -> NodeObject:
    """A node; ``annotation=""`` writes a fresh inventory, ``None`` omits it, any other text is used as is."""
    annotations = {}
    if annotation == "":
        gpus = make_gpus(name, count, memory=memory, unhealthy=unhealthy, model=model)
        annotations[KEYS.node_inventory] = encode_inventory(
            gpus, heartbeat=heartbeat, protocol=fingerprint or PROTOCOL.fingerprint()
        )
    elif annotation is not None:
        annotations[KEYS.node_inventory] = annotation
    return NodeObject(
        name,
        labels=dict(labels or {}),
        annotations=annotations,
        allocatable=dict(allocatable or {"cpu": "64", "memory": "256Gi", "pods": "110"}),
        taints=taints,
        unschedulable=unschedulable,
    )


def gpu_limits(*, gpu: str | None = None, core: str | None = None, mem: str | None = None) -> dict[str, str]:
    out = {}
    for resource, value in ((RES.gpu, gpu), (RES.core, core), (RES.memory, mem)):
        if value is not None:
            out[resource] = value
    return out


def make_pod(
    uid: str,
    *,
    gpu: str | None = None,
    core: str | None = None,
    mem: str | None = None,
    node: str = "",
    phase: PodPhase = PodPhase.PENDING,
    scheduler: str = PROTOCOL.scheduler_name,
    annotations: Mapping[str, str] | None = None,
    cpu: str | None = None,
    deletion_timestamp: float | None = None,
    **extra: object,
) -> PodObject:
    """A one-container pod (container ``main``) asking for our resources in the protocol's units."""
    limits = gpu_limits(gpu=gpu, core=core, mem=mem)
    if cpu is not None:
        limits["cpu"] = cpu
    container = ContainerSpec("main", limits=limits)
    return PodObject(
        uid, "default", uid,
        containers=(container,),
        node_name=node,
        phase=phase,
        scheduler_name=scheduler,
        annotations=dict(annotations or {}),
        deletion_timestamp=deletion_timestamp,
        **extra,
    )


def with_plan(pod: PodObject, allocation: PodAllocation, gpus: tuple[Gpu, ...], *, bind: bool = True) -> PodObject:
    """``pod`` carrying the plan of ``allocation`` (and bound to its node when ``bind``)."""
    annotations = {**pod.annotations, KEYS.pod_plan: encode_plan(allocation, gpus)}
    return attrs.evolve(
        pod, annotations=annotations, node_name=allocation.node if bind else pod.node_name,
        phase=PodPhase.RUNNING if bind else pod.phase,
    )


class Clock:
    """A settable clock (epoch seconds)."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_sync(*nodes: NodeObject, clock: Clock | None = None) -> LedgerSync:
    sync = LedgerSync(ClusterLedger(), PROTOCOL, clock=clock or Clock())
    for node in nodes:
        sync.on_node(node)
    return sync


def make_scheduler(sync: LedgerSync, policy: str = "binpack", *, binder: BindPlugin | None = None) -> Scheduler:
    """Scheduler on ``sync.ledger``: the standalone node filters, then the policy's own filters."""
    profile = build_profile(policy, sync.ledger, rng=np.random.default_rng(0), binder=binder)
    filters = node_filters(sync.nodes, sync.constraints, sync.gates)
    scheduler = Scheduler(sync.ledger, attrs.evolve(profile, filters=(*filters, *profile.filters)))
    sync.attach(scheduler)
    return scheduler


def used(sync: LedgerSync, node: str) -> list[tuple[int, int]]:
    """``(core milli-GPU, memory bytes)`` used per GPU of ``node``."""
    return [(g.core_used, g.memory_used) for g in sync.ledger.gpus(node)]
