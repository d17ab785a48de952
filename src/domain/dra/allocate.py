"""The standalone scheduler's DRA allocator: a pod's ResourceClaims of our driver as asks of the one ledger, and
the allocation written back exactly as kube-scheduler's DynamicResources plugin writes it, so neither the kubelet
nor our driver can tell who allocated.

**Which claims** (:func:`claim_names`): each ``spec.resourceClaims`` entry names an existing claim or a template;
a template's claim is the one ``status.resourceClaimStatuses`` names (kube-controller-manager's resourceclaim
controller makes it): none named yet means wait (:class:`ClaimRefusedError`, retried), "" means no claim is needed.

**Asks** (:func:`claim_need`), per claim of the pod:

* *allocated* (``status.allocation`` set; a claim shared by several pods, or one allocated earlier): its devices of
  our driver must lie on one node; the pod is pinned there and nothing new is booked (the claim's own ledger record
  holds its GPUs, :mod:`domain.dra.booking`); the pod is added to ``reservedFor`` unless there, within the API's
  limit of :data:`MAX_RESERVED_FOR` consumers;
* *not allocated*: each request becomes one ask container ``dra-claim/<pod claim>/<request>`` of the pod's
  request (:class:`~domain.request.ContainerRequest`), so one policy over one ledger places classic containers and
  claims together:

  - class ``dra.device_class_gpu`` (``ExactCount``, ``count`` k, no capacity): k whole GPUs;
  - class ``dra.device_class_share`` (count 1): ``cores`` (percent of one GPU, an integer 1..100) and ``memory``
    (bytes, rounded up to the memory unit: the slice's ``requestPolicy`` step, :func:`domain.dra.build.memory_step`)
    → a share of one GPU. An omitted capacity consumes the policy's default, all of it (:mod:`domain.dra.build`):
    without ``memory`` the claim takes the GPU's whole memory, so its ask is the whole GPU (no share fits beside
    it); without ``cores`` it takes 100 % of the cores with that memory;
  - a MIG class (``dra.device_class_mig`` of a profile of the profile tables, :func:`mig_class_profiles`;
    ``count`` k, no capacity): k instances of that profile, placed by the MIG books like a classic MIG container
    (a claim of MIG instances and of whole GPUs or shares is refused: the Runtime grants a claim one kind);
  - anything else is refused (:class:`ClaimRefusedError`, naming claim, request, field and value): other classes,
    ``allocationMode: All``, a share with ``count`` above 1, capacity
    other than ``cores`` and ``memory``, ``selectors``, ``adminAccess``, ``tolerations``, ``firstAvailable``,
    ``spec.devices.constraints`` or ``config``, and the protocol's percent memory mode.

**Results** (:func:`claim_results`): one ``status.allocation.devices.results`` entry per device granted to an ask
container: the request, our driver, pool = the node (:mod:`domain.dra.pool`), device ``gpu-<index>``,
``consumedCapacity`` ``cores`` (percent) and ``memory`` (bytes) as the device's request policy gives them, and a
``shareID``: the devices allow multiple allocations, and for such devices kube-scheduler records both on every
allocation (``resource.k8s.io/v1`` AllocatedDeviceStatus/DeviceRequestAllocationResult, KEP-5075). A MIG instance
is the device ``gpu-<index>-mig-<profile in DNS form>-<start>`` (:mod:`domain.dra.build`) of its booking, without
consumed capacity or ``shareID`` (MIG devices are allocated once). The allocation's node selector is
``matchFields metadata.name In [node]`` (the writer's concern, :mod:`ports.claim_writes`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import attrs

from domain.allocation import ContainerGrant, PodAllocation
from domain.dra.booking import node_results
from domain.dra.build import memory_step
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu
from domain.kube.objects import PodObject
from domain.kube.protocol import DraNames, ProtocolConstants, dns_profile, mig_device_class, parse_quantity
from domain.mig.ledger import MigPodAllocation
from domain.mig.profiles import MIG_MODELS
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.units import MILLI_PER_PERCENT, PERCENT_PER_GPU

ASK_PREFIX = "dra-claim/"
"""Name prefix of a claim's ask containers (a container name is a DNS label: no real container has a ``/``)."""
MAX_RESERVED_FOR = 256
"""Most consumers a claim's ``status.reservedFor`` may list (resource.k8s.io/v1 ResourceClaimReservedForMaxSize)."""
_CAPACITIES = frozenset({"cores", "memory"})


