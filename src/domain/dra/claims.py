"""A ResourceClaim's allocation for our driver, turned into the Runtime grant that prepares it on this node.

The kubelet's ``NodePrepareResources`` names claims only (:class:`ClaimRef`: namespace, UID, name); the plugin
reads the claim's ``status.allocation.devices.results`` (:class:`AllocationResult`, one per allocated device and
request) and keeps the results whose ``driver`` is ours and whose ``pool`` is this node (the pool name of
:mod:`domain.dra.pool` is the node name). :func:`plan_claim` maps them to one
:class:`~domain.runtime.types.ContainerAllocationRequest`:

* **Device names** are those of :mod:`domain.dra.build`: ``gpu-<index>`` is the whole GPU with that NVML index
  (MIG off); ``gpu-<index>-mig-<profile>-<start>`` (``<profile>`` as :func:`domain.kube.protocol.dns_profile`
  spells it) is the MIG instance of that profile at that placement start on that GPU (MIG on), granted as the
  Runtime's :class:`~domain.runtime.types.PlannedMig` (profile, start; ``create`` when the Runtime lists no
  instance of the profile there: a dynamic-MIG Runtime creates it, a static one refuses), the way the device
  plugin asks for a planned MIG instance. Any other name, an index the node does not have, a whole-GPU device on
  a GPU in MIG mode, a MIG device on a GPU without MIG, an unknown profile or start, or a claim mixing whole
  GPUs or shares with MIG instances (one Runtime grant holds either) is refused.
* **Shares** come from ``consumedCapacity`` (consumable capacity, KEP-5075): ``cores`` in percent of one GPU
  (1..100; the slice's capacity is 100) becomes ``core_milli`` = cores × 10, ``memory`` (a quantity, bytes)
  becomes ``memory_bytes``. A result without consumed capacity takes the whole GPU (1000 milli-GPU, memory by the
  ledger's rule). Several results on one GPU (two requests of the claim) add up, at most one GPU.
* **The grant key**: the Runtime's records are keyed by (pod UID, container); a claim's grant uses
  (claim UID, :data:`CLAIM_CONTAINER`) and the claim's namespace and name as the pod's, so the Runtime counts it in
  the same per-GPU capacity book as device-plugin grants (``domain.runtime.capacity``) with no contract change.

Errors: :class:`ClaimPreparationError` with a message naming the claim and the field or device at fault.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu, MigMode
from domain.kube.protocol import dns_profile, parse_quantity
from domain.mig.profiles import MigGpuModel, MigProfile
from domain.runtime.mig import mig_table, same_profile
from domain.runtime.types import ContainerAllocationRequest, DeviceInfo, PlannedGpu, PlannedMig
from domain.units import MILLI_PER_GPU

CLAIM_CONTAINER = "dra-claim"
"""The container name of every claim grant in the Runtime's book (key = claim UID + this name)."""

_WHOLE_GPU = re.compile(r"^gpu-(0|[1-9][0-9]{0,3})$")
_MIG_DEVICE = re.compile(r"^gpu-(0|[1-9][0-9]{0,3})-mig-([a-z0-9]+(?:-[a-z0-9]+)*)-(0|[1-9][0-9]{0,2})$")
_MIG_PARENT = re.compile(r"^gpu-(0|[1-9][0-9]{0,3})-mig-")
"""Any name in our MIG devices' namespace: its parent GPU is known even where the rest does not parse."""
_PERCENT_MILLI = MILLI_PER_GPU // 100


class ClaimPreparationError(DomainError):
    """A claim cannot be prepared on this node; the message names the claim and what is wrong."""


@attrs.frozen
class ClaimRef:
    """A claim as the kubelet names it: ``namespace``, ``uid`` (the key of every answer) and ``name``. Raises
    :class:`InvalidRequestError` (field ``claim.uid`` / ``claim.name``) when one is empty."""

    namespace: str
    uid: str
    name: str

    def __attrs_post_init__(self) -> None:
        if not self.uid:
            raise InvalidRequestError("claim.uid", self.uid, "must not be empty")
        if not self.name:
            raise InvalidRequestError("claim.name", self.name, "must not be empty")

    @property
    def label(self) -> str:
        """``claim <namespace>/<name> (<uid>)`` for messages."""
        return f"claim {self.namespace}/{self.name} ({self.uid})"


def _text_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


@attrs.frozen
class AllocationResult:
    """One ``status.allocation.devices.results`` entry: ``request`` name, ``driver``, ``pool``, ``device`` name,
    ``consumed`` capacity (name → quantity text, e.g. ``{"cores": "30", "memory": "4Gi"}``; empty when the
    scheduler recorded none) and ``share_id`` (None without consumable capacity)."""

    request: str
    driver: str
    pool: str
    device: str
    consumed: Mapping[str, str] = attrs.field(factory=dict, converter=_text_map)
    share_id: str | None = None


