"""A ResourceClaim's allocation for our driver as records of the scheduler's ledger (one book with classic pods).

kube-scheduler's DRA allocator writes ``status.allocation.devices.results``; the results of our driver name a
pool (= the node name, :mod:`domain.dra.pool`) and a device of :mod:`domain.dra.build`. :func:`claim_bookings`
turns them into one :class:`~domain.allocation.PodAllocation` per node, keyed :func:`claim_record_uid` (``claim:``
+ the claim UID, never a pod UID), with no CPU, host memory or pod slot (``pod_slot=False``: the pods that use the
claim count those themselves) and per GPU what the Runtime grants the claim (:func:`domain.dra.claims.plan_claim`,
whose parsing is reused: :func:`~domain.dra.claims.gpu_index`, :func:`~domain.dra.claims.result_share`):

* ``gpu-<index>`` without ``consumedCapacity``: the whole GPU (1000 milli-GPU, all its memory, a whole-GPU grant);
* ``gpu-<index>`` with ``consumedCapacity``: ``cores`` % × 10 milli-GPU, ``memory`` bytes, a missing one derived
  by the ledger's rule (:func:`domain.request.resolve_share`, as the Runtime does); several results on one GPU add
  up.

**MIG devices** (``gpu-<index>-mig-<profile>-<start>``) on a GPU the inventory lists in MIG mode are the MIG
books' (:mod:`domain.scheduling.mig.books`), not the ledger's: :func:`book_mig_on_node` turns them into one
:class:`~domain.mig.ledger.MigPodAllocation` under the same key, one booking per device (container = the request
name; ``create`` in dynamic mode where the node lists no instance of the profile there), which the MIG books
hold like a pod's instances. The time-sharing record leaves them out (the ledger's per-GPU books of a MIG-mode GPU
take no time-sharing pod anyway).

**Safe side.** What cannot be mapped exactly is counted as more, never dropped, and named in
:attr:`ClaimBooking.problems` (the caller logs them): a consumed capacity that does not parse, shares adding up
beyond one GPU, and a MIG device whose parent GPU is **not** in MIG mode count as the whole GPU. A MIG device on a
GPU in MIG mode whose profile or start the GPU's table does not have is named in :attr:`MigClaimBooking.problems`
and not booked (no instance can be told). A device whose GPU cannot be told at all (a name not of this driver, an
index the node does not list) leaves the GPU usage unknown: :attr:`ClaimBooking.unknown` says why, and the caller
gates the node for GPU pods while the claim is there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.dra.claims import (
    AllocationResult,
    ClaimAllocation,
    ClaimPreparationError,
    ClaimRef,
    gpu_index,
    mig_device,
    mig_parent_index,
    mig_placement,
    result_share,
)
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, MigMode
from domain.kube.annotations import MigInstanceRecord
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.request import resolve_share
from domain.units import MILLI_PER_GPU

CLAIM_RECORD_PREFIX = "claim:"
"""Prefix of a claim's record key in the ledger (``claim:<claim uid>``)."""

SHARES = "dra-shares"
WHOLE = "dra-whole"
"""The record's container names: its shared GPUs and its whole GPUs."""


def claim_record_uid(claim_uid: str) -> str:
    """The ledger key of the claim with UID ``claim_uid``."""
    return f"{CLAIM_RECORD_PREFIX}{claim_uid}"


def is_claim_record(uid: str) -> bool:
    """True when ledger key ``uid`` is a claim's (:func:`claim_record_uid`)."""
    return uid.startswith(CLAIM_RECORD_PREFIX)


@attrs.frozen
class ClaimBooking:
    """What one claim holds on one ``node``: the ledger ``record`` (None when no GPU of it could be told),
    ``problems`` (results counted on the safe side, for the log) and ``unknown`` (why part of its GPU usage is
    unknown; empty when all is known)."""

    node: str
    record: PodAllocation | None
    problems: tuple[str, ...] = ()
    unknown: str = ""


def _ref(claim: ClaimAllocation) -> ClaimRef:
    try:
        return ClaimRef(claim.namespace, claim.uid, claim.name)
    except InvalidRequestError:
        return ClaimRef(claim.namespace, claim.uid or "?", claim.name or "?")


def node_results(claim: ClaimAllocation, driver: str) -> dict[str, tuple[AllocationResult, ...]]:
    """The claim's results of ``driver`` grouped by pool (= node name), in their order; empty when it holds
    nothing of ours (unallocated, or only other drivers' devices)."""
    out: dict[str, list[AllocationResult]] = {}
    for result in claim.results:
        if result.driver == driver and result.pool:
            out.setdefault(result.pool, []).append(result)
    return {node: tuple(results) for node, results in out.items()}


