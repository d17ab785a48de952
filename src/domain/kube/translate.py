"""Translate Kubernetes objects into the ledger's terms: pod requests, node inventories, pod allocations.

* :func:`pod_request` reads our three extended resources per container (limits, falling back to requests;
  both set must be equal, as the API server enforces for extended resources) plus node-level ``cpu`` and
  ``memory`` by Kubernetes' effective-request rule ``max(Σ app, max init)``, and the GPU selector annotations.
  Units: core in percent of one GPU (integer 1..100) → milli-GPU; memory in ``memory_unit`` units → bytes, or
  in percentage mode → a relative share (``ContainerRequest.memory_milli``, resolved per GPU by the default
  rule of :mod:`domain.request`). Bad values raise :class:`InvalidRequestError` naming the pod, the container,
  the resource and the value (failure case B12).
* :func:`read_node` / :func:`node_inventory` read a Node's inventory annotation and allocatable quantities,
  and say why a node must not take GPU pods (missing, malformed, stale, future-dated or foreign-protocol
  inventory); :func:`inventory_reason` re-evaluates that reason at a later time without decoding again.
* :func:`read_allocation` / :func:`pod_allocation` give the ledger record of a pod that exists in the cluster:
  its plan when the pod is bound (never for a pending pod: failure case B07), the caller's own reservation
  while it is being bound, or an inferred placement for a pod bound by another scheduler (failure case B08,
  see :mod:`domain.kube.inference`).

MIG (:mod:`domain.mig`): :func:`pod_request` also reads ``<prefix>/mig-<profile>`` resources through the one shared
resource table (:func:`domain.mig.resources.mig_resource_table`, the table the device plugin registers from); a name
under that stem the table does not know is rejected with the table's "unknown profile" reason (failure case B30),
so the scheduler reports it instead of leaving the pod Pending. :func:`read_mig_plan` reads the MIG part of a
bound pod's plan (same trust rules as the GPU plan), :func:`mig_container_plans` writes it.

Sources: Kubernetes docs "Extended resources" (integers, requests = limits), "Resource sharing within containers"
(effective requests with init containers); failure cases B07/B08/B12 (``docs/failure-cases.md``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.kube.annotations import (
    MigContainerPlan,
    MigInstanceRecord,
    PlannedInstance,
    decode_inventory,
    decode_mig_plan,
    decode_plan,
)
from domain.kube.inference import check_plan, infer_allocation
from domain.kube.objects import ContainerSpec, NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants, parse_quantity
from domain.kube.quantity import parse_bytes, parse_count, parse_cpu_milli, parse_decimal_quantity
from domain.ledger import ClusterLedger
from domain.mig.errors import UnknownMigProfileError
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.mig.plugin import MigContainerRequest, MigPodRequest
from domain.mig.resources import RESOURCE_STEM, MigResourceTable, mig_resource_table, resource_prefix
from domain.request import ContainerRequest, GpuSelector, PodRequest
from domain.units import MAX_GPU_MEMORY_BYTES, MAX_NODE_QUANTITY, MILLI_PER_PERCENT, PERCENT_PER_GPU


@functools.lru_cache(maxsize=8)
def mig_table(protocol: ProtocolConstants) -> MigResourceTable:
    """The shared MIG resource table of ``protocol`` (every known GPU model; cached): the names pods may ask for
    and the device plugin registers. Raises :class:`InvalidRequestError` when the GPU resource has no prefix."""
    return mig_resource_table(protocol)


def mig_stem(protocol: ProtocolConstants) -> str | None:
    """``<prefix>/mig-``, the stem of every MIG resource name, or None when the GPU resource has no prefix."""
    try:
        return f"{resource_prefix(protocol)}/{RESOURCE_STEM}"
    except InvalidRequestError:
        return None


# ---------------------------------------------------------------------------------------------- pods
def _extended(pod: PodObject, spec: ContainerSpec, resource: str) -> int | None:
    """One extended resource of one container: limit (else request) as an integer, or None when absent."""
    field = f"pod[{pod.key}].container[{spec.name}].{resource}"
    limit, request = spec.limits.get(resource), spec.requests.get(resource)
    if None not in (limit, request) and parse_quantity(field, str(limit)) != parse_quantity(field, str(request)):
        raise InvalidRequestError(field, {"requests": request, "limits": limit}, "requests must equal limits")
    text = limit if limit is not None else request
    return None if text is None else parse_quantity(field, text)


def _percent(field: str, value: int | None, *, whole: str) -> int | None:
    """``value`` when it is None or 1..100 (percent of one GPU); ``whole``: the whole-GPU resource, named in the
    reason for more than 100 %. Raises :class:`InvalidRequestError` naming ``field``."""
    if value is not None and value < 1:
        raise InvalidRequestError(field, value, "must be an integer 1..100 (% of one GPU); 0 is not a request")
    if value is not None and value > PERCENT_PER_GPU:
        raise InvalidRequestError(field, value, f"must be an integer 1..100 (% of one GPU): a share cannot exceed "
                                  f"one GPU; ask for whole GPUs with {whole} instead")
    return value


def _mig_ask(pod: PodObject, spec: ContainerSpec, protocol: ProtocolConstants) -> tuple[str | None, int]:
    """The container's MIG ask ``(canonical profile, count)``, ``(None, 0)`` without one (module docstring)."""
    stem = mig_stem(protocol)
    if stem is None:
        return None, 0
    prefix = f"pod[{pod.key}].container[{spec.name}]"
    asks: dict[str, tuple[str, int]] = {}
    for resource in dict.fromkeys([*spec.limits, *spec.requests]):
        if not resource.startswith(stem):
            continue
        try:
            profile = mig_table(protocol).parse(resource)
        except UnknownMigProfileError as error:
            raise InvalidRequestError(f"{prefix}.{resource}", resource, str(error)) from None
        count = _extended(pod, spec, resource) or 0
        if profile is not None and count > 0:
            asks[resource] = (profile, count)
    if len(asks) > 1:
        raise InvalidRequestError(f"{prefix}.mig", sorted(asks),
                                  "a container asks for one MIG profile; split the profiles into containers")
    return next(iter(asks.values()), (None, 0))


