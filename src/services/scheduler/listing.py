"""Which resync listings may be adopted, and which informer updates an adopted listing already holds.

Invariant: a listing is adopted only when each of its resourceVersions is at least what the informers applied
(else an event newer than the listing was already in the books and adopting would undo it); after an adoption, an
informer update whose object resourceVersion is not newer than the adopted listing is not re-applied. Unnumbered
resourceVersions pass every check (kube-apiserver's are etcd revisions; other servers may not number them).
"""

from __future__ import annotations

from collections.abc import Callable

from domain.scheduling.sync.drift import DriftReport

RESYNC_ATTEMPTS = 3
"""Listings a resync tries before giving up when each one is older than what the informers applied."""


class StaleListingError(Exception):
    """Every listing of a resync was older than what the informers had already applied; nothing was adopted."""


def drift_count(report: DriftReport) -> int:
    """Entries a resync repaired: pods missing, extra or changed, nodes missing or extra, plus nodes whose
    totals differed (``report.totals``; a corrupted running total can drift with every record equal)."""
    return sum(map(len, (report.missing, report.extra, report.changed, report.nodes_missing, report.nodes_extra,
                         report.totals)))


def resource_version(text: str) -> int | None:
    """A resourceVersion as a number, None when it is not one."""
    return int(text) if text.isdigit() else None


class ListingFloor:
    """The resourceVersions of the last adopted listing, checked against the informers' (module docstring).

    ``watermarks`` (set by the app; None = no check): returns the node and pod informers' resourceVersions;
    ``claim_watermark`` likewise the ResourceClaim informer's (None = no claim informer, no check);
    ``slice_watermark`` the ResourceSlice informer's (None = no slice informer, no check).
    """

    def __init__(self) -> None:
        self.watermarks: Callable[[], tuple[str, str]] | None = None
        self.claim_watermark: Callable[[], str] | None = None
        self.slice_watermark: Callable[[], str] | None = None
        self._nodes: int | None = None
        self._pods: int | None = None
        self._claims: int | None = None
        self._slices: int | None = None

    def behind(self, nodes_rv: str, pods_rv: str, claims_rv: str = "", slices_rv: str = "") -> str:
        """Which listing (``nodes``/``pods``/``claims``/``slices``) is older than its informer, as
        ``"nodes 5 < 7"``, or empty."""
        pairs: list[tuple[str, str, str]] = []
        if self.watermarks is not None:
            pairs.extend(zip(("nodes", "pods"), (nodes_rv, pods_rv), self.watermarks(), strict=True))
        if self.claim_watermark is not None:
            pairs.append(("claims", claims_rv, self.claim_watermark()))
        if self.slice_watermark is not None:
            pairs.append(("slices", slices_rv, self.slice_watermark()))
        late = []
        for what, listed, applied in pairs:
            have, seen = resource_version(listed), resource_version(applied)
            if have is not None and seen is not None and have < seen:
                late.append(f"{what} {have} < {seen}")
        return ", ".join(late)

    def adopted(self, nodes_rv: str, pods_rv: str, claims_rv: str = "", slices_rv: str = "") -> None:
        """Record the resourceVersions of the listing just adopted."""
        self._nodes, self._pods = resource_version(nodes_rv), resource_version(pods_rv)
        self._claims, self._slices = resource_version(claims_rv), resource_version(slices_rv)

    def holds_claim(self, rv: str) -> bool:
        """True when a ResourceClaim at resourceVersion ``rv`` is already reflected by the adopted listing."""
        return self._holds(rv, self._claims)

    def holds_slice(self, rv: str) -> bool:
        """True when a ResourceSlice at resourceVersion ``rv`` is already reflected by the adopted listing."""
        return self._holds(rv, self._slices)

    def holds_node(self, rv: str) -> bool:
        """True when a Node object at resourceVersion ``rv`` is already reflected by the adopted listing."""
        return self._holds(rv, self._nodes)

    def holds_pod(self, rv: str) -> bool:
        """True when a Pod object at resourceVersion ``rv`` is already reflected by the adopted listing."""
        return self._holds(rv, self._pods)

    @staticmethod
    def _holds(rv: str, floor: int | None) -> bool:
        number = resource_version(rv)
        return floor is not None and number is not None and number <= floor
