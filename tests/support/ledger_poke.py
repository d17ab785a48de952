"""Test helper: simulate a bug elsewhere that corrupts a ledger's running per-GPU core total.

:func:`corrupt_core_used` writes ``core_used`` directly, bypassing the booking methods, so the node's records no
longer agree with it, then refreshes the row's derived arrays (:meth:`LedgerSlots.refresh_derived`: free core,
schedulable free, per-node sums) from the corrupted raw books, as any later row change would. The filters and
scores then see exactly what the corrupted total says (a node that "looks empty" does look empty to them), while
``verify_node`` and ``reserve`` must still catch the mismatch against the records.
"""

from __future__ import annotations

from domain.ledger import ClusterLedger


def corrupt_core_used(ledger: ClusterLedger, node: str, gpu: int, *, value: int | None = None,
                      delta: int = 0) -> None:
    """Set ``core_used[node, gpu]`` to ``value`` (when given), then add ``delta`` (milli-GPU), outside the books,
    and refresh the row's derived arrays. Raises ``UnknownNodeError`` for an unknown node."""
    slot = ledger.slot(node)
    if value is not None:
        ledger.core_used[slot, gpu] = value
    ledger.core_used[slot, gpu] += delta
    ledger.refresh_derived(slot)
