"""Event de-duplication bookkeeping (``domain.kube.events``), the rule both cluster adapters follow.

Covers: the key is object (kind, namespace, name, UID), type, reason and message, never the count or timestamps;
a repeat raises the count and moves the last timestamp forward only (a clock step back keeps it); the cache keeps
the most recently recorded keys up to its bound and forgets evicted or dropped ones (their next occurrence starts a
new Event); a bound below 1 is refused.
"""

from __future__ import annotations

import attrs
import pytest

from domain.kube.events import EventCorrelator, SeenEvent, event_key
from domain.kube.objects import ClusterEvent

EVENT = ClusterEvent("Pod", "web-0", "FailedScheduling", "0 nodes available", namespace="team", type="Warning",
                     uid="u1")


def test_the_key_is_object_type_reason_and_message() -> None:
    stamped = attrs.evolve(EVENT, count=7, first_timestamp=1.0, last_timestamp=2.0)
    assert event_key(stamped) == event_key(EVENT)
    for change in ({"message": "other"}, {"reason": "Scheduled"}, {"type": "Normal"}, {"uid": "u2"},
                   {"namespace": "x"}, {"name": "web-1"}, {"kind": "Node"}):
        assert event_key(attrs.evolve(EVENT, **change)) != event_key(EVENT)  # type: ignore[arg-type]


def test_a_repeat_raises_the_count_and_never_moves_the_last_timestamp_back() -> None:
    first = SeenEvent("web-0.1", 1, 100.0, 100.0)
    again = first.repeated(now=105.0)
    assert again == SeenEvent("web-0.1", 2, 100.0, 105.0)
    assert again.repeated(now=90.0) == SeenEvent("web-0.1", 3, 100.0, 105.0)


def test_the_cache_is_bounded_and_forgets() -> None:
    correlator = EventCorrelator(max_keys=2)
    a, b, c = (attrs.evolve(EVENT, message=m) for m in "abc")
    correlator.record(a, SeenEvent("a", 1, 0, 0))
    correlator.record(b, SeenEvent("b", 1, 0, 0))
    correlator.record(a, SeenEvent("a", 2, 0, 1))  # recorded again: now the most recent
    correlator.record(c, SeenEvent("c", 1, 0, 0))  # evicts b
    assert (correlator.seen(a), correlator.seen(b), len(correlator)) == (SeenEvent("a", 2, 0, 1), None, 2)
    correlator.forget(a)
    assert correlator.seen(a) is None
    with pytest.raises(ValueError, match=">= 1"):
        EventCorrelator(max_keys=0)
