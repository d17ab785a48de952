"""The exporter's detector as Kubernetes Events: which changes between two refreshes deserve an Event on the Node.

The detector's signals are already metrics (``exporter_runtime_up``, ``gpu_healthy``, ``gpu_xid_errors_total``,
``exporter_data_age_seconds``); Events tell ``kubectl describe node`` readers *when* something changed. So an
Event is emitted only on a transition, never once per refresh or scrape: :func:`transitions` compares the
previous :class:`DetectorState` with the current one.

Transitions (reason, type):

* ``RuntimeUnreachable`` (Warning) / ``RuntimeReachable`` (Normal): the latest pull from the node Runtime failed
  (error or deadline) / succeeded again.
* ``ExporterDataStale`` (Warning) / ``ExporterDataFresh`` (Normal): the served data became older than
  ``stale_after_s`` / was replaced by a fresh pull. A single failed pull is only ``RuntimeUnreachable``; the data
  goes stale when the outage lasts.
* ``GpuUnhealthy`` (Warning) / ``GpuRecovered`` (Normal): a GPU's health as the Runtime reports it changed.
* ``XidError`` (Warning): the Runtime's count of an XID code on a GPU grew (one Event per GPU and code per
  refresh, the message gives the increase and the total). A count that drops (the Runtime restarted and
  counts from zero) is a new baseline, not an Event.

The first state (``previous`` None, the exporter just started) is compared with a healthy baseline that already
holds its XID counts: Warnings for what is wrong now, no Normal Events, no XID Events for errors counted before
the exporter ran. A GPU that appears later is baselined the same way; a GPU that disappears yields no Event.
GPU transitions come only from successful pulls: a failed pull keeps the previous data, so nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal

import attrs

from domain.gpu import GpuUuid, Health
from domain.kube.objects import ClusterEvent

from .snapshot import Snapshot

EventType = Literal["Normal", "Warning"]

RUNTIME_UNREACHABLE = "RuntimeUnreachable"
RUNTIME_REACHABLE = "RuntimeReachable"
DATA_STALE = "ExporterDataStale"
DATA_FRESH = "ExporterDataFresh"
GPU_UNHEALTHY = "GpuUnhealthy"
GPU_RECOVERED = "GpuRecovered"
XID_ERROR = "XidError"

REASONS = (RUNTIME_UNREACHABLE, RUNTIME_REACHABLE, DATA_STALE, DATA_FRESH, GPU_UNHEALTHY, GPU_RECOVERED, XID_ERROR)
"""Every reason :func:`transitions` can give (module docstring)."""

MAX_MESSAGE = 1000
"""Characters of an Event message kept (the API server limits the message to 1 KiB)."""


def _int_map(value: Mapping[int, int]) -> dict[int, int]:
    return dict(value)


@attrs.frozen
class GpuState:
    """One GPU as the detector sees it: ``index``, ``uuid``, ``healthy``, ``reason`` (why unhealthy; may be
    empty) and ``xid_counts`` (XID code → errors since the Runtime started)."""

    index: int
    uuid: GpuUuid
    healthy: bool = True
    reason: str = ""
    xid_counts: Mapping[int, int] = attrs.field(factory=dict, converter=_int_map)


@attrs.frozen
class DetectorState:
    """What the detector compares: ``runtime_up`` (the latest pull succeeded), ``runtime_error`` (why it failed;
    empty when up), ``data_age_s`` (seconds since the served data was pulled; None before the first pull),
    ``stale`` (that age is past the threshold) and ``gpus`` (from the last good pull, by index)."""

    runtime_up: bool = True
    runtime_error: str = ""
    data_age_s: float | None = None
    stale: bool = False
    gpus: tuple[GpuState, ...] = ()


@attrs.frozen
class Transition:
    """One change worth an Event: ``reason`` (CamelCase, one of :data:`REASONS`), ``type`` and ``message``."""

    reason: str
    type: EventType
    message: str


def detector_state(snapshot: Snapshot, *, now: float, stale_after_s: float) -> DetectorState:
    """The detector's view of ``snapshot`` at ``now`` (epoch s): stale when the data is more than
    ``stale_after_s`` seconds old (never before the first good pull: there is no data to be stale)."""
    age = snapshot.age_s(now)
    gpus = tuple(
        GpuState(g.device.gpu.index, g.device.gpu.uuid, g.device.gpu.health is Health.HEALTHY,
                 g.device.health_reason, g.sample.xid_counts)
        for g in sorted(snapshot.data.gpus, key=lambda g: g.device.gpu.index)
    )
    return DetectorState(
        runtime_up=snapshot.runtime_up, runtime_error="" if snapshot.runtime_up else snapshot.last_error,
        data_age_s=age, stale=age is not None and age > stale_after_s, gpus=gpus,
    )


def _gpu_name(gpu: GpuState) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})"


def _gpu_transitions(previous: GpuState, current: GpuState) -> Iterator[Transition]:
    if previous.healthy and not current.healthy:
        why = f": {current.reason}" if current.reason else ""
        yield Transition(GPU_UNHEALTHY, "Warning", f"{_gpu_name(current)} became unhealthy{why}")
    elif not previous.healthy and current.healthy:
        yield Transition(GPU_RECOVERED, "Normal", f"{_gpu_name(current)} is healthy again")
    for xid, count in sorted(current.xid_counts.items()):
        before = previous.xid_counts.get(xid, 0)
        if count > before:
            yield Transition(XID_ERROR, "Warning", f"{_gpu_name(current)}: XID {xid} error, {count - before} new "
                             f"({count} since the node Runtime started)")


def _baseline(gpu: GpuState) -> GpuState:
    return attrs.evolve(gpu, healthy=True, reason="")


def _all(previous: DetectorState | None, current: DetectorState) -> Iterator[Transition]:
    if previous is None:
        previous = DetectorState(gpus=tuple(_baseline(g) for g in current.gpus))
    if previous.runtime_up and not current.runtime_up:
        why = f": {current.runtime_error}" if current.runtime_error else ""
        yield Transition(RUNTIME_UNREACHABLE, "Warning", f"Node Runtime unreachable{why}; serving the last data")
    elif not previous.runtime_up and current.runtime_up:
        yield Transition(RUNTIME_REACHABLE, "Normal", "Node Runtime reachable again")
    if not previous.stale and current.stale:
        age = "" if current.data_age_s is None else f" ({current.data_age_s:.0f} s old)"
        yield Transition(DATA_STALE, "Warning", f"Exporter data is stale{age}: the node Runtime has not answered")
    elif previous.stale and not current.stale:
        yield Transition(DATA_FRESH, "Normal", "Exporter data is fresh again")
    before = {g.uuid: g for g in previous.gpus}
    for gpu in current.gpus:
        yield from _gpu_transitions(before.get(gpu.uuid) or _baseline(gpu), gpu)


def transitions(previous: DetectorState | None, current: DetectorState) -> tuple[Transition, ...]:
    """The transitions from ``previous`` (None: the exporter just started) to ``current`` (module docstring), in
    order: Runtime, staleness, then GPUs by index (health before XIDs, XIDs by code). Never raises."""
    return tuple(_all(previous, current))


def node_event(transition: Transition, *, node: str, uid: str = "") -> ClusterEvent:
    """``transition`` as an Event on Node ``node`` (``uid`` when known), message cut to :data:`MAX_MESSAGE`."""
    return ClusterEvent("Node", node, transition.reason, transition.message[:MAX_MESSAGE], type=transition.type,
                        uid=uid)
