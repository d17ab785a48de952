"""Commits (services.scheduler.commit, SchedulerService.commit) when things go wrong, on the in-memory cluster.

Covers:
* the commit is one write: the binding carries the plan annotation, so a watcher sees the pod go from unbound
  without a plan to bound with it in a single change, and no annotation patch is sent;
* any exception — a transport error (UnavailableError), a raw OSError an adapter let through, a bug, an HTTP
  error — during the binding fails the commit with a CommitError naming the pod and saying what a re-read
  found, chained to the cause; the reservation is released, the pod is no longer "being bound" (a retry commits),
  and the pod carries neither node nor plan;
* a binding that went through while its answer was lost (the re-read finds the pod bound to our node with our
  plan) is a success: pod bound, plan kept, counted as scheduled; a pod bound to the same node with another plan
  (another replica's binding) is not;
* a deposed leader binds nothing: leadership lost (or a new term opened) after the commit began → NotLeaderError,
  no binding, no plan, reservation released;
* the binding replaces any plan a pending pod carries — this scheduler's own leftover, another writer's, one
  written for another pod object, junk (B07: a pending pod's plan is never trusted);
* ``check_bound``: BOUND only for the same pod object bound to the planned node with exactly our plan; UNBOUND,
  NOT_OURS (elsewhere, other plan, re-created, gone) and UNKNOWN (the re-read failed) otherwise, never raising.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import encode_plan
from domain.kube.objects import EventType, PodObject
from domain.units import GiB
from ports.cluster import ClusterError, ConflictError, UnavailableError
from services.scheduler import service as service_module
from services.scheduler.commit import Found, check_bound, write_plan_and_bind
from services.scheduler.service import CommitError, NotLeaderError
from support.kube_builders import KEYS, PROTOCOL, make_gpus
from support.scheduler_world import World, new_pod, world

WRITER = PROTOCOL.scheduler_name


def reserved(w: World, name: str = "a") -> tuple[PodObject, PodAllocation]:
    w.node("n1", 1)
    pod = w.pending(name, core="60", mem="10")
    result = w.service.schedule_pod(pod)
    assert result.allocation is not None
    return pod, result.allocation


def assert_untouched(w: World, pod: PodObject) -> None:
    after = w.cluster.get_pod("default", pod.name)
    assert not after.node_name
    assert KEYS.pod_plan not in after.annotations
    assert w.service.reservation(pod.uid) is None
    assert w.used("n1") == [(0, 0)]


def plan_for(pod: PodObject, index: int = 0, *, uid: str | None = None, writer: str = WRITER, core: int = 600) -> str:
    grant = ContainerGrant("main", (GpuGrant(index, core, 10 * GiB),))
    return encode_plan(PodAllocation(uid or pod.uid, "n1", (grant,)), make_gpus("n1", 2), writer=writer)


def before_committing(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> None:
    """Run ``then`` once the service has begun the commit (term taken, reservation marked committing), right before
    it calls :func:`write_plan_and_bind`."""
    real = service_module.write_plan_and_bind

    def wrapped(*args: Any, **kwargs: Any) -> None:
        then()
        real(*args, **kwargs)

    monkeypatch.setattr(service_module, "write_plan_and_bind", wrapped)


# ---------------------------------------------------------------------------------------------- one write
def test_the_binding_carries_the_plan_in_one_write() -> None:
    w = world()
    pod, allocation = reserved(w)
    start = w.cluster.list_pods().resource_version
    w.cluster.before_patch = lambda: pytest.fail("the commit sent an annotation patch")
    w.service.commit(pod, allocation)
    events = list(w.cluster.watch_pods(resource_version=start, timeout_seconds=0.01))
    assert [e.type for e in events] == [EventType.MODIFIED]
    bound = events[0].object
    assert bound is not None
    assert bound.node_name == "n1"
    assert bound.annotations[KEYS.pod_plan] == plan_for(pod)


# ---------------------------------------------------------------------------------------------- any exception
ERRORS = [UnavailableError("bind pod default/a: API server unavailable: ReadTimeoutError"),
          OSError("connection reset by peer"), RuntimeError("a bug")]


@pytest.mark.parametrize("error", ERRORS, ids=["unavailable", "raw-oserror", "bug"])
def test_any_exception_during_the_binding_releases_and_allows_a_retry(error: Exception) -> None:
    w = world()
    pod, allocation = reserved(w)
    w.cluster.bind_failures.append(error)
    with pytest.raises(CommitError, match="pod default/a: binding to node n1 failed") as caught:
        w.service.commit(pod, allocation)
    assert caught.value.__cause__ is error
    assert str(caught.value).endswith("; pod not bound when re-read")
    assert_untouched(w, pod)
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="bind-failed") == 1
    retry = w.service.schedule_pod(w.deliver("a"))  # not "already being bound"
    assert retry.allocation is not None
    w.service.commit(w.cluster.get_pod("default", "a"), retry.allocation)
    assert w.cluster.get_pod("default", "a").node_name == "n1"


@pytest.mark.parametrize("error", [UnavailableError("read timed out"), OSError("reset")], ids=["unavailable", "raw"])
def test_a_binding_that_went_through_with_its_answer_lost_is_a_success(error: Exception) -> None:
    w = world()
    pod, allocation = reserved(w)
    w.cluster.lost_binds.append(error)
    w.service.commit(pod, allocation)
    after = w.deliver("a")
    assert after.node_name == "n1"
    assert KEYS.pod_plan in after.annotations
    assert w.used("n1") == [(600, 10)]
    assert w.sample("lj_runtimekit_scheduler_decisions_total", result="scheduled") == 1
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="bind-failed") is None


def test_a_pod_bound_to_the_same_node_with_another_plan_is_not_our_binding() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    theirs = plan_for(pod, writer="another-replica")
    w.cluster.bind_pod("default", "a", uid=pod.uid, node="n1", annotations={KEYS.pod_plan: theirs})
    with pytest.raises(CommitError, match=r"^pod default/a: binding to node n1 failed \(HTTP 409\): .*already "
                                          r"assigned.*; pod bound elsewhere, re-created or gone: not bound by us$"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan_for(pod), writer=WRITER)
    assert w.cluster.get_pod("default", "a").annotations[KEYS.pod_plan] == theirs


# ---------------------------------------------------------------------------------------------- leadership
def test_a_leader_deposed_during_the_commit_binds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    pod, allocation = reserved(w)
    before_committing(monkeypatch, lambda: w.leader.__setitem__(0, False))
    with pytest.raises(NotLeaderError, match="pod default/a: this replica lost leadership before binding it; not "
                                             "bound"):
        w.service.commit(pod, allocation)
    assert_untouched(w, pod)


def test_a_new_term_during_the_commit_also_stops_the_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    pod, allocation = reserved(w)

    def new_term() -> None:  # lost and regained: the books of the old term are not the new term's
        w.service.stop_leading()
        w.service.begin_leading()

    before_committing(monkeypatch, new_term)
    with pytest.raises(NotLeaderError):
        w.service.commit(pod, allocation)
    after = w.cluster.get_pod("default", "a")
    assert not after.node_name
    assert KEYS.pod_plan not in after.annotations


# ---------------------------------------------------------------------------------------------- leftover plans
def test_our_own_leftover_plan_for_the_same_pod_is_overwritten_by_the_binding() -> None:
    w = world()
    pod, allocation = reserved(w)
    leftover = plan_for(pod, core=500)  # an earlier attempt's (written by a release that patched before binding)
    fresh = w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: leftover})
    w.service.commit(fresh, allocation)
    after = w.cluster.get_pod("default", "a")
    assert after.node_name == "n1"
    assert after.annotations[KEYS.pod_plan] == plan_for(pod)


@pytest.mark.parametrize("leftover", ["other-writer", "other-pod", "junk"])
def test_any_plan_on_the_pending_pod_is_replaced_by_the_binding(leftover: str) -> None:
    w = world()
    pod, allocation = reserved(w)
    text = {"other-writer": plan_for(pod, writer="someone-else"), "other-pod": plan_for(pod, uid="old-uid"),
            "junk": "{"}[leftover]
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: text})
    w.service.commit(pod, allocation)  # the service's copy predates the leftover: no precondition stops it
    after = w.cluster.get_pod("default", "a")
    assert after.node_name == "n1"
    assert after.annotations[KEYS.pod_plan] == plan_for(pod)


# ---------------------------------------------------------------------------------------------- check_bound
def test_check_bound_is_bound_only_for_our_binding() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Found.UNBOUND
    impostor = PodObject("other-uid", "default", "a")
    assert check_bound(w.cluster, impostor, KEYS.pod_plan, plan, node="n1") is Found.NOT_OURS  # re-created
    w.cluster.bind_pod("default", "a", uid=pod.uid, node="n1", annotations={KEYS.pod_plan: plan})
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Found.BOUND
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan, node="n2") is Found.NOT_OURS  # elsewhere
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan_for(pod, 1), node="n1") is Found.NOT_OURS  # other plan
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Found.NOT_OURS  # gone


def test_check_bound_never_raises() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")

    def unreachable(namespace: str, name: str) -> PodObject:
        raise UnavailableError("get pod default/a: API server unavailable")

    w.cluster.get_pod = unreachable  # type: ignore[method-assign]
    assert check_bound(w.cluster, pod, KEYS.pod_plan, plan_for(pod), node="n1") is Found.UNKNOWN


def test_write_plan_and_bind_names_the_pod_the_status_and_what_the_re_read_found() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    error = ClusterError("Internal error")
    error.status = 500
    w.cluster.bind_failures.append(error)
    with pytest.raises(CommitError, match=r"^pod default/a: binding to node n1 failed \(HTTP 500\): Internal error; "
                                          r"pod not bound when re-read$"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan, writer=WRITER)
    w.cluster.bind_failures.append(ConflictError("conflict"))
    w.cluster.get_pod = lambda namespace, name: (_ for _ in ()).throw(OSError("reset"))  # type: ignore[method-assign]
    with pytest.raises(CommitError, match=r"; pod could not be re-read: the binding may still go through$"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan, writer=WRITER)
    with pytest.raises(NotLeaderError, match=r"not bound$"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan, writer=WRITER,
                            may_write=lambda: False)
    assert w.cluster.bind_failures == []
