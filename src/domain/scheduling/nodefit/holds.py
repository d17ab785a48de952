"""Admission holds: no second pod with an identical GPU request on a node until the first one got its devices.

Kubelet's device plugin Allocate carries only device IDs, so when two pods pending on one node ask for the same
amount of one of our resources, the device plugin cannot tell which pod a call is for and refuses it
(:mod:`domain.device_plugin.matching`, rule 4: never guess, because a swapped plan would later free capacity on the
wrong GPU). HAMi avoids the same problem with a per-node lock held from bind to Allocate; this is a narrower
version of that lock: a node is held only for pods whose request *could* be confused with the pending one.

Rules:

* A **holder** is a pod this scheduler bound or reserved on a node that asks for GPU resources (time-sharing or
  MIG), is not terminal, and carries no ``protocol.annotations.pod_allocated`` mark yet (the device plugin writes
  it once every container got its devices). Pods bound before we saw them (by another scheduler, or before a
  restart) count as holders too while they are Pending without the mark.
* A holder lapses :attr:`AdmissionHolds.window_s` seconds after it was first seen holding (kubelet down, or a
  device plugin too old to write the mark): a hold may delay, never block forever.
* The **signature** of a request is the set of ``(kind, amount)`` pairs over its containers: ``("gpu", n)``,
  ``("core", milli)``, ``("memory", bytes or milli-percent)``, ``("mig", profile)``. A DRA claim's ask containers
  (names starting :data:`domain.dra.allocate.ASK_PREFIX`) are left out: a claim's devices are named in its
  allocation and prepared by the DRA driver, never matched at Allocate, and no device plugin marks such a pod.
  Kubelet asks for one resource of one container per Allocate call, in an order we do not control, so two requests
  can be confused when their signatures share any pair. A pod is kept off every node holding a pod whose signature
  shares a pair with its own.
* A holder with the pod's own ``namespace/name`` but another UID (the pod was deleted and re-created, and the old
  UID's delete has not been seen yet) holds like any other, and the reason names both UIDs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from domain.dra.allocate import ASK_PREFIX
from domain.errors import InvalidRequestError
from domain.request import PodRequest

Signature = frozenset[tuple[str, object]]
"""``(kind, amount)`` pairs of a request (module docstring)."""

DEFAULT_WINDOW_S = 60.0
"""How long a holder holds at most, seconds (kubelet allocates devices at admission, before image pulls)."""


def hold_window(value: float | None, *, field: str = "admission_hold_seconds") -> float | None:
    """The one meaning of a hold window (seconds) everywhere it is given: the command line's ``--admission-hold``,
    ``ServiceConfig.admission_hold_seconds`` and :class:`AdmissionHolds`: ``None`` or ``0`` = holds off (returns
    None); a finite number > 0 = that many seconds. Raises :class:`InvalidRequestError` naming ``field`` for a
    negative, NaN or infinite value (a hold may delay a pod, never block it forever)."""
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidRequestError(field, value, "must be a finite number of seconds >= 0 (0 or None: holds off)")
    return float(value)


def request_signature(request: PodRequest) -> Signature:
    """The signature of ``request`` (module docstring); empty for a pod that asks for no GPU resource."""
    pairs: set[tuple[str, object]] = set()
    for container in request.containers:
        if container.name.startswith(ASK_PREFIX):
            continue
        if container.gpus:
            pairs.add(("gpu", container.gpus))
        if container.core_milli:
            pairs.add(("core", container.core_milli))
        if container.memory_bytes:
            pairs.add(("memory", container.memory_bytes))
        if container.memory_milli:
            pairs.add(("memory%", container.memory_milli))
        if container.mig_profile:
            pairs.add(("mig", container.mig_profile))
    return frozenset(pairs)


@attrs.define
class _Holder:
    node: str
    label: str
    signature: Signature
    since: float


class AdmissionHolds:
    """The holders per node (module docstring). ``window_s``: seconds a holder holds at most; None or 0 turns
    holds off (nothing is ever held: for set-ups without a device plugin that writes the allocated mark; stored as
    None). Not thread-safe (the scheduler's lock covers it). Raises :class:`InvalidRequestError` (a ValueError) for
    a negative, NaN or infinite window (:func:`hold_window`)."""

    def __init__(self, window_s: float | None = DEFAULT_WINDOW_S) -> None:
        self.window_s = hold_window(window_s, field="window_s")
        self._holders: dict[str, _Holder] = {}

    def hold(self, uid: str, node: str, request: PodRequest, *, label: str, now: float) -> None:
        """Record pod ``uid`` (``label``: ``namespace/name`` for reasons) as holding ``node`` from ``now`` (epoch
        seconds); a pod already holding that node keeps its start time. No-op for a request without GPU
        resources."""
        signature = request_signature(request)
        if not signature or self.window_s is None:
            self.release(uid)
            return
        current = self._holders.get(uid)
        since = current.since if current is not None and current.node == node else now
        self._holders[uid] = _Holder(node, label, signature, since)

    def release(self, uid: str) -> None:
        """Pod ``uid`` no longer holds (allocated, terminal, deleted, reservation rolled back); idempotent."""
        self._holders.pop(uid, None)

    def holding(self, uid: str) -> bool:
        """Whether pod ``uid`` holds a node now (lapsed or not)."""
        return uid in self._holders

    def __len__(self) -> int:
        """Holders, lapsed ones included."""
        return len(self._holders)

    def holders(self) -> dict[str, str]:
        """``{pod uid: node}`` of every holder, lapsed ones included (for tests and diagnostics)."""
        return {uid: holder.node for uid, holder in self._holders.items()}

    def held_nodes(self, request: PodRequest, *, now: float, exclude: Iterable[str] = ()) -> dict[str, str]:
        """``{node: reason}`` for every node holding a pod whose request could be confused with ``request``
        (shared signature pair), not counting pods in ``exclude`` (the pod itself) or lapsed holders."""
        signature = request_signature(request)
        if not signature or self.window_s is None:
            return {}
        skip = set(exclude) | {request.uid}
        held: dict[str, str] = {}
        for uid, holder in self._holders.items():
            if uid in skip or now - holder.since > self.window_s or not signature & holder.signature:
                continue
            if holder.label == request.label():  # the same name under another UID: say so, over any other holder
                held[holder.node] = (f"pod {holder.label} has UID {request.uid}, but UID {uid} under that name still "
                                     "holds the node (deleted and re-created? the old pod's delete or allocation has "
                                     "not been seen yet)")
            else:
                held.setdefault(holder.node, f"waiting for {holder.label} (identical GPU request) to get its devices")
        return held

    def adopt(self, fresh: AdmissionHolds, *, keep: Iterable[str]) -> None:
        """Take ``fresh``'s holders (a rebuild from a listing: bound pods only) plus this instance's holders
        among ``keep`` (our reservations not bound yet, which a listing cannot show). A pod holding the same node
        in both keeps its earlier start, so a resync never extends a hold past the window."""
        kept = {uid: self._holders[uid] for uid in keep if uid in self._holders and uid not in fresh._holders}
        holders = {**fresh._holders, **kept}
        for uid, holder in holders.items():  # a rebuild saw the pod just now: keep when it started holding
            known = self._holders.get(uid)
            if known is not None and known.node == holder.node:
                holder.since = min(holder.since, known.since)
        self._holders = holders
