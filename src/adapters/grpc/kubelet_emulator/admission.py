"""Pod admission as kubelet's device manager does it, without I/O: the result types, the device pick and the merge
of a container's Allocate responses (kubelet ``pkg/kubelet/cm/devicemanager/manager.go``, ``devicesToAllocate``).

Kubelet admits one pod at a time. For each container (init containers first, then app containers, each in spec
order) and each device-plugin resource in its limits, it picks device IDs (:func:`pick_devices`), sends them to the
plugin in one ``Allocate`` and records them (``podDevices``); a container's runtime config is the merge of its
per-resource responses (:func:`merge_responses`). Any failure rejects the pod with reason
:data:`UNEXPECTED_ADMISSION_ERROR` (``admission.GetPodAdmitResult``), a requested extended resource no plugin ever
registered with ``OutOf<resource>`` (the predicate admit handler); kubelet then records a Warning event and sets
the pod ``Failed`` with that reason and the message ``Pod was rejected: <message>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import ContainerSpec
from domain.kube.protocol import parse_quantity
from domain.runtime.types import ContainerAllocationResponse, DeviceSpec, Mount

log = logging.getLogger(__name__)

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
"""Pod status reason of a failed device allocation (kubelet ``unexpectedAdmissionError.Type()``)."""

HEALTHY = "Healthy"
"""``v1beta1.Healthy``: the only health string kubelet counts as healthy (anything else is unhealthy)."""


class AdmissionError(Exception):
    """Kubelet's device manager refused a container; the message is kubelet's error text."""


def out_of_reason(resource: str) -> str:
    """The predicate handler's reason for a resource the node lacks: ``OutOf<resource>`` (``OutOfnvidia.com/gpu``)."""
    return f"OutOf{resource}"


def unexpected_message(error: str) -> str:
    """Kubelet's message for a device-manager failure (``unexpectedAdmissionError.Error()``)."""
    return f"Allocate failed due to {error}, which is unexpected"


def is_extended_resource(name: str) -> bool:
    """True for a domain-qualified name outside ``kubernetes.io`` (``vendor.tld/name``), which kubelet accepts
    from device plugins (``v1helper.IsExtendedResourceName``); ``cpu``, ``memory``, ``hugepages-*`` are native."""
    domain, slash, rest = name.partition("/")
    if not slash or not domain or not rest or name.startswith("requests."):
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def container_requests(spec: ContainerSpec) -> dict[str, int]:
    """The container's extended-resource amounts: limit, else request (the API server requires equal requests and
    limits and fills requests from limits; the in-memory cluster does not validate, so both are read), in limits
    order. Zero amounts are dropped (kubelet allocates nothing for them).

    Raises :class:`AdmissionError` for a non-integer quantity (``500m``; the API server rejects those).
    """
    names = [*spec.limits, *(n for n in spec.requests if n not in spec.limits)]
    amounts: dict[str, int] = {}
    for name in names:
        if not is_extended_resource(name):
            continue
        text = spec.limits.get(name, spec.requests.get(name, "0"))
        try:
            value = parse_quantity(name, str(text))
        except InvalidRequestError as error:
            raise AdmissionError(f"container {spec.name!r}: {error}") from None
        if value > 0:
            amounts[name] = value
    return amounts


PreferredFn = Callable[[Sequence[str], Sequence[str], int], Sequence[str]]
"""``(available, must_include, allocation_size) -> device IDs``: one ``GetPreferredAllocation`` round trip."""


def pick_devices(
    *, resource: str, required: int, reusable: Sequence[str], available: Sequence[str],
    preferred: PreferredFn | None,
) -> list[str]:
    """Choose ``required`` device IDs of ``resource`` like kubelet's ``devicesToAllocate`` (no topology hints):

    1. IDs lent by finished init containers of the same pod (``reusable``) first, in order;
    2. if more are needed and ``available`` (healthy, not allocated) holds fewer than the rest, fail;
    3. when the plugin offers it (``preferred`` not None), call GetPreferredAllocation with ``available`` plus the
       IDs already chosen, ``must_include`` = those chosen, size = ``required``, and keep the returned IDs that are
       in ``available`` (in the plugin's order);
    4. fill any shortfall from ``available`` in advertised order.

    Raises :class:`AdmissionError` with kubelet's text (``requested number of devices unavailable for …``);
    exceptions of ``preferred`` propagate (kubelet fails admission when the call fails).
    """
    chosen: list[str] = []

    def take(candidates: Iterable[str]) -> bool:
        for ident in candidates:
            if len(chosen) >= required:
                break
            if ident not in chosen:
                chosen.append(ident)
        return len(chosen) >= required

    if take(reusable):
        return chosen
    free = [i for i in available if i not in chosen]
    needed = required - len(chosen)
    if len(free) < needed:
        raise AdmissionError(f"requested number of devices unavailable for {resource}. "
                             f"Requested: {needed}, Available: {len(free)}")
    if preferred is not None:
        offered = set(free)
        if take(i for i in preferred([*free, *chosen], list(chosen), required) if i in offered):
            return chosen
    take(free)
    return chosen


