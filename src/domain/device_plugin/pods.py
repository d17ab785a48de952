"""Building the Allocate candidates of one node from its pods (see :mod:`domain.device_plugin.matching`).

A pod contributes candidates when it is bound to the node, ``Pending``, not being deleted, and one of its
containers asks for one of our resources. Its plan is taken only through
:func:`domain.kube.translate.read_allocation` (bound pod, plan decoded against the node's current GPUs and
checked against the pod's own requests); a pod whose plan is missing or refused still contributes candidates,
with ``grant=None`` and the reason, so it makes matches ambiguous instead of borrowing another pod's plan. A MIG
pod's plan is read with :func:`domain.kube.translate.read_mig_plan` (same trust rules); its containers carry the
instances they receive (``Candidate.mig``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from domain.device_plugin.devices import MigResource, ResourceKey, ResourceKind
from domain.device_plugin.matching import Candidate
from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.kube.annotations import PlannedInstance
from domain.kube.objects import ContainerSpec, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants, parse_quantity
from domain.kube.translate import AllocationSource, asks_mig, mig_stem, mig_table, read_allocation, read_mig_plan
from domain.mig.errors import UnknownMigProfileError


def resource_names(protocol: ProtocolConstants) -> dict[ResourceKind, str]:
    """Extended resource name per kind, from the protocol constants."""
    names = protocol.resources
    return {ResourceKind.GPU: names.gpu, ResourceKind.CORE: names.core, ResourceKind.MEMORY: names.memory}


def mig_resource_names(protocol: ProtocolConstants) -> dict[MigResource, str]:
    """Every MIG resource of the shared table (:func:`domain.kube.translate.mig_table`, all known models) and its
    extended resource name; empty when the protocol's GPU resource has no prefix."""
    try:
        table = mig_table(protocol)
    except InvalidRequestError:
        return {}
    return {MigResource(profile): name for name, profile in sorted(table.profiles.items())}


def container_amounts(spec: ContainerSpec, protocol: ProtocolConstants) -> dict[ResourceKey, int]:
    """The container's integer amount per kind, MIG resources included (limit, else request; absent, zero,
    malformed or an unknown MIG profile = not asked)."""
    amounts: dict[ResourceKey, int] = {}
    names: list[tuple[ResourceKey, str]] = list(resource_names(protocol).items())
    stem = mig_stem(protocol)
    for name in dict.fromkeys([*spec.limits, *spec.requests]):
        if stem is None or not name.startswith(stem):
            continue
        try:
            profile = mig_table(protocol).parse(name)
        except UnknownMigProfileError:
            continue
        if profile is not None:
            names.append((MigResource(profile), name))
    for kind, name in names:
        text = spec.limits.get(name, spec.requests.get(name))
        if text is None:
            continue
        try:
            value = parse_quantity(name, str(text))
        except InvalidRequestError:
            continue
        if value > 0:
            amounts[kind] = value
    return amounts


def admission_order(pod: PodObject) -> list[ContainerSpec]:
    """Containers in kubelet's allocation order: init containers, then app containers, each in spec order."""
    return [c for c in pod.containers if c.init] + [c for c in pod.containers if not c.init]


def node_candidates(
    pods: Iterable[PodObject], *, node: str, node_gpus: Sequence[Gpu], protocol: ProtocolConstants
) -> list[Candidate]:
    """Every Allocate candidate among ``pods`` on ``node`` (module docstring). Never raises for pod content."""
    out: list[Candidate] = []
    for pod in pods:
        if pod.node_name != node or pod.phase is not PodPhase.PENDING or pod.deletion_timestamp is not None:
            continue
        specs = [(i, s, container_amounts(s, protocol)) for i, s in enumerate(admission_order(pod))]
        specs = [(i, s, a) for i, s, a in specs if a]
        if not specs:
            continue
        grants = {}
        mig: dict[str, tuple[PlannedInstance, ...]] = {}
        if asks_mig(pod, protocol):
            mig_reading = read_mig_plan(pod, node_gpus, protocol)
            mig = {name: plan.instances for name, plan in mig_reading.plans.items()}
            problem = mig_reading.problem
        else:
            reading = read_allocation(pod, node_gpus, protocol, infer=False)
            problem = reading.problem
            if reading.source is AllocationSource.PLAN and reading.allocation is not None:
                grants = {c.container: c for c in reading.allocation.containers}
            elif not problem:
                problem = f"allocation source {reading.source.value}"
        for order, spec, amounts in specs:
            grant = grants.get(spec.name)
            instances = mig.get(spec.name, ())
            out.append(Candidate(
                pod_uid=pod.uid, namespace=pod.namespace, pod_name=pod.name, container=spec.name, order=order,
                amounts=amounts, grant=grant, init=spec.init, mig=instances,
                problem="" if grant is not None or instances else (
                    problem or "the plan has no entry for this container"),
            ))
    return out
