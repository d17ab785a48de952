"""One scheduling cycle for a MIG pod (:func:`schedule_mig`) and why each node refuses one (:func:`mig_reasons`).

Invariant: a MIG pod is booked in both ledgers or in neither — its node-only record (CPU, memory, a pod slot) in
the time-sharing :class:`~domain.ledger.ClusterLedger` and its instances in the :class:`MigBooks`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from domain.allocation import PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError, LedgerCorruptedError, UnknownNodeError
from domain.ledger import ClusterLedger
from domain.mig.errors import MigPlacementError, NoMigCapacityError, UnknownMigProfileError
from domain.mig.ledger import MigPodAllocation
from domain.request import PodRequest
from domain.scheduling.framework.candidates import rejection_reasons
from domain.scheduling.framework.cycle import CycleState, Scheduler, ScheduleResult
from domain.scheduling.mig.books import MigBooks, place
from domain.scheduling.mig.plugin import MigFilterResult, MigPlugin


def _grouped(reasons: Mapping[str, str]) -> list[tuple[str, int]]:
    """``(reason, node count)`` pairs of a node → reason map, in first-seen order of the sorted nodes."""
    counts: dict[str, int] = {}
    for name in sorted(reasons):
        counts[reasons[name]] = counts.get(reasons[name], 0) + 1
    return list(counts.items())


def schedule_mig(ledger: ClusterLedger, books: MigBooks, scheduler: Scheduler, request: PodRequest, *,
                 candidates: Collection[str] | None = None) -> tuple[ScheduleResult, MigPodAllocation | None]:
    """One cycle for MIG pod ``request``: ``scheduler``'s filters (sharing ``ledger``) for the node-level checks
    (``candidates``, node fit, toggle, gate, CPU, memory, pod slots), then the MIG plugin's filter and selection (lowest
    fragmentation loss, ties by node name) among the nodes left, then the node-only record in ``ledger`` and the
    instances in ``books``, both or neither. Returns the result and the MIG record booked (None when unscheduled
    or already counted). Never raises for the request: an invalid one is an unscheduled result naming why."""
    uid = request.uid
    existing = ledger.record(uid)
    if existing is not None:
        return ScheduleResult(uid, existing, reason="already counted", feasible_nodes=1), books.record(uid)
    try:
        books.filter(request, ())
    except (InvalidRequestError, UnknownMigProfileError) as error:
        return ScheduleResult(uid, None, reason=f"invalid request: {error}"), None
    slots, rejected = scheduler.feasible(request, CycleState(candidates=candidates))
    result = books.filter(request, (ledger.name(int(slot)) for slot in slots))
    plans, reasons = dict(result.plans), dict(result.reasons)
    while plans:
        plan = MigPlugin.select(MigFilterResult(plans, reasons))
        assert plan is not None
        node = plan.allocation.node
        mig = MigPodAllocation(uid, node, tuple(sorted(plan.allocation.bookings, key=place)))
        allocation = PodAllocation(uid, node, (), cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes)
        try:
            ledger.reserve(allocation)
        except (InsufficientResourcesError, LedgerCorruptedError, InvalidRequestError, UnknownNodeError) as error:
            reasons[node] = str(error)
            del plans[node]
            continue
        try:
            books.reserve(mig)
        except (NoMigCapacityError, MigPlacementError, LedgerCorruptedError, InvalidRequestError) as error:
            ledger.release(uid)
            reasons[node] = str(error)
            del plans[node]
            continue
        return ScheduleResult(uid, allocation, feasible_nodes=len(plans), rejected=tuple(rejected)), mig
    rejected += [(f"MIG: {why}", count) for why, count in _grouped(reasons)]
    detail = "; ".join(f"{count} node(s): {why}" for why, count in rejected) or "no nodes available"
    return ScheduleResult(uid, None, reason=f"0 nodes available: {detail}", rejected=tuple(rejected)), None


def mig_reasons(books: MigBooks, scheduler: Scheduler, request: PodRequest, names: Iterable[str], *,
                fallback: str) -> dict[str, str]:
    """Per node of ``names``, why it cannot take MIG pod ``request``: the first node-level filter that removes it
    (:func:`~domain.scheduling.framework.candidates.rejection_reasons`), else the MIG plugin's reason, else
    ``fallback``. Never raises for the request (its problem becomes every node's reason)."""
    names = list(names)
    reasons = rejection_reasons(scheduler, request, names, fallback=fallback)
    passed = [n for n, why in reasons.items() if why == fallback]
    try:
        result = books.filter(request, passed)
    except (InvalidRequestError, UnknownMigProfileError) as error:
        return dict.fromkeys(names, f"invalid request: {error}")
    for name, why in result.reasons.items():
        reasons[name] = f"MIG: {why}"
    return reasons
