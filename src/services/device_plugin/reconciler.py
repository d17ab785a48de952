"""The release reconciler: releases the Runtime's allocation records of pods that ended (module docstring of
:mod:`domain.device_plugin.releases` for the rule and the grace).

Kubelet never tells a device plugin that a pod ended, and on a real node nothing else releases the records, so every
``interval_s`` seconds (``--release-interval``; the first pass at start) :meth:`RecordReconciler.run_once`:

1. reads the Runtime's records (``ExporterGetDataList``; nothing more happens when there are none);
2. *then* lists the node's pods (``spec.nodeName=<node>``). The order is what makes a pod being admitted right now
   safe: its record is created at Allocate, after the pod was bound, so a record read in step 1 belongs to a pod
   that a listing taken after it includes. Listing first would open a window where a pod bound and admitted
   between the two reads has a record but no pod. The grace (``2 × interval_s``, or a second pass) covers a
   listing served from a stale cache;
3. releases each due pod's records (``Release(pod_uid)``) and logs the pod, the reason and the count.

Release is idempotent (a pod with no records returns 0), so racing another releaser — ``ljrk up``'s emulated
container runtime (:mod:`entrypoints.up.cri`), or a second pass after a lost answer — is harmless: the records go
once and only returned counts are added to :attr:`RecordReconciler.released`. A pass that cannot read the Runtime or
the API server is logged and skipped (the next pass decides afresh); a failed Release is retried at the next pass
without waiting for the grace again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from domain.device_plugin.releases import ReleaseDecision, stale_records
from ports.cluster import ClusterError, PodsApi
from ports.runtime import NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 30.0
"""Seconds between passes (``--release-interval``)."""

GRACE_INTERVALS = 2.0
"""The grace of a stale record, in intervals (module docstring)."""


class RecordReconciler:
    """Releases Runtime records of pods that left node ``node`` or ended (module docstring). ``interval_s``: seconds
    between passes (> 0; the grace is ``GRACE_INTERVALS × interval_s``); ``clock``: epoch seconds. ``released``
    counts records released, ``passes`` completed passes. Raises ValueError for a non-positive interval."""

    def __init__(
        self, *, node: str, runtime: NodeRuntime, cluster: PodsApi, interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.node = node
        self._runtime = runtime
        self._cluster = cluster
        self.interval_s = interval_s
        self.grace_s = GRACE_INTERVALS * interval_s
        self._clock = clock
        self._suspects: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self.released = 0
        self.passes = 0

    def run_once(self) -> ReleaseDecision:
        """One pass (module docstring); returns its decision. Raises ``ports.runtime.NodeRuntimeError`` when the
        Runtime's records cannot be read and ``ports.cluster.ClusterError`` when the pods cannot be listed (nothing
        released then); a failed Release is logged, not raised."""
        with self._lock:
            decision, count = release_pass(node=self.node, runtime=self._runtime, cluster=self._cluster,
                                           now=self._clock(), grace_s=self.grace_s, suspects=self._suspects)
            self._suspects = decision.seen
            self.released += count
            self.passes += 1
            return decision

    def run(self, stop: threading.Event) -> None:
        """A pass at once, then one every ``interval_s`` seconds until ``stop`` is set. Never raises."""
        while not stop.is_set():
            try:
                self.run_once()
            except NodeRuntimeError as error:
                log.warning("release pass skipped: cannot read the Runtime's records: %s", error)
            except ClusterError as error:
                log.warning("release pass skipped: cannot list node %s's pods: %s", self.node, error)
            except Exception:  # an adapter bug must not end the loop
                log.exception("release pass failed")
            stop.wait(self.interval_s)


def release_pass(
    *, node: str, runtime: NodeRuntime, cluster: PodsApi, now: float, grace_s: float,
    suspects: frozenset[str] | None,
) -> tuple[ReleaseDecision, int]:
    """Steps 1-3 of the module docstring at ``now`` (epoch s) with ``grace_s``; ``suspects``: the pod UIDs the
    previous pass found stale, or None to treat every record as one (release without grace). Returns the decision
    and how many records were released. Raises ``NodeRuntimeError`` when the records cannot be read and
    ``ClusterError`` when the pods cannot be listed (nothing released then); a failed Release is logged, not
    raised."""
    records = runtime.exporter_data().containers
    pods = cluster.list_pods(field_selector=f"spec.nodeName={node}").items if records else ()  # after the records
    if suspects is None:
        suspects = frozenset(r.pod_uid for r in records)
    decision = stale_records(records, pods, now=now, grace_s=grace_s, suspects=suspects)
    released = 0
    for stale in decision.due:
        try:
            count = runtime.release(stale.pod_uid)
        except NodeRuntimeError as error:  # e.g. a MIG instance that cannot be destroyed yet: next pass
            log.warning("cannot release the Runtime records of pod %s (%s): %s; retrying", stale.label,
                        stale.reason.value, error)
            continue
        released += count
        if not count:  # released by someone else since step 1 (module docstring)
            log.debug("records of pod %s were already released", stale.label)
            continue
        age = "unknown" if stale.age_s is None else f"{stale.age_s:.0f} s"
        log.info("released %d Runtime record(s) of pod %s (%s; containers %s; allocated %s ago)", count,
                 stale.label, stale.reason.value, ", ".join(stale.containers), age)
    return decision, released


def release_ended_now(*, node: str, runtime: NodeRuntime, cluster: PodsApi) -> int:
    """:func:`release_pass` without grace: release at once the Runtime records of pods no longer on ``node`` or
    ended; returns how many records were released. For the Allocate that the Runtime refused for capacity: a pod
    deleted a moment ago still holds its GPU in the Runtime's books until released, while the scheduler already
    placed its successor there. Raises what :func:`release_pass` raises."""
    return release_pass(node=node, runtime=runtime, cluster=cluster, now=time.time(), grace_s=0.0, suspects=None)[1]