def _container(pod: PodObject, spec: ContainerSpec, protocol: ProtocolConstants) -> ContainerRequest:
    names = protocol.resources
    prefix = f"pod[{pod.key}].container[{spec.name}]"
    mig_profile, mig_count = _mig_ask(pod, spec, protocol)
    gpus = _extended(pod, spec, names.gpu) or 0
    core = _percent(f"{prefix}.{names.core}", _extended(pod, spec, names.core), whole=names.gpu)
    memory = _extended(pod, spec, names.memory)
    memory_bytes: int | None = None
    memory_milli: int | None = None
    if memory is not None:
        unit = protocol.memory_unit_bytes
        if unit is None:
            memory_milli = _percent(f"{prefix}.{names.memory}", memory, whole=names.gpu)
            memory_milli = None if memory_milli is None else memory_milli * MILLI_PER_PERCENT
        elif memory < 1:
            raise InvalidRequestError(f"{prefix}.{names.memory}", memory, "must be at least 1; 0 is not a request")
        elif memory * unit > MAX_GPU_MEMORY_BYTES:
            raise InvalidRequestError(
                f"{prefix}.{names.memory}", memory,
                f"must be at most {MAX_GPU_MEMORY_BYTES // unit} (1 PiB in units of {unit} bytes): no GPU has that "
                "much memory")
        else:
            memory_bytes = memory * unit
    if gpus > 0 and (core is not None or memory is not None):
        raise InvalidRequestError(
            f"{prefix}.{names.gpu}", gpus,
            f"whole GPUs cannot be combined with {names.core}/{names.memory}: a whole GPU already grants 100 % core "
            "and all of its memory",
        )
    if mig_profile is not None and (gpus > 0 or core is not None or memory is not None):
        raise InvalidRequestError(
            f"{prefix}.mig", mig_profile,
            f"a container takes either MIG instances or {names.gpu}/{names.core}/{names.memory}, not both",
        )
    return ContainerRequest(
        spec.name,
        gpus=gpus,
        core_milli=None if core is None else core * MILLI_PER_PERCENT,
        memory_bytes=memory_bytes,
        init=spec.init,
        memory_milli=memory_milli,
        mig_profile=mig_profile,
        mig_count=mig_count,
    )


