"""The scheduler's ledger, kept equal to the cluster: :class:`LedgerSync` and the :class:`Tombstone` of a delete.

One facade over its parts, each the single owner of its state: :mod:`.events` (informer events: nodes, pods,
deletes, staleness ticks), :mod:`.ledgersync` (our reservations — assume, forget — and the rebuild from a full
listing: rebuild, adopt, resync), :mod:`.gates` (nodes taking no GPU pods), :mod:`.overbooking` (the check that
quarantines an over-committed node), :mod:`.vanished` (pods on GPUs a node no longer lists) and :mod:`.drift` (live
books against a rebuild). The MIG books and a MIG pod's cycle are :mod:`domain.scheduling.mig.books` and
:mod:`domain.scheduling.mig.cycle`. The rules, each with the failure case it covers, are in
``docs/ledger-sync.md``.
"""

from domain.scheduling.sync.events import Tombstone
from domain.scheduling.sync.ledgersync import LedgerSync

__all__ = ["LedgerSync", "Tombstone"]
