"""Keeping one scheduler replica's books right over time: reservation expiry, ticks, resyncs, leadership terms.

A resync lists without the lock and adopts under it only a listing at least as new as the informers
(:mod:`.listing`); a term serves only once its books were rebuilt (:mod:`.leadership`). The rules in full:
``docs/scheduler-service.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from domain.kube.objects import Listing, PodObject
from domain.scheduling.sync.drift import DriftReport
from services._shared.gcpause import collection_paused
from services._shared.logs import fields

from .leadership import REBUILD_BACKOFF, rebuild_until_serving
from .listing import RESYNC_ATTEMPTS, StaleListingError, drift_count
from .state import ServiceState

log = logging.getLogger(__name__)


class ServiceUpkeep(ServiceState):
    """Maintenance and leadership of :class:`~.service.SchedulerService` (module docstring)."""

    # ------------------------------------------------------------------ maintenance
    def expire_assumed(self) -> list[str]:
        """Release reservations older than ``assumed_ttl_seconds`` that were never committed (the bind never
        came); returns their UIDs."""
        with self._lock:
            expired = self._reservations.expire(self.config.assumed_ttl_seconds)  # each given back wakes
        for uid in expired:
            log.info("reservation expired", extra=fields(pod_uid=uid, ttl=self.config.assumed_ttl_seconds))
        return expired

    def tick(self) -> None:
        """Re-check inventory staleness (no node event comes when a device plugin dies), expire reservations and
        report book problems (:mod:`.alerts`)."""
        with self._lock:
            gated = set(self.sync.gates)
            self.sync.tick()
            if gated - set(self.sync.gates):
                self._may_have_room()  # a gate lapsed (an inventory no longer dated in the future, say)
        self.expire_assumed()
        with self._lock:
            events = self.alerts.collect(self.sync)  # a lapsed reservation may have ended an over-booking
        self.notices.emit(events)

    def resync(self) -> DriftReport:
        """List nodes, pods and (with their ports) ResourceClaims and our driver's ResourceSlices, rebuild the books
        from the listing and adopt them (repairing the live books in place), report the drift (counted in the
        metrics), and refresh FGD's typical pods.

        The listing and the rebuild run without the lock; the adoption takes it and happens only when each
        listing's resourceVersion is at least the informer's (:attr:`listing`): otherwise an event newer than
        the listing was already applied, so the service lists again (module docstring). Raises
        :class:`ports.cluster.ClusterError` when listing fails and :class:`StaleListingError` after
        :data:`RESYNC_ATTEMPTS` listings that were all too old.
        """
        for attempt in range(1, RESYNC_ATTEMPTS + 1):
            nodes = self.cluster.list_nodes()
            pods = self.cluster.list_pods()
            claims = Listing((), "") if self.claims is None else self.claims.list_claims()
            slices = (Listing((), "") if self.slices is None
                      else self.slices.list_driver_slices(driver=self.protocol.dra.driver))
            with self._lock:
                last_good, mig_last_good = self.sync.last_good(), self.sync.books.last_good()
            with collection_paused():
                fresh = self.sync.rebuild(nodes.items, pods.items, last_good=last_good, mig_last_good=mig_last_good,
                                          claims=claims.items, slices=slices.items)
            with self._lock, collection_paused():
                behind = self.listing.behind(nodes.resource_version, pods.resource_version, claims.resource_version,
                                             slices.resource_version)
                if not behind:
                    held = set(self.sync.holds.holders())
                    report = self.sync.adopt(fresh, claims_listed_at=claims.resource_version)
                    self._may_have_room()
                    self.schedulers.reobserve(pods.items)
                    self._adopted(pods.items)
                    if held - set(self.sync.holds.holders()):
                        self._changed()  # holds the listing ended (a mark the informer had not shown yet)
                    self.listing.adopted(nodes.resource_version, pods.resource_version, claims.resource_version,
                                         slices.resource_version)
                    count = drift_count(report)
                    events = self.alerts.collect(self.sync)
                    break
            log.info("resync listing older than the informers; listing again",
                     extra=fields(attempt=attempt, behind=behind))
        else:
            raise StaleListingError(f"{RESYNC_ATTEMPTS} listings were older than what the informers had applied")
        self.metrics.drift_repaired(count)
        self.notices.emit(events)
        if count:
            log.warning("ledger drift repaired", extra=fields(
                count=count, missing=list(report.missing), extra_pods=list(report.extra),
                changed=list(report.changed), nodes_missing=list(report.nodes_missing),
                nodes_extra=list(report.nodes_extra), totals=sorted(report.totals)))
        return report

    def _adopted(self, pods: Sequence[PodObject]) -> None:
        """Under the lock, after a listing was adopted: what lives beside the books is restored from ``pods``
        (preemption's nominations, :meth:`.preempting.PreemptionEntries._adopted`); nothing here."""

    @property
    def serving(self) -> bool:
        """True while this replica leads and has rebuilt its books in the current term: only then do the
        drivers schedule."""
        return self._terms.rebuilt and self.is_leader()

    def begin_leading(self) -> int:
        """Leadership gained: open a new term (not serving until :meth:`rebuild_ledger` succeeds for it) and
        publish the leader gauge. Call synchronously where leadership is learnt; returns the term token."""
        with self._lock:
            term = self._terms.open()
            self.metrics.set_leader(True)
            self.alerts.forget()  # the term's first report writes the Events a follower did not
        log.info("leadership gained; rebuilding the ledger", extra=fields(term=term))
        return term

    def current_term(self, term: int) -> bool:
        """True while ``term`` is the open term."""
        with self._lock:
            return self._terms.current(term)

    def rebuild_ledger(self, term: int, *, ready: Callable[[], bool] = lambda: True,
                       stop: threading.Event | None = None, backoff: tuple[float, float] = REBUILD_BACKOFF) -> bool:
        """Rebuild the books for ``term`` and then serve (:func:`.leadership.rebuild_until_serving` with
        :meth:`resync`); returns True once serving, False as soon as the term is over or ``stop`` is set."""
        return rebuild_until_serving(term, current=self.current_term, resync=self.resync, serve=self._serve,
                                     ready=ready, stop=stop or threading.Event(), backoff=backoff)

    def _serve(self, term: int) -> bool:
        with self._lock:
            if not self._terms.serve(term):
                return False
            self._changed()
            return True

    def start_leading(self, *, ready: Callable[[], bool] = lambda: True, stop: threading.Event | None = None,
                      backoff: tuple[float, float] = REBUILD_BACKOFF) -> bool:
        """:meth:`begin_leading`, then :meth:`rebuild_ledger` for that term on this thread."""
        return self.rebuild_ledger(self.begin_leading(), ready=ready, stop=stop, backoff=backoff)

    def stop_leading(self) -> None:
        """Leadership lost: close the term, publish it and drop reservations that were never committed (no bind
        will follow)."""
        with self._lock:
            self._terms.close()
            self.metrics.set_leader(False)
            self._reservations.drop_uncommitted()
        log.info("leadership lost")