def node_requests(pod: PodObject) -> tuple[int, int]:
    """The pod's effective node-level ``(cpu milli-cores, memory bytes)``: per container the request (else the
    limit, which the API server copies into requests), then ``max(Σ app, max init)``. Raises
    :class:`InvalidRequestError` naming the container and resource for a malformed quantity or one above
    ``MAX_NODE_QUANTITY``."""
    app_cpu = app_mem = init_cpu = init_mem = 0
    for spec in pod.containers:
        values = []
        for resource, parse in (("cpu", parse_cpu_milli), ("memory", parse_bytes)):
            text = spec.requests.get(resource, spec.limits.get(resource))
            field = f"pod[{pod.key}].container[{spec.name}].{resource}"
            value = 0 if text is None else parse(field, text)
            if value > MAX_NODE_QUANTITY:
                unit = "milli-cores" if resource == "cpu" else "bytes"
                raise InvalidRequestError(field, text, f"must be at most {MAX_NODE_QUANTITY} {unit}: no node has "
                                          "that much")
            values.append(value)
        cpu, mem = values
        if spec.init:
            init_cpu, init_mem = max(init_cpu, cpu), max(init_mem, mem)
        else:
            app_cpu, app_mem = app_cpu + cpu, app_mem + mem
    return max(app_cpu, init_cpu), max(app_mem, init_mem)


def _csv(text: str | None) -> tuple[str, ...]:
    items = [part.strip() for part in (text or "").split(",")]
    return tuple(dict.fromkeys(item for item in items if item))


def pod_selector(pod: PodObject, protocol: ProtocolConstants) -> GpuSelector:
    """GPU selector from the pod's annotations: models (comma-separated allow-list), GPU UUIDs to use, GPU UUIDs
    to avoid. Blank entries are ignored."""
    keys = protocol.annotations
    return GpuSelector(
        models=_csv(pod.annotations.get(keys.pod_gpu_models)),
        include_uuids=frozenset(_csv(pod.annotations.get(keys.pod_gpu_uuids))),
        exclude_uuids=frozenset(_csv(pod.annotations.get(keys.pod_gpu_uuids_exclude))),
    )


def pod_request(pod: PodObject, protocol: ProtocolConstants) -> PodRequest:
    """The :class:`PodRequest` of ``pod`` (module docstring).

    Raises :class:`InvalidRequestError` naming pod, container, resource and value for: non-integer extended
    quantities (``50.5``, ``500m``), negative values, core 0 or > 100, memory 0 or above 1 PiB (in percentage
    mode: 0 or > 100), cpu or memory above ``MAX_NODE_QUANTITY``, requests ≠ limits, whole GPUs combined with
    core/memory, malformed cpu/memory quantities, an empty UID or duplicate container names; and for MIG: a
    ``<prefix>/mig-*`` name the shared table does not know (reason: the table's "unknown profile" message, with
    the canonical name when an alias was spelled; B30), two MIG profiles in one container, MIG combined with our
    time-sharing resources in one container or one pod.
    ``gpu=0`` next to core/memory is a plain share; a MIG amount 0 is no ask.
    """
    containers = tuple(_container(pod, spec, protocol) for spec in pod.containers)
    cpu, memory = node_requests(pod)
    return PodRequest(
        uid=pod.uid,
        containers=containers,
        namespace=pod.namespace,
        name=pod.name,
        cpu_milli=cpu,
        memory_bytes=memory,
        selector=pod_selector(pod, protocol),
    )


