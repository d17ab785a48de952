"""Which pod container a kubelet Allocate call is for, decided from the scheduler's plans, never from device IDs.

Kubelet's Allocate carries only device IDs (one ``ContainerAllocateRequest`` per call, one call per container per
resource; kubelet ``pkg/kubelet/cm/devicemanager/manager.go``). IDs are fungible tokens kubelet may pick freely (failure
case B17), so the plugin must find the container another way. **Matching rule** (:func:`select_container`), for a call
on resource ``kind`` with ``count`` IDs:

1. Candidates are the containers of pods bound to this node (``spec.nodeName``, which only a scheduler can set),
   still ``Pending`` (kubelet allocates every container of a pod during admission, before any runs) and not
   being deleted, whose request (limit, else request) for ``kind`` equals ``count``, and for which this plugin
   has not yet served ``kind``. Pods asking for our resources without a trusted plan are candidates too, so they
   make a match ambiguous instead of letting another pod's plan be used for them.
2. A container already served for another resource but not this one is the one kubelet is admitting (it
   allocates all resources of one container back to back under one lock): if exactly one such container
   matches, it is the answer.
3. Otherwise each pod contributes its first matching container in kubelet's order (init containers in spec
   order, then app containers in spec order). A pod whose admission has started (some container served) is
   preferred; if exactly one pod remains, its container is the answer.
4. Anything else — no candidate, or two pods that could both be meant — raises; the plugin never guesses.

**Limits.** Two pods pending on the node at once with identical amounts on the first resource kubelet asks for
are ambiguous and fail admission (kubelet reports ``UnexpectedAdmissionError``; their controller recreates
them). The served set lives in the plugin's memory: a plugin restarted in the middle of one pod's admission
treats that pod as not started (rule 3 still identifies it when it is the only match). Trust: the plan is the
scheduler's annotation, read only on bound pods, bound to the pod object by its ``podUID`` and checked against the
pod's own requests and the node's inventory (``domain.kube.translate.read_allocation``); nothing else the pod
carries (other annotations, labels, the device IDs kubelet chose) is used.

**Admission done.** :func:`pod_fully_served` says when every resource kind of every container of a pod (init
containers included) has been served; the device plugin then marks the pod (``protocol.annotations.pod_allocated``)
so the scheduler may bind another pod with an identical request to the node (the limit above).

MIG resources follow the same rule: a MIG container asks for one profile (one :class:`MigResource`), so kubelet
calls once for it, and its plan entry is the list of instances it receives (``Candidate.mig``); a device ID of a
MIG resource only gives the count, like any other (B17).

:func:`runtime_request` turns the chosen container's plan into the Runtime's Allocate request;
:func:`planned_gpus` and :func:`planned_instance_ids` into what GetPreferredAllocation prefers.

Errors: :class:`NoMatchingContainerError`, :class:`AmbiguousContainerError`, :class:`UntrustedPlanError`,
:class:`UnhealthyPlanError` (all :class:`DevicePluginError`, a :class:`domain.errors.DomainError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

import attrs

from domain.allocation import ContainerGrant
from domain.device_plugin.devices import DeviceId, MigResource, ResourceKey
from domain.errors import DomainError
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import PlannedInstance
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu, PlannedMig


class DevicePluginError(DomainError):
    """Base of the device plugin's Allocate errors; the message is the whole explanation."""


class NoMatchingContainerError(DevicePluginError):
    """No pending pod container on this node asks for this amount of this resource."""


class AmbiguousContainerError(DevicePluginError):
    """Several pod containers could be meant; the plugin refuses to guess (module docstring, rule 4)."""


class UntrustedPlanError(DevicePluginError):
    """The container was identified but its pod has no plan the plugin may trust (missing, malformed, or not
    matching the pod's requests)."""


class UnhealthyPlanError(DevicePluginError):
    """The plan names a GPU that is unhealthy now (failure case B14): allocating it would start work on a faulty
    GPU, so admission fails and the pod is rescheduled."""


ContainerKey = tuple[str, str]
"""``(pod UID, container name)``."""


@attrs.frozen
class Candidate:
    """One pod container that may be the subject of an Allocate call.

    ``order``: position in kubelet's allocation order within the pod (init containers first). ``amounts``: the
    container's request per resource kind (integers, resource units; MIG resources included). ``grant``: its
    time-sharing entry of the trusted plan, or None; ``mig``: the MIG instances the trusted plan gives it (empty
    otherwise). Neither means the pod has no trusted plan (``problem`` says why).
    """

    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    order: int
    amounts: Mapping[ResourceKey, int]
    grant: ContainerGrant | None
    init: bool = False
    problem: str = ""
    mig: tuple[PlannedInstance, ...] = ()

    @property
    def key(self) -> ContainerKey:
        """``(pod UID, container)``."""
        return (self.pod_uid, self.container)

    @property
    def label(self) -> str:
        """``namespace/name:container`` for messages."""
        return f"{self.namespace}/{self.pod_name}:{self.container}"


def _names(candidates: Sequence[Candidate]) -> str:
    return ", ".join(sorted(c.label for c in candidates))