def _one(ref: ClaimRef, result: AllocationResult, gpus: dict[int, Gpu],
         problems: list[str]) -> tuple[int, int, int | None] | str | None:
    """(index, core milli-GPU, memory bytes or None) of one result, None memory with 1000 core = the whole GPU;
    why its GPU is unknown; or None when the result is not booked (a MIG device on a GPU in MIG mode)."""
    parent = mig_parent_index(result.device)
    try:
        index = gpu_index(ref, result.device) if parent is None else parent
    except ClaimPreparationError as error:
        return str(error)
    if index not in gpus:
        return f"{ref.label}: device {result.device!r}: the node lists no GPU {index}"
    if parent is not None:
        if gpus[index].mig_mode is not MigMode.DISABLED:
            return None  # the MIG books' (book_mig_on_node)
        problems.append(f"{ref.label}: MIG device {result.device!r} on GPU {index}, which is not in MIG mode, "
                        f"counted as the whole GPU {index}")
        return index, MILLI_PER_GPU, None
    try:
        return (index, *result_share(ref, result))
    except ClaimPreparationError as error:
        problems.append(f"{error}; counted as the whole GPU {index}")
        return index, MILLI_PER_GPU, None


def book_on_node(claim: ClaimAllocation, node: str, results: Sequence[AllocationResult],
                 gpus: Sequence[Gpu]) -> ClaimBooking:
    """The :class:`ClaimBooking` of ``claim``'s ``results`` (of our driver, in pool ``node``) on a node listing
    ``gpus`` (module docstring). Never raises for bad claim content."""
    ref = _ref(claim)
    by_index = {g.index: g for g in gpus}
    problems: list[str] = []
    unknown: list[str] = []
    totals: dict[int, tuple[int, int]] = {}
    whole: set[int] = set()
    for result in results:
        share = _one(ref, result, by_index, problems)
        if share is None:
            continue
        if isinstance(share, str):
            unknown.append(share)
            continue
        index, core, memory = share
        if (core, memory) == (MILLI_PER_GPU, None):
            whole.add(index)
        if index in whole:
            continue
        capacity = by_index[index].memory_bytes
        core, memory_bytes = resolve_share(core_milli=core, memory_bytes=memory, gpu_memory_bytes=capacity)
        old_core, old_memory = totals.get(index, (0, 0))
        core, memory_bytes = old_core + core, old_memory + memory_bytes
        if core > MILLI_PER_GPU or memory_bytes > capacity:
            problems.append(f"{ref.label}: GPU {index}: the claim's shares add up to {core} milli-GPU and "
                            f"{memory_bytes} bytes, beyond one GPU; counted as the whole GPU")
            whole.add(index)
        totals[index] = (core, memory_bytes)
    containers = []
    shared = tuple(GpuGrant(i, c, m) for i, (c, m) in sorted(totals.items()) if i not in whole)
    if shared:
        containers.append(ContainerGrant(SHARES, shared))
    held = tuple(GpuGrant(i, MILLI_PER_GPU, by_index[i].memory_bytes) for i in sorted(whole))
    if held:
        containers.append(ContainerGrant(WHOLE, held, whole=True))
    record = (PodAllocation(claim_record_uid(claim.uid), node, tuple(containers), pod_slot=False)
              if containers else None)
    return ClaimBooking(node, record, tuple(problems), "; ".join(unknown))


@attrs.frozen
class MigClaimBooking:
    """What one claim holds in the MIG books of one node: the ``record`` (None when it holds no MIG instance
    there) and ``problems`` (MIG devices not booked, for the log)."""

    record: MigPodAllocation | None
    problems: tuple[str, ...] = ()


def book_mig_on_node(claim: ClaimAllocation, node: str, results: Sequence[AllocationResult], gpus: Sequence[Gpu],
                     *, layout: Mapping[int, Sequence[MigInstanceRecord]], dynamic: bool) -> MigClaimBooking:
    """The MIG books' record of ``claim``'s MIG devices among ``results`` (of our driver, in pool ``node``) on GPUs
    of ``gpus`` in MIG mode (module docstring); ``layout``: the instances the node lists (GPU index → instances),
    ``dynamic``: the books' placement mode is dynamic. Never raises for bad claim content."""
    ref = _ref(claim)
    by_index = {g.index: g for g in gpus}
    bookings: list[MigBooking] = []
    problems: list[str] = []
    for result in results:
        parent = mig_parent_index(result.device)
        gpu = None if parent is None else by_index.get(parent)
        if gpu is None or gpu.mig_mode is MigMode.DISABLED:
            continue  # not a MIG device on a MIG GPU: the ledger's record (book_on_node) counts it
        index, name, start = mig_device(result.device) or (gpu.index, "?", -1)
        placed = mig_placement(gpu, name, start)
        if placed is None:
            problems.append(f"{ref.label}: MIG device {result.device!r}: GPU {index} ({gpu.model}) has no MIG "
                            "profile and placement of that name (gpu-<index>-mig-<profile in DNS form>-<start>); "
                            "not booked")
            continue
        table, profile = placed
        listed = any(i.start == start and table.lookup(i.profile) == profile for i in layout.get(index, ()))
        bookings.append(MigBooking(index, profile.name, start, result.request, create=dynamic and not listed))
    if not bookings:
        return MigClaimBooking(None, tuple(problems))
    try:
        record = MigPodAllocation(claim_record_uid(claim.uid), node, tuple(bookings))
    except InvalidRequestError as error:
        return MigClaimBooking(None, (*problems, f"{ref.label}: {error}; not booked"))
    return MigClaimBooking(record, tuple(problems))
