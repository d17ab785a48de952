"""Pod conditions (``status.conditions``): the value type, the rule that writes one, and the condition a scheduler
puts on a pod it preempts.

Invariant: a pod holds at most one condition of each ``type``. Writing a condition replaces the entry of its type
and keeps every other, in order (a new type is appended); its ``last_transition_time`` moves only when the
``status`` changes — the rule of ``UpdatePodCondition`` (``k8s.io/kubernetes/pkg/api/v1/pod``), which both cluster
adapters apply through :func:`with_condition`. Times are seconds since the epoch, whole seconds (the API stores
RFC 3339 with second precision).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

DISRUPTION_TARGET = "DisruptionTarget"
"""Condition type of a pod about to be deleted by a disruption (core/v1 ``DisruptionTarget``)."""

PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
"""``DisruptionTarget`` reason of a pod a scheduler preempts (core/v1 ``PodReasonPreemptionByScheduler``)."""


@attrs.frozen
class PodCondition:
    """One entry of ``status.conditions``: ``type`` (``Ready``, ``DisruptionTarget``…), ``status`` (``"True"``,
    ``"False"`` or ``"Unknown"``), ``reason``, ``message``, ``last_transition_time`` (epoch s; None when unset)."""

    type: str
    status: str = "True"
    reason: str = ""
    message: str = ""
    last_transition_time: float | None = None


def preemption_condition(scheduler_name: str) -> PodCondition:
    """The condition kube-scheduler adds to a victim before deleting it (``pkg/scheduler/framework/preemption``):
    ``DisruptionTarget``, status True, reason ``PreemptionByScheduler``, a message naming ``scheduler_name`` (the
    preemptor's ``spec.schedulerName``). No transition time: the write sets it (:func:`with_condition`)."""
    return PodCondition(DISRUPTION_TARGET, "True", PREEMPTION_BY_SCHEDULER,
                        f"{scheduler_name}: preempting to accommodate a higher priority pod")


def with_condition(conditions: Sequence[PodCondition], condition: PodCondition,
                   now: float) -> tuple[PodCondition, ...] | None:
    """``conditions`` with ``condition`` written (module docstring), or None when that changes nothing (an entry of
    its type already has its status, reason and message). The written entry's ``last_transition_time`` is the old
    entry's when the status is unchanged, else ``now`` (epoch s) truncated to whole seconds; ``condition``'s own
    time is ignored."""
    old = next((c for c in conditions if c.type == condition.type), None)
    if old is not None and (old.status, old.reason, old.message) == (condition.status, condition.reason,
                                                                      condition.message):
        return None
    kept = old is not None and old.status == condition.status
    written = attrs.evolve(condition, last_transition_time=old.last_transition_time if old is not None and kept
                           else float(int(now)))
    if old is None:
        return (*conditions, written)
    return tuple(written if c.type == condition.type else c for c in conditions)