@attrs.frozen
class ClaimDevice:
    """One device of a prepared DRA claim as its driver's ``NodePrepareResources`` answered it: ``driver``,
    ``pool``, ``device`` (the claim's allocation result), ``cdi_ids`` (fully qualified CDI names) and ``share_id``
    (None without consumable capacity)."""

    driver: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...] = ()
    share_id: str | None = None


@attrs.frozen
class ContainerClaim:
    """A prepared DRA claim a container uses (pod-resources ``dynamic_resources``): ``namespace``, ``name``,
    ``uid`` and its ``devices``."""

    namespace: str
    name: str
    uid: str
    devices: tuple[ClaimDevice, ...] = ()


@attrs.frozen
class ContainerAdmission:
    """One container as kubelet admitted it: ``name``, ``init`` (an init container), ``devices`` (resource name →
    device IDs kubelet allocated, in allocation order; kubelet's ``podDevices`` entry), ``responses`` (resource name
    → that resource's ``ContainerAllocateResponse`` in domain form) and ``runtime`` (their merge: envs, mounts,
    device nodes, annotations, CDI device names, see :func:`merge_responses`), ``cdi_env`` (the env edits the
    CDI-enabled runtime injected for those names and for its claims' CDI names; empty without a CDI spec directory)
    and ``claims`` (the prepared DRA claims it uses, :class:`ContainerClaim`; app containers only)."""

    name: str
    init: bool = False
    devices: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    responses: Mapping[str, ContainerAllocationResponse] = attrs.field(factory=dict)
    runtime: ContainerAllocationResponse = attrs.field(factory=ContainerAllocationResponse)
    cdi_env: Mapping[str, str] = attrs.field(factory=dict)
    claims: tuple[ContainerClaim, ...] = ()


@attrs.frozen
class PodAdmission:
    """An admitted pod: ``uid``, ``namespace``, ``name`` and its containers in admission order (init containers
    first). Every container of the pod is listed, also those holding no device."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerAdmission, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def app_containers(self) -> tuple[ContainerAdmission, ...]:
        """The app containers (what pod-resources ``List`` reports; plain init containers are not listed)."""
        return tuple(c for c in self.containers if not c.init)

    def device_ids(self, resource: str) -> frozenset[str]:
        """Every device ID of ``resource`` the pod holds (init containers' lent IDs counted once)."""
        return frozenset(i for c in self.containers for i in c.devices.get(resource, ()))


@attrs.frozen
class AdmissionResult:
    """The outcome of one admission: ``admission`` when admitted, else None with kubelet's ``reason``
    (:data:`UNEXPECTED_ADMISSION_ERROR`, ``OutOf<resource>``, ``RunContainerError``) and ``message``."""

    admission: PodAdmission | None
    reason: str = ""
    message: str = ""

    @property
    def admitted(self) -> bool:
        """True when the pod was admitted."""
        return self.admission is not None


def merge_responses(responses: Iterable[ContainerAllocationResponse], *, container: str) -> ContainerAllocationResponse:
    """Merge one container's per-resource Allocate responses as kubelet's ``deviceRunContainerOptions`` does: envs
    and annotations by key, device nodes and mounts by container path (the first value wins and a conflicting
    later one is logged and dropped), CDI device names in order, each once (``getCDIDeviceInfo``)."""
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    devices: dict[str, DeviceSpec] = {}
    mounts: dict[str, Mount] = {}
    cdi: dict[str, None] = {}

    def put(target: dict[str, str], key: str, value: str, what: str) -> None:
        if key in target:
            if target[key] != value:
                log.error("container %s: conflicting %s %s: keeping %r, dropping %r", container, what, key,
                          target[key], value)
            return
        target[key] = value

    for response in responses:
        for key, value in response.envs.items():
            put(envs, key, value, "environment variable")
        for key, value in response.annotations.items():
            put(annotations, key, value, "annotation")
        for device in response.devices:
            known = devices.setdefault(device.container_path, device)
            if known.host_path != device.host_path:
                log.error("container %s: device %s maps to %s and %s; keeping the first", container,
                          device.container_path, known.host_path, device.host_path)
        cdi.update(dict.fromkeys(response.cdi_devices))
        for mount in response.mounts:
            seen = mounts.setdefault(mount.container_path, mount)
            if seen.host_path != mount.host_path:
                log.error("container %s: mount %s maps to %s and %s; keeping the first", container,
                          mount.container_path, seen.host_path, mount.host_path)
    return ContainerAllocationResponse(envs=envs, mounts=tuple(mounts.values()), devices=tuple(devices.values()),
                                       annotations=annotations, cdi_devices=tuple(cdi))
