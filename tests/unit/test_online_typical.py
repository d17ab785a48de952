"""Typical pods learned online (:mod:`domain.simulation.online`) and the replay's ``typical`` mode.

Behaviours covered:

* the refresh schedule: due at the first pod, then whenever the pods seen grow by 10 %, and at ``min_observed``;
* the learned distribution: observed pods plus the reference until ``min_observed``, observed pods alone after;
* bad arguments are refused with the argument's name;
* ``ReplayConfig(typical="online")``: policies that use no typical pods replay exactly as with ``trace``; FGD's
  decisions change (it no longer knows the whole trace); the recorded fragmentation is measured against the
  trace's typical pods in both modes (equal series when the decisions are equal); unknown modes are refused;
* ``summary.json`` names the mode of each run.
"""

from __future__ import annotations

import pytest

from adapters.reportfiles.writer import summary_row
from domain.errors import InvalidRequestError
from domain.scheduling.policies.fgd.fragmentation import PodClass
from domain.simulation.online import OnlineTypical
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.synthetic import synthetic_nodes, synthetic_pods

A, B, REF = PodClass(1000, 500, 1), PodClass(2000, 1000, 1), PodClass(3000, 0, 0)


def test_refreshes_at_first_pod_then_every_ten_percent_growth_and_at_min_observed() -> None:
    online = OnlineTypical([REF], min_observed=25)
    due = [n for n in range(1, 61) if online.observe(A) is not None]
    # 1..10 each (ceil(1.1·n) = n + 1), then 11 → 13 → 15 → 17 → 19 → 21 → 24; 25 (min_observed); 28 → 31 → 35 → …
    assert due == [*range(1, 12), 13, 15, 17, 19, 21, 24, 25, 28, 31, 35, 39, 43, 48, 53, 59]
    assert online.refreshes == len(due)


def test_blends_the_reference_until_min_observed_then_uses_observed_pods_alone() -> None:
    online = OnlineTypical([REF, REF, REF], min_observed=4)
    first = online.observe(A)
    assert first is not None
    assert set(first.classes) == {A, REF}
    assert dict(zip(first.classes, first.probabilities, strict=True))[REF] == pytest.approx(0.75)
    for pod in (B, B):
        online.observe(pod)
    fourth = online.observe(B)  # 4 seen = min_observed: reference dropped
    assert fourth is not None
    assert set(fourth.classes) == {A, B}
    assert dict(zip(fourth.classes, fourth.probabilities, strict=True))[B] == pytest.approx(0.75)


@pytest.mark.parametrize(("kwargs", "field"), [({"min_observed": -1}, "min_observed"), ({"growth": 1.0}, "growth")])
def test_bad_arguments_are_refused_by_name(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidRequestError, match=field):
        OnlineTypical([REF], **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="reference"):
        OnlineTypical([])


def test_online_mode_changes_only_typical_pod_policies_and_keeps_the_frag_metric() -> None:
    nodes, pods = synthetic_nodes(0.02), synthetic_pods(0.02)
    trace = replay(nodes, pods, ReplayConfig("best-fit", 3))
    online = replay(nodes, pods, ReplayConfig("best-fit", 3, typical="online"))
    assert online.used_milli == trace.used_milli
    assert online.frag_milli == trace.frag_milli  # measured against the trace's typical pods either way
    fgd_trace = replay(nodes, pods, ReplayConfig("fgd", 3))
    fgd_online = replay(nodes, pods, ReplayConfig("fgd", 3, typical="online"))
    assert fgd_online.arrived_milli == fgd_trace.arrived_milli  # same arrival stream
    assert fgd_online.used_milli != fgd_trace.used_milli  # decisions from what was seen, not the whole trace
    assert summary_row(fgd_online)["typical"] == "online"
    assert summary_row(fgd_trace)["typical"] == "trace"


def test_unknown_typical_mode_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="typical"):
        ReplayConfig("fgd", 1, typical="oracle")
