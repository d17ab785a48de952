"""Admission holds (domain.scheduling.nodefit.holds) and the scheduler service using them.

Covers: request signatures; a holder keeps confusable pods (any shared (kind, amount)) off its node and nothing
else; the allocated mark, a terminal phase, deletion or a rolled-back reservation release it; a holder lapses after
the window; holds off (None or 0, with one meaning on the command line, in ``ServiceConfig`` and in
``AdmissionHolds``; negative, NaN and infinite windows refused everywhere) hold nothing; a resync keeps our unbound
reservations' holds; in the service, a second identical pod goes to another node, or waits with a reason naming the
holder, until the device plugin's mark arrives; a holder with the pod's own name under another UID (re-created pod)
is named by both UIDs, also in the extender's bind answer (it used to read "waiting for <the same pod> (identical
GPU request)").
"""

from __future__ import annotations

import math

import pytest

from domain.dra.allocate import ASK_PREFIX
from domain.errors import InvalidRequestError
from domain.kube.objects import PodPhase
from domain.request import ContainerRequest, PodRequest
from domain.scheduling.nodefit.holds import AdmissionHolds, request_signature
from domain.units import GiB
from entrypoints.scheduler.__main__ import build_parser, settings_from_args
from entrypoints.scheduler.app import SchedulerSettings, SettingsError
from entrypoints.scheduler.containers import service_config
from entrypoints.scheduler.extender_json import ExtenderJson
from services.scheduler.extender import Extender
from services.scheduler.policies import ServiceConfig
from support.kube_builders import PROTOCOL
from support.scheduler_world import new_pod, schedule_and_commit, world

KEY = PROTOCOL.annotations.pod_allocated


def req(uid: str, core: int | None = 500, memory: int | None = 4 * GiB, gpus: int = 0) -> PodRequest:
    return PodRequest(uid, (ContainerRequest("main", gpus=gpus, core_milli=core, memory_bytes=memory),))


def test_signature_pairs_and_cpu_only_pods() -> None:
    assert request_signature(req("a")) == {("core", 500), ("memory", 4 * GiB)}
    assert request_signature(req("w", core=None, memory=None, gpus=2)) == {("gpu", 2)}
    assert request_signature(PodRequest("cpu", (ContainerRequest("main"),))) == frozenset()


def test_claim_asks_neither_hold_nor_are_held() -> None:
    """A DRA claim's devices are named in its allocation, never matched at Allocate: its ask containers leave the
    signature, so two pods with the same claim shape on one node do not wait for a mark no device plugin writes."""
    ask = ContainerRequest(f"{ASK_PREFIX}gpu/gpu", core_milli=500, memory_bytes=4 * GiB)
    claim_pod = PodRequest("c1", (ContainerRequest("main"), ask))
    assert request_signature(claim_pod) == frozenset()
    mixed = PodRequest("c2", (ContainerRequest("main", gpus=1), ask))
    assert request_signature(mixed) == {("gpu", 1)}
    holds = AdmissionHolds()
    holds.hold("c1", "n1", claim_pod, label="default/c1", now=0.0)
    assert not holds.holding("c1")
    holds.hold("a", "n1", req("a"), label="default/a", now=0.0)
    assert holds.held_nodes(PodRequest("c3", (ContainerRequest("main"), ask)), now=1.0) == {}


def test_a_holder_keeps_only_confusable_pods_off_its_node() -> None:
    holds = AdmissionHolds(60)
    holds.hold("a", "n1", req("a"), label="ns/a", now=0)
    assert holds.held_nodes(req("b"), now=1) == {"n1": "waiting for ns/a (identical GPU request) to get its devices"}
    assert set(holds.held_nodes(req("c", core=300), now=1)) == {"n1"}  # shares memory=4Gi
    assert holds.held_nodes(req("d", core=300, memory=2 * GiB), now=1) == {}  # nothing in common
    assert holds.held_nodes(req("a"), now=1) == {}  # never held against itself
    assert holds.held_nodes(PodRequest("cpu", (ContainerRequest("main"),)), now=1) == {}