def select_container(
    kind: ResourceKey,
    count: int,
    candidates: Sequence[Candidate],
    served: Mapping[ContainerKey, Set[ResourceKey]],
) -> Candidate:
    """The container an Allocate call of ``count`` IDs of ``kind`` is for (module docstring, rules 1-4).

    ``candidates``: every container of a bound, pending, non-deleting pod on this node that asks for any of our
    resources; ``served``: the kinds already served per container. Raises :class:`NoMatchingContainerError`,
    :class:`AmbiguousContainerError`, or :class:`UntrustedPlanError` when the one match has no trusted plan.
    """
    matches = [c for c in candidates if c.amounts.get(kind, 0) == count and kind not in served.get(c.key, ())]
    what = f"{count} x {kind.value}"
    if not matches:
        raise NoMatchingContainerError(
            f"no pending pod container on this node asks for {what} (or it was already allocated)")
    in_progress = [c for c in matches if served.get(c.key)]
    if len(in_progress) > 1:
        raise AmbiguousContainerError(f"{what}: several containers are part-way through allocation: "
                                      f"{_names(in_progress)}")
    if in_progress:
        chosen = in_progress[0]
    else:
        firsts: dict[str, Candidate] = {}
        for c in sorted(matches, key=lambda c: c.order):
            firsts.setdefault(c.pod_uid, c)
        started_pods = {uid for uid, _ in served if served[(uid, _)]}
        pool = [c for c in firsts.values() if c.pod_uid in started_pods] or list(firsts.values())
        if len(pool) > 1:
            raise AmbiguousContainerError(
                f"{what} could be for any of {_names(pool)}; refusing to guess (pods with identical requests "
                "pending on one node at the same time cannot be told apart from kubelet's Allocate call)")
        chosen = pool[0]
    if chosen.grant is None and not chosen.mig:
        raise UntrustedPlanError(f"{chosen.label} asks for {what} but has no trusted plan: {chosen.problem}")
    return chosen


def pod_fully_served(
    pod_uid: str, candidates: Sequence[Candidate], served: Mapping[ContainerKey, Set[ResourceKey]]
) -> bool:
    """True when every kind (time-sharing and MIG) each candidate container of pod ``pod_uid`` asks for is in
    ``served`` (init containers included; containers that ask for none of our resources are not candidates and do
    not count). False when ``candidates`` has no container of the pod. Never raises."""
    mine = [c for c in candidates if c.pod_uid == pod_uid]
    return bool(mine) and all(set(c.amounts) <= set(served.get(c.key, ())) for c in mine)


def runtime_request(chosen: Candidate, gpus: Sequence[Gpu]) -> ContainerAllocationRequest:
    """The Runtime Allocate request for ``chosen`` from its plan on ``gpus`` (the node's GPUs with current health):
    planned GPUs (time-sharing) or MIG instances (parent GPU, profile, start, create) in plan order. Raises
    :class:`DevicePluginError` for a planned GPU not on the node and :class:`UnhealthyPlanError` for an unhealthy one
    (B14)."""
    by_index = {g.index: g for g in gpus}
    if chosen.mig:
        instances = []
        for instance in chosen.mig:
            gpu = by_index.get(instance.gpu_index)
            if gpu is None or gpu.uuid != instance.gpu_uuid:
                raise DevicePluginError(f"{chosen.label}: planned MIG GPU {instance.gpu_uuid} is not on this node")
            if gpu.health is not Health.HEALTHY:
                raise UnhealthyPlanError(f"{chosen.label}: planned MIG GPU {gpu.index} ({gpu.uuid}) is unhealthy")
            instances.append(PlannedMig(gpu.index, gpu.uuid, profile=instance.profile, start=instance.start,
                                        create=instance.create))
        return ContainerAllocationRequest(chosen.pod_uid, chosen.namespace, chosen.pod_name, chosen.container,
                                          (), init=chosen.init, mig=tuple(instances))
    assert chosen.grant is not None  # select_container raises UntrustedPlanError otherwise
    planned = []
    for grant in chosen.grant.grants:
        gpu = by_index.get(grant.gpu_index)
        if gpu is None:
            raise DevicePluginError(f"{chosen.label}: planned GPU index {grant.gpu_index} is not on this node")
        if gpu.health is not Health.HEALTHY:
            raise UnhealthyPlanError(f"{chosen.label}: planned GPU {gpu.index} ({gpu.uuid}) is unhealthy")
        planned.append(PlannedGpu(gpu.index, gpu.uuid, core_milli=grant.core_milli,
                                  memory_bytes=grant.memory_bytes))
    return ContainerAllocationRequest(chosen.pod_uid, chosen.namespace, chosen.pod_name, chosen.container,
                                      tuple(planned), init=chosen.init)


def planned_gpus(chosen: Candidate, gpus: Sequence[Gpu]) -> list[GpuUuid]:
    """The GPUs ``chosen``'s plan gives it, in plan order: its time-sharing grants' GPUs among ``gpus`` (the node's),
    then its MIG instances' GPUs. Never raises."""
    by_index = {g.index: g for g in gpus}
    planned = []
    if chosen.grant is not None:
        planned = [by_index[g.gpu_index].uuid for g in chosen.grant.grants if g.gpu_index in by_index]
    return planned + [i.gpu_uuid for i in chosen.mig]


def planned_instance_ids(chosen: Candidate, kind: MigResource,
                         listed: Mapping[tuple[GpuUuid, int], int]) -> list[str]:
    """The device IDs of ``kind`` naming ``chosen``'s planned MIG instances themselves (static strategy), in plan
    order; ``listed`` maps an existing instance's ``(GPU UUID, placement start)`` to its GPU instance id. A planned
    instance not listed has no ID."""
    return [str(DeviceId(i.gpu_uuid, kind, listed[(i.gpu_uuid, i.start)])) for i in chosen.mig
            if (i.gpu_uuid, i.start) in listed]
