"""Impossible books, caught when they happen: a node whose ledger books a GPU beyond its capacity is quarantined at
once.

Books are *impossible* when a GPU the node's inventory lists carries more than 100 % core (1000 milli-GPU) or more
memory than the GPU has. The ledger counts such bookings anyway (observed pods are reality: a plan annotation on a
pod bound by another scheduler, a foreign pod inferred onto a full node, a GPU reported smaller than before), so
its records stay true to the cluster; but a node whose books cannot be real takes no new pod until they can:

* :meth:`OverbookingGuard.check` looks at every node whose books changed since the last check
  (:attr:`ClusterLedger.version`) and quarantines an over-booked one (:meth:`ClusterLedger.quarantine_node`) with a
  reason naming each GPU, its booked and real core and memory, and the pods booked there;
* the quarantine is lifted as soon as the books are possible again (a pod ended, the GPU is reported again), unless
  something else quarantined the node meanwhile (corrupted totals stay quarantined until a repair; a repair of an
  over-booked node is quarantined again at the next check);
* a GPU missing from the inventory (usage against zero capacity) is not judged here: it vanished, which
  :mod:`domain.scheduling.sync.vanished` reports.

:class:`~domain.scheduling.sync.LedgerSync` runs the check after every event that may change the books
(:func:`checks_books`), so a node is quarantined by the very event that made its books impossible, never only by
the periodic resync. :attr:`OverbookingGuard.overbooked` (node → reason) is what the scheduler service turns into
Events and a gauge.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Concatenate, ParamSpec, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from domain.ledger import ClusterLedger
from domain.units import format_bytes

PODS_NAMED = 5
"""Pods named per GPU in a reason (the rest are counted), so a reason stays readable in an Event."""


class OverbookingGuard:
    """Quarantines the nodes of ``ledger`` whose books are impossible, and lifts it when they are possible again
    (module docstring). ``label(pod_uid)`` names a pod in reasons (default: the UID).

    ``overbooked``: node → the reason it is quarantined with (also in ``ledger.quarantine`` unless another
    quarantine came first).
    """

    def __init__(self, ledger: ClusterLedger, *, label: Callable[[str], str] = str) -> None:
        self.ledger = ledger
        self.label = label
        self.overbooked: dict[str, str] = {}
        self._slots: dict[int, str] = {}  # slot → name of each node in overbooked
        self._deferred = False
        self._seen: npt.NDArray[np.int64] = np.zeros(0, np.int64)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block, :meth:`check` does nothing; one check runs when it ends (a rebuild from a listing
        books every pod before anyone reads the quarantine)."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False
            self.check()

    def check(self) -> None:
        """Judge every node whose books changed since the last call; cost: one comparison of the version column,
        plus the changed nodes (a removed node's slot changes too, and its quarantine is forgotten)."""
        if self._deferred:
            return
        ledger = self.ledger
        version = ledger.version
        if len(self._seen) != len(version):
            grown = np.full(len(version), -1, np.int64)
            kept = min(len(self._seen), len(version))
            grown[:kept] = self._seen[:kept]
            self._seen = grown
        moved = np.flatnonzero(version != self._seen)
        self._seen[moved] = version[moved]
        changed = moved[ledger.active[moved]]
        if self._slots and len(moved):  # a removed node's slot moves too: its quarantine goes with it
            for slot in moved.tolist():
                name = self._slots.get(slot)
                if name is not None and (not ledger.active[slot] or ledger.name(slot) != name):
                    del self._slots[slot]  # removed, or its slot reused by another node within one change
                    self.overbooked.pop(name, None)
        for slot in changed:
            self._judge(ledger.name(int(slot)))

    def _judge(self, name: str) -> None:
        ledger = self.ledger
        reason = self.reason(name)
        old = self.overbooked.get(name)
        current = ledger.quarantine.get(name)
        if reason:
            self.overbooked[name] = reason
            self._slots[ledger.slot(name)] = name
            if current is None or current == old:
                ledger.quarantine_node(name, reason)
        elif old is not None:
            del self.overbooked[name]
            self._slots.pop(ledger.slot(name), None)
            if current == old:
                ledger.lift_quarantine(name)

    def reason(self, name: str) -> str:
        """Why the books of node ``name`` are impossible, or empty when they are possible."""
        ledger = self.ledger
        slot = ledger.slot(name)
        problems = []
        for gpu in ledger.inventory(name).gpus:
            i = gpu.index
            core, core_cap = int(ledger.core_used[slot, i]), int(ledger.core_cap[slot, i])
            mem, mem_cap = int(ledger.mem_used[slot, i]), int(ledger.mem_cap[slot, i])
            if core <= core_cap and mem <= mem_cap:
                continue
            records = (ledger.record(uid) for uid in ledger.pods_on(name))
            pods = sorted(self.label(r.pod_uid) for r in records if r is not None and i in r.per_gpu_usage())
            named = ", ".join(pods[:PODS_NAMED]) + (f" and {len(pods) - PODS_NAMED} more" if len(pods) > PODS_NAMED
                                                    else "")
            problems.append(f"GPU {i} ({gpu.uuid}) is booked {core} of {core_cap} milli-GPU core and "
                            f"{format_bytes(mem)} of {format_bytes(mem_cap)} memory, by {named}")
        if not problems:
            return ""
        return f"impossible books (more than a GPU has): {'; '.join(problems)}"


class _Guarded(Protocol):
    @property
    def books_guard(self) -> OverbookingGuard: ...


_S = TypeVar("_S", bound=_Guarded)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def checks_books(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Decorate a method that may change the books: after it returns (or raises), its object's
    ``books_guard`` checks them."""

    @functools.wraps(method)
    def run(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        finally:
            self.books_guard.check()

    return run
