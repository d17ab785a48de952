"""The ledger record of a pod that exists in the cluster (:func:`read_allocation`): its plan when the pod is bound
and the plan is trusted, the caller's own reservation while it is being bound, or an inferred placement for a pod
bound by another scheduler (:mod:`domain.kube.inference`). Invariant: a plan on a pending pod is never trusted
(B07); a pod bound by others is still counted (B08); ``docs/failure-cases.md``.
"""


from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.kube.annotations import (
    decode_plan,
)
from domain.kube.inference import check_plan, infer_allocation
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.quantity import parse_decimal_quantity
from domain.kube.translate.pods import (
    mig_stem,
    node_requests,
    pod_request,
)
from domain.ledger import ClusterLedger
from domain.request import PodRequest


class AllocationSource(enum.Enum):
    """Where a pod's ledger record comes from."""

    PLAN = "plan"
    """The plan annotation of a bound pod, checked against its requests and the node's inventory."""
    ASSUMED = "assumed"
    """The caller's own reservation (pod not bound yet, or bound before its plan came back)."""
    INFERRED = "inferred"
    """Bound pod asking for our resources without a usable plan (another scheduler; B08)."""
    NODE_ONLY = "node-only"
    """Bound pod without GPU requests (or with unreadable ones): node CPU, memory and a pod slot only."""
    NONE = "none"
    """Not counted: pending, or in a terminal phase."""


@attrs.frozen
class AllocationReading:
    """A pod's ledger record (None when not counted), its :class:`AllocationSource`, and ``problem``: why a
    plan was not used or the request could not be read (empty when nothing went wrong).

    ``gpu_unknown``: the pod is bound and names our GPU resources (time-sharing or MIG) but its request cannot be
    read (invalid or impossible, such as 2^63 bytes of GPU memory), so what it holds of the node's GPUs is
    unknown. Its record is node-only; a booking of the GPUs would be a guess that is smaller than nothing at all
    tells, so callers treat the node as unusable for GPU pods instead (:class:`~domain.scheduling.sync.LedgerSync`
    gates it).
    """

    allocation: PodAllocation | None
    source: AllocationSource
    problem: str = ""
    gpu_unknown: bool = attrs.field(default=False, kw_only=True)


def _nonzero(field: str, text: object) -> bool:
    """True unless ``text`` is a valid quantity equal to 0 (kubelet allocates no device for 0; an unreadable
    amount may hold anything)."""
    try:
        return parse_decimal_quantity(field, text) != 0
    except InvalidRequestError:
        return True


def names_gpu_resources(pod: PodObject, protocol: ProtocolConstants) -> bool:
    """True when a container of ``pod`` asks for one of our time-sharing GPU resources or a ``<prefix>/mig-*``
    resource with an amount that is not a valid 0 (the amounts may be invalid: kubelet hands out no device for a
    0, so such a container holds nothing of the GPUs)."""
    names = protocol.resources
    ours = {names.gpu, names.core, names.memory}
    stem = mig_stem(protocol)

    def gpu_resource(name: str) -> bool:
        return name in ours or (stem is not None and name.startswith(stem))

    return any(gpu_resource(name) and _nonzero(name, text)
               for spec in pod.containers for amounts in (spec.limits, spec.requests) for name, text in amounts.items())


def read_allocation(
    pod: PodObject,
    node_gpus: Sequence[Gpu],
    protocol: ProtocolConstants,
    *,
    ledger: ClusterLedger | None = None,
    assumed: PodAllocation | None = None,
    infer: bool = True,
    parse: Callable[[PodObject], PodRequest] | None = None,
) -> AllocationReading:
    """The ledger record of ``pod`` as it exists in the cluster (module docstring), never raising.

    ``node_gpus``: current GPUs of ``pod.node_name``. ``ledger``: the live books, which inference reads to
    place a plan-less pod on GPUs that are actually free (the pod's own record is discounted). ``assumed``: the
    caller's reservation of this pod, if any; ``infer=False`` returns source INFERRED with no allocation instead
    of computing it (for callers that infer several pods together). ``parse``: how the pod's request is read
    (default :func:`pod_request`; :class:`domain.kube.requests.PodRequests` memoises it).

    Order: terminal → not counted; unbound → ``assumed`` or not counted (a plan on a pending pod is never
    trusted, B07); unreadable request → node-only (``gpu_unknown`` when it names our GPU resources); no GPU
    request → node-only; valid plan → plan; else ``assumed`` on the same node; else inference.
    """
    if pod.phase.terminal:
        return AllocationReading(None, AllocationSource.NONE, f"phase {pod.phase.value}")
    if not pod.node_name:
        if assumed is not None:
            return AllocationReading(assumed, AllocationSource.ASSUMED)
        return AllocationReading(None, AllocationSource.NONE, "not bound")
    try:
        request = pod_request(pod, protocol) if parse is None else parse(pod)
    except InvalidRequestError as error:
        try:
            cpu, memory = node_requests(pod)
        except InvalidRequestError:
            cpu = memory = 0
        only = PodAllocation(pod.uid, pod.node_name, (), cpu_milli=cpu, memory_bytes=memory)
        return AllocationReading(only, AllocationSource.NODE_ONLY, f"unreadable request: {error}",
                                 gpu_unknown=names_gpu_resources(pod, protocol))
    if not request.wants_gpu:
        only = PodAllocation(pod.uid, pod.node_name, (), cpu_milli=request.cpu_milli,
                             memory_bytes=request.memory_bytes)
        return AllocationReading(only, AllocationSource.NODE_ONLY)
    key = protocol.annotations.pod_plan
    text = pod.annotations.get(key)
    problem = f"no plan annotation {key}"
    if text is not None:
        try:
            plan = decode_plan(text, key=key, pod_uid=pod.uid, node=pod.node_name, node_gpus=node_gpus,
                               cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes)
            check_plan(plan, request, node_gpus, key=key)
        except InvalidRequestError as error:
            problem = f"plan not trusted: {error}"
        else:
            return AllocationReading(plan, AllocationSource.PLAN)
    if assumed is not None and assumed.node == pod.node_name:
        return AllocationReading(assumed, AllocationSource.ASSUMED, problem)
    if not infer:
        return AllocationReading(None, AllocationSource.INFERRED, problem)
    inferred, note = infer_allocation(request, pod.node_name, node_gpus, ledger)
    return AllocationReading(inferred, AllocationSource.INFERRED, "; ".join(p for p in (problem, note) if p))


def pod_allocation(
    pod: PodObject,
    node_gpus: Sequence[Gpu],
    protocol: ProtocolConstants,
    *,
    ledger: ClusterLedger | None = None,
    assumed: PodAllocation | None = None,
) -> PodAllocation | None:
    """The ledger record of ``pod`` or None; :func:`read_allocation` also says where it came from and why."""
    return read_allocation(pod, node_gpus, protocol, ledger=ledger, assumed=assumed).allocation
