"""Commits (services.scheduler.commit, SchedulerService.commit) when things go wrong, on the in-memory cluster.

Covers:
* any exception — a transport error (UnavailableError), a raw OSError an adapter let through, a bug — during the
  binding or the plan write fails the commit with a CommitError naming the pod, chained to the cause; the
  reservation is released, the pod is no longer "being bound" (a retry commits), and the plan annotation is
  rolled back, also when the plan write itself went through but its answer was lost;
* a binding that went through while its answer was lost (the rollback finds the pod bound to our node) is a
  success: pod bound, plan kept, counted as scheduled;
* a deposed leader binds nothing: leadership lost (or a new term opened) while the plan was being written →
  NotLeaderError, no binding, plan removed, reservation released;
* the plan write overwrites this scheduler's own leftover plan for the same pod object after a 409, and refuses
  another writer's plan or a plan written for another pod object;
* ``remove_plan``: removes only our exact plan on the same unbound pod; never edits a bound pod (bound to our
  node = BOUND, elsewhere = NOT_OURS); another UID or another plan is left alone; a 409 re-reads and retries
  (and stops at a pod bound meanwhile); repeated 409s and transport errors end in FAILED without raising.
"""

from __future__ import annotations

import pytest
from kube_builders import KEYS, PROTOCOL, make_gpus
from scheduler_world import World, new_pod, world

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.kube.annotations import encode_plan
from domain.kube.objects import PodObject
from domain.units import GiB
from ports.cluster import ClusterError, ConflictError, UnavailableError
from services.scheduler.commit import REMOVE_ATTEMPTS, Undo, remove_plan, write_plan_and_bind
from services.scheduler.service import CommitError, NotLeaderError

WRITER = PROTOCOL.scheduler_name


def reserved(w: World, name: str = "a") -> tuple[PodObject, PodAllocation]:
    w.node("n1", 1)
    pod = w.pending(name, core="60", mem="10")
    result = w.service.schedule_pod(pod)
    assert result.allocation is not None
    return pod, result.allocation


def assert_rolled_back(w: World, pod: PodObject) -> None:
    after = w.cluster.get_pod("default", pod.name)
    assert not after.node_name
    assert KEYS.pod_plan not in after.annotations
    assert w.service.reservation(pod.uid) is None
    assert w.used("n1") == [(0, 0)]


def plan_for(pod: PodObject, index: int = 0, *, uid: str | None = None, writer: str = WRITER, core: int = 600) -> str:
    grant = ContainerGrant("main", (GpuGrant(index, core, 10 * GiB),))
    return encode_plan(PodAllocation(uid or pod.uid, "n1", (grant,)), make_gpus("n1", 2), writer=writer)


# ---------------------------------------------------------------------------------------------- any exception
ERRORS = [UnavailableError("bind pod default/a: API server unavailable: ReadTimeoutError"),
          OSError("connection reset by peer"), RuntimeError("a bug")]


@pytest.mark.parametrize("error", ERRORS, ids=["unavailable", "raw-oserror", "bug"])
def test_any_exception_during_the_binding_releases_rolls_back_and_allows_a_retry(error: Exception) -> None:
    w = world()
    pod, allocation = reserved(w)
    w.cluster.bind_failures.append(error)
    with pytest.raises(CommitError, match="pod default/a: binding to node n1 failed") as caught:
        w.service.commit(pod, allocation)
    assert caught.value.__cause__ is error
    assert "plan annotation removed" in str(caught.value)
    assert_rolled_back(w, pod)
    assert w.sample("lj_runtimekit_scheduler_failures_total", reason="bind-failed") == 1
    retry = w.service.schedule_pod(w.deliver("a"))  # not "already being bound"
    assert retry.allocation is not None
    w.service.commit(w.cluster.get_pod("default", "a"), retry.allocation)
    assert w.cluster.get_pod("default", "a").node_name == "n1"


@pytest.mark.parametrize("applied", [True, False], ids=["answer-lost", "not-applied"])
def test_a_transport_error_on_the_plan_write_rolls_the_plan_back(applied: bool) -> None:
    w = world()
    pod, allocation = reserved(w)
    w.cluster.patch_failures.append((UnavailableError("patch pod default/a: API server unavailable"), applied))
    with pytest.raises(CommitError, match="pod default/a: writing the plan annotation failed"):
        w.service.commit(pod, allocation)
    assert_rolled_back(w, pod)


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


# ---------------------------------------------------------------------------------------------- leadership
def test_a_leader_deposed_while_writing_the_plan_binds_nothing() -> None:
    w = world()
    pod, allocation = reserved(w)

    def lose() -> None:
        w.cluster.before_patch = None
        w.leader[0] = False

    w.cluster.before_patch = lose
    with pytest.raises(NotLeaderError, match="pod default/a: this replica lost leadership before binding"):
        w.service.commit(pod, allocation)
    assert_rolled_back(w, pod)