@attrs.frozen
class DeviceAsk:
    """One ``spec.devices.requests`` entry of a claim, as far as the standalone scheduler allocates it
    (:mod:`domain.dra.allocate`): ``name``; for an ``exactly`` request ``device_class`` (``deviceClassName``),
    ``mode`` (``allocationMode``: ``ExactCount`` or ``All``), ``count`` (devices, with ``ExactCount``) and
    ``capacity`` (``capacity.requests``: capacity name → quantity text); ``extras``: the other fields it sets
    (``selectors``, ``adminAccess``, ``tolerations``, ``firstAvailable``), which that allocator does not evaluate."""

    name: str
    device_class: str = ""
    mode: str = "ExactCount"
    count: int = 1
    capacity: Mapping[str, str] = attrs.field(factory=dict, converter=_text_map)
    extras: tuple[str, ...] = ()


@attrs.frozen
class ClaimAllocation:
    """A claim read from the API: its identity (``namespace``, ``name``, ``uid``), ``results`` (empty when the
    claim is not allocated) and the object's ``resource_version`` (empty where unknown); from its spec the device
    ``requests`` and ``extras`` (``spec.devices`` fields besides ``requests`` that it sets: ``constraints``,
    ``config``); ``allocated``: ``status.allocation`` is set (whatever the drivers); ``reserved_for``: the UIDs of
    ``status.reservedFor``, in order."""

    namespace: str
    name: str
    uid: str
    results: tuple[AllocationResult, ...] = ()
    resource_version: str = ""
    requests: tuple[DeviceAsk, ...] = ()
    extras: tuple[str, ...] = ()
    allocated: bool = False
    reserved_for: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def ours(results: Iterable[AllocationResult], *, driver: str, pool: str) -> tuple[AllocationResult, ...]:
    """The results of ``driver`` in ``pool`` (this node), in their order."""
    return tuple(r for r in results if r.driver == driver and r.pool == pool)


def gpu_index(claim: ClaimRef, device: str) -> int:
    """The NVML index of whole-GPU device ``device`` (``gpu-<index>``). Raises :class:`ClaimPreparationError` for a
    MIG device (:func:`mig_parent_index` reads its GPU) or a name that is not a device of this driver."""
    if _MIG_PARENT.match(device):
        raise ClaimPreparationError(f"{claim.label}: device {device!r} is a MIG device; it is prepared as a MIG "
                                    "instance, not a whole GPU")
    match = _WHOLE_GPU.match(device)
    if match is None:
        raise ClaimPreparationError(f"{claim.label}: device {device!r} is not a device of this driver "
                                    "(expected gpu-<index> or gpu-<index>-mig-<profile>-<start>)")
    return int(match.group(1))


def _mig(claim: ClaimRef, device: str, by_index: Mapping[int, DeviceInfo]) -> PlannedMig:
    """The Runtime's planned MIG instance for MIG device name ``device`` (module docstring)."""
    parsed = mig_device(device)
    if parsed is None:
        raise ClaimPreparationError(f"{claim.label}: device {device!r} is not a device of this driver "
                                    "(expected gpu-<index>-mig-<profile>-<start>, the profile in DNS form)")
    index, name, start = parsed
    info = by_index.get(index)
    if info is None:
        raise ClaimPreparationError(f"{claim.label}: device {device!r}: this node has no GPU {index}")
    if info.gpu.mig_mode is not MigMode.ENABLED:
        raise ClaimPreparationError(f"{claim.label}: device {device!r}: GPU {index} is not in MIG mode")
    placed = mig_placement(info.gpu, name, start)
    if placed is None:
        raise ClaimPreparationError(f"{claim.label}: device {device!r}: GPU {index} ({info.gpu.model}) has no MIG "
                                    f"profile {name!r} placed at memory slice {start}")
    table, profile = placed
    listed = any(i.start == start and same_profile(i.profile, profile.name, table) for i in info.mig_instances)
    return PlannedMig(index, info.gpu.uuid, profile=profile.name, start=start, create=not listed)


def mig_device(device: str) -> tuple[int, str, int] | None:
    """``(parent GPU index, profile in DNS form, start memory slice)`` of MIG device name ``device``
    (``gpu-<index>-mig-<profile>-<start>``), None for a name not of that form."""
    match = _MIG_DEVICE.match(device)
    return None if match is None else (int(match.group(1)), match.group(2), int(match.group(3)))


