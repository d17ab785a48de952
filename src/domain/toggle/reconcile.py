"""One reconcile of one node: (desired state from the label, what the controller knows, the node's Jobs, now) →
the steps to take. Pure: no I/O, time passed in (epoch seconds).

Rules, with the failure case each covers:

* **at most one active Job per node** — no Job is created while any Job of ours for the node is active; the
  Job in flight is the one the record names (a Job found active that the record does not know, after a restart
  that lost the record, is adopted when the state machine allows it, else only waited for);
* **latest desired state wins** — a label flip never interrupts the Job in flight; once it finished, the label's
  value *then* decides, so a quick true/false/true flip ends enabled with no disable Job (B28 c);
* **label removed = false** (:func:`~.states.desired_from_label`, B28); a node with neither the label nor a
  state annotation is not managed: no step at all (B25);
* **cause** — a failed Job is reported with its pod's own cause (``causes``, :func:`~.jobs.failure_cause`) before
  the Job condition, in the annotation and the Events;
* **retry** — a failed Job (or one still active :attr:`~.policy.TogglePolicy.stuck_after` seconds after its
  creation, which is deleted, or one that vanished) is retried after the policy's backoff without waiting for a
  label change; after ``max_tries`` failures in a row the node is ``failed`` with a Warning Event; a ``failed``
  node starts over when the label changes (any observed change, even back to the same value);
* **clean-up** — succeeded Jobs are deleted at once (after their outcome is recorded), whoever's record they
  belong to, including Jobs that finished before the controller started (B26); failed Jobs are kept for
  ``failed_job_ttl`` seconds after they finished; Jobs owned by an earlier Node of the same name, and every Job
  of a deleted node, are deleted, and a deleted node's record is forgotten (B27);
* **write-back** — the node's two annotations are written only when what they say changes.

Step order matters and callers execute steps in order, stopping at the first failure (and then keeping the old
record): a new Job is created before the state naming it is written; a finished Job is deleted only after its
outcome is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.kube.objects import ClusterEvent, JobObject, JobPhase

from .jobs import FailureCause, JobTemplate, is_ours, job_action, job_generation, job_node
from .policy import TogglePolicy
from .record import NodeToggle, decode
from .states import TRANSITIONS, Action, ToggleState, desired_from_label


@attrs.frozen
class NodeView:
    """What the controller sees of a node: ``name``, ``uid``, the enable ``label`` value (None = absent), its
    ``annotations``, ``label_changes`` — how many changes of the label the controller observed — and
    ``generation``, the highest Job generation it saw for the node (Jobs since deleted included), so a Job name
    is not reused while the old Job's pods may linger."""

    name: str
    uid: str
    label: str | None = None
    annotations: Mapping[str, str] = attrs.field(factory=dict)
    label_changes: int = 0
    generation: int = 0


@attrs.frozen
class ToggleSettings:
    """Everything a reconcile needs besides its inputs: the retry ``policy``, the Job ``template``, and the
    annotation keys ``state_key``/``detail_key`` (protocol constants ``node_state``/``node_toggle``)."""

    policy: TogglePolicy
    template: JobTemplate
    state_key: str = "lj-runtimekit.io/runtime-state"
    detail_key: str = "lj-runtimekit.io/runtime-toggle"


@attrs.frozen
class CreateJob:
    """Create ``job``."""

    job: JobObject


@attrs.frozen
class DeleteJob:
    """Delete Job ``namespace/name`` with background propagation; ``reason``: ``succeeded``, ``expired`` (failed,
    kept past its TTL), ``stuck`` (active too long), ``node-gone`` or ``node-replaced``."""

    namespace: str
    name: str
    reason: str


@attrs.frozen
class WriteState:
    """Merge ``annotations`` into Node ``node``'s annotations."""

    node: str
    annotations: Mapping[str, str]


@attrs.frozen
class EmitEvent:
    """Record ``event`` (best effort: a failure does not stop the other steps)."""

    event: ClusterEvent


@attrs.frozen
class Forget:
    """Drop everything known about node ``node`` (it was deleted)."""

    node: str


Step = CreateJob | DeleteJob | WriteState | EmitEvent | Forget


@attrs.frozen
class Decision:
    """A reconcile's result: the ``record`` to keep once the steps succeeded (None = not managed, or forgotten);
    the ``steps``; ``wake_at`` (epoch s to reconcile again: a retry, a failed Job's TTL, a Job's stuck deadline;
    None = only on the next event); for metrics, the state ``transitions`` made and the Jobs that ``failed``
    (their actions)."""

    record: NodeToggle | None
    steps: tuple[Step, ...] = ()
    wake_at: float | None = None
    transitions: tuple[tuple[ToggleState, ToggleState], ...] = ()
    failed: tuple[Action, ...] = ()


