"""The scheduler's ledger, kept equal to the cluster: :class:`LedgerSync` and the :class:`Tombstone` of a delete.

One facade over four parts, each the single owner of its state: :mod:`.events` (informer events: nodes, pods,
deletes, staleness ticks), :mod:`.ledgersync` (our reservations — assume, forget — and the rebuild from a full
listing: rebuild, adopt, resync), :mod:`.migbooks` with :mod:`.migcycle` (the MIG books and a MIG pod's cycle) and
:mod:`.gates` (nodes taking no GPU pods). The rules, each with the failure case it covers, are in
``docs/ledger-sync.md``.
"""

from domain.scheduling.sync.events import Tombstone
from domain.scheduling.sync.ledgersync import LedgerSync
from domain.scheduling.sync.migbooks import PLACEHOLDER_PREFIX, MigBooks
from domain.scheduling.sync.migcycle import mig_reasons

__all__ = ["PLACEHOLDER_PREFIX", "LedgerSync", "MigBooks", "Tombstone", "mig_reasons"]
