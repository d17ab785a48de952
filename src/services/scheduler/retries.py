"""Which backed-off pods the standalone loop keeps aside: :class:`FutileRetries`.

kube-scheduler keeps a pod that fits nowhere in its unschedulable queue until a cluster event may help it
(``pkg/scheduler/internal/queue``: queueing hints, then a periodic flush). The loop does the same with its
backoff: a pod whose last cycle found it no room is *futile* at the service's ``room_version`` read before that
cycle; when its backoff ends, no wake brought it forward, its backoff is short of the longest and
``room_unchanged_since`` that version, it is *skipped*: backed off again without a cycle or an Event.

Invariants: a pod is futile only for the object that failed (an edited pod may fit: :meth:`FutileRetries.failed`
forgets it); a skip is provisional: a room change counted after the skip was decided (:meth:`room_changed`), or
an event of one of the pod's claims (:meth:`claim_changed`), makes it due at once; a pod is kept aside only while
its backoff is short of the longest (with nothing changing, its next cycle comes after 1 + 2 + … + 32 + 60 s,
then every longest backoff). Not thread-safe: the loop calls it under its own lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from domain.kube.objects import PodObject


class FutileRetries:
    """The futile and skipped pods of a loop (module docstring), by ``namespace/name``; ``unchanged`` is the
    service's ``room_unchanged_since``. ``skipped`` counts the retries skipped so far."""

    def __init__(self, unchanged: Callable[[int], bool]) -> None:
        self._unchanged = unchanged
        self._futile: dict[str, int] = {}  # key → room version read before the cycle that found it no room
        self._skipped: set[str] = set()  # keys skipped since the last room change
        self.skipped = 0
        self.claim_events = 0
        """Claim events seen so far (:meth:`claim_changed`): read before a cycle of a pod with claims."""

    def failed(self, key: str, version: int | None, claims_at: int | None = None) -> None:
        """The pod under ``key`` failed; ``version``: the room version read before a cycle that found it no room,
        None for any other failure (or when the failed object is no longer the one queued); ``claims_at``: for a
        pod with claims, :attr:`claim_events` read before that cycle (a claim event since, maybe one of its own,
        keeps it from being kept aside)."""
        self._skipped.discard(key)
        if claims_at is not None and claims_at != self.claim_events:
            version = None
        if version is None:
            self._futile.pop(key, None)
        else:
            self._futile[key] = version

    def forget(self, key: str) -> None:
        """The pod left the queue, or changed: it is not kept aside."""
        self._futile.pop(key, None)
        self._skipped.discard(key)

    def skip(self, key: str, *, woken: bool, delay: float, longest: float) -> bool:
        """The pod's backoff (``delay`` s) just ended: True when its retry is skipped (module docstring);
        ``woken``: a wake brought it forward."""
        version = self._futile.get(key)
        if version is None or woken or delay >= longest or not self._unchanged(version):
            return False
        self._skipped.add(key)
        self.skipped += 1
        return True

    def room_changed(self) -> list[str]:
        """Something that may make room was counted: the keys skipped since the last change, due at once."""
        due, self._skipped = sorted(self._skipped), set()
        for key in due:
            self._futile.pop(key, None)
        return due

    def claim_changed(self, pods: Mapping[str, PodObject], namespace: str, name: str) -> list[str]:
        """ResourceClaim ``namespace/name`` changed: the futile pods of ``pods`` (key → queued object) using it are
        no longer kept aside; returns those skipped since the last change, due at once."""
        self.claim_events += 1
        using = [key for key in self._futile if (pod := pods.get(key)) is not None and pod.namespace == namespace
                 and any(claim.resolved == name for claim in pod.resource_claims)]
        due = sorted(key for key in using if key in self._skipped)
        for key in using:
            self.forget(key)
        return due
