"""The MIG part of a pod: its MIG request (:func:`mig_pod_request`), the plan's MIG part the scheduler writes
(:func:`mig_container_plans`) and reads back from a bound pod (:func:`read_mig_plan`, same trust rules as the GPU
plan). Invariant: a MIG plan is trusted only when it matches the pod's request and the node's listed instances.
"""


from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import (
    MigContainerPlan,
    PlannedInstance,
    decode_mig_plan,
)
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate.pods import (
    mig_stem,
    pod_request,
)
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.mig.requests import MigContainerRequest, MigPodRequest
from domain.request import PodRequest


def asks_mig(pod: PodObject, protocol: ProtocolConstants) -> bool:
    """True when a container of ``pod`` names a ``<prefix>/mig-*`` resource (a cheap look at the names only; the
    request may still be invalid)."""
    stem = mig_stem(protocol)
    return stem is not None and any(
        name.startswith(stem) for spec in pod.containers for names in (spec.limits, spec.requests) for name in names)


def mig_pod_request(request: PodRequest) -> MigPodRequest:
    """The MIG plugin's view of ``request``'s MIG containers (names, canonical profiles, counts, init flags).
    Raises :class:`InvalidRequestError` when the pod asks for no MIG instance."""
    containers = tuple(MigContainerRequest(c.name, c.mig_profile or "", c.mig_count, c.init)
                       for c in request.mig_containers)
    if not containers:
        raise InvalidRequestError(f"pod[{request.uid}].mig", 0, "the pod asks for no MIG instance")
    return MigPodRequest(request.uid, containers)


def _place(booking: MigBooking) -> tuple[int, int]:
    return (booking.gpu_index, booking.start)


def mig_container_plans(
    request: PodRequest,
    allocation: MigPodAllocation,
    node_gpus: Sequence[Gpu],
    instance_ids: Mapping[tuple[int, int], str] | None = None,
) -> tuple[MigContainerPlan, ...]:
    """What each MIG container of ``request`` receives at Allocate under ``allocation`` (the plan annotation's
    ``mig`` lists), in the pod's container order.

    An app container receives the bookings labelled with its name, by GPU index and start. An init container
    (kubelet hands its devices on to the app containers) receives first the bookings labelled with its name (the
    instances only a larger init container needs), then the pod's other bookings of its profile, by GPU index
    and start, as many as it asks for. ``instance_ids``: ``(gpu index, start)`` → NVML GPU instance id of existing
    instances (informational). Raises :class:`InvalidRequestError` when a container's count is not covered or a
    booking names a GPU index the node does not have.
    """
    by_index = {g.index: g for g in node_gpus}
    ids = instance_ids or {}
    ordered = sorted(allocation.bookings, key=_place)
    out: list[MigContainerPlan] = []
    for container in (c for c in request.containers if c.wants_mig):
        own = [b for b in ordered if b.container == container.name]
        if container.init:
            own += [b for b in ordered if b.container != container.name and b.profile == container.mig_profile]
        chosen = own[:container.mig_count]
        field = f"pod[{request.uid}].container[{container.name}].mig"
        if len(chosen) != container.mig_count:
            raise InvalidRequestError(field, len(chosen), f"the MIG plan covers {len(chosen)} of "
                                      f"{container.mig_count} instances")
        instances = []
        for booking in chosen:
            gpu = by_index.get(booking.gpu_index)
            if gpu is None:
                raise InvalidRequestError(f"{field}.gpu_index", booking.gpu_index,
                                          f"node {allocation.node} has no such GPU")
            instances.append(PlannedInstance(booking.gpu_index, GpuUuid(gpu.uuid), booking.profile, booking.start,
                                             booking.create, None if booking.create else ids.get(_place(booking))))
        out.append(MigContainerPlan(container.name, container.init, tuple(instances)))
    return tuple(out)


