"""The pure reconcile function (domain.toggle.reconcile) driven by a one-node simulator.

The simulator applies a decision's steps to its own Job list and annotations (as the controller does on the API)
and plays the Job controller (a Job succeeds or fails when the test says so).

Behaviours covered:
- label true → one enable Job, state ``enabling`` written; success → ``enabled``, the Job deleted after the state
  is written, a Normal Event; label removed or false → a disable Job → ``disabled`` (B28 a/b);
- a node without label and without state gets no step at all (B25);
- true/false/true while the enable Job runs: no second Job, ends ``enabled`` with no disable Job (B28 c);
  true/false: the disable Job starts only after the enable Job finished;
- a failed Job is retried after backoff (10, 20 s …) without a label change, each with a Warning Event, then the
  node is ``failed`` after max_tries with a Warning Event; it stays failed until the label changes;
- an active Job past its deadline is deleted and counts as a failure; a vanished in-flight Job counts as one;
- failed Jobs are kept for the TTL then deleted (a wake-up is asked for at the TTL); succeeded Jobs of ours are
  deleted on sight, including ones the record never knew (B26); Jobs that are not ours are never touched;
- a deleted node: all its Jobs deleted and its record forgotten; a node re-created under the same name (new UID)
  starts fresh, its predecessor's Jobs deleted, a Job with another name created (B27);
- a restarted controller (no record) resumes from the annotations, adopting the running Job;
- properties (hypothesis): for any interleaving of label changes, Job outcomes and time, at most one Job is ever
  active and, once Jobs succeed, the node ends in the last desired state (or ``failed`` for that same target).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.kube.objects import JobObject, JobPhase, JobStatus
from domain.toggle.jobs import MANAGED_BY_LABEL, JobTemplate
from domain.toggle.policy import TogglePolicy
from domain.toggle.reconcile import (
    CreateJob,
    Decision,
    DeleteJob,
    EmitEvent,
    Forget,
    NodeView,
    ToggleSettings,
    WriteState,
    reconcile,
)
from domain.toggle.record import NodeToggle
from domain.toggle.states import Action, ToggleState

S = ToggleState
SETTINGS = ToggleSettings(TogglePolicy(max_tries=3, backoff_base=10, backoff_cap=60, failed_job_ttl=100,
                                       job_deadline=30), JobTemplate(namespace="ljrk"))
STATE, DETAIL = SETTINGS.state_key, SETTINGS.detail_key


class Sim:
    """One node, its Jobs and annotations; ``step()`` reconciles and applies the steps."""

    def __init__(self, label: str | None = None, *, settings: ToggleSettings = SETTINGS) -> None:
        self.settings = settings
        self.now = 1000.0
        self.uid = "uid-1"
        self.label = label
        self.changes = 0
        self.exists = True
        self.annotations: dict[str, str] = {}
        self.jobs: dict[str, JobObject] = {}
        self.record: NodeToggle | None = None
        self.log: list[object] = []
        self.created: list[JobObject] = []
        self.deleted: list[tuple[str, str]] = []
        self.max_active = 0

    def set_label(self, value: str | None) -> None:
        if value != self.label:
            self.label = value
            self.changes += 1

    def view(self) -> NodeView | None:
        if not self.exists:
            return None
        return NodeView("n1", self.uid, self.label, dict(self.annotations), self.changes)

    def step(self) -> Decision:
        decision = reconcile("n1", self.view(), self.record, list(self.jobs.values()), now=self.now,
                             settings=self.settings)
        for s in decision.steps:
            self.log.append(s)
            if isinstance(s, CreateJob):
                assert s.job.name not in self.jobs
                job = attrs.evolve(s.job, uid=f"job-{len(self.created)}", created_at=self.now)
                self.jobs[job.name] = job
                self.created.append(job)
            elif isinstance(s, DeleteJob):
                del self.jobs[s.name]
                self.deleted.append((s.name, s.reason))
            elif isinstance(s, WriteState):
                self.annotations.update(s.annotations)
        self.record = decision.record
        self.max_active = max(self.max_active, len(self.active()))
        return decision

    def active(self) -> list[JobObject]:
        return [j for j in self.jobs.values() if not j.status.phase.finished]

    def finish(self, *, ok: bool = True) -> JobObject:
        (job,) = self.active()
        phase = JobPhase.SUCCEEDED if ok else JobPhase.FAILED
        status = JobStatus(phase, succeeded=int(ok), failed=int(not ok), finished_at=self.now,
                           reason="" if ok else "BackoffLimitExceeded", message="" if ok else "agent exit 1")
        self.jobs[job.name] = attrs.evolve(job, status=status)
        return job

    @property
    def state(self) -> ToggleState | None:
        return self.record.state if self.record is not None else None

    def of(self, kind: type) -> list[object]:
        return [s for s in self.log if isinstance(s, kind)]


def events(sim: Sim, reason: str = "") -> list[EmitEvent]:
    return [s for s in sim.log if isinstance(s, EmitEvent) and reason in s.event.reason]  # type: ignore[misc]


def test_enable_then_disable_through_jobs() -> None:
    sim = Sim("true")
    decision = sim.step()
    (job,) = sim.created
    assert job.command[3] == "enable"
    assert sim.state is S.ENABLING
    assert sim.annotations[STATE] == "enabling"
    assert isinstance(decision.steps[0], CreateJob)
    assert isinstance(decision.steps[1], WriteState)
    assert decision.wake_at == sim.now + SETTINGS.policy.stuck_after
    assert sim.step().steps == ()  # the Job runs: nothing to do
    sim.finish()
    decision = sim.step()
    assert sim.state is S.ENABLED
    assert sim.annotations[STATE] == "enabled"
    kinds = [type(s) for s in decision.steps]
    assert kinds.index(WriteState) < kinds.index(DeleteJob)  # outcome recorded before the Job goes
    assert sim.deleted == [(job.name, "succeeded")]
    assert [e.event.reason for e in events(sim)] == ["RuntimeEnabled"]
    assert decision.transitions == ((S.ENABLING, S.ENABLED),)
    assert sim.step().steps == ()

    sim.set_label(None)  # B28 (a): removing the label disables
    sim.step()
    assert sim.state is S.DISABLING
    assert sim.created[-1].command[3] == "disable"
    sim.finish()
    sim.step()
    assert sim.state is S.DISABLED
    assert sim.annotations[STATE] == "disabled"
    assert sim.jobs == {}


def test_label_false_disables_like_removal() -> None:
    sim = Sim("true")
    sim.step()
    sim.finish()
    sim.step()
    sim.set_label("false")
    sim.step()
    sim.finish()
    sim.step()
    assert sim.state is S.DISABLED
    assert [j.command[3] for j in sim.created] == ["enable", "disable"]


def test_unmanaged_node_gets_no_step() -> None:
    sim = Sim(None)
    for _ in range(3):
        assert sim.step() == Decision(None)
    assert sim.annotations == {}


def test_explicit_false_on_an_unmanaged_node_runs_a_disable_job() -> None:
    sim = Sim("false")
    sim.step()
    assert sim.state is S.DISABLING
    assert sim.created[0].command[3] == "disable"


def test_quick_true_false_true_flip_ends_enabled_with_one_job() -> None:
    sim = Sim("true")
    sim.step()
    sim.set_label("false")
    sim.step()
    sim.set_label("true")
    sim.step()
    assert len(sim.created) == 1
    sim.finish()
    sim.step()
    assert sim.state is S.ENABLED
    assert len(sim.created) == 1
    assert sim.jobs == {}


def test_flip_waits_for_the_running_job_then_latest_wins() -> None:
    sim = Sim("true")
    sim.step()
    sim.set_label("false")
    assert sim.step().steps == ()  # never a second active Job
    sim.finish()
    decision = sim.step()
    assert sim.state is S.DISABLING
    assert decision.transitions == ((S.ENABLING, S.ENABLED), (S.ENABLED, S.DISABLING))
    assert [j.command[3] for j in sim.created] == ["enable", "disable"]
    assert sim.max_active == 1


def test_failed_jobs_are_retried_with_backoff_then_the_node_fails() -> None:
    sim = Sim("true")
    sim.step()
    sim.finish(ok=False)
    decision = sim.step()
    assert sim.state is S.ENABLING
    assert sim.record is not None
    assert sim.record.retry_at == sim.now + 10
    assert decision.failed == (Action.ENABLE,)
    assert "try 1 of 3 failed" in events(sim, "RuntimeToggleRetry")[0].event.message
    assert decision.wake_at == sim.now + 10
    sim.now += 9
    assert not any(isinstance(s, CreateJob) for s in sim.step().steps)
    sim.now += 1
    sim.step()
    assert len(sim.created) == 2  # retried without any label change
    sim.finish(ok=False)
    sim.step()
    assert sim.record.retry_at == sim.now + 20
    sim.now += 20
    sim.step()
    sim.finish(ok=False)
    decision = sim.step()
    assert sim.state is S.FAILED
    assert sim.annotations[STATE] == "failed"
    assert decision.transitions == ((S.ENABLING, S.FAILED),)
    (gave_up,) = events(sim, "RuntimeToggleFailed")
    assert gave_up.event.type == "Warning"
    assert "after 3 tries" in gave_up.event.message
    assert "agent exit 1" in sim.record.error
    sim.now += 1000
    sim.step()
    assert len(sim.created) == 3
    assert sim.state is S.FAILED
    sim.set_label("false")
    sim.set_label("true")
    sim.step()
    assert len(sim.created) == 4
    assert sim.state is S.ENABLING
    assert sim.record.tries == 1


def test_failed_jobs_are_kept_for_the_ttl_then_deleted() -> None:
    sim = Sim("true")
    sim.step()
    failed = sim.finish(ok=False)
    decision = sim.step()
    assert failed.name in sim.jobs
    assert decision.wake_at == sim.now + 10  # the retry comes first; the TTL wake-up follows
    sim.now += 10
    decision = sim.step()
    sim.finish()
    sim.step()
    assert failed.name in sim.jobs
    assert sim.state is S.ENABLED
    sim.now += 89
    assert sim.step().wake_at == sim.now + 1
    sim.now += 1
    sim.step()
    assert (failed.name, "expired") in sim.deleted
    assert sim.jobs == {}


def test_stuck_and_vanished_jobs_count_as_failures() -> None:
    sim = Sim("true")
    sim.step()
    (job,) = sim.created
    sim.now += SETTINGS.policy.stuck_after
    sim.step()
    assert (job.name, "stuck") in sim.deleted
    assert "still active" in sim.record.error  # type: ignore[union-attr]
    sim.now += 10
    sim.step()
    second = sim.created[-1]
    del sim.jobs[second.name]  # someone deleted it
    sim.step()
    assert "disappeared" in sim.record.error  # type: ignore[union-attr]
    assert sim.record.tries == 2
    assert sim.state is S.ENABLING


def _ours(sim: Sim, name: str, phase: JobPhase, *, finished_ago: float = 40) -> JobObject:
    job = SETTINGS.template.build("n1", "uid-1", Action.ENABLE, 50)
    status = JobStatus(phase, finished_at=sim.now - finished_ago)
    return attrs.evolve(job, name=name, created_at=sim.now - 500, status=status)


def test_succeeded_jobs_from_before_are_deleted_failed_kept_foreign_untouched() -> None:
    sim = Sim(None)
    sim.annotations = NodeToggle("n1", state=S.DISABLED).annotations(state_key=STATE, detail_key=DETAIL)
    for i in range(3):
        sim.jobs[f"old-ok-{i}"] = _ours(sim, f"old-ok-{i}", JobPhase.SUCCEEDED)
    sim.jobs["old-failed"] = _ours(sim, "old-failed", JobPhase.FAILED)
    foreign = attrs.evolve(_ours(sim, "foreign", JobPhase.SUCCEEDED), labels={MANAGED_BY_LABEL: "someone"})
    sim.jobs["foreign"] = foreign
    decision = sim.step()
    assert sorted(sim.deleted) == [(f"old-ok-{i}", "succeeded") for i in range(3)]
    assert set(sim.jobs) == {"old-failed", "foreign"}
    assert decision.wake_at == sim.now + 60  # the failed Job's TTL
    unmanaged = Sim(None)
    unmanaged.jobs["old-ok"] = _ours(unmanaged, "old-ok", JobPhase.SUCCEEDED)
    unmanaged.jobs["foreign"] = foreign
    unmanaged.step()
    assert unmanaged.deleted == [("old-ok", "succeeded")]
    assert unmanaged.record is None


def test_deleted_node_loses_its_jobs_and_record_and_comes_back_fresh() -> None:
    sim = Sim("true")
    sim.step()
    (first,) = sim.created
    sim.exists = False
    decision = sim.step()
    assert sim.deleted == [(first.name, "node-gone")]
    assert isinstance(decision.steps[-1], Forget)
    assert sim.record is None
    assert sim.step().steps == (Forget("n1"),)  # nothing left to do, nothing re-created
    sim.exists, sim.uid, sim.annotations = True, "uid-2", {}
    sim.step()
    assert len(sim.created) == 2
    assert sim.created[1].name != first.name
    assert sim.created[1].owner.uid == "uid-2"  # type: ignore[union-attr]
    assert sim.state is S.ENABLING
    assert sim.record.tries == 1


def test_replaced_node_deletes_the_predecessors_jobs() -> None:
    sim = Sim("true")
    sim.step()
    (first,) = sim.created
    sim.uid = "uid-2"  # deleted and re-created while the controller did not look
    sim.annotations = {}
    sim.step()
    assert (first.name, "node-replaced") in sim.deleted
    assert len(sim.created) == 2
    assert sim.created[1].owner.uid == "uid-2"


def test_restarted_controller_resumes_from_annotations_and_adopts_the_job() -> None:
    sim = Sim("true")
    sim.step()
    sim.record = None  # a new controller process
    assert sim.step().steps == ()
    sim.finish()
    sim.step()
    assert sim.state is S.ENABLED
    assert len(sim.created) == 1
    lost = Sim("true")  # crashed after creating the Job, before writing the state
    lost.step()
    lost.record, lost.annotations = None, {}
    lost.step()
    assert lost.state is S.ENABLING
    assert len(lost.created) == 1
    lost.finish()
    lost.step()
    assert lost.state is S.ENABLED


# ---------------------------------------------------------------------------------------------- properties
OPS = st.lists(st.sampled_from(["true", "false", "none", "ok", "fail", "wait", "step"]), max_size=40)


def _play(sim: Sim, ops: list[str]) -> None:
    actions: dict[str, Callable[[], object]] = {
        "true": lambda: sim.set_label("true"), "false": lambda: sim.set_label("false"),
        "none": lambda: sim.set_label(None), "wait": lambda: setattr(sim, "now", sim.now + 15), "step": sim.step,
        "ok": lambda: sim.finish() if sim.active() else None,
        "fail": lambda: sim.finish(ok=False) if sim.active() else None,
    }
    for op in ops:
        actions[op]()


def _drain(sim: Sim) -> None:
    for _ in range(50):
        sim.step()
        if sim.active():
            sim.finish()
        sim.now += 100


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_any_sequence_ends_in_the_last_desired_state(ops: list[str]) -> None:
    sim = Sim(None)
    _play(sim, ops)
    _drain(sim)
    assert sim.max_active <= 1
    want = Action.ENABLE if sim.label == "true" else Action.DISABLE
    if sim.record is None:
        assert sim.label is None
        assert not sim.created
        return
    assert sim.state is want.done or (sim.state is S.FAILED and sim.record.target is want)
    assert sim.annotations[STATE] == sim.state.value  # type: ignore[union-attr]
    assert not sim.active()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["true", "false", "none", "ok", "step", "wait"]), max_size=40))
def test_label_flips_without_failures_always_converge(ops: list[str]) -> None:
    sim = Sim(None)
    _play(sim, ops)
    _drain(sim)
    assert sim.max_active <= 1
    if sim.record is not None:
        assert sim.state is (Action.ENABLE if sim.label == "true" else Action.DISABLE).done
