"""Per-namespace quotas on what the DRA claims of our driver consume: cores and memory, summed over the namespace.

Native DRA quota (ResourceQuota ``<class>.deviceclass.resource.k8s.io/devices``) counts devices, so a claim of 10 %
of a GPU and one of a whole GPU count the same. Here a namespace's cluster admin sets two Namespace labels (their
keys are the protocol's ``dra.claim-quota-cores`` and ``dra.claim-quota-memory``):

* cores: a non-negative integer, percent of one GPU (``100`` = one whole GPU's compute; ``250`` = two and a half);
* memory: a non-negative integer Kubernetes quantity (``64Gi``, bytes).

A label left out sets no limit on that key; a namespace with neither has no quota. :func:`read_limits` raises
:class:`~domain.errors.InvalidRequestError` naming the label and its value for anything else.

**What one allocated claim consumes** (:func:`claim_usage`), summed over its ``status.allocation.devices.results``
of our driver (other drivers' results count nothing):

* a result with ``consumedCapacity`` (a share of a GPU, consumable capacity): its ``cores`` and ``memory``, parsed
  by :func:`domain.dra.claims.result_share` (the DRA plugin's parser); a missing ``cores`` is the whole GPU's 100, a
  missing ``memory`` the share of the device's memory the cores give (the ledger's rule,
  :func:`domain.request.resolve_share`);
* a result without ``consumedCapacity``: the whole device as its ResourceSlice publishes it
  (:func:`device_facts`): a whole GPU is 100 cores and its ``capacity.memory``; a MIG device is its
  ``capacity.memory`` (the profile's memory) and ``ceil(100 × compute slices it takes / compute slices of its GPU)``
  cores, read from its ``consumesCounters`` (``compute-slice-<i>``) against its GPU's counter set (so a 3g.40gb
  instance of an A100, 3 of 7 slices, is 43 cores);
* **safe side**: a consumed capacity that does not parse counts as the whole device; a device no slice of the
  driver lists (its node gone) counts 100 cores and 0 memory, and is named in :attr:`ClaimUsage.unknown` (the
  claim under review is refused for it when the namespace limits memory: :func:`quota_refusal`'s caller).

**The check** (:func:`quota_refusal`): a new allocation is refused when what the namespace's other allocated claims
use plus what it asks exceeds a limit; the message says ``over quota`` and names the claim, the namespace, the label
key, its limit, what is in use (and by how many claims) and what the claim asks. Units: cores in percent of one GPU,
memory in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.dra.claims import ClaimAllocation, ClaimPreparationError, ClaimRef, result_share
from domain.dra.slices import ResourceSlice
from domain.errors import InvalidRequestError
from domain.kube.protocol import DraNames, parse_quantity
from domain.request import resolve_share
from domain.units import MILLI_PER_PERCENT, PERCENT_PER_GPU, format_bytes

_COMPUTE_SLICE = "compute-slice-"
MAX_CORES = 10**9
"""Largest cores limit accepted (percent of one GPU: ten million GPUs); a longer number is a typo."""


@attrs.frozen
class QuotaLimits:
    """A namespace's limits: ``cores`` (percent of one GPU) and ``memory_bytes``; None = no limit on that key."""

    cores: int | None = None
    memory_bytes: int | None = None

    @property
    def active(self) -> bool:
        """True when at least one key is limited."""
        return self.cores is not None or self.memory_bytes is not None


@attrs.frozen
class Usage:
    """What claims consume: ``cores`` (percent of one GPU) and ``memory_bytes``."""

    cores: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cores + other.cores, self.memory_bytes + other.memory_bytes)


@attrs.frozen
class DeviceFacts:
    """What allocating one published device whole consumes: ``cores`` (percent of one GPU) and ``memory_bytes``."""

    cores: int
    memory_bytes: int


@attrs.frozen
class ClaimUsage:
    """One claim's consumption: ``key`` (``namespace/name``), ``uid``, ``usage``, ``problems`` (results counted on
    the safe side) and ``unknown`` (devices whose memory could not be told; counted as 0 bytes)."""

    key: str
    uid: str
    usage: Usage
    problems: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()


def _limit_label(labels: Mapping[str, str], key: str, *, memory: bool) -> int | None:
    text = labels.get(key)
    if text is None:
        return None
    field = f"namespace label {key}"
    if memory:
        return parse_quantity(field, text)
    if not (isinstance(text, str) and text.isascii() and text.isdigit()) or int(text) > MAX_CORES:
        raise InvalidRequestError(field, text, f"must be a whole number of percent of one GPU, 0..{MAX_CORES} "
                                               "(100 = one GPU)")
    return int(text)


def read_limits(labels: Mapping[str, str], names: DraNames) -> QuotaLimits:
    """The limits a Namespace's ``labels`` set (module docstring), under the protocol's ``names``. Raises
    :class:`InvalidRequestError` naming ``namespace label <key>`` and the value for a cores label that is no whole
    number or a memory label that is no integer quantity."""
    return QuotaLimits(cores=_limit_label(labels, names.claim_quota_cores, memory=False),
                       memory_bytes=_limit_label(labels, names.claim_quota_memory, memory=True))


