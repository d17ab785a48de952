"""The extender's ``preempt`` verb (ExtenderPreemptionArgs → ExtenderPreemptionResult,
k8s.io/kube-scheduler/extender/v1, Go field names) over the scheduler service on the in-memory cluster:
kube-scheduler's summed view proposes a victim whose GPU cannot take the pod → we answer the victim on the right
GPU; a proposal larger than needed is minimised; a node where nothing fits is dropped; ``Never``, a standby and
pods not ours; malformed bodies are 400s. After kube-scheduler nominates the preemptor (``status.nominatedNodeName``),
our ``filter`` holds that node against a lower-priority pod while the victims' GPUs free up, and not once the field
is cleared (nor without ``follow_nominations``)."""

from __future__ import annotations

import attrs
import pytest

from adapters.kubernetes.corejson import pod_from_json
from domain.kube.objects import PodObject
from entrypoints.scheduler.extender_json import ExtenderArgsError, ExtenderJson
from services.scheduler.extender import Extender
from support.kube_builders import RES
from support.scheduler_world import World, world


def running(w: World, name: str, node: str, gpu: int, percent: int, priority: int) -> PodObject:
    bound = w.running(name, node, {gpu: (percent, 1)})
    updated = attrs.evolve(bound, priority=priority)
    w.service.on_pod(updated)
    return updated


def pod_json(name: str, percent: int, *, priority: int = 1000, policy: str | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"priority": priority, "containers": [
        {"name": "main", "resources": {"limits": {RES.core: str(percent), RES.memory: "1"}}}]}
    if policy is not None:
        spec["preemptionPolicy"] = policy
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec, "status": {}}


def meta(*pods: PodObject, violations: int = 0) -> dict[str, object]:
    return {"Pods": [{"UID": p.uid} for p in pods], "NumPDBViolations": violations}


@pytest.fixture
def w() -> World:
    w = world()
    w.node("n1", 2)
    w.node("n2", 1)
    assert w.service.start_leading()
    return w


def test_the_victim_on_the_gpu_that_can_take_the_pod_replaces_kube_schedulers_summed_choice(w: World) -> None:
    a = running(w, "a", "n1", 0, 40, priority=5)   # GPU 0: 40 % (prio 5) + 30 % (prio 30)
    running(w, "d", "n1", 0, 30, priority=30)
    b = running(w, "b", "n1", 1, 60, priority=10)  # GPU 1: 60 % (prio 10)
    wire = ExtenderJson(Extender(w.service))
    # kube-scheduler's summed view: 70 % free after evicting a (the lowest) "fits" an 80 % share; per GPU it does not
    reply = wire.preempt({"Pod": pod_json("hi", 80), "NodeNameToMetaVictims": {"n1": meta(a, violations=1)}})
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": b.uid}], "NumPDBViolations": 1}}}


def test_a_proposal_larger_than_needed_is_minimised_within_it(w: World) -> None:
    a = running(w, "a", "n1", 0, 70, priority=1)
    b = running(w, "b", "n1", 1, 70, priority=2)
    wire = ExtenderJson(Extender(w.service))
    reply = wire.preempt({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {"n1": meta(a, b)}})
    assert reply["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 0}}


def test_a_node_where_no_victim_set_fits_is_dropped_and_others_kept(w: World) -> None:
    a = running(w, "a", "n1", 0, 70, priority=1)
    running(w, "a2", "n1", 1, 70, priority=2000)
    peer = running(w, "peer", "n2", 0, 70, priority=1000)  # not lower than the preemptor
    small = running(w, "small", "n2", 0, 20, priority=1)
    wire = ExtenderJson(Extender(w.service))
    reply = wire.preempt({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {
        "n1": meta(a), "n2": meta(small), "ghost": meta()}})
    assert reply["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 0}}
    assert peer.uid not in str(reply)


def test_the_full_pod_form_of_a_cache_less_kube_scheduler_is_read_too(w: World) -> None:
    a = running(w, "a", "n1", 0, 70, priority=1)
    running(w, "b", "n1", 1, 70, priority=2)
    full = {"metadata": {"uid": a.uid, "name": "a", "namespace": "default"}, "spec": {}}
    reply = ExtenderJson(Extender(w.service)).preempt(
        {"Pod": pod_json("hi", 60), "NodeNameToVictims": {"n1": {"Pods": [full], "NumPDBViolations": 0}}})
    assert reply["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 0}}


def test_never_a_standby_and_unmanaged_pods(w: World) -> None:
    a = running(w, "a", "n1", 0, 70, priority=1)
    wire = ExtenderJson(Extender(w.service))
    never = wire.preempt({"Pod": pod_json("hi", 60, policy="Never"), "NodeNameToMetaVictims": {"n1": meta(a)}})
    assert never == {"NodeNameToMetaVictims": {}}
    cpu_only = {"metadata": {"name": "cpu", "uid": "uid-cpu"}, "spec": {"priority": 9, "containers": [{"name": "c"}]}}
    untouched = wire.preempt({"Pod": cpu_only, "NodeNameToMetaVictims": {"n1": meta(a, violations=2)}})
    assert untouched == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 2}}}
    w.leader[0] = False
    standby = wire.preempt({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {"n1": meta(a)}})
    assert standby == {"NodeNameToMetaVictims": {}}