@attrs.define
class _Run:
    """Mutable scratch of one reconcile."""

    name: str
    uid: str
    now: float
    settings: ToggleSettings
    record: NodeToggle
    causes: Mapping[str, FailureCause] = attrs.field(factory=dict)
    creates: list[Step] = attrs.field(factory=list)
    events: list[Step] = attrs.field(factory=list)
    deletes: list[Step] = attrs.field(factory=list)
    wakes: list[float] = attrs.field(factory=list)
    transitions: list[tuple[ToggleState, ToggleState]] = attrs.field(factory=list)
    failed: list[Action] = attrs.field(factory=list)

    def move(self, state: ToggleState) -> None:
        before = self.record.state
        self.record = self.record.moved(state, now=self.now)
        if before is not state:
            self.transitions.append((before, state))

    def event(self, reason: str, message: str, *, warning: bool) -> None:
        self.events.append(EmitEvent(ClusterEvent(
            kind="Node", name=self.name, reason=reason, message=message, namespace="default",
            type="Warning" if warning else "Normal", uid=self.uid)))


def _start_state(action: Action) -> ToggleState:
    """The steady state from which ``action`` is a legal first move (for nodes without a record)."""
    return ToggleState.DISABLED if action is Action.ENABLE else ToggleState.ENABLED


def _forget(name: str, jobs: Sequence[JobObject]) -> Decision:
    steps: list[Step] = [DeleteJob(j.namespace, j.name, "node-gone") for j in jobs]
    return Decision(None, (*steps, Forget(name)))


def reconcile(
    name: str,
    node: NodeView | None,
    record: NodeToggle | None,
    jobs: Sequence[JobObject],
    *,
    now: float,
    settings: ToggleSettings,
    causes: Mapping[str, FailureCause] | None = None,
) -> Decision:
    """Reconcile node ``name`` (module docstring). ``node`` None = the node does not exist; ``record`` = the
    controller's record (what it last wrote), None when it has none (the node's annotations are read then);
    ``jobs`` = the Jobs of ours for this node (others are ignored); ``now`` epoch s; ``causes`` = what the pods of
    failed Jobs said, by Job name (absent: the Job condition alone). Never raises for any
    input the cluster can hold (illegal moves are avoided by construction; a bug would raise
    :class:`~.states.IllegalTransitionError`)."""
    jobs = [j for j in jobs if is_ours(j) and job_node(j) == name]
    if node is None:
        return _forget(name, jobs)
    stale = [j for j in jobs if j.owner is not None and j.owner.uid != node.uid]
    current = sorted((j for j in jobs if j not in stale), key=lambda j: (job_generation(j), j.name))
    active = [j for j in current if not j.status.phase.finished]
    if record is not None and record.node_uid != node.uid:
        record = None  # a new node under a known name starts fresh (B27)
    known = record or decode(name, node.annotations, state_key=settings.state_key,
                             detail_key=settings.detail_key, node_uid=node.uid)
    desired = desired_from_label(node.label)
    if known is None:
        if node.label is None and not active:
            replaced = [DeleteJob(j.namespace, j.name, "node-replaced") for j in stale]
            return _cleanup_only(name, current, replaced, now=now, settings=settings)
        first = job_action(active[-1]) if active else None
        start = _start_state(first if first is not None else desired)
        known = NodeToggle(name, node.uid, start, since=now, episode=node.label_changes)
        published: dict[str, str] | None = None  # nothing on the node yet
    else:  # what the node says (or what this controller last wrote there): write only when it changes
        published = known.annotations(state_key=settings.state_key, detail_key=settings.detail_key)
    generation = max([known.generation, node.generation, *(job_generation(j) for j in jobs)])
    run = _Run(name, node.uid, now, settings, attrs.evolve(known, node_uid=node.uid, generation=generation),
               causes or {})
    run.deletes.extend(DeleteJob(j.namespace, j.name, "node-replaced") for j in stale)

    inflight = _in_flight(run, current, active)
    if inflight is not None:
        _consume(run, inflight)
    elif run.record.job:
        _failure(run, f"Job {run.record.job} disappeared before it finished")
    busy = any(not j.status.phase.finished and j.name != _consumed(run, inflight) for j in active)
    if not busy:
        _next(run, desired, node.label_changes)
    _clean_finished(run, current)

    new = run.record
    steps: list[Step] = list(run.creates)
    written = new.annotations(state_key=settings.state_key, detail_key=settings.detail_key)
    if written != published:
        steps.append(WriteState(name, written))
    steps.extend(run.events)
    steps.extend(run.deletes)
    return Decision(new, tuple(steps), min(run.wakes, default=None), tuple(run.transitions), tuple(run.failed))


def _in_flight(run: _Run, current: Sequence[JobObject], active: Sequence[JobObject]) -> JobObject | None:
    """The Job whose outcome decides the node's next step: the one the record names, else an active Job the
    state machine can adopt (the newest)."""
    named = next((j for j in current if j.name == run.record.job), None) if run.record.job else None
    if named is not None:
        return named
    for job in reversed(active):
        action = job_action(job)
        if action is None:
            continue
        state = run.record.state
        if state is action.working or action.working in TRANSITIONS[state]:
            run.move(action.working)
            tries = run.record.tries if run.record.target is action and run.record.tries else 1
            run.record = attrs.evolve(run.record, target=action, job=job.name, tries=tries)
            return job
    return None