def device_facts(slices: Iterable[ResourceSlice], *, driver: str) -> dict[tuple[str, str], DeviceFacts]:
    """``(pool, device name) → DeviceFacts`` of every device the ``driver``'s ``slices`` publish (module
    docstring: whole GPUs, MIG devices by their compute slices). A device without ``capacity.memory`` has 0 bytes;
    a MIG device whose counter set is not among ``slices`` counts 100 cores (the safe side)."""
    mine = [s for s in slices if s.driver == driver]
    compute: dict[tuple[str, str], int] = {}
    for piece in mine:
        for counter_set in piece.content.shared_counters:
            slots = sum(1 for name in counter_set.counters if name.startswith(_COMPUTE_SLICE))
            compute[(piece.pool, counter_set.name)] = slots
    out: dict[tuple[str, str], DeviceFacts] = {}
    for piece in mine:
        for device in piece.content.devices:
            memory = device.capacity.get("memory")
            cores = PERCENT_PER_GPU
            for use in device.consumes_counters:
                taken = sum(1 for name in use.counters if name.startswith(_COMPUTE_SLICE))
                slots = compute.get((piece.pool, use.counter_set), 0)
                if slots and taken:
                    cores = min(PERCENT_PER_GPU, -(-PERCENT_PER_GPU * taken // slots))
            out[(piece.pool, device.name)] = DeviceFacts(cores, 0 if memory is None else memory.value)
    return out


def _ref(claim: ClaimAllocation) -> ClaimRef:
    try:
        return ClaimRef(claim.namespace, claim.uid, claim.name)
    except InvalidRequestError:
        return ClaimRef(claim.namespace, claim.uid or "?", claim.name or "?")


def claim_usage(claim: ClaimAllocation, *, driver: str,
                devices: Mapping[tuple[str, str], DeviceFacts]) -> ClaimUsage:
    """What ``claim``'s results of ``driver`` consume (module docstring), reading whole devices from ``devices``
    (:func:`device_facts`). Never raises for bad claim content: it is counted on the safe side and named."""
    ref = _ref(claim)
    total = Usage()
    problems: list[str] = []
    unknown: list[str] = []
    for result in claim.results:
        if result.driver != driver:
            continue
        facts = devices.get((result.pool, result.device))
        where = f"device {result.device} in pool {result.pool}"
        share: tuple[int, int | None] | None = None
        if result.consumed:
            try:
                share = result_share(ref, result)
            except ClaimPreparationError as error:
                problems.append(f"{error}; counted as the whole device")
        if share is None and facts is not None:
            total += Usage(facts.cores, facts.memory_bytes)
            continue
        if share is None:
            unknown.append(f"{where}: no ResourceSlice of {driver} lists it; counted as {PERCENT_PER_GPU} cores "
                           "and 0 bytes")
            total += Usage(PERCENT_PER_GPU, 0)
            continue
        core_milli, memory = share
        cores = -(-core_milli // MILLI_PER_PERCENT)
        if memory is None and facts is not None and facts.memory_bytes > 0:
            memory = resolve_share(core_milli=core_milli, memory_bytes=None, gpu_memory_bytes=facts.memory_bytes)[1]
        if memory is None:
            unknown.append(f"{where}: consumedCapacity has no memory and no ResourceSlice of {driver} gives the "
                           "device's; counted as 0 bytes")
            memory = 0
        total += Usage(cores, memory)
    return ClaimUsage(claim.key, claim.uid, total, tuple(problems), tuple(unknown))


def holds_ours(claim: ClaimAllocation, driver: str) -> bool:
    """True when ``claim`` is allocated with at least one result of ``driver``."""
    return any(r.driver == driver for r in claim.results)


@attrs.frozen
class NamespaceUsage:
    """A namespace with a quota: its ``limits``, what its allocated claims of the driver ``used`` and how many
    ``claims`` they are, and the ``problems`` met counting them (safe side, unknown devices)."""

    namespace: str
    limits: QuotaLimits
    used: Usage
    claims: int
    problems: tuple[str, ...] = ()


def namespace_usage(namespace: str, limits: QuotaLimits, usages: Iterable[ClaimUsage]) -> NamespaceUsage:
    """The sum of ``usages`` (each one allocated claim of the namespace) against ``limits``."""
    listed = list(usages)
    used = sum((u.usage for u in listed), Usage())
    problems = tuple(p for u in listed for p in (*u.problems, *u.unknown))
    return NamespaceUsage(namespace, limits, used, len(listed), problems)


def _cores(value: int) -> str:
    """Cores in percent of one GPU, with the GPUs they make: ``150 (1.5 GPU)``."""
    return f"{value} ({value / PERCENT_PER_GPU:g} GPU)"


def quota_refusal(claim_key: str, asks: Usage, current: NamespaceUsage, names: DraNames) -> str | None:
    """Why allocating claim ``claim_key`` (``namespace/name``), which ``asks``, would take ``current`` (the
    namespace's other allocated claims) over a limit; None when it fits (module docstring: "The check")."""
    reasons = []
    used, limits = current.used, current.limits
    if limits.cores is not None and used.cores + asks.cores > limits.cores:
        reasons.append(f"cores limit {names.claim_quota_cores}={_cores(limits.cores)}: in use "
                       f"{_cores(used.cores)} by {current.claims} claim(s), this claim asks {_cores(asks.cores)}")
    if limits.memory_bytes is not None and used.memory_bytes + asks.memory_bytes > limits.memory_bytes:
        reasons.append(f"memory limit {names.claim_quota_memory}={format_bytes(limits.memory_bytes)}: in use "
                       f"{format_bytes(used.memory_bytes)} by {current.claims} claim(s), this claim asks "
                       f"{format_bytes(asks.memory_bytes)}")
    if not reasons:
        return None
    return (f"ResourceClaim {claim_key} is over quota in namespace {current.namespace}: "
            + "; ".join(reasons))