def test_a_holder_of_the_same_name_under_another_uid_is_named_as_such() -> None:
    holds = AdmissionHolds(60)
    holds.hold("old-uid", "n1", req("old-uid"), label="ns/web-0", now=0)
    holds.hold("twin", "n1", req("twin"), label="ns/twin", now=0)
    recreated = PodRequest("new-uid", req("x").containers, namespace="ns", name="web-0")
    why = holds.held_nodes(recreated, now=1)["n1"]
    assert why == ("pod ns/web-0 has UID new-uid, but UID old-uid under that name still holds the node (deleted and "
                   "re-created? the old pod's delete or allocation has not been seen yet)")


def test_a_bind_refused_because_the_uid_changed_names_the_uid_mismatch() -> None:
    w = world(admission_hold_seconds=60)
    w.node("n1", 1)
    w.service.start_leading()
    old = w.pending("web-0", core="40", mem="4")
    schedule_and_commit(w, old)  # bound, Pending, no mark yet: holds n1
    w.cluster.delete_pod("default", "web-0", grace_period_seconds=0)  # the delete has not reached the service
    new = new_pod(w.cluster, "web-0", core="40", mem="4")
    extender = ExtenderJson(Extender(w.service))
    reply = extender.bind({"PodName": "web-0", "PodNamespace": "default", "PodUID": new.uid, "Node": "n1"})
    error = str(reply["Error"])
    assert f"has UID {new.uid}, but UID {old.uid} under that name still holds the node" in error
    assert "identical GPU request" not in error  # it used to say "waiting for default/web-0 (identical …)"


def test_release_window_and_off() -> None:
    holds = AdmissionHolds(60)
    holds.hold("a", "n1", req("a"), label="ns/a", now=0)
    holds.hold("a", "n1", req("a"), label="ns/a", now=50)  # same node: keeps its start time
    assert holds.held_nodes(req("b"), now=60) != {}
    assert holds.held_nodes(req("b"), now=60.5) == {}  # lapsed: a hold delays, never blocks forever
    holds.release("a")
    assert holds.holders() == {}
    off = AdmissionHolds(None)
    off.hold("a", "n1", req("a"), label="ns/a", now=0)
    assert off.held_nodes(req("b"), now=0) == {}
    with pytest.raises(ValueError, match="must be a finite number of seconds >= 0"):
        AdmissionHolds(-1)


def test_gpu_topology_first_reaches_the_service_config() -> None:
    argv = ["--mode", "standalone", "--listen", "127.0.0.1:0"]
    assert not service_config(settings_from_args(build_parser().parse_args(argv))).topology_first
    assert service_config(settings_from_args(build_parser().parse_args([*argv, "--gpu-topology-first"]))
                          ).topology_first


@pytest.mark.parametrize("off", [0, 0.0, None])
def test_zero_means_off_on_the_command_line_in_the_service_config_and_the_holds(off: float | None) -> None:
    settings = settings_from_args(build_parser().parse_args(
        ["--mode", "standalone", "--listen", "127.0.0.1:0", "--admission-hold", "0"]))
    assert settings.admission_hold_seconds == 0
    assert ServiceConfig(admission_hold_seconds=off).admission_hold_seconds == off  # 0.0 used to raise
    assert service_config(settings).admission_hold_seconds in (0, None)
    assert AdmissionHolds(off).window_s is None
    w = world(admission_hold_seconds=off)
    w.node("n1", 2)
    schedule_and_commit(w, w.pending("a", core="40", mem="4"))
    assert w.service.schedule_pod(w.pending("b", core="40", mem="4")).scheduled  # an identical twin is not held
    assert w.service.sync.holds.holders() == {}


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_negative_nan_or_endless_hold_is_refused_everywhere_with_the_field_named(bad: float) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ServiceConfig(admission_hold_seconds=bad)
    assert caught.value.field == "admission_hold_seconds"
    with pytest.raises(SettingsError, match="admission_hold_seconds"):
        SchedulerSettings(admission_hold_seconds=bad)
    with pytest.raises(InvalidRequestError, match="window_s"):
        AdmissionHolds(bad)


