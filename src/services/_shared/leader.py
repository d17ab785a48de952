"""Leader election over a coordination.k8s.io/v1 Lease: a small loop of our own that can be stopped and tested.

Algorithm (client-go's ``tools/leaderelection``): safety comes from optimistic concurrency
(every write carries the read resourceVersion; a stale write gets 409). A candidate takes over only when the
Lease record has not changed for ``lease_duration`` seconds *as measured on its own clock since it last saw a
change* (so clocks need not agree). The leader renews every ``retry_period`` and steps down when it could not
renew for ``renew_deadline``. On a clean stop the leader releases the Lease (empty holder) so a standby takes
over at once instead of after a full lease. The official client's module is not used: it calls ``sys.exit`` on
bad configuration, cannot be stopped, and never releases.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import LeaseRecord
from ports.cluster import ClusterError, ConflictError, LeasesApi, NotFoundError

log = logging.getLogger(__name__)


@attrs.frozen
class LeaderConfig:
    """Lease ``namespace``/``name``, this replica's ``identity``, and timings in seconds (kube-scheduler defaults
    15/10/2). Raises :class:`InvalidRequestError` unless ``lease_duration > renew_deadline > retry_period > 0``."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __attrs_post_init__(self) -> None:
        if not self.identity:
            raise InvalidRequestError("leader.identity", self.identity, "must not be empty")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise InvalidRequestError(
                "leader.timings",
                (self.lease_duration, self.renew_deadline, self.retry_period),
                "need lease_duration > renew_deadline > retry_period > 0",
            )


class LeaderElector:
    """One replica's view of the election. :meth:`step` is one attempt; :meth:`run` loops until stopped.

    ``clock`` returns seconds (monotonic is fine: only differences of this replica's own readings are used,
    except the Lease's informative acquire/renew times, written with ``wall_clock``).
    """

    def __init__(
        self,
        cluster: LeasesApi,
        config: LeaderConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self._leader = False
        self._observed_rv = ""
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.transitions_seen = 0

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the Lease (and renewed it within ``renew_deadline``)."""
        if self._leader and self.clock() - self._last_renew > self.config.renew_deadline:
            self._leader = False
        return self._leader

    def _record(self, lease: LeaseRecord, *, take_over: bool) -> LeaseRecord:
        now = self.wall_clock()
        return attrs.evolve(
            lease,
            holder=self.config.identity,
            lease_duration_seconds=int(self.config.lease_duration),
            renew_time=now,
            acquire_time=now if take_over else lease.acquire_time,
            transitions=lease.transitions + 1 if take_over and lease.holder else lease.transitions,
        )

    def step(self) -> bool:
        """Try to acquire or renew once; returns :attr:`is_leader`. Never raises: any exception (API and
        transport errors, or a bug) is logged and counts as a failed attempt, so leadership lapses after
        ``renew_deadline`` of failures."""
        config = self.config
        now = self.clock()
        try:
            try:
                lease = self.cluster.get_lease(config.namespace, config.name)
            except NotFoundError:
                fresh = LeaseRecord(config.namespace, config.name)
                self.cluster.create_lease(self._record(fresh, take_over=True))
                self._won(now)
                return True
            seen = self.clock()  # when the record was seen: a slow or stuck GET must not age it (client-go does too)
            if lease.resource_version != self._observed_rv:
                self._observed_rv = lease.resource_version
                self._observed_at = seen
            mine = lease.holder == config.identity
            expired = not lease.holder or seen - self._observed_at > config.lease_duration
            if not mine and not expired:
                self._leader = False
                return False
            updated = self.cluster.update_lease(self._record(lease, take_over=not mine))
            self._observed_rv = updated.resource_version
            self._observed_at = now
            self._won(now)
            return True
        except ConflictError:
            log.info("lease %s/%s: lost a write race", config.namespace, config.name)
        except ClusterError as error:
            log.warning("lease %s/%s: %s", config.namespace, config.name, error)
        except Exception:  # the election loop must outlive anything one attempt raises
            log.exception("lease %s/%s: attempt failed", config.namespace, config.name)
        return self.is_leader

    def _won(self, now: float) -> None:
        if not self._leader:
            self.transitions_seen += 1
            log.info("lease %s/%s: %s is now leader", self.config.namespace, self.config.name, self.config.identity)
        self._leader = True
        self._last_renew = now

    def release(self) -> None:
        """Give the Lease up (empty holder) if held, so a standby takes over without waiting; best effort (never
        raises)."""
        if not self._leader:
            return
        self._leader = False
        try:
            lease = self.cluster.get_lease(self.config.namespace, self.config.name)
            if lease.holder == self.config.identity:
                self.cluster.update_lease(attrs.evolve(lease, holder="", renew_time=self.wall_clock()))
        except Exception as error:  # best effort on the way out
            log.warning("lease release failed: %s", error)

    def run(
        self,
        stop: threading.Event,
        *,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
    ) -> None:
        """Loop every ``retry_period`` until ``stop`` is set; call ``on_started``/``on_stopped`` on each change
        of leadership, and release the Lease on exit. A callback that raises is logged; the loop goes on."""
        leading = False
        try:
            while not stop.is_set():
                now_leading = self.step()
                if now_leading and not leading:
                    self._call(on_started, "on_started")
                elif leading and not now_leading:
                    self._call(on_stopped, "on_stopped")
                leading = now_leading
                stop.wait(self.config.retry_period)
        finally:
            if leading:
                self._call(on_stopped, "on_stopped")
            self.release()

    def _call(self, callback: Callable[[], None], what: str) -> None:
        try:
            callback()
        except Exception:  # a callback's bug must not end the election loop
            log.exception("lease %s/%s: %s failed", self.config.namespace, self.config.name, what)