def _consumed(run: _Run, inflight: JobObject | None) -> str:
    """Name of the in-flight Job when its outcome was taken this round (it no longer blocks a new Job)."""
    return inflight.name if inflight is not None and not run.record.job else ""


def _consume(run: _Run, job: JobObject) -> None:
    policy = run.settings.policy
    action = job_action(job)
    if action is None:  # never: in-flight Jobs are ours, whose action label is known
        return
    phase = job.status.phase
    if phase is JobPhase.ACTIVE:
        created = job.created_at if job.created_at is not None else run.now
        if run.now - created >= policy.stuck_after:
            run.deletes.append(DeleteJob(job.namespace, job.name, "stuck"))
            _failure(run, f"Job {job.name} still active {run.now - created:.0f} s after its creation")
        else:
            run.wakes.append(created + policy.stuck_after)
        return
    if phase is JobPhase.SUCCEEDED:
        run.move(action.done)
        run.record = attrs.evolve(run.record, job="", retry_at=None, error="")
        run.event(f"Runtime{action.done.value.capitalize()}", f"Job {job.name} {action.value}d the Runtime",
                  warning=False)
        return
    detail = ": ".join(part for part in (job.status.reason, job.status.message) if part) or "no reason given"
    _failure(run, f"Job {job.name} failed: {run.causes.get(job.name, FailureCause()).describe(detail)}")


def _failure(run: _Run, message: str) -> None:
    """The Job in flight failed: schedule a retry, or give up after ``max_tries``."""
    record, policy = run.record, run.settings.policy
    action = record.target if record.target is not None else Action.ENABLE
    run.failed.append(action)
    if record.tries >= policy.max_tries:
        run.move(ToggleState.FAILED)
        run.record = attrs.evolve(run.record, job="", retry_at=None, error=message)
        run.event("RuntimeToggleFailed", f"{action.value} gave up after {record.tries} tries: {message}",
                  warning=True)
        return
    delay = policy.backoff(max(1, record.tries))
    run.record = attrs.evolve(record, job="", retry_at=run.now + delay, error=message)
    run.event("RuntimeToggleRetry", f"{action.value} try {record.tries} of {policy.max_tries} failed: {message}; "
              f"retrying in {delay:g} s", warning=True)


def _next(run: _Run, desired: Action, label_changes: int) -> None:
    """No Job is active: start (or keep waiting to start) the Job the desired state needs, if any."""
    record = run.record
    if record.state is desired.done:
        if record.tries or record.retry_at is not None:
            run.record = attrs.evolve(record, tries=0, retry_at=None)
        return
    if record.state is ToggleState.FAILED and record.target is desired and record.episode == label_changes:
        return  # stays failed until the label changes
    if record.target is not desired or record.state is ToggleState.FAILED or record.state.steady:
        record = attrs.evolve(record, target=desired, tries=0, retry_at=None, error="", episode=label_changes)
    run.record = record
    if record.retry_at is not None and run.now < record.retry_at:
        run.move(desired.working)
        run.wakes.append(record.retry_at)
        return
    generation = record.generation + 1
    job = run.settings.template.build(run.name, run.uid, desired, generation)
    run.creates.append(CreateJob(job))
    run.move(desired.working)
    run.record = attrs.evolve(run.record, job=job.name, generation=generation, tries=record.tries + 1,
                              retry_at=None)
    run.wakes.append(run.now + run.settings.policy.stuck_after)


def _clean_finished(run: _Run, current: Sequence[JobObject]) -> None:
    """Delete succeeded Jobs now and failed ones once their TTL passed (else wake then); the record's own
    in-flight Job is never among them."""
    ttl = run.settings.policy.failed_job_ttl
    for job in current:
        if job.name == run.record.job or not job.status.phase.finished:
            continue
        if any(isinstance(s, DeleteJob) and s.name == job.name for s in run.deletes):
            continue
        if job.status.phase is JobPhase.SUCCEEDED:
            run.deletes.append(DeleteJob(job.namespace, job.name, "succeeded"))
            continue
        finished = next(t for t in (job.status.finished_at, job.created_at, run.now) if t is not None)
        if run.now >= finished + ttl:
            run.deletes.append(DeleteJob(job.namespace, job.name, "expired"))
        else:
            run.wakes.append(finished + ttl)


def _cleanup_only(
    name: str, current: Sequence[JobObject], steps: Sequence[Step], *, now: float, settings: ToggleSettings
) -> Decision:
    """An unmanaged node (no label, no state): only delete or age out its finished Jobs."""
    run = _Run(name, "", now, settings, NodeToggle(name))
    run.deletes.extend(steps)
    _clean_finished(run, current)
    return Decision(None, tuple(run.deletes), min(run.wakes, default=None))
