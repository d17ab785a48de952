"""Which Runtime allocation records have outlived their pods (the device plugin's release reconciler decides).

Kubelet never tells a device plugin that a pod ended, so on a real node nothing else releases the Runtime's records
(``ljrk up``'s emulated container runtime does it for its own pods); a record left behind keeps its GPU share booked
in the Runtime and its series in the exporter. The reconciler compares the Runtime's records (``ExporterGetDataList``
rows, :class:`domain.runtime.types.ContainerData`) with the pods bound to the node, and :func:`stale_records` names
the pods whose records may go.

**Rule.** A pod's records are *stale* when no pod of the node's listing has its UID (deleted, or deleted and
re-created under the same name with a new UID), or when that pod is in a terminal phase (``Succeeded``,
``Failed``: kubelet frees a terminal pod's devices too). A pod being deleted but not gone yet, or in phase
``Unknown``, still holds its GPUs: its records stay. Records are released per pod (``Release(pod_uid)``), since
every container of a pod shares its fate.

**Grace.** A stale pod's records are released (*due*) only when the newest of them was allocated more than
``grace_s`` seconds ago, or when the pod was already found stale in the previous pass (``suspects``: the
:attr:`ReleaseDecision.seen` of that pass). A record with no ``allocated_at`` (0: a Runtime that does not report
it) waits for the second pass. This covers a pod admitted while the pass runs: the reconciler reads the records
*before* listing the pods, and a record is created at Allocate, after the pod was bound, so a pod whose record was
read is in a later listing, unless that listing is stale (a caching API server); the grace keeps such a record.

Pure: no I/O, no clock; times are epoch seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence, Set

import attrs

from domain.kube.objects import PodObject
from domain.runtime.types import ContainerData


class ReleaseReason(enum.Enum):
    """Why a pod's records are stale (module docstring)."""

    POD_GONE = "pod-gone"
    """No pod on the node has the record's UID."""
    POD_TERMINAL = "pod-terminal"
    """The pod is ``Succeeded`` or ``Failed``."""


@attrs.frozen
class StaleRecord:
    """One pod whose records are due for release: its ``pod_uid``, ``namespace`` and ``pod_name`` (as the records
    name it), its recorded ``containers`` (names, sorted), the ``reason`` and ``age_s`` (seconds since its newest
    record was allocated; None when the Runtime gave no time)."""

    pod_uid: str
    namespace: str
    pod_name: str
    containers: tuple[str, ...]
    reason: ReleaseReason
    age_s: float | None

    @property
    def label(self) -> str:
        """``namespace/name (uid)`` for logs."""
        return f"{self.namespace}/{self.pod_name} ({self.pod_uid})"


@attrs.frozen
class ReleaseDecision:
    """The result of one pass: ``due``, the pods whose records to release now (by UID); ``seen``, the UIDs of
    every pod found stale in this pass, due or still in grace (pass it as the next pass's ``suspects``)."""

    due: tuple[StaleRecord, ...] = ()
    seen: frozenset[str] = frozenset()

    @property
    def due_uids(self) -> tuple[str, ...]:
        """The pod UIDs of :attr:`due`, in order."""
        return tuple(s.pod_uid for s in self.due)


def stale_records(
    records: Sequence[ContainerData], pods: Iterable[PodObject], *, now: float, grace_s: float,
    suspects: Set[str] = frozenset(),
) -> ReleaseDecision:
    """The records' pods to release now (module docstring).

    ``records``: the Runtime's container records, read *before* ``pods``, the node's pods (``spec.nodeName``);
    ``now``: epoch seconds; ``grace_s``: seconds a stale record is kept after its allocation (≥ 0); ``suspects``: the
    pod UIDs the previous pass found stale. ``due`` is ordered by pod UID. Records with an empty pod UID are
    ignored. Raises ValueError for a negative ``grace_s``.
    """
    if grace_s < 0:
        raise ValueError(f"grace_s must be >= 0, got {grace_s}")
    by_uid = {pod.uid: pod for pod in pods}
    grouped: dict[str, list[ContainerData]] = {}
    for record in records:
        if record.pod_uid:
            grouped.setdefault(record.pod_uid, []).append(record)
    due: list[StaleRecord] = []
    seen: set[str] = set()
    for uid in sorted(grouped):
        pod = by_uid.get(uid)
        if pod is None:
            reason = ReleaseReason.POD_GONE
        elif pod.phase.terminal:
            reason = ReleaseReason.POD_TERMINAL
        else:
            continue
        seen.add(uid)
        rows = grouped[uid]
        times = [r.allocated_at for r in rows if r.allocated_at > 0]
        age = now - max(times) if times else None
        if uid in suspects or (age is not None and age > grace_s):
            first = rows[0]
            due.append(StaleRecord(uid, first.namespace, first.pod_name, tuple(sorted({r.container for r in rows})),
                                   reason, age))
    return ReleaseDecision(tuple(due), frozenset(seen))