class ClaimRefusedError(DomainError):
    """The pod cannot be placed with its claims now; the message names the claim, the request and why (a claim
    not made or not found yet reads the same way: the pod is retried)."""


@attrs.frozen
class ClaimAsk:
    """A not yet allocated ``claim`` of the pod: ``containers``, one ask per request in request order, and per
    request what it consumes of each device, ``cores`` in percent and ``memory`` in bytes (None: the device's
    default, all of it)."""

    claim: ClaimAllocation
    containers: tuple[ContainerRequest, ...]
    consumed: tuple[tuple[int | None, int | None], ...]


@attrs.frozen
class ClaimNeed:
    """What a pod's claims ask (module docstring): ``asks`` to allocate, ``shared`` claims already allocated that
    it uses (reserved for it unless ``reserved_for`` lists it already) and ``node``, where those pin it (None: no
    pin)."""

    asks: tuple[ClaimAsk, ...] = ()
    shared: tuple[ClaimAllocation, ...] = ()
    node: str | None = None

    def request(self, base: PodRequest) -> PodRequest:
        """``base`` (the pod's own request: its containers, CPU, memory, selector) with the ask containers added.
        Raises :class:`InvalidRequestError` as :class:`PodRequest` does (MIG asks beside GPU or share asks), and for a
        pod with init containers asking GPU resources: a claim is held for the pod's whole life, beside its init
        containers as beside its app containers, which the effective-request rule of one request cannot say."""
        extra = tuple(c for ask in self.asks for c in ask.containers)
        if not extra:
            return base
        for container in base.containers:
            if container.init and (container.kind is not GpuKind.NONE or container.wants_mig):
                raise InvalidRequestError(f"container[{container.name}]", "init container asking GPU resources",
                                          "a pod whose DRA claims lj-runtimekit's scheduler places cannot have one; "
                                          "ask the GPU in an app container or through a claim")
        return attrs.evolve(base, containers=(*base.containers, *extra))

    def expected(self) -> dict[str, frozenset[str]]:
        """Claim UID → the names of its ask containers, for each claim to allocate: the ledger hands those
        containers over to the claim's record when it is booked
        (:meth:`~domain.scheduling.sync.claims.ClaimEvents.expect_claims`)."""
        return {ask.claim.uid: frozenset(c.name for c in ask.containers) for ask in self.asks}


def without_asks(allocation: PodAllocation) -> PodAllocation:
    """``allocation`` without any claim's ask container (names starting :data:`ASK_PREFIX`): what the pod's plan
    annotation carries (the claims' records hold the rest)."""
    kept = tuple(c for c in allocation.containers if not c.container.startswith(ASK_PREFIX))
    return allocation if len(kept) == len(allocation.containers) else attrs.evolve(allocation, containers=kept)


def ask_name(pod_claim: str, request: str) -> str:
    """The ask container of ``request`` of the pod's claim entry ``pod_claim``."""
    return f"{ASK_PREFIX}{pod_claim}/{request}"


def claim_names(pod: PodObject) -> tuple[tuple[str, str], ...]:
    """``(pod claim entry, ResourceClaim name)`` of each claim ``pod`` uses, in spec order (entries the
    resourceclaim controller needs no claim for are left out). Raises :class:`ClaimRefusedError` while a template's
    claim is not made yet."""
    out = []
    for entry in pod.resource_claims:
        name = entry.resolved
        if name is None:
            raise ClaimRefusedError(f"pod claim {entry.name!r}: waiting for the ResourceClaim made from template "
                               f"{entry.template_name!r} (kube-controller-manager's resourceclaim controller)")
        if name:
            out.append((entry.name, name))
    return tuple(out)


def _refuse(claim: ClaimAllocation, request: str, why: str) -> ClaimRefusedError:
    where = f" request {request!r}" if request else ""
    return ClaimRefusedError(f"ResourceClaim {claim.key}{where}: {why}")


def _shared_node(claim: ClaimAllocation, pod_uid: str, driver: str) -> str:
    pools = node_results(claim, driver)
    if not pools:
        raise _refuse(claim, "", f"allocated without devices of driver {driver}; its pods are kube-scheduler's")
    if len(pools) > 1:
        raise _refuse(claim, "", f"allocated on several nodes ({', '.join(sorted(pools))})")
    if pod_uid not in claim.reserved_for and len(claim.reserved_for) >= MAX_RESERVED_FOR:
        raise _refuse(claim, "", f"already reserved for {MAX_RESERVED_FOR} pods, the most the API allows")
    return next(iter(pools))


