"""Builders for the MIG wiring tests: MIG nodes with an inventory annotation carrying the MIG layout, pods asking
for ``<prefix>/mig-<profile>`` resources, and their plans.

Not a test module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.annotations import MigInstanceRecord, encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.translate import mig_container_plans, pod_request
from domain.mig.ledger import MigPodAllocation
from domain.units import GiB
from support.kube_builders import KEYS, NOW, PROTOCOL

A100_80 = "NVIDIA A100-SXM4-80GB"
PREFIX = "alibabacloud.com/mig-"
ALLOCATABLE = {"cpu": "64", "memory": "256Gi", "pods": "110"}

Layout = Mapping[int, Sequence[tuple[str, int]]]


def mig_uuid(node: str, index: int, start: int) -> str:
    return f"MIG-{node}-{index}-{start}"


def mig_gpus(node: str, count: int = 2, *, shared: int = 0, model: str = A100_80, memory: int = 80 * GiB,
             unhealthy: tuple[int, ...] = ()) -> tuple[Gpu, ...]:
    """``count`` GPUs in MIG mode, then ``shared`` time-sharing GPUs (A100 16 GiB)."""
    out = [Gpu(i, GpuUuid(f"GPU-{node}-{i}"), model, memory, mig_mode=MigMode.ENABLED,
               health=Health.UNHEALTHY if i in unhealthy else Health.HEALTHY) for i in range(count)]
    out += [Gpu(count + i, GpuUuid(f"GPU-{node}-{count + i}"), "A100", 16 * GiB) for i in range(shared)]
    return tuple(out)


def records(node: str, layout: Layout, *, held: Iterable[tuple[int, int]] = (),
            no_compute: Iterable[tuple[int, int]] = ()) -> dict[int, list[MigInstanceRecord]]:
    """The annotation's instances of ``layout``: GI id ``start + 1``, CI 0, free unless ``held``."""
    held, bare = set(held), set(no_compute)
    return {index: [MigInstanceRecord(start + 1, None if (index, start) in bare else 0, profile, start,
                                      "" if (index, start) in bare else mig_uuid(node, index, start),
                                      (index, start) not in held)
                    for profile, start in items] for index, items in layout.items()}


def mig_node(name: str, layout: Layout | None = None, *, gpus: tuple[Gpu, ...] | None = None,
             held: Iterable[tuple[int, int]] = (), no_compute: Iterable[tuple[int, int]] = (),
             strategy: str = "static", heartbeat: float = NOW) -> NodeObject:
    """A node whose inventory annotation carries the MIG layout (default GPUs: two A100-80GB in MIG mode)."""
    gpus = gpus if gpus is not None else mig_gpus(name)
    text = encode_inventory(gpus, heartbeat=heartbeat, protocol=PROTOCOL.fingerprint(),
                            mig=records(name, layout or {}, held=held, no_compute=no_compute), mig_strategy=strategy)
    return NodeObject(name, annotations={KEYS.node_inventory: text}, allocatable=dict(ALLOCATABLE))


def mig_spec(name: str, profile: str, count: int = 1, *, init: bool = False) -> ContainerSpec:
    return ContainerSpec(name, limits={PREFIX + profile.replace("+", "."): str(count)}, init=init)


def mig_pod(uid: str, profile: str = "3g.40gb", count: int = 1, *, node: str = "",
            phase: PodPhase = PodPhase.PENDING, containers: Sequence[ContainerSpec] | None = None,
            annotations: Mapping[str, str] | None = None) -> PodObject:
    """A pod asking for ``count`` instances of ``profile`` in container ``main`` (or ``containers``)."""
    specs = tuple(containers) if containers is not None else (mig_spec("main", profile, count),)
    return PodObject(uid, "default", uid, containers=specs, node_name=node, phase=phase,
                     scheduler_name=PROTOCOL.scheduler_name, annotations=dict(annotations or {}))


def with_mig_plan(pod: PodObject, allocation: MigPodAllocation, gpus: tuple[Gpu, ...], *,
                  bind: bool = True) -> PodObject:
    """``pod`` carrying the MIG plan of ``allocation`` (bound to its node and Running when ``bind``)."""
    request = pod_request(pod, PROTOCOL)
    plans = mig_container_plans(request, allocation, gpus)
    text = encode_plan(PodAllocation(pod.uid, allocation.node), gpus, mig=plans)
    return attrs.evolve(pod, annotations={**pod.annotations, KEYS.pod_plan: text},
                        node_name=allocation.node if bind else pod.node_name,
                        phase=PodPhase.RUNNING if bind else pod.phase)
