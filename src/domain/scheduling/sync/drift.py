"""Drift between a live ledger and one rebuilt from a full listing: what :meth:`LedgerSync.resync` reports.

Drift means events were lost or mishandled (a delete that never arrived, B01; a missed bind; a corrupted
running total). Reporting it, not only repairing it, keeps the problem visible.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from domain.ledger import ClusterLedger


@attrs.frozen
class DriftReport:
    """Differences between the live ledger and a rebuild from a full listing, found by :meth:`LedgerSync.resync`.

    ``missing``: pod UIDs the listing counts but the live ledger did not; ``extra``: UIDs counted live but not by
    the listing (deletes that never arrived, B01); ``changed``: UIDs counted by both with different records;
    ``nodes_missing``/``nodes_extra``: node names likewise; ``totals``: per node present in both, the book
    fields that differed, as ``{field: (live, rebuilt)}`` (fields of :meth:`ClusterLedger.books`).
    """

    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    nodes_missing: tuple[str, ...] = ()
    nodes_extra: tuple[str, ...] = ()
    totals: Mapping[str, Mapping[str, tuple[object, object]]] = attrs.field(factory=dict)

    @property
    def clean(self) -> bool:
        """True when live and rebuilt books agreed."""
        return not (self.missing or self.extra or self.changed or self.nodes_missing or self.nodes_extra
                    or self.totals)


def compare_books(live: ClusterLedger, rebuilt: ClusterLedger) -> DriftReport:
    """The drift of ``live`` against ``rebuilt``: pod records by UID, node sets, and per-node book fields."""
    ours, theirs = live.records(), rebuilt.records()
    live_books, new_books = live.books(), rebuilt.books()
    totals = {
        name: {field: (value, new_books[name][field]) for field, value in books.items()
               if value != new_books[name][field]}
        for name, books in live_books.items() if name in new_books and books != new_books[name]
    }
    return DriftReport(
        missing=tuple(sorted(set(theirs) - set(ours))),
        extra=tuple(sorted(set(ours) - set(theirs))),
        changed=tuple(sorted(u for u in set(ours) & set(theirs) if ours[u] != theirs[u])),
        nodes_missing=tuple(sorted(set(new_books) - set(live_books))),
        nodes_extra=tuple(sorted(set(live_books) - set(new_books))),
        totals=totals,
    )