def mig_placement(gpu: Gpu, name: str, start: int) -> tuple[MigGpuModel, MigProfile] | None:
    """``gpu``'s profile table and its profile whose DNS form is ``name`` (:func:`dns_profile`), when that
    profile may be placed at memory slice ``start``; None otherwise (no table, no such profile, no such start)."""
    table = mig_table(gpu)
    profile = None if table is None else next((p for p in table.profiles if dns_profile(p.name) == name), None)
    return None if table is None or profile is None or start not in profile.placements else (table, profile)


def mig_parent_index(device: str) -> int | None:
    """The parent GPU's NVML index of MIG device ``device`` (``gpu-<index>-mig-<profile>-<start>``), None for any
    other name; the rest of the name is not checked (the parent is enough to count the GPU as taken)."""
    match = _MIG_PARENT.match(device)
    return None if match is None else int(match.group(1))


def result_share(claim: ClaimRef, result: AllocationResult) -> tuple[int, int | None]:
    """(core milli-GPU, memory bytes or None = derived from the core by the ledger's rule) that ``result`` takes
    of its GPU: no ``consumedCapacity`` is the whole GPU (1000, None); ``cores`` percent × 10, absent = 1000.
    Raises :class:`ClaimPreparationError` naming the field for a quantity that does not parse or is out of range
    (cores 1..100, memory ≥ 1 byte)."""
    if not result.consumed:
        return MILLI_PER_GPU, None
    where = f"{claim.label}: device {result.device} consumedCapacity"
    try:
        cores = result.consumed.get("cores")
        core = MILLI_PER_GPU if cores is None else parse_quantity(f"{where}.cores", cores) * _PERCENT_MILLI
        memory_text = result.consumed.get("memory")
        memory = None if memory_text is None else parse_quantity(f"{where}.memory", memory_text)
    except InvalidRequestError as error:
        raise ClaimPreparationError(str(error)) from error
    if not 1 <= core <= MILLI_PER_GPU:
        raise ClaimPreparationError(f"{where}.cores={result.consumed.get('cores')!r}: must be 1..100 (percent)")
    if memory is not None and memory < 1:
        raise ClaimPreparationError(f"{where}.memory={memory_text!r}: must be at least 1 byte")
    return core, memory


def plan_claim(claim: ClaimRef, results: Sequence[AllocationResult], devices: Sequence[DeviceInfo]) -> (
        ContainerAllocationRequest):
    """The Runtime grant of ``claim`` for ``results`` (already filtered by :func:`ours`) on the node's
    ``devices`` (module docstring). Raises :class:`ClaimPreparationError` for no results, an unknown device, a MIG
    device that does not fit the GPU, whole GPUs mixed with MIG instances, a bad consumed capacity, or shares
    adding up beyond one GPU."""
    if not results:
        raise ClaimPreparationError(f"{claim.label}: no allocated device of this driver on this node")
    by_index = {d.gpu.index: d for d in devices}
    mig = tuple(_mig(claim, r.device, by_index) for r in results if _MIG_PARENT.match(r.device))
    if mig and len(mig) != len(results):
        raise ClaimPreparationError(f"{claim.label}: the claim mixes MIG devices with whole GPUs or shares "
                                    f"({', '.join(r.device for r in results)}); one grant holds either")
    if mig:
        return ContainerAllocationRequest(pod_uid=claim.uid, namespace=claim.namespace, pod_name=claim.name,
                                          container=CLAIM_CONTAINER, gpus=(), mig=mig)
    totals: dict[int, tuple[int, int | None]] = {}
    for result in results:
        index = gpu_index(claim, result.device)
        info = by_index.get(index)
        if info is None:
            raise ClaimPreparationError(f"{claim.label}: device {result.device!r}: this node has no GPU {index}")
        if info.gpu.mig_mode is MigMode.ENABLED:
            raise ClaimPreparationError(f"{claim.label}: device {result.device!r}: GPU {index} is in MIG mode")
        core, memory = result_share(claim, result)
        if index in totals:
            old_core, old_memory = totals[index]
            core = old_core + core
            memory = None if memory is None or old_memory is None else memory + old_memory
        if core > MILLI_PER_GPU:
            raise ClaimPreparationError(f"{claim.label}: GPU {index}: the claim's shares add up to {core} milli-GPU, "
                                        f"more than one GPU ({MILLI_PER_GPU})")
        totals[index] = (core, memory)
    gpus = tuple(PlannedGpu(index=i, uuid=by_index[i].gpu.uuid, core_milli=core, memory_bytes=memory)
                 for i, (core, memory) in totals.items())
    return ContainerAllocationRequest(pod_uid=claim.uid, namespace=claim.namespace, pod_name=claim.name,
                                      container=CLAIM_CONTAINER, gpus=gpus)