def mig_allocation_of(plans: Iterable[MigContainerPlan], *, pod_uid: str, node: str) -> MigPodAllocation:
    """The MIG books' record of a pod from its plan's MIG containers (the inverse of :func:`mig_container_plans`):
    each instance once, labelled with the first app container listing it, else the first init container;
    bookings by GPU index and start. Raises :class:`InvalidRequestError` when two app containers list one
    instance or an instance is listed with different profiles or ``create`` flags."""
    plans = list(plans)
    first: dict[tuple[int, int], MigBooking] = {}
    app_owner: dict[tuple[int, int], str] = {}
    for plan in sorted(plans, key=lambda p: p.init):  # app containers first (stable: plan order within each)
        for instance in plan.instances:
            place = (instance.gpu_index, instance.start)
            booking = MigBooking(instance.gpu_index, instance.profile, instance.start, plan.container, instance.create)
            seen = first.setdefault(place, booking)
            field = f"pod[{pod_uid}].containers.{plan.container}.mig"
            if (seen.profile, seen.create) != (booking.profile, booking.create):
                raise InvalidRequestError(field, place, f"listed as {seen.profile} (create={seen.create}) by "
                                          f"container {seen.container} and as {booking.profile} (create="
                                          f"{booking.create}) here")
            if not plan.init:
                if place in app_owner:
                    raise InvalidRequestError(field, place, f"app container {app_owner[place]} holds it too")
                app_owner[place] = plan.container
    return MigPodAllocation(pod_uid, node, tuple(first[p] for p in sorted(first)))


def check_mig_plan(plans: Sequence[MigContainerPlan], request: PodRequest, *, key: str) -> None:
    """Check the plan's MIG containers against the pod's own MIG asks (B07: a plan is believed only as far as the
    pod's requests agree): the same containers, init flags, counts and profiles. Raises
    :class:`InvalidRequestError` naming ``key`` and the container."""
    asked = {c.name: c for c in request.mig_containers}
    listed = {p.container: p for p in plans}
    for name in sorted(set(asked) | set(listed)):
        field = f"{key}.containers.{name}.mig"
        container, plan = asked.get(name), listed.get(name)
        if container is None:
            raise InvalidRequestError(field, len(plan.instances) if plan else 0, "the container asks for no MIG "
                                      "instance")
        if plan is None:
            raise InvalidRequestError(field, None, f"the container asks for {container.mig_count} x "
                                      f"{container.mig_profile} but the plan lists none")
        if plan.init != container.init or len(plan.instances) != container.mig_count:
            raise InvalidRequestError(field, len(plan.instances), f"the container asks for {container.mig_count} x "
                                      f"{container.mig_profile} (init={container.init})")
        wrong = sorted({i.profile for i in plan.instances if i.profile != container.mig_profile})
        if wrong:
            raise InvalidRequestError(field, wrong, f"the container asks for {container.mig_profile}")


@attrs.frozen
class MigPlanReading:
    """The MIG part of a bound pod's plan: ``plans`` (per MIG container, by name) and ``allocation`` (the MIG
    books' record) when the plan is trusted, else both empty/None and ``problem`` says why."""

    plans: Mapping[str, MigContainerPlan] = attrs.field(factory=dict)
    allocation: MigPodAllocation | None = None
    problem: str = ""


def read_mig_plan(pod: PodObject, node_gpus: Sequence[Gpu], protocol: ProtocolConstants,
                  *, request: PodRequest | None = None) -> MigPlanReading:
    """The MIG plan of ``pod`` (bound to a node whose current GPUs are ``node_gpus``), never raising: trusted only
    when the pod is bound, its request reads and asks for MIG instances, and the plan decodes (its ``podUID`` and
    node) and agrees with the request (:func:`check_mig_plan`). ``request``: the pod's request when the caller has
    it already."""
    if not pod.node_name:
        return MigPlanReading(problem="not bound")
    try:
        request = request if request is not None else pod_request(pod, protocol)
    except InvalidRequestError as error:
        return MigPlanReading(problem=f"unreadable request: {error}")
    if not request.wants_mig:
        return MigPlanReading(problem="the pod asks for no MIG instance")
    key = protocol.annotations.pod_plan
    text = pod.annotations.get(key)
    if text is None:
        return MigPlanReading(problem=f"no plan annotation {key}")
    try:
        plans = decode_mig_plan(text, key=key, pod_uid=pod.uid, node=pod.node_name, node_gpus=node_gpus)
        check_mig_plan(plans, request, key=key)
        allocation = mig_allocation_of(plans, pod_uid=pod.uid, node=pod.node_name)
    except InvalidRequestError as error:
        return MigPlanReading(problem=f"MIG plan not trusted: {error}")
    return MigPlanReading({p.container: p for p in plans}, allocation)