@pytest.mark.parametrize(("body", "message"), [
    ({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}}, "UID must be"),
    ({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}, "Pods must be an array"),
    ({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": -1}}},
     "NumPDBViolations must be a non-negative integer"),
    ({"Pod": pod_json("hi", 60), "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be a JSON object"),
])
def test_malformed_bodies_name_the_field(w: World, body: dict[str, object], message: str) -> None:
    with pytest.raises(ExtenderArgsError, match=message):
        ExtenderJson(Extender(w.service)).preempt(body)


@pytest.mark.parametrize("follow", [True, False], ids=["following", "not-following"])
def test_the_node_kube_scheduler_nominated_a_preemptor_to_is_held_against_lower_pods(follow: bool) -> None:
    w = world()
    w.service.config = attrs.evolve(w.service.config, follow_nominations=follow)
    w.node("n1", 2)
    assert w.service.start_leading()
    running(w, "a", "n1", 0, 40, priority=5)
    b = running(w, "b", "n1", 1, 60, priority=10)
    extender = Extender(w.service)
    hi = w.cluster.create_pod(pod_from_json(pod_json("hi", 80)))  # kube-scheduler preempted b for it, nominated it
    w.cluster.delete_pod("default", "b", uid=b.uid)
    w.service.on_pod(w.deliver("b"))
    w.service.on_pod(w.cluster.nominate_pod("default", "hi", "n1"))
    assert w.service.nominated_node(hi.uid) == ("n1" if follow else "")

    w.cluster.delete_pod("default", "b", grace_period_seconds=0)  # b's containers ended: GPU 1 is free
    w.service.on_pod_deleted(b)
    sneak = w.cluster.create_pod(pod_from_json(pod_json("sneak", 70, priority=1)))  # fits GPU 1 only
    decided = extender.filter(sneak, ["n1"])
    if not follow:
        assert decided.passed == ("n1",)  # the freed GPU goes to the lower pod
        return
    assert decided.passed == ()
    assert "held for the nominated pod default/hi" in decided.failed["n1"]
    assert extender.filter(w.cluster.get_pod("default", "hi"), ["n1"]).passed == ("n1",)

    w.service.on_pod(w.cluster.nominate_pod("default", "hi", ""))  # kube-scheduler cleared it: no hold
    assert w.service.nominated_node(hi.uid) == ""


def test_a_followed_nomination_books_no_victims_of_its_own_and_refuses_nothing_that_fits_now() -> None:
    w = world()
    w.service.config = attrs.evolve(w.service.config, follow_nominations=True)
    w.node("n1", 2)
    assert w.service.start_leading()
    running(w, "a", "n1", 0, 40, priority=5)
    running(w, "b", "n1", 1, 60, priority=10)  # kube-scheduler has not deleted anything (yet)
    hi = w.cluster.create_pod(pod_from_json(pod_json("hi", 80)))
    w.service.on_pod(w.cluster.nominate_pod("default", "hi", "n1"))
    nomination = w.service.nominations.get(hi.uid)
    assert nomination is not None
    assert (nomination.node, nomination.victims, nomination.followed) == ("n1", (), True)
    small = w.cluster.create_pod(pod_from_json(pod_json("small", 40, priority=1)))  # fits GPU 1 beside b now
    assert Extender(w.service).filter(small, ["n1"]).passed == ("n1",)


def test_a_resync_ends_nominations_whose_pod_is_gone_or_bound_and_follows_moved_fields() -> None:
    w = world()
    w.service.config = attrs.evolve(w.service.config, follow_nominations=True)
    w.node("n1", 2)
    w.node("n2", 2)
    assert w.service.start_leading()
    running(w, "b", "n1", 1, 60, priority=10)
    running(w, "c", "n2", 1, 60, priority=10)
    gone = w.cluster.create_pod(pod_from_json(pod_json("gone", 80)))
    moved = w.cluster.create_pod(pod_from_json(pod_json("moved", 80)))
    for name in ("gone", "moved"):
        w.service.on_pod(w.cluster.nominate_pod("default", name, "n1"))
    w.cluster.delete_pod("default", "gone", grace_period_seconds=0)  # its delete event missed
    w.cluster.nominate_pod("default", "moved", "n2")  # its update missed
    w.service.resync()
    assert w.service.nominated_node(gone.uid) == ""
    assert w.service.nominated_node(moved.uid) == "n2"