def test_a_new_term_during_the_commit_also_stops_the_binding() -> None:
    w = world()
    pod, allocation = reserved(w)

    def new_term() -> None:  # lost and regained: the books of the old term are not the new term's
        w.cluster.before_patch = None
        w.service.stop_leading()
        w.service.begin_leading()

    w.cluster.before_patch = new_term
    with pytest.raises(NotLeaderError):
        w.service.commit(pod, allocation)
    assert not w.cluster.get_pod("default", "a").node_name


# ---------------------------------------------------------------------------------------------- leftover plans
def test_our_own_leftover_plan_for_the_same_pod_is_overwritten_after_a_409() -> None:
    w = world()
    pod, allocation = reserved(w)
    leftover = plan_for(pod, core=500)  # an earlier attempt's, whose rollback never happened
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: leftover})
    w.service.commit(pod, allocation)  # the service's copy is stale: 409, re-read, ours → overwritten
    after = w.cluster.get_pod("default", "a")
    assert after.node_name == "n1"
    assert after.annotations[KEYS.pod_plan] == plan_for(pod)


@pytest.mark.parametrize("leftover", ["other-writer", "other-pod", "junk"])
def test_a_plan_that_is_not_ours_is_not_overwritten(leftover: str) -> None:
    w = world()
    pod, allocation = reserved(w)
    text = {"other-writer": plan_for(pod, writer="someone-else"), "other-pod": plan_for(pod, uid="old-uid"),
            "junk": "{"}[leftover]
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: text})
    with pytest.raises(CommitError, match="pod default/a: the pod changed and now carries another"):
        w.service.commit(pod, allocation)
    after = w.cluster.get_pod("default", "a")
    assert after.annotations[KEYS.pod_plan] == text
    assert not after.node_name
    assert w.service.reservation(pod.uid) is None


# ---------------------------------------------------------------------------------------------- remove_plan
def test_remove_plan_removes_only_our_exact_plan_on_the_same_unbound_pod() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.NOT_OURS  # no plan at all
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan_for(pod, 1)})
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.NOT_OURS  # another plan
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan})
    impostor = PodObject("other-uid", "default", "a")
    assert remove_plan(w.cluster, impostor, KEYS.pod_plan, plan, node="n1") is Undo.NOT_OURS  # another pod object
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.REMOVED
    assert KEYS.pod_plan not in w.cluster.get_pod("default", "a").annotations
    w.cluster.delete_pod("default", "a", grace_period_seconds=0)
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.NOT_OURS  # gone


@pytest.mark.parametrize(("node", "undo"), [("n1", Undo.BOUND), ("n2", Undo.NOT_OURS)])
def test_remove_plan_never_edits_a_bound_pod(node: str, undo: Undo) -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan})
    w.cluster.bind_pod("default", "a", uid=pod.uid, node="n1")
    version = w.cluster.resource_version
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node=node) is undo
    assert w.cluster.resource_version == version
    assert w.cluster.get_pod("default", "a").annotations[KEYS.pod_plan] == plan


def test_remove_plan_retries_on_409_and_stops_at_a_pod_bound_meanwhile() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan})
    w.cluster.patch_failures.append((ConflictError("stale resourceVersion"), False))
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.REMOVED

    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan})
    w.cluster.before_patch = lambda: w.cluster.bind_pod("default", "a", uid=pod.uid, node="n1")
    w.cluster.patch_failures.append((ConflictError("the pod was bound meanwhile"), False))
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.BOUND
    assert w.cluster.get_pod("default", "a").annotations[KEYS.pod_plan] == plan


def test_remove_plan_gives_up_without_raising() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    w.cluster.patch_pod_annotations("default", "a", {KEYS.pod_plan: plan})
    w.cluster.patch_failures.extend([(ConflictError("busy"), False)] * REMOVE_ATTEMPTS)
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.FAILED
    w.cluster.patch_failures.append((UnavailableError("unreachable"), False))
    assert remove_plan(w.cluster, pod, KEYS.pod_plan, plan, node="n1") is Undo.FAILED
    assert w.cluster.get_pod("default", "a").annotations[KEYS.pod_plan] == plan


def test_write_plan_and_bind_rolls_back_on_any_exception_and_names_the_pod() -> None:
    w = world()
    pod = new_pod(w.cluster, "a", core="60", mem="10")
    plan = plan_for(pod)
    w.cluster.bind_failures.append(ClusterError("HTTP 500"))
    with pytest.raises(CommitError, match=r"^pod default/a: binding to node n1 failed: HTTP 500; plan annotation "
                                          r"removed$"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan, writer=WRITER)
    with pytest.raises(NotLeaderError, match="plan annotation removed"):
        write_plan_and_bind(w.cluster, pod, node="n1", key=KEYS.pod_plan, plan=plan, writer=WRITER,
                            may_write=lambda: False)
    assert KEYS.pod_plan not in w.cluster.get_pod("default", "a").annotations