def _capacity(claim: ClaimAllocation, ask: DeviceAsk, name: str, low: int, high: int | None) -> int | None:
    text = ask.capacity.get(name)
    if text is None:
        return None
    try:
        value = parse_quantity(f"capacity.requests.{name}", text)
    except InvalidRequestError as error:
        raise _refuse(claim, ask.name, str(error)) from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f"at least {low}"
        raise _refuse(claim, ask.name, f"capacity.requests.{name}={text!r} must be {bound}")
    return value


@functools.lru_cache(maxsize=8)
def mig_class_profiles(names: DraNames) -> Mapping[str, str]:
    """MIG DeviceClass name → the canonical MIG profile it asks for, for every profile of the profile tables
    (:data:`domain.mig.profiles.MIG_MODELS`; the classes the DRA deploy creates, :func:`mig_device_class`)."""
    return {mig_device_class(names, p.name): p.name for model in MIG_MODELS.values() for p in model.profiles}


def _ask(claim: ClaimAllocation, pod_claim: str, ask: DeviceAsk, protocol: ProtocolConstants
         ) -> tuple[ContainerRequest, tuple[int | None, int | None]]:
    dra = protocol.dra
    if ask.extras:
        raise _refuse(claim, ask.name, f"sets {', '.join(ask.extras)}, which lj-runtimekit's scheduler does not "
                      "evaluate; leave the pod to kube-scheduler (schedulerName default-scheduler)")
    profile = mig_class_profiles(dra).get(ask.device_class)
    if ask.device_class not in (dra.device_class_gpu, dra.device_class_share) and profile is None:
        raise _refuse(claim, ask.name, f"device class {ask.device_class!r} is not allocated by lj-runtimekit's "
                      f"scheduler (it allocates {dra.device_class_gpu}, {dra.device_class_share} and "
                      f"{mig_device_class(dra, '<profile>')} of a known MIG profile)")
    if ask.mode != "ExactCount":
        raise _refuse(claim, ask.name, f"allocationMode {ask.mode!r}: only ExactCount is allocated")
    unknown = sorted(set(ask.capacity) - _CAPACITIES)
    if unknown:
        raise _refuse(claim, ask.name, f"capacity.requests {unknown}: the devices have only cores and memory")
    name = ask_name(pod_claim, ask.name)
    if profile is not None:
        if ask.capacity:
            raise _refuse(claim, ask.name, f"capacity.requests {dict(ask.capacity)}: class {ask.device_class} "
                          "takes whole MIG instances, no capacity")
        if not 1 <= ask.count <= 64:
            raise _refuse(claim, ask.name, f"count={ask.count} must be 1..64 MIG instances")
        return ContainerRequest(name, mig_profile=profile, mig_count=ask.count), (None, None)
    if ask.device_class == dra.device_class_gpu:
        if ask.capacity:
            raise _refuse(claim, ask.name, f"class {ask.device_class} takes whole GPUs: no capacity.requests "
                          f"(ask class {dra.device_class_share} for a share)")
        if not 1 <= ask.count <= 64:
            raise _refuse(claim, ask.name, f"count={ask.count} must be 1..64 GPUs")
        return ContainerRequest(name, gpus=ask.count), (None, None)
    if ask.count != 1:
        raise _refuse(claim, ask.name, f"count={ask.count}: a share request takes one GPU (use one request per GPU)")
    step = protocol.memory_unit_bytes
    if step is None:
        raise _refuse(claim, ask.name, "the protocol's memory unit is a percentage; shares of class "
                      f"{ask.device_class} are allocated by kube-scheduler in that mode")
    cores = _capacity(claim, ask, "cores", 1, PERCENT_PER_GPU)
    memory = _capacity(claim, ask, "memory", 1, None)
    if memory is None:
        return ContainerRequest(name, gpus=1), (cores, None)
    memory = -(-memory // step) * step
    core_milli = (PERCENT_PER_GPU if cores is None else cores) * MILLI_PER_PERCENT
    return ContainerRequest(name, core_milli=core_milli, memory_bytes=memory), (cores, memory)


def claim_need(pod: PodObject, claims: Mapping[str, ClaimAllocation | None], protocol: ProtocolConstants) -> ClaimNeed:
    """The :class:`ClaimNeed` of ``pod`` given its claims by name (None: not found) (module docstring). Raises
    :class:`ClaimRefusedError` naming the claim for a claim that is missing, unusable or asks what is not allocated
    here."""
    asks: list[ClaimAsk] = []
    shared: list[ClaimAllocation] = []
    nodes: dict[str, str] = {}
    seen: set[str] = set()
    for pod_claim, name in claim_names(pod):
        claim = claims.get(name)
        if claim is None:
            raise ClaimRefusedError(f"pod claim {pod_claim!r}: ResourceClaim {pod.namespace}/{name} does not exist")
        if claim.uid in seen:
            continue
        seen.add(claim.uid)
        if claim.allocated or claim.results:
            nodes[claim.key] = _shared_node(claim, pod.uid, protocol.dra.driver)
            shared.append(claim)
            continue
        if claim.extras:
            raise _refuse(claim, "", f"sets spec.devices {', '.join(claim.extras)}, which lj-runtimekit's "
                          "scheduler does not evaluate; leave the pod to kube-scheduler")
        if not claim.requests:
            raise _refuse(claim, "", "asks no device")
        made = [_ask(claim, pod_claim, ask, protocol) for ask in claim.requests]
        if len({c.wants_mig for c, _ in made}) > 1:
            raise _refuse(claim, "", "asks MIG instances and whole GPUs or shares in one claim; the Runtime grants a "
                          "claim one kind: use one claim for each")
        asks.append(ClaimAsk(claim, tuple(c for c, _ in made), tuple(d for _, d in made)))
    if len(set(nodes.values())) > 1:
        raise ClaimRefusedError(f"the pod's allocated claims lie on different nodes: "
                           f"{', '.join(f'{k} on {n}' for k, n in sorted(nodes.items()))}")
    return ClaimNeed(tuple(asks), tuple(shared), next(iter(nodes.values()), None))


def default_memory(gpu: Gpu, protocol: ProtocolConstants) -> int:
    """Bytes a claim that names no ``memory`` consumes of ``gpu``: its request policy's default (the largest
    multiple of the step not above the GPU's memory), or all of it where the device has no policy
    (:mod:`domain.dra.build`)."""
    step = memory_step(gpu.memory_bytes, protocol)
    top = gpu.memory_bytes // step * step
    return top if top >= 2 * step else gpu.memory_bytes


def claim_results(ask: ClaimAsk, allocation: PodAllocation, gpus: Sequence[Gpu], protocol: ProtocolConstants,
                  share_id: Callable[[], str], mig: MigPodAllocation | None = None) -> tuple[AllocationResult, ...]:
    """The ``status.allocation.devices.results`` of ``ask`` placed as ``allocation`` (and, for MIG asks, the pod's
    MIG reservation ``mig``) says on its node, whose GPUs are ``gpus`` (module docstring); ``share_id`` makes each
    share result's ``shareID`` (a UUID). Raises :class:`ClaimRefusedError` when the placement grants an ask
    container nothing or a GPU ``gpus`` does not list."""
    by_name: dict[str, ContainerGrant] = {c.container: c for c in allocation.containers}
    by_index = {g.index: g for g in gpus}
    results = []
    for ask_request, container, (cores, memory) in zip(ask.claim.requests, ask.containers, ask.consumed, strict=True):
        if container.wants_mig:
            booked = [] if mig is None else [b for b in mig.bookings if b.container == container.name]
            if len(booked) != container.mig_count:
                raise _refuse(ask.claim, ask_request.name, f"the placement on node {allocation.node} books "
                              f"{len(booked)} of its {container.mig_count} MIG instances")
            results += [AllocationResult(request=ask_request.name, driver=protocol.dra.driver, pool=allocation.node,
                                         device=f"gpu-{b.gpu_index}-mig-{dns_profile(b.profile)}-{b.start}")
                        for b in sorted(booked, key=lambda b: (b.gpu_index, b.start))]
            continue
        granted = by_name.get(container.name)
        if granted is None or not granted.grants:
            raise _refuse(ask.claim, ask_request.name, f"the placement on node {allocation.node} grants it no GPU")
        for grant in granted.grants:
            gpu = by_index.get(grant.gpu_index)
            if gpu is None:
                raise _refuse(ask.claim, ask_request.name, f"node {allocation.node} lists no GPU {grant.gpu_index}")
            used = default_memory(gpu, protocol) if memory is None else memory
            consumed = {"cores": str(PERCENT_PER_GPU if cores is None else cores), "memory": str(used)}
            results.append(AllocationResult(request=ask_request.name, driver=protocol.dra.driver,
                                            pool=allocation.node, device=f"gpu-{gpu.index}", consumed=consumed,
                                            share_id=share_id()))
    return tuple(results)
