"""``ljrk inspect``'s DRA claim quotas: per namespace carrying a quota label (protocol ``dra.claim-quota-cores`` /
``dra.claim-quota-memory``), its limits, what its allocated claims of our driver use and how many they are —
the same arithmetic the quota webhook applies (:mod:`domain.dra.quota`).

Units: cores in percent of one GPU, memory in bytes. A label that does not parse gives a report with ``error`` (the
label and value named, as the webhook refuses every allocation there until it is fixed) and no limits. Pure: the
same listing gives the same reports, namespaces by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.quota import (
    DeviceFacts,
    QuotaLimits,
    Usage,
    claim_usage,
    holds_ours,
    namespace_usage,
    read_limits,
)
from domain.errors import InvalidRequestError
from domain.kube.protocol import DraNames


@attrs.frozen
class ClaimQuotaReport:
    """One namespace with a quota label: ``limits`` (None per key without a limit), ``used``, ``claims`` (allocated
    claims of the driver counted), ``problems`` (what was counted on the safe side) and ``error`` (a label that
    does not parse; empty when they do)."""

    namespace: str
    limits: QuotaLimits
    used: Usage
    claims: int
    problems: tuple[str, ...] = ()
    error: str = ""

    @property
    def over(self) -> bool:
        """True when the use exceeds a limit (possible: limits lowered after the allocations)."""
        limits = self.limits
        return ((limits.cores is not None and self.used.cores > limits.cores)
                or (limits.memory_bytes is not None and self.used.memory_bytes > limits.memory_bytes))


def claim_quotas(namespaces: Mapping[str, Mapping[str, str]], claims: Iterable[ClaimAllocation],
                 devices: Mapping[tuple[str, str], DeviceFacts], names: DraNames) -> tuple[ClaimQuotaReport, ...]:
    """The report of every namespace in ``namespaces`` (name → labels) carrying a quota label, over the listed
    ``claims`` and the driver's ``devices`` (:func:`domain.dra.quota.device_facts`), by namespace name."""
    keys = (names.claim_quota_cores, names.claim_quota_memory)
    by_namespace: dict[str, list[ClaimAllocation]] = {}
    for claim in claims:
        if holds_ours(claim, names.driver):
            by_namespace.setdefault(claim.namespace, []).append(claim)
    out: list[ClaimQuotaReport] = []
    for namespace in sorted(namespaces):
        labels = namespaces[namespace]
        if not any(key in labels for key in keys):
            continue
        try:
            limits = read_limits(labels, names)
        except InvalidRequestError as error:
            limits, problem = QuotaLimits(), str(error)
        else:
            problem = ""
        usages = [claim_usage(c, driver=names.driver, devices=devices) for c in by_namespace.get(namespace, [])]
        usage = namespace_usage(namespace, limits, usages)
        out.append(ClaimQuotaReport(namespace, limits, usage.used, usage.claims, usage.problems, problem))
    return tuple(out)
