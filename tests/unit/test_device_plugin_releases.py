"""Which Runtime records the device plugin releases (``domain.device_plugin.releases.stale_records``), and the
allocated-mark rule (``domain.device_plugin.matching.pod_fully_served``).

Behaviours covered:

* a record whose pod is gone is due once older than the grace; one whose pod is Succeeded or Failed too;
* a fresh record of a gone pod waits (in ``seen``) and is due on the next pass, however young;
* a pod present and Pending, Running, Unknown or being deleted keeps its records;
* several containers of one pod give one release, held back by the newest record;
* a pod re-created under the same name with a new UID: the old UID's records go, the new one's stay;
* a record without ``allocated_at`` waits for a second pass; empty UIDs are ignored; a negative grace is refused;
* ``pod_fully_served``: true only when every kind of every candidate container of the pod was served.
"""

from __future__ import annotations

import pytest

from domain.device_plugin.devices import MigResource, ResourceKind
from domain.device_plugin.matching import Candidate, pod_fully_served
from domain.device_plugin.releases import ReleaseReason, stale_records
from domain.kube.objects import PodObject, PodPhase
from domain.runtime.types import ContainerData

NOW = 1_000_000.0
GRACE = 60.0


def record(uid: str, container: str = "main", *, age: float = 120.0, name: str = "p") -> ContainerData:
    """A Runtime record of ``uid``/``container`` allocated ``age`` seconds before NOW (0 = unknown time)."""
    return ContainerData(uid, "default", name, container, False, (), allocated_at=NOW - age if age else 0.0)


def pod(uid: str, phase: PodPhase = PodPhase.RUNNING, *, name: str = "p", deleting: bool = False) -> PodObject:
    return PodObject(uid, "default", name, node_name="n1", phase=phase,
                     deletion_timestamp=NOW if deleting else None)


def test_gone_pod_is_released_once_older_than_the_grace() -> None:
    decision = stale_records([record("u1")], [], now=NOW, grace_s=GRACE)
    [stale] = decision.due
    assert (stale.pod_uid, stale.reason, stale.containers, stale.age_s) == ("u1", ReleaseReason.POD_GONE, ("main",),
                                                                            120.0)
    assert decision.seen == {"u1"}
    assert stale.label == "default/p (u1)"


@pytest.mark.parametrize("phase", [PodPhase.SUCCEEDED, PodPhase.FAILED])
def test_terminal_pod_is_released(phase: PodPhase) -> None:
    decision = stale_records([record("u1")], [pod("u1", phase)], now=NOW, grace_s=GRACE)
    assert [(s.pod_uid, s.reason) for s in decision.due] == [("u1", ReleaseReason.POD_TERMINAL)]


def test_fresh_record_waits_for_the_grace_or_the_next_pass() -> None:
    first = stale_records([record("u1", age=5)], [], now=NOW, grace_s=GRACE)
    assert first.due == ()
    assert first.seen == {"u1"}  # suspected: the next pass releases it
    second = stale_records([record("u1", age=5 + 30)], [], now=NOW + 30, grace_s=GRACE, suspects=first.seen)
    assert second.due_uids == ("u1",)
    # without the previous sighting the same record still waits
    assert stale_records([record("u1", age=35)], [], now=NOW, grace_s=GRACE).due == ()
    # exactly at the grace: not older than it yet
    assert stale_records([record("u1", age=GRACE)], [], now=NOW, grace_s=GRACE).due == ()


@pytest.mark.parametrize("live", [
    pod("u1", PodPhase.RUNNING), pod("u1", PodPhase.PENDING), pod("u1", PodPhase.UNKNOWN),
    pod("u1", PodPhase.RUNNING, deleting=True),
])
def test_pod_present_and_not_terminal_keeps_its_records(live: PodObject) -> None:
    decision = stale_records([record("u1", age=10_000)], [live], now=NOW, grace_s=GRACE, suspects={"u1"})
    assert decision.due == ()
    assert decision.seen == frozenset()


def test_several_containers_of_one_pod_are_one_release_held_by_the_newest() -> None:
    rows = [record("u1", "init", age=500), record("u1", "b", age=300), record("u1", "a", age=200)]
    [stale] = stale_records(rows, [], now=NOW, grace_s=GRACE).due
    assert stale.containers == ("a", "b", "init")
    assert stale.age_s == 200.0
    young = [record("u1", "init", age=500), record("u1", "a", age=10)]
    assert stale_records(young, [], now=NOW, grace_s=GRACE).due == ()


def test_pod_recreated_with_the_same_name_and_a_new_uid() -> None:
    rows = [record("old", name="web"), record("new", name="web", age=1)]
    decision = stale_records(rows, [pod("new", PodPhase.PENDING, name="web")], now=NOW, grace_s=GRACE)
    assert [(s.pod_uid, s.pod_name, s.reason) for s in decision.due] == [("old", "web", ReleaseReason.POD_GONE)]
    assert decision.seen == {"old"}


def test_mixed_node_releases_only_the_stale_pods_in_uid_order() -> None:
    rows = [record("c"), record("a"), record("b"), record("d", age=1)]
    pods = [pod("b"), pod("c", PodPhase.SUCCEEDED)]
    decision = stale_records(rows, pods, now=NOW, grace_s=GRACE)
    assert decision.due_uids == ("a", "c")
    assert decision.seen == {"a", "c", "d"}


def test_unknown_allocation_time_waits_for_a_second_pass_and_empty_uids_are_ignored() -> None:
    first = stale_records([record("u1", age=0), record("", age=500)], [], now=NOW, grace_s=GRACE)
    assert first.due == ()
    assert first.seen == {"u1"}
    [stale] = stale_records([record("u1", age=0)], [], now=NOW, grace_s=GRACE, suspects=first.seen).due
    assert stale.age_s is None


def test_negative_grace_is_refused() -> None:
    with pytest.raises(ValueError, match="grace_s"):
        stale_records([], [], now=NOW, grace_s=-1)


def _candidate(uid: str, container: str, *kinds: ResourceKind | MigResource, init: bool = False) -> Candidate:
    return Candidate(uid, "default", uid, container, 0, dict.fromkeys(kinds, 1), None, init=init)


def test_pod_fully_served_needs_every_kind_of_every_container() -> None:
    core, memory = ResourceKind.CORE, ResourceKind.MEMORY
    candidates = [_candidate("u1", "setup", core, init=True), _candidate("u1", "main", core, memory),
                  _candidate("u2", "main", core)]
    served: dict[tuple[str, str], set[ResourceKind | MigResource]] = {("u1", "setup"): {core}}
    assert not pod_fully_served("u1", candidates, served)
    served[("u1", "main")] = {memory}
    assert not pod_fully_served("u1", candidates, served)
    served[("u1", "main")].add(core)
    assert pod_fully_served("u1", candidates, served)
    assert not pod_fully_served("u2", candidates, served)
    assert not pod_fully_served("u3", candidates, served)  # no candidate at all: never "done"
    mig = MigResource("1g.10gb")
    assert pod_fully_served("m", [_candidate("m", "main", mig)], {("m", "main"): {mig}})