# ---------------------------------------------------------------------------------------------- nodes
@attrs.frozen
class InventoryReading:
    """What a Node says about itself.

    ``counted``: the inventory the ledger books against — the annotation's GPUs whenever it decodes (even when
    stale or from another protocol, so running pods stay counted), no GPUs when it is missing or malformed (the
    ledger may keep the GPUs the node last published instead: :class:`~domain.scheduling.sync.LedgerSync`), and
    always the node's allocatable CPU (milli-cores), memory (bytes) and pods. ``reason``: empty when the node
    may take new GPU pods, else why not. ``heartbeat``: the annotation's epoch seconds, when it decodes (None
    means missing or malformed). ``steady_reason``: the part of ``reason`` that does not depend on the time
    (everything but the heartbeat's age), so the reason at a later time is :func:`inventory_reason` of
    ``heartbeat`` and ``steady_reason`` without decoding the annotation again. ``mig``/``mig_strategy``: the MIG
    layout (GPU index → instances) and strategy of the annotation, when it decodes (empty otherwise).
    """

    counted: NodeInventory
    reason: str = ""
    heartbeat: float | None = None
    steady_reason: str = ""
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = attrs.field(factory=dict)
    mig_strategy: str = ""

    @property
    def inventory(self) -> NodeInventory | None:
        """The inventory when the node may take GPU pods, else None (see :attr:`reason`)."""
        return None if self.reason else self.counted


def _allocatable(node: NodeObject) -> tuple[tuple[int, int, int], list[str]]:
    values, problems = [], []
    for resource, parse in (("cpu", parse_cpu_milli), ("memory", parse_bytes), ("pods", parse_count)):
        text = node.allocatable.get(resource)
        field = f"node[{node.name}].allocatable.{resource}"
        try:
            value = 0 if text is None else parse(field, text)
            if value > MAX_NODE_QUANTITY:
                raise InvalidRequestError(field, text, f"must be at most {MAX_NODE_QUANTITY} in base units: no node "
                                          "has that much")
            values.append(value)
        except InvalidRequestError as error:
            values.append(0)
            problems.append(str(error))
    cpu, memory, pods = values
    return (cpu, memory, pods), problems


def heartbeat_problem(heartbeat: float | None, protocol: ProtocolConstants, *, now: float) -> str:
    """Why an inventory heartbeat (epoch seconds; None = no readable inventory) is not fresh at ``now``: older
    than ``protocol.inventory_stale_seconds``, or that far in the *future* (a device plugin whose clock runs
    ahead would otherwise stay fresh long after it stopped); empty when fresh."""
    if heartbeat is None:
        return ""
    age, limit = now - heartbeat, protocol.inventory_stale_seconds
    if age > limit:
        return f"stale GPU inventory: heartbeat {age:.0f} s old (limit {limit} s)"
    if -age > limit:
        return f"GPU inventory heartbeat {-age:.0f} s in the future (clock skew beyond the {limit} s limit)"
    return ""


def inventory_reason(heartbeat: float | None, steady_reason: str, protocol: ProtocolConstants, *, now: float) -> str:
    """The gate reason at ``now`` of a node read earlier (:class:`InventoryReading` fields): the heartbeat's
    problem first, then the steady part."""
    return "; ".join(p for p in (heartbeat_problem(heartbeat, protocol, now=now), steady_reason) if p)


PROTOCOL_PUBLISHERS = ("device-plugin", "exporter")
"""Node components that publish the fingerprint of their protocol on the Node (:func:`protocol_mismatches`)."""


