"""The claim quota gate: decides whether a ResourceClaim's new allocation fits its namespace's quota.

kube-scheduler's DRA plugin writes a claim's allocation (``status.allocation``) in PreBind; the validating webhook
(``entrypoints.claim_quota``) hands each such write here (:meth:`ClaimQuotaGate.review`). The gate reads the
namespace's quota labels (:mod:`domain.dra.quota`), lists the namespace's claims and the driver's ResourceSlices of
the pools they use, and answers :class:`Verdict`:

* allowed: the namespace has no quota label, the claim holds nothing of our driver, or it fits;
* refused: it would go over a limit (the domain's message, saying ``over quota``); a quota label does not parse
  (the message names the label and value: the namespace's claims of the driver are refused until an admin fixes
  it); the claim's own device is unknown while memory is limited; or the API cannot be read (fail closed, as the
  webhook's ``failurePolicy: Fail`` does when the webhook cannot be reached).

**Races.** Decisions are serialised by one lock, and an allocation approved here counts as *pending* until a list
shows the claim allocated (then the list counts it), the claim is gone, or ``pending_ttl_s`` (seconds, monotonic)
passed without the list showing it allocated (the write was refused later or failed). So two allocations reviewed
back to back cannot both pass on a list that shows neither. The invariant holds for one gate in one process: the
Deployment runs one replica (docs/quota.md says what two replicas would allow).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.quota import (
    ClaimUsage,
    Usage,
    claim_usage,
    device_facts,
    holds_ours,
    namespace_usage,
    quota_refusal,
    read_limits,
)
from domain.dra.slices import ResourceSlice
from domain.errors import InvalidRequestError
from domain.kube.protocol import DraNames
from ports.cluster import ClusterError
from ports.namespaces import NamespacesApi
from ports.resource_claims import NamespaceClaimsApi
from ports.resource_slices import ResourceSlicesApi

log = logging.getLogger(__name__)

PENDING_TTL_S = 30.0
"""Seconds an approved allocation counts while no list shows it: kube-apiserver gives a webhook at most 30 s, and
the write follows the last webhook's answer at once."""


@attrs.frozen
class Verdict:
    """The answer: ``allowed`` and, when refused, ``message`` (one line for the user)."""

    allowed: bool
    message: str = ""


@attrs.frozen
class _Pending:
    namespace: str
    usage: Usage
    at: float


def read_devices(slices: ResourceSlicesApi, *, driver: str, pools: Iterable[str]) -> list[ResourceSlice]:
    """The ``driver``'s ResourceSlices of every pool (= node) in ``pools``. Raises ClusterError."""
    found: list[ResourceSlice] = []
    for pool in sorted(set(pools)):
        found.extend(slices.list_resource_slices(driver=driver, node=pool))
    return found


class ClaimQuotaGate:
    """Reviews allocations against namespace quotas (module docstring). ``clock``: monotonic seconds."""

    def __init__(self, *, names: DraNames, namespaces: NamespacesApi, claims: NamespaceClaimsApi,
                 slices: ResourceSlicesApi, clock: Callable[[], float], pending_ttl_s: float = PENDING_TTL_S) -> None:
        if not pending_ttl_s > 0:
            raise ValueError(f"pending_ttl_s={pending_ttl_s!r}: must be > 0 seconds")
        self._names = names
        self._namespaces = namespaces
        self._claims = claims
        self._slices = slices
        self._clock = clock
        self._ttl = pending_ttl_s
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}

    @property
    def pending(self) -> int:
        """Approved allocations no list has shown yet."""
        with self._lock:
            return len(self._pending)

    def review(self, claim: ClaimAllocation) -> Verdict:
        """Whether ``claim`` (its new content, allocation included) may be allocated (module docstring)."""
        driver = self._names.driver
        if not holds_ours(claim, driver):
            return Verdict(True)
        with self._lock:
            try:
                return self._review(claim, driver)
            except ClusterError as error:
                log.warning("claim quota: %s/%s refused: cannot read the cluster: %s", claim.namespace, claim.name,
                            error)
                return Verdict(False, f"claim quota of namespace {claim.namespace} cannot be checked, so "
                                      f"ResourceClaim {claim.key} is refused for now: {error}")

    def _review(self, claim: ClaimAllocation, driver: str) -> Verdict:
        namespace = claim.namespace
        self._pending.pop(claim.uid, None)  # a claim reviewed again is decided again
        try:
            limits = read_limits(self._namespaces.namespace_labels(namespace), self._names)
        except InvalidRequestError as error:
            return Verdict(False, f"ResourceClaim {claim.key} refused: the claim quota of namespace {namespace} is "
                                  f"invalid ({error}); a cluster admin must fix the label")
        if not limits.active:
            return Verdict(True)
        everything = self._claims.list_namespace_claims(namespace)
        self._forget(namespace, everything)
        allocated = [c for c in everything if c.uid != claim.uid and holds_ours(c, driver)]
        pools = {r.pool for c in (*allocated, claim) for r in c.results if r.driver == driver}
        devices = device_facts(read_devices(self._slices, driver=driver, pools=pools), driver=driver)
        asks = claim_usage(claim, driver=driver, devices=devices)
        if asks.unknown and limits.memory_bytes is not None:
            return Verdict(False, f"ResourceClaim {claim.key} refused: its use of the memory quota of namespace "
                                  f"{namespace} cannot be told: {'; '.join(asks.unknown)}")
        usages = [claim_usage(c, driver=driver, devices=devices) for c in allocated]
        usages += [ClaimUsage(f"{namespace}/(pending {uid})", uid, p.usage) for uid, p in self._pending.items()
                   if p.namespace == namespace and uid != claim.uid]
        message = quota_refusal(claim.key, asks.usage, namespace_usage(namespace, limits, usages), self._names)
        if message is not None:
            log.info("claim quota: %s", message)
            return Verdict(False, message)
        self._pending[claim.uid] = _Pending(namespace, asks.usage, self._clock())
        return Verdict(True)

    def _forget(self, namespace: str, listed: Iterable[ClaimAllocation]) -> None:
        """Drop pending approvals the list of ``namespace`` now accounts for (shown allocated, or gone) and those
        of any namespace older than the TTL."""
        now = self._clock()
        shown = {c.uid: holds_ours(c, self._names.driver) for c in listed}
        for uid, pending in list(self._pending.items()):
            accounted = pending.namespace == namespace and shown.get(uid, True)
            if accounted or now - pending.at > self._ttl:
                del self._pending[uid]