def test_adopt_keeps_unbound_reservations() -> None:
    live, fresh = AdmissionHolds(60), AdmissionHolds(60)
    live.hold("reserved", "n1", req("reserved"), label="ns/r", now=0)
    live.hold("gone", "n2", req("gone"), label="ns/g", now=0)
    fresh.hold("bound", "n3", req("bound"), label="ns/b", now=0)
    live.adopt(fresh, keep=["reserved"])
    assert live.holders() == {"reserved": "n1", "bound": "n3"}


def test_service_holds_identical_pods_until_the_device_plugin_marks_the_first() -> None:
    w = world(admission_hold_seconds=60)
    w.node("n1", 2)
    first = schedule_and_commit(w, w.pending("a", core="40", mem="4"))
    assert first.node == "n1"
    w.deliver("a")  # bound, Pending, no mark yet
    result = w.service.schedule_pod(w.pending("b", core="40", mem="4"))
    assert not result.scheduled
    assert "waiting for default/a (identical GPU request) to get its devices" in result.reason
    assert w.service.schedule_pod(w.pending("c", core="20", mem="2")).scheduled  # nothing to confuse
    w.cluster.patch_pod_annotations("default", "a", {KEY: "1700000000"})
    w.deliver("a")
    assert w.service.schedule_pod(w.cluster.get_pod("default", "b")).scheduled


def test_service_sends_a_twin_to_another_node_and_a_terminal_pod_holds_nothing() -> None:
    w = world(admission_hold_seconds=60)
    w.node("n1", 2)
    w.node("n2", 2)
    a = schedule_and_commit(w, w.pending("a", core="40", mem="4"))
    w.deliver("a")
    b = schedule_and_commit(w, w.pending("b", core="40", mem="4"))
    assert {a.node, b.node} == {"n1", "n2"}
    w.deliver("b")
    w.cluster.set_pod_phase("default", "a", PodPhase.FAILED)
    w.deliver("a")
    assert set(w.service.sync.holds.holders()) == {b.pod_uid}


def test_a_rolled_back_reservation_releases_its_hold() -> None:
    w = world(admission_hold_seconds=60)
    w.node("n1", 2)
    pod = w.pending("a", core="40", mem="4")
    result = w.service.schedule_pod(pod)
    assert result.allocation is not None
    assert w.service.sync.holds.holders() == {pod.uid: "n1"}
    w.service.sync.forget(pod.uid)
    assert w.service.sync.holds.holders() == {}


def test_the_mark_arriving_wakes_pods_waiting_in_backoff() -> None:
    w = world(admission_hold_seconds=60)
    woken: list[int] = []
    w.service.change_listeners.append(lambda: woken.append(1))
    w.node("n1", 2)
    schedule_and_commit(w, w.pending("a", core="40", mem="4"))
    w.deliver("a")
    before = len(woken)
    w.cluster.patch_pod_annotations("default", "a", {KEY: "1700000000"})
    w.deliver("a")
    assert len(woken) == before + 1


def test_a_resync_never_extends_a_hold_past_its_window() -> None:
    w = world(admission_hold_seconds=30)
    w.node("n1", 2)
    schedule_and_commit(w, w.pending("a", core="40", mem="4"))
    w.deliver("a")
    twin = w.pending("b", core="40", mem="4")
    assert not w.service.schedule_pod(twin).scheduled
    w.clock.now += 31  # (the inventory heartbeat stays fresh: its limit is 60 s)
    w.service.resync()  # re-lists the still-unmarked pod "a"
    assert w.service.schedule_pod(twin).scheduled  # its hold had lapsed before the resync, and stays lapsed