def protocol_mismatches(node: NodeObject, protocol: ProtocolConstants) -> dict[str, str]:
    """``{component: fingerprint}`` for each node component (:data:`PROTOCOL_PUBLISHERS`) whose published
    protocol fingerprint (annotations ``node_protocol`` for the device plugin, ``node_exporter_protocol`` for the
    exporter) differs from ``protocol``'s. A component that published nothing is not a mismatch (not deployed,
    or not started yet: the device plugin's missing inventory gates the node anyway)."""
    keys = protocol.annotations
    ours = protocol.fingerprint()
    published = {"device-plugin": node.annotations.get(keys.node_protocol),
                 "exporter": node.annotations.get(keys.node_exporter_protocol)}
    return {c: f for c, f in published.items() if f is not None and f != ours}


KUBELET_UNREGISTERED = "device plugin not registered with kubelet (kubelet restarting?); kubelet would refuse GPU pods"
"""Gate reason of a node whose inventory says ``kubeletRegistered: false``: a pod bound there now would fail
kubelet's admission (``UnexpectedAdmissionError``), so it waits until the plugin has registered again."""


def read_node(node: NodeObject, protocol: ProtocolConstants, *, now: float) -> InventoryReading:
    """Read ``node``'s inventory annotation and allocatable quantities at ``now`` (epoch seconds).

    The reason is set when the annotation is missing or malformed, its heartbeat is more than
    ``protocol.inventory_stale_seconds`` old or in the future, it is stamped with another protocol fingerprint,
    the node's device plugin or exporter publishes another protocol fingerprint (:func:`protocol_mismatches`),
    the device plugin says it is not registered with kubelet (:data:`KUBELET_UNREGISTERED`), or when allocatable
    cannot be parsed. Never raises for bad node content.
    """
    (cpu, memory, pods), problems = _allocatable(node)
    key = protocol.annotations.node_inventory
    text = node.annotations.get(key)
    gpus: tuple[Gpu, ...] = ()
    heartbeat: float | None = None
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = {}
    strategy = ""
    if text is None:
        problems.insert(0, f"no GPU inventory annotation {key}")
    else:
        try:
            record = decode_inventory(text, key=key)
        except InvalidRequestError as error:
            problems.insert(0, f"malformed GPU inventory: {error}")
        else:
            gpus, heartbeat, mig, strategy = record.gpus, record.heartbeat, record.mig, record.mig_strategy
            if record.protocol != protocol.fingerprint():
                problems.insert(0, f"protocol mismatch: device plugin speaks {record.protocol}, "
                                   f"scheduler {protocol.fingerprint()}")
            if not record.kubelet_registered:
                problems.insert(0, KUBELET_UNREGISTERED)
    known = any(p.startswith("protocol mismatch") for p in problems)  # the inventory's own stamp, above
    for component, fingerprint in protocol_mismatches(node, protocol).items():
        if component != "device-plugin" or not known:
            problems.insert(0, f"protocol mismatch: {component.replace('-', ' ')} speaks {fingerprint}, "
                               f"scheduler {protocol.fingerprint()}")
    counted = NodeInventory(NodeName(node.name), gpus, cpu_milli=cpu, memory_bytes=memory, max_pods=pods)
    steady = "; ".join(problems)
    return InventoryReading(counted, inventory_reason(heartbeat, steady, protocol, now=now), heartbeat, steady,
                            dict(mig), strategy)


def node_inventory(node: NodeObject, protocol: ProtocolConstants, *, now: float) -> NodeInventory | None:
    """The node's inventory when it may take GPU pods, else None; :func:`read_node` gives the reason."""
    return read_node(node, protocol, now=now).inventory


# ---------------------------------------------------------------------------------------------- allocations
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


# ---------------------------------------------------------------------------------------------- MIG
def asks_mig(pod: PodObject, protocol: ProtocolConstants) -> bool:
    """True when a container of ``pod`` names a ``<prefix>/mig-*`` resource (a cheap look at the names only; the
    request may still be invalid)."""
    stem = mig_stem(protocol)
    return stem is not None and any(
        name.startswith(stem) for spec in pod.containers for name in (*spec.limits, *spec.requests))


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
