"""The service-side life of a reservation, between the cycle that makes it and the watch that confirms it.

The books (:class:`~domain.scheduling.sync.LedgerSync`) hold the reservation itself; this records when each was
made and whether its commit is running or done. Invariants: a reservation whose commit never starts expires after
the TTL; one whose commit is running or done never expires (the watch will confirm it, or the commit's failure
releases it); releasing forgets all three, and a release that gave a reservation back (expiry, a failed commit, a
reservation decided again, leadership lost) calls ``released()``: its room is free again. Not thread-safe: the
service calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable

from domain.scheduling.sync import LedgerSync


class Reservations:
    """Reservation times and commit states of pods reserved in ``sync`` (module docstring); ``clock``: epoch s;
    ``released``: called after each reservation given back."""

    def __init__(self, sync: LedgerSync, clock: Callable[[], float], released: Callable[[], None] = lambda: None
                 ) -> None:
        self.sync = sync
        self.clock = clock
        self.released = released
        self._reserved_at: dict[str, float] = {}
        self._committing: set[str] = set()
        self._committed: set[str] = set()

    def made(self, uid: str) -> None:
        """A cycle (or a commit re-booking a lost one) reserved ``uid`` now."""
        self._reserved_at[uid] = self.clock()

    def release(self, uid: str) -> bool:
        """Drop ``uid``'s reservation from the books and forget it here (idempotent); True when one existed."""
        self._reserved_at.pop(uid, None)
        self._committed.discard(uid)
        if not self.sync.forget(uid):
            return False
        self.released()
        return True

    def forget(self, uid: str) -> None:
        """The pod is gone (deleted or replaced): forget its times and commit state (the books drop it)."""
        self._committed.discard(uid)
        self._reserved_at.pop(uid, None)

    def confirmed(self, uid: str) -> None:
        """The watch showed ``uid`` bound or ended: its commit is no longer ours to track."""
        self._committed.discard(uid)

    def committing(self, uid: str) -> bool:
        """True while a commit of ``uid`` runs."""
        return uid in self._committing

    def start_commit(self, uid: str) -> None:
        """A commit of ``uid`` starts (call :meth:`end_commit` in every case)."""
        self._committing.add(uid)

    def end_commit(self, uid: str, *, bound: bool) -> None:
        """The commit of ``uid`` ended; ``bound``: the binding was written (else the reservation is released)."""
        self._committing.discard(uid)
        if not bound:
            self.release(uid)
        elif self.sync.assumed.get(uid) is not None:
            self._committed.add(uid)

    def committed(self, uid: str) -> bool:
        """True when ``uid`` was bound by this replica and the watch has not shown it bound yet."""
        return uid in self._committed

    def expire(self, ttl_seconds: float) -> list[str]:
        """Release reservations older than ``ttl_seconds`` whose commit never started; returns their UIDs."""
        now = self.clock()
        assumed = self.sync.assumed
        for uid in [u for u in self._reserved_at if u not in assumed]:
            del self._reserved_at[uid]
        expired = []
        for uid in assumed:
            if uid in self._committing or uid in self._committed:
                continue
            since = self._reserved_at.setdefault(uid, now)
            if now - since > ttl_seconds:
                self.release(uid)
                expired.append(uid)
        return expired

    def drop_uncommitted(self) -> None:
        """Leadership lost: release every reservation whose commit never started (no bind will follow)."""
        for uid in list(self.sync.assumed):
            if uid not in self._committing and uid not in self._committed:
                self.release(uid)
